"""The py-echo agent's skills, shared by two workers.

../worker.py (the Python worker) imports this module and awaits `handle`. The
Rust worker runs this file as a command agent: the envelope on stdin, the
result JSON on stdout, exit 75 for a retryable failure and 1 for any other
(see "command agents" in docs/operations.md).

When PY_ECHO_JOURNAL names a file, every run appends JSON lines to it:
{"event": "start" | "end", "task", "attempt", "resumed", "via", "pid"}, so
a test can count how often a handler really ran, and which worker ran it.
"""

import asyncio
import json
import os
import sys


class Failure(Exception):
    """A failed run: `retryable` ones are tried again by the orchestrator."""

    def __init__(self, code, message, retryable=False, retry_after_seconds=None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable
        self.retry_after_seconds = retry_after_seconds


async def skill(action, params, ctx):
    """One skill. `ctx` has task_id, attempt, resumed, idempotency_key and
    progress (a function: `message=`, `artifact=`)."""
    if action == "echo":
        return {"echo": params}
    if action == "flaky":
        wanted = int(params.get("succeed_on_attempt", 2))
        if ctx["attempt"] < wanted:
            raise Failure("not_yet", f"attempt {ctx['attempt']} of {wanted}", retryable=True)
        return {"attempt": ctx["attempt"]}
    if action == "fail":
        raise Failure(
            params.get("code", "asked_to_fail"),
            params.get("message", "the params asked for a failure"),
            retryable=bool(params.get("retryable", False)),
        )
    if action == "progress":
        # Three reports: a message, then an artifact in two chunks.
        ctx["progress"](message="step 1")
        ctx["progress"](artifact={"artifact_id": "notes", "parts": [{"text": "chunk-1 "}]})
        chunk = {"artifact_id": "notes", "parts": [{"text": "chunk-2"}], "append": True, "last_chunk": True}
        ctx["progress"](artifact=chunk)
        return {"reported": 3}
    if action == "report_then_sleep":
        # One report naming this run, then a sleep: a run that takes the
        # attempt over reports its own seq 1.
        ctx["progress"](message=f"run {os.getpid()} started")
        seconds = float(params.get("seconds", 1))
        await asyncio.sleep(seconds)
        return {"slept": seconds, "pid": os.getpid()}
    if action == "sleep":
        seconds = float(params.get("seconds", 1))
        await asyncio.sleep(seconds)
        return {"slept": seconds, "pid": os.getpid()}
    raise Failure("unknown_action", f"py-echo has no skill {action!r}")


def journal(event, ctx, via, **extra):
    path = os.environ.get("PY_ECHO_JOURNAL")
    if not path:
        return
    line = {
        "event": event,
        "task": ctx["task_id"],
        "attempt": ctx["attempt"],
        "resumed": ctx["resumed"],
        "via": via,
        "pid": os.getpid(),
        **extra,
    }
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")


async def handle(action, params, ctx, via="python"):
    """What a worker calls: `skill`, with a journal line before and after
    (none after when the run is stopped)."""
    journal("start", ctx, via)
    try:
        result = await skill(action, params, ctx)
    except Failure as failure:
        journal("end", ctx, via, outcome="failed", code=failure.code)
        raise
    journal("end", ctx, via, outcome="completed")
    return result


def command_progress():
    """A command's progress channel: one JSON object per line on the file
    descriptor ORCH_PROGRESS_FD (docs/agents.md)."""
    channel = os.fdopen(int(os.environ["ORCH_PROGRESS_FD"]), "w", buffering=1)

    def report(message=None, artifact=None):
        line = {k: v for k, v in (("message", message), ("artifact", artifact)) if v is not None}
        channel.write(json.dumps(line) + "\n")

    return report


def main():
    envelope = json.load(sys.stdin)
    ctx = {
        "task_id": os.environ["ORCH_TASK_ID"],
        "attempt": int(os.environ["ORCH_ATTEMPT"]),
        "resumed": os.environ.get("ORCH_RESUMED") == "1",
        "idempotency_key": os.environ.get("ORCH_IDEMPOTENCY_KEY", ""),
        "progress": command_progress(),
    }
    payload = envelope["payload"]
    try:
        result = asyncio.run(handle(payload["action"], payload.get("params", {}), ctx, "command"))
    except Failure as failure:
        print(f"{failure.code}: {failure.message}", file=sys.stderr)
        sys.exit(75 if failure.retryable else 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
