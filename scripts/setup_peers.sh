#!/usr/bin/env bash
# Creates build/peervenv: the runtimes a user would deploy instead of our emitted code
# (llama.cpp through llama-cpp-python, onnxruntime, torch), kept out of .venv so they never
# leak into the project's own dependencies. Benchmarks (bench/bench_edge.py, bench_quant.py)
# run their peer side in this interpreter. Idempotent; the first run builds llama.cpp from
# its sdist (several minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=build/peervenv
PACKAGES="numpy onnx==1.22.0 onnxruntime torch==2.13.0 llama-cpp-python==0.3.36 gguf>=0.10"
STAMP="$VENV/.peer-stamp"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$PACKAGES" ]; then
  echo "peers: ok ($VENV)"; exit 0
fi
PYTHON="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# llama.cpp is compiled for this machine (GGML_NATIVE) and for the CPU only, as a user
# deploying it here would build it.
CMAKE_ARGS="-DGGML_NATIVE=ON" "$VENV/bin/pip" install -q $PACKAGES
echo "$PACKAGES" > "$STAMP"
echo "peers: ok ($VENV)"
