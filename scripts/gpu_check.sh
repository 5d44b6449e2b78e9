#!/usr/bin/env bash
# Real-GPU check of the Vulkan parts (docs/vulkan.md, "Running on a real GPU").
#
#   bash scripts/gpu_check.sh prepare     # here, with network: fills build/gpu/ (ignored by git)
#   STAGE=tests bash scripts/gpu_check.sh # on the GPU machine (no network), carrying build/gpu
#   STAGE=bench bash scripts/gpu_check.sh # the benchmarks; results are copied to $OUT
#
# `prepare` downloads the Vulkan loader/headers and the GL dispatch libraries NVIDIA's ICD
# needs (.debs), the kp sdist, pybind11 and the pure-Python test dependencies, and compiles
# every shader the tests and benchmarks use into build/gpu/spv (OPENINFER_VK_CACHE), so that
# the GPU machine needs neither glslc nor network. Nothing here runs in `make test`.
set -u
cd "$(dirname "$0")/.."
G=build/gpu
if [ "${1:-}" = prepare ]; then
  set -e
  mkdir -p $G/wheels $G/wheels2 $G/spv
  (cd $G && apt-get download libvulkan1 libvulkan-dev libfmt9 libfmt-dev libegl1 libglvnd0 \
      libopengl0 libgl1 libglx0 libgles2)
  .venv/bin/pip download -q --no-deps --no-binary :all: -d $G kp==0.9.0
  .venv/bin/pip download -q --no-deps -d $G "pybind11>=3"
  .venv/bin/pip download -q --no-deps -d $G/wheels pytest pluggy iniconfig packaging rich \
      markdown-it-py mdurl pygments
  .venv/bin/pip download -q --no-deps -d $G/wheels2 attrs sortedcontainers pytest-xdist execnet
  for v in 3.10 3.11 3.12 3.13; do
    .venv/bin/pip download -q --no-deps -d $G/wheels2 hypothesis --python-version $v \
        --only-binary=:all: --platform manylinux2014_x86_64
  done
  OPENINFER_VK_CACHE=$PWD/$G/spv .venv/bin/python -m pytest -q -n 2 -p no:randomly \
      tests/vk tests/sim/test_vulkan.py tests/emit/test_vulkan.py
  exit 0
fi
PY=python3
if [ ! -e /opt/kp/kp ] && ! ls /opt/kp/kp*.so >/dev/null 2>&1; then
  for f in $G/*.deb; do dpkg -x "$f" /; done; ldconfig
  $PY -m pip install -q --no-index --no-deps --target /opt/pyb $G/pybind11-3*.whl
  $PY -m pip install -q --no-index --no-deps --target /opt/pydeps $G/wheels/*.whl
  $PY -m pip install -q --no-index --no-deps --find-links $G/wheels2 --target /opt/pydeps \
      hypothesis attrs sortedcontainers pytest-xdist execnet 2>&1 | tail -3
  export pybind11_DIR="$(PYTHONPATH=/opt/pyb $PY -m pybind11 --cmakedir)"
  export KOMPUTE_OPT_INSTALL=OFF KOMPUTE_OPT_USE_BUILT_IN_VULKAN_HEADER=OFF \
         KOMPUTE_OPT_USE_BUILT_IN_FMT=OFF KOMPUTE_OPT_USE_BUILT_IN_PYBIND11=OFF \
         KOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON
  mkdir -p /tmp/kpb && tar xzf $G/kp-0.9.0.tar.gz -C /tmp/kpb
  sed -i "s/'-DKOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON'\$/'-DKOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON',/" /tmp/kpb/kp-0.9.0/setup.py
  patch -p1 -d /tmp/kpb/kp-0.9.0 < openinfer_jax/vk/kp-0.9.0-shader-barrier.patch
  start=$(date +%s)
  CMAKE_BUILD_PARALLEL_LEVEL=16 $PY -m pip install -q --no-deps --no-build-isolation --no-index --target /opt/kp /tmp/kpb/kp-0.9.0 2>&1 | tail -5
  echo "kp build: $(( $(date +%s) - start )) s"
fi
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export PYTHONPATH=/opt/kp:/opt/pydeps:$PWD
export OPENINFER_VK_CACHE=$PWD/$G/spv
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
nvidia-smi -L; $PY --version; echo "cc: $(command -v cc gcc clang | tr '\n' ' ')"
$PY -c "import kp; print(kp.Manager().get_device_properties()['device_name'])"
DESELECT="not compile_failure and not missing_glslc and not precompile_builds"  # these need glslc there
if [ "${STAGE:-tests}" = tests ]; then
  start=$(date +%s)
  timeout 330 $PY -m pytest tests/vk tests/sim/test_vulkan.py -q -n 8 -p no:cacheprovider -p no:randomly -k "$DESELECT" 2>&1 | tail -15
  echo "vk tests: $(( $(date +%s) - start )) s"
  start=$(date +%s)
  timeout 200 $PY -m pytest tests/emit/test_vulkan.py -q -n 8 -p no:cacheprovider -p no:randomly 2>&1 | tail -15
  echo "emit vulkan tests: $(( $(date +%s) - start )) s"
else
  timeout 300 $PY bench/bench_vk.py --torch 2>&1 | tail -40
  cp bench/results/vk.json "$OUT/vk_gpu.json"
  timeout 120 $PY bench/bench_vk_caches.py --quick 2>&1 | tail -15
  cp bench/results/quick/vk_caches.json "$OUT/vk_caches_gpu.json"
  timeout 150 $PY bench/bench_emit.py --quick 2>&1 | tail -25
  cp bench/results/quick/emit.json "$OUT/emit_gpu.json"
fi
