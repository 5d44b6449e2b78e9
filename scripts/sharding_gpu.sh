#!/usr/bin/env bash
# Issue 20 on real GPUs: the sharding benchmarks in one command (docs/sharding.md, "Benchmark").
#
#   bash scripts/sharding_gpu.sh [N] [EXTRA ARGS...]   # on the GPU machine, from any directory
#
# With the device tool: run(kind="nvidia-h200-x2", command="bash scripts/sharding_gpu.sh 2",
# timeout_s=600). Needs only the image's python3 (JAX with CUDA, numpy, rich); results and
# logs go to $OUT (what comes back) or bench/results. Runs, each under its own time limit so a
# slow part still leaves the others' JSON:
#   1. bench/bench_sharding.py --devices N: batch 1 and 8 x context 256 and 2048, 1 vs N GPUs,
#      the hand-written sharded jit in every row, per-GPU memory (about 4-6 minutes);
#   2. bench/bench_sharding_profile.py --devices N: host dispatch / device busy / collectives
#      of one sharded step, simulator vs jit (about 1 minute, the repro skipped).
set -u
cd "$(dirname "$0")/.."
n="${1:-2}"
shift || true   # the rest (e.g. --quick on CPU to try the script) goes to both benchmarks
out="${OUT:-bench/results}"
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# NVLink multicast stays off on shared hosts (KINDS.md); harmless where it is already.
export NCCL_NVLS_ENABLE=0
kind="$(python3 -c 'import jax; print(jax.devices()[0].device_kind.split()[-1].lower())')"
model="$(mktemp -d)/decoder.oinf"   # written once by the first run, reused by the second
timeout 440 python3 bench/bench_sharding.py --devices "$n" --model "$model" "$@" \
    --out "$out/sharding_gpu_${kind}x$n.json" 2>&1 | grep -v '^[WI]0000' | tee "$out/sharding_${kind}x$n.log"
timeout 130 python3 bench/bench_sharding_profile.py --devices "$n" --model "$model" --no-repro "$@" \
    --out "$out/sharding_profile_gpu_${kind}x$n.json" 2>&1 | grep -v '^[WI]0000' \
    | tee "$out/sharding_profile_${kind}x$n.log"
rm -rf "$(dirname "$model")"
