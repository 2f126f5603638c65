#!/bin/sh
# Usage: host/bench/handoffs.sh BX STATE WORKSPACE TOOL PATH N
# Starts BX's daemon on STATE, makes N calls of TOOL with {"path": PATH} through
# `bx mcp` (host/bench/mcp_calls.py), and prints the median round trip and, from
# `perf stat`, the context switches and CPU time per call of the daemon and of `bx mcp`.
# On this kind of virtual machine a context switch is dear, and a thread hand-off costs
# one or more: docs/mcp.md#against-a-bare-host quotes it. Needs `perf` (Debian's
# linux-perf), which `make setup` does not install: it is run by hand, never in CI.
set -eu
bx=$1 state=$2 ws=$3 tool=$4 path=$5 n=$6
here=$(dirname "$0")
py=${PYTHON:-$here/../../.venv/bin/python}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$bx" --state-dir "$state" serve 2>"$out/serve.log" &
daemon=$!
# Ready once it answers (`bx approvals` asks the daemon and never starts one), within
# 30 s.
tries=0
until "$bx" --state-dir "$state" approvals >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -gt 300 ]; then
        echo "the daemon did not answer within 30 s; its log:" >&2
        cat "$out/serve.log" >&2
        kill "$daemon" 2>/dev/null || true
        exit 1
    fi
    sleep 0.1
done
"$py" "$here/mcp_calls.py" "$bx" "$state" "$ws" "$tool" "$path" 20 >/dev/null
perf stat -x, -e context-switches,task-clock -p "$daemon" -o "$out/daemon" &
watcher=$!
"$py" "$here/mcp_calls.py" "$bx" "$state" "$ws" "$tool" "$path" "$n" \
    perf stat -x, -e context-switches,task-clock -o "$out/mcp"
kill -INT "$watcher"; wait "$watcher" || true
kill "$daemon"; wait "$daemon" || true
for who in daemon mcp; do
    awk -F, -v n="$n" -v who="$who" '
        $3 == "context-switches" { cs = $1 }
        $3 == "task-clock" { ms = $1 }
        END { printf "%s: %.1f context switches and %.3f ms of CPU per call\n", who, cs / n, ms / n }
    ' "$out/$who"
done
