#!/usr/bin/env python3
"""{{name}}: an agent that `orchestrator worker` runs, one process per task.

The task's envelope (JSON, without its token) arrives on stdin; the result
(JSON) goes to stdout. The exit code says how the task ended:
  0   completed, with the result on stdout;
  75  failed for now: the worker runs the task again (a retry);
  any other: failed, with the last line of stderr as the message.
Progress reports, one JSON object per line, go to the file descriptor that
ORCH_PROGRESS_FD names. docs/first-agent.md walks through it.
"""
import json
import os
import sys


def progress(message):
    """Sends one progress report; it shows in the task's history."""
    fd = os.environ.get("ORCH_PROGRESS_FD")
    if fd:
        os.write(int(fd), (json.dumps({"message": message}) + "\n").encode())


def greet(params):
    """The skill `greet`: a greeting for params.name."""
    name = params.get("name", "").strip()
    if not name:
        raise ValueError("params.name must not be empty")
    progress(f"greeting {name}")
    return {"greeting": f"Hello, {name}!"}


# The skills of agent.json, by id.
SKILLS = {"greet": greet}


def main():
    envelope = json.load(sys.stdin)
    payload = envelope["payload"]
    skill = SKILLS.get(payload["action"])
    if skill is None:
        print(f"no skill {payload['action']!r}", file=sys.stderr)
        return 1
    params = payload.get("params", {})
    if params.get("retry_once") and os.environ.get("ORCH_ATTEMPT") == "1":
        print("the first attempt fails on purpose (retry_once): exit 75 asks for a retry", file=sys.stderr)
        return 75
    try:
        result = skill(params)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 1
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
