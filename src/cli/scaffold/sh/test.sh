#!/bin/sh
# Tests of {{name}}: run `sh test.sh` in this directory.
set -eu
cd "$(dirname "$0")"
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$(printf '%s' '{"payload":{"action":"greet","params":{"name":"Ada"}}}' | ORCH_ATTEMPT=1 sh agent.sh)
[ "$out" = '{"greeting": "Hello, Ada!"}' ] || fail "greet answered $out"

if printf '%s' '{"payload":{"action":"greet","params":{"name":""}}}' | sh agent.sh 2>/dev/null; then
    fail "an empty name was accepted"
fi

code=0
printf '%s' '{"payload":{"action":"greet","params":{"name":"Ada","retry_once":true}}}' \
    | ORCH_ATTEMPT=1 sh agent.sh >/dev/null 2>&1 || code=$?
[ "$code" = 75 ] || fail "retry_once exited $code on the first attempt, not 75"

echo "ok: 3 tests"
