"""The C target with block-quantized weights: oi_quant.h against a NumPy model of its arithmetic,
emitted programs (linear, matmul, embedding, gather, quantized prefix tables in a loop) against the
simulator, the loader's checks, and builds for aarch64."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.emit import Synthesizer
from openinfer_jax.emit.runtime_files import RUNTIME_DIR
from openinfer_jax.oinf import OinfWriter, QuantizedTensor, quantize
from openinfer_jax.sim import Simulator
from tests.emit.harness import CC, CFLAGS, build, read_tensor, run_driver
from tests.emit.test_vulkan import needs_vulkan

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")

KERNEL_DRIVER = r"""
#include "oi_runtime.h"
#include "oi_quant.h"
#include <stdio.h>
#include <stdlib.h>
/* kt MODEL NAME DTYPE N K B F32SCALES X.bin Y.bin: y = W x with the q16-activation GEMV */
int main(int argc, char **argv) {
    oi_model m;
    const oi_block_tensor *w;
    int64_t dims[2], N, K, B;
    uint32_t dtype;
    int f32, rc;
    float *x, *y, *dx, *sx;
    int16_t *xq;
    int32_t *qx;
    oi_q_act a;
    FILE *f;
    if (argc != 10) return 9;
    dtype = (uint32_t)atoi(argv[3]); N = atoll(argv[4]); K = atoll(argv[5]); B = atoll(argv[6]);
    f32 = atoi(argv[7]);
    x = malloc(K * 4); y = malloc(N * 4); dx = malloc(K * 4); sx = malloc(K * 4);
    xq = malloc(K * 2); qx = malloc(K * 4);
    if ((rc = oi_model_open_file(&m, argv[1]))) { printf("%s\n", oi_last_error()); return 1; }
    dims[0] = N; dims[1] = K;
    if ((rc = oi_model_get_block(&m, argv[2], dtype, (uint32_t)B, f32 ? 10u : 9u, 2, dims, &w))) {
        printf("%d %s\n", rc, oi_last_error());
        return 2;
    }
    f = fopen(argv[8], "rb");
    if (!f || fread(x, 4, (size_t)K, f) != (size_t)K) return 3;
    fclose(f);
    a.xq = xq; a.dx = dx; a.sx = sx; a.qx = qx;
    oi_q_quantize_act(x, K, B, dtype != 1, &a);
    oi_q_gemv(w, dtype, f32, K, B, 0, N, &a, y);
#ifdef OI_Q_AVX2
    printf("avx2\n");
#endif
    f = fopen(argv[9], "wb");
    fwrite(y, 4, (size_t)N, f);
    fclose(f);
    oi_model_close(&m);
    return 0;
}
"""


# The portable loops (-O2, no target flags) and the build for this machine (-O3
# -march=native: on x86-64 with AVX2/FMA/F16C, oi_quant.h's hand-vectorized rows).
BUILDS = {"portable": ["-O2"], "native": ["-O3", "-march=native"]}


@pytest.fixture(scope="module", params=sorted(BUILDS))
def kernel_driver(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp(f"qkernel_{request.param}")
    (work / "kt.c").write_text(KERNEL_DRIVER)
    for name in ("oi_runtime.c", "oi_runtime.h", "oi_quant.h", "oi_parallel.h"):
        shutil.copy(RUNTIME_DIR / name, work / name)
    flags = [f for f in CFLAGS if not f.startswith("-O")] + BUILDS[request.param]
    subprocess.run(
        [CC, *flags, "-I.", "kt.c", "oi_runtime.c", "-lm", "-o", "kt"], cwd=work, check=True
    )
    return work / "kt"


def _host_has_avx2() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return all(f in flags for f in ("avx2", "fma", "f16c"))


def _model_of_the_kernel(qt: QuantizedTensor, x: np.ndarray) -> np.ndarray:
    """oi_q_gemv's arithmetic in NumPy: 16-bit activations per block, integer block dots."""
    block = qt.layout.block_size
    nb = x.size // block
    xb = x.reshape(nb, block).astype(np.float32)
    amax = np.abs(xb).max(axis=1)
    dx = (amax / np.float32(32767)).astype(np.float32)
    inv = np.where(amax > 0, np.float32(32767) / amax, 0).astype(np.float32)
    v = xb * inv[:, None]
    xq = np.where(v >= 0, np.trunc(v + 0.5), np.trunc(v - 0.5)).astype(np.int64)
    codes = qt.codes().astype(np.int64).reshape(qt.shape[0], nb, block)
    dots = (codes * xq[None]).sum(axis=-1).astype(np.float32)
    y = (dots * (qt.scales.astype(np.float32) * dx[None])).sum(axis=-1)
    if qt.offsets is not None:
        y = y + (qt.offsets.astype(np.float32) * xb.sum(axis=1)[None]).sum(axis=-1)
    return y


