#!/usr/bin/env python3
"""Outlook agent: writes email drafts into an outbox, once per idempotency key.

Reads a task envelope on stdin; writes outbox/<key>.json (ORCH_OUTBOX sets
the directory) unless a draft with that key exists, and prints
{"draft_id": ..., "path": ..., "created": true|false}. The file is created
with O_EXCL, so two runs of one task can never both write it.
"""
import hashlib
import json
import os
import pathlib
import sys


def main():
    envelope = json.load(sys.stdin)
    params = envelope.get("payload", {}).get("params", {})
    for field in ("subject", "body"):
        if not isinstance(params.get(field), str):
            print(f"params.{field} is required (a string)", file=sys.stderr)
            return 1
    key = envelope["control"]["idempotency_key"]
    draft_id = "draft-" + hashlib.sha256(key.encode()).hexdigest()[:16]
    outbox = pathlib.Path(os.environ.get("ORCH_OUTBOX", "outbox"))
    outbox.mkdir(parents=True, exist_ok=True)
    path = outbox / f"{draft_id}.json"
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


if __name__ == "__main__":
    sys.exit(main())
