#!/bin/sh
# {{name}}: an agent that `orchestrator worker` runs, one process per task.
#
# The task's envelope (JSON, without its token) arrives on stdin; the
# result (JSON) goes to stdout. The exit code says how the task ended:
#   0   completed, with the result on stdout;
#   75  failed for now: the worker runs the task again (a retry);
#   any other: failed, with the last line of stderr as the message.
# Progress reports, one JSON object per line, go to the file descriptor
# that ORCH_PROGRESS_FD names. docs/first-agent.md walks through it.
#
# This one reads params.name with sed, which is enough for a name; for
# real JSON, use jq (`jq -r .payload.params.name`).
set -eu
envelope=$(cat)

action=$(printf '%s' "$envelope" | sed -n 's/.*"payload":{"action":"\([^"]*\)".*/\1/p')
if [ "$action" != "greet" ]; then
    echo "no skill '$action'" >&2
    exit 1
fi
name=$(printf '%s' "$envelope" | sed -n 's/.*"params":{[^}]*"name":"\([^"\\]*\)".*/\1/p')
if [ -z "$name" ]; then
    echo "params.name must not be empty" >&2
    exit 1
fi
case "$envelope" in
*'"retry_once":true'*)
    if [ "${ORCH_ATTEMPT:-1}" = 1 ]; then
        echo "the first attempt fails on purpose (retry_once): exit 75 asks for a retry" >&2
        exit 75
    fi
    ;;
esac
if [ -n "${ORCH_PROGRESS_FD:-}" ]; then
    printf '{"message": "greeting %s"}\n' "$name" >&"$ORCH_PROGRESS_FD"
fi
printf '{"greeting": "Hello, %s!"}\n' "$name"
