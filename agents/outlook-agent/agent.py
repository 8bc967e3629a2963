#!/usr/bin/env python3
"""Outlook agent: writes email drafts into an outbox and sends them, each once.

Reads a task envelope on stdin and runs its action:

- compose:draft writes outbox/<draft_id>.json (ORCH_OUTBOX sets the
  directory; the draft id is derived from the idempotency key) unless that
  draft exists, and prints {"draft_id", "path", "created": true|false}. The
  file is created with O_EXCL, so two runs of one task never both write it.
- send:draft "sends" draft <draft_id> by moving it from the outbox to
  <outbox>/sent/ with one atomic rename, and prints {"draft_id", "path",
  "sent": true, "already_sent": true|false}. A retry finds the draft in
  sent/ and sends nothing again; a draft in neither place is a failure.
"""
import hashlib
import json
import os
import pathlib
import sys


def fail(message):
    print(message, file=sys.stderr)
    return 1


def outbox():
    return pathlib.Path(os.environ.get("ORCH_OUTBOX", "outbox"))


def compose(envelope, params):
    for field in ("subject", "body"):
        if not isinstance(params.get(field), str):
            return fail(f"params.{field} is required (a string)")
    key = envelope["control"]["idempotency_key"]
    draft_id = "draft-" + hashlib.sha256(key.encode()).hexdigest()[:16]
    box = outbox()
    box.mkdir(parents=True, exist_ok=True)
    path = box / f"{draft_id}.json"
    draft = {
        "draft_id": draft_id,
        "to": params.get("to", []),
        "subject": params["subject"],
        "body": params["body"],
        "task_id": envelope["header"]["task_id"],
        "idempotency_key": key,
    }
    created = False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(draft, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        created = True
    json.dump({"draft_id": draft_id, "path": str(path), "created": created}, sys.stdout)
    return 0


def send(params):
    draft_id = params.get("draft_id")
    if not isinstance(draft_id, str) or "/" in draft_id or not draft_id.startswith("draft-"):
        return fail("params.draft_id is required (a draft id from compose:draft)")
    box = outbox()
    sent_dir = box / "sent"
    sent_dir.mkdir(parents=True, exist_ok=True)
    source, target = box / f"{draft_id}.json", sent_dir / f"{draft_id}.json"
    already = False
    try:
        os.rename(source, target)
    except FileNotFoundError:
        if not target.exists():
            return fail(f"no draft {draft_id} in {box}")
        already = True
    json.dump({"draft_id": draft_id, "path": str(target), "sent": True, "already_sent": already}, sys.stdout)
    return 0


def main():
    envelope = json.load(sys.stdin)
    payload = envelope.get("payload", {})
    params = payload.get("params", {})
    action = payload.get("action")
    if action == "compose:draft":
        return compose(envelope, params)
    if action == "send:draft":
        return send(params)
    return fail(f"unknown action {action!r}")


if __name__ == "__main__":
    sys.exit(main())