@pytest.mark.parametrize(
    ("block", "scale_dtype"), [(32, DType.F16), (64, DType.F32), (16, DType.F16)]
)
@pytest.mark.parametrize(("scheme", "code"), [("q8_0", 1), ("q4_0", 18), ("q4_1", 21)])
def test_gemv_is_the_modelled_arithmetic(
    kernel_driver: Path, tmp_path: Path, scheme: str, code: int, block: int, scale_dtype: DType
) -> None:
    rng = np.random.default_rng(block + code)
    n, k = 24, 128
    qt = quantize(rng.standard_normal((n, k)), scheme, block, scale_dtype)
    with OinfWriter(tmp_path / "m.oinf") as w:
        w.add_tensor("w", qt)
    x = rng.standard_normal(k).astype(np.float32)
    x.tofile(tmp_path / "x.bin")
    args = [str(kernel_driver), "m.oinf", "w", str(code), str(n), str(k), str(block),
            str(int(scale_dtype is DType.F32)), "x.bin", "y.bin"]  # fmt: skip
    result = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout
    y = np.fromfile(tmp_path / "y.bin", np.float32)
    model = _model_of_the_kernel(qt, x)  # same integer block sums; f32 sums in another order
    np.testing.assert_allclose(y, model, rtol=1e-5, atol=1e-5 * float(np.abs(model).max()))
    if kernel_driver.parent.name.startswith("qkernel_native") and _host_has_avx2():
        assert "avx2" in result.stdout  # this build took the hand-vectorized rows
    exact = qt.dequantize() @ x  # 16-bit activations: ~2e-5 of the output scale
    assert np.abs(y - exact).max() < 1e-4 * np.abs(exact).max() + 1e-5
    wrong = args.copy()
    wrong[6] = str(block * 2)  # another block size than the file's
    result = subprocess.run(wrong, cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 2 and "re-synthesize for this model" in result.stdout


PROGRAM = """
graph {
  dynamic { ids: i32[1]; }
  constant { W: q4_1[32, 64]; E: q8_0[10, 64]; L(l): q4_0[64, 64] @pattern("L.{l}"); M: q8_0[64, 48];
             R: q4_1[16, 64]; B: f32[32]; D: f32[64, 48]; }
  volatile { h: f32[1, 64]; g: f32[1, 64]; y: f32[1, 32]; z: f32[1, 48]; e2: f32[1, 64]; r: f32[16, 48]; }
  block entry {
    op embedding(E, ids) >> h;
    op gather(E, ids, axis=0) >> e2;
    loop layers (l in 0..NL) {
      op linear(h, L[l]) >> g;
      op tanh(g) >> h;
    }
    op linear(h, W, B) >> y;
    op matmul(h, M) >> z;
    op matmul(R, D) >> r;
    return;
  }
}
"""


def _program_model(path: Path) -> None:
    rng = np.random.default_rng(0)
    with OinfWriter(path) as w:
        w.add_sizevar("NL", 3)
        w.add_tensor("W", quantize(rng.standard_normal((32, 64)), "q4_1"))
        w.add_tensor("E", quantize(rng.standard_normal((10, 64)), "q8_0"))
        for i in range(3):
            w.add_tensor(f"L.{i}", quantize(rng.standard_normal((64, 64)) * 0.2, "q4_0"))
        w.add_tensor("M", quantize(rng.standard_normal((64, 48)), "q8_0", 16))
        w.add_tensor("R", quantize(rng.standard_normal((16, 64)), "q4_1", 64))
        w.add_tensor("B", rng.standard_normal(32).astype(np.float32))
        w.add_tensor("D", rng.standard_normal((64, 48)).astype(np.float32))


def test_emitted_program_matches_the_simulator(tmp_path: Path) -> None:
    """Within 2e-3 relative to each output's scale: the C matrix-vector products quantize
    activations to 16 bits per block (docs/synthesis.md), the simulator multiplies in f32."""
    model = tmp_path / "m.oinf"
    _program_model(model)
    steps = [{"ids": np.array([t], np.int32)} for t in (3, 9, -1, 42)]
    outputs = ["y", "z", "e2", "h", "r"]
    plan = Synthesizer("c").synthesize(model, PROGRAM, name="prog", outputs=outputs)
    exe = build(plan, tmp_path / "c")
    result = run_driver(exe, model, steps, tmp_path)
    assert result.returncode == 0, result.stderr
    ex = Simulator(model, PROGRAM).make_executor()
    for s, feed in enumerate(steps):
        ex.insert(**feed)
        ex.step()
        for var in outputs:
            got = read_tensor(tmp_path / "out" / f"{var}.{s}.bin", DType.F32)
            want = np.asarray(ex.fetch(var))
            scale = float(np.abs(want).max())
            np.testing.assert_allclose(
                got, want, rtol=0, atol=2e-3 * scale, err_msg=f"step {s} {var}"
            )
            if var == "e2":
                np.testing.assert_array_equal(got, want)  # a gather dequantizes exactly
    assert "oi_quant.h" in plan.files and '#include "oi_quant.h"' in plan.files["prog.c"]
    source = plan.files["prog.c"]
    # weights are bound in place: no arena buffer for W, E, L, M, R
    assert "oi_model_get_block" in source and "V_W.data = (void *)p;" in source
    assert "  W  " not in plan.summary()


def test_a_model_with_another_block_layout_is_refused_at_load(tmp_path: Path) -> None:
    model = tmp_path / "m.oinf"
    _program_model(model)
    plan = Synthesizer("c").synthesize(model, PROGRAM, name="prog", outputs=["y"])
    exe = build(plan, tmp_path / "c")
    rng = np.random.default_rng(1)
    other = tmp_path / "other.oinf"
    with OinfWriter(other) as w:  # same names and shapes, W with blocks of 16
        w.add_sizevar("NL", 3)
        w.add_tensor("W", quantize(rng.standard_normal((32, 64)), "q4_1", 16))
        w.add_tensor("E", quantize(rng.standard_normal((10, 64)), "q8_0"))
        for i in range(3):
            w.add_tensor(f"L.{i}", quantize(rng.standard_normal((64, 64)), "q4_0"))
        w.add_tensor("M", quantize(rng.standard_normal((64, 48)), "q8_0", 16))
        w.add_tensor("R", quantize(rng.standard_normal((16, 64)), "q4_1", 64))
        w.add_tensor("B", rng.standard_normal(32).astype(np.float32))
        w.add_tensor("D", rng.standard_normal((64, 48)).astype(np.float32))
    result = run_driver(exe, other, [{"ids": np.array([1], np.int32)}], tmp_path)
    assert result.returncode != 0
    assert (
        "model tensor W is dtype 21 block 16" in result.stderr and "re-synthesize" in result.stderr
    )


@pytest.mark.skipif(
    shutil.which("aarch64-linux-gnu-gcc") is None, reason="no aarch64 cross compiler"
)
def test_cross_compiles_for_aarch64(tmp_path: Path) -> None:
    model = tmp_path / "m.oinf"
    _program_model(model)
    plan = Synthesizer.from_arch("cortex-a53").synthesize(
        model, PROGRAM, name="prog", outputs=["y"]
    )
    build(plan, tmp_path / "c", cc="aarch64-linux-gnu-gcc", flags=[*CFLAGS, "-O3"])
    kind = subprocess.run(
        ["file", "driver"], cwd=tmp_path / "c", capture_output=True, text=True
    ).stdout
    assert "aarch64" in kind or "ARM" in kind, kind


@pytest.mark.skipif(shutil.which("clang") is None, reason="clang not installed")
def test_clang_builds_cleanly(tmp_path: Path) -> None:
    model = tmp_path / "m.oinf"
    _program_model(model)
    plan = Synthesizer("c").synthesize(model, PROGRAM, name="prog", outputs=["y"])
    build(plan, tmp_path / "c", cc="clang", flags=[*CFLAGS, "-O3", "-march=native"])


@needs_vulkan
def test_vulkan_target_runs_quantized_nodes_on_the_host(tmp_path: Path) -> None:
    """The emitted Vulkan program keeps block-quantized weights packed in the host model and
    runs their nodes with the C kernels; the rest of the graph dispatches on the device."""
    model = tmp_path / "m.oinf"
    _program_model(model)
    outputs = ["y", "z", "e2"]
    plan = Synthesizer("vulkan").synthesize(model, PROGRAM, name="prog", outputs=outputs)
    assert plan.vulkan is not None
    assert plan.vulkan.reasons() == {"block-quantized weight (C kernel on the host)": 6}
    exe = build(plan, tmp_path / "c")
    steps = [{"ids": np.array([t], np.int32)} for t in (3, 9)]
    result = run_driver(exe, model, steps, tmp_path)
    assert result.returncode == 0, result.stderr
    ex = Simulator(model, PROGRAM).make_executor()
    for s, feed in enumerate(steps):
        ex.insert(**feed)
        ex.step()
        for var in outputs:
            want = np.asarray(ex.fetch(var))
            got = read_tensor(tmp_path / "out" / f"{var}.{s}.bin", DType.F32)
            np.testing.assert_allclose(got, want, rtol=0, atol=2e-3 * float(np.abs(want).max()))


def test_one_and_two_threads_are_bit_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quantized products split their output rows over the kernel threads (oi_parallel.h)."""
    from tests.emit.cases import test_arch

    model = tmp_path / "m.oinf"
    _program_model(model)
    base = test_arch()
    arch = {**base, "preferences": {**base["preferences"], "threads": 2}}
    plan = Synthesizer(arch).synthesize(model, PROGRAM, name="prog", outputs=["y", "z", "h"])
    assert "oi_pool.h" in plan.files and "oi_parallel.h" in plan.files
    steps = [{"ids": np.array([t], np.int32)} for t in (3, 7)]
    flags = [*CFLAGS, "-DOI_PARALLEL_MIN_WORK=0"]  # split even these small products
    outs = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("OI_THREADS", threads)
        exe = build(plan, tmp_path / f"t{threads}", flags=flags)
        result = run_driver(exe, model, steps, tmp_path / f"run{threads}")
        assert result.returncode == 0, result.stderr
        outs[threads] = {
            p.name: p.read_bytes() for p in sorted((tmp_path / f"run{threads}" / "out").iterdir())
        }
    assert outs["1"] == outs["2"] and len(outs["1"]) == 6
