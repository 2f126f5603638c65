#!/usr/bin/env bash
# The newcomer questions of docs/agent.md#tried-as-a-newcomer: what `make chat` sets up
# (its config, the default policy, fs.read, fs.list and py.run) in a fresh state
# directory, then one `bx chat --say` per question in this checkout, each timed.
# Run from the repository root after `make setup tools components` and a debug build.
set -u
S=$(mktemp -d)
trap 'kill $(python3 -c "import json;print(json.load(open(\"$S/daemon.json\"))[\"pid\"])" 2>/dev/null) 2>/dev/null; rm -rf "$S"' EXIT
printf '%s\n' '[inference]' \
  "launch = [\"$PWD/.venv/bin/python\", \"$PWD/host/infer/llama_server.py\", \"{port}\", \"--parallel\", \"2\", \"--ctx\", \"16384\", \"--model\", \"qwen\"]" \
  'tool_mode = "constrained"' 'temperature = 0.0' '[loop]' 'max_tokens = 512' > "$S/config.toml"
target/debug/bx --state-dir "$S" policy init >/dev/null
for t in fs_read fs_list; do
  w=tools/target/wasm32-wasip2/release/bx_tool_$t.wasm
  target/debug/bx --state-dir "$S" tool install "$w" --digest "sha256:$(sha256sum "$w" | cut -d' ' -f1)" >/dev/null
done
w=tools/target/py/py_run.wasm
target/debug/bx --state-dir "$S" tool install "$w" --digest "sha256:$(sha256sum "$w" | cut -d' ' -f1)" \
  --manifest tools/py-run/manifest.toml --name py --replace >/dev/null
n=0
for q in "list the files here" "read README.md and tell me what bx is" "how many lines does Makefile have"; do
  n=$((n + 1))
  echo "> $q"
  start=$(date +%s%N)
  timeout 300 target/debug/bx --state-dir "$S" chat --session newcomer-$n --say "$q" </dev/null 2>&1 | cut -c1-600
  echo "($(( ($(date +%s%N) - start) / 1000000000 )) s)"
done
