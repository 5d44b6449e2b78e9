"""The Vulkan target on lavapipe (Mesa's CPU Vulkan driver), or any Vulkan device: every
example graph is emitted, built against libvulkan (cc + -lvulkan only: the SPIR-V is embedded
in the C source) and run over several steps; every output of every step must match the
simulator. Op nodes with a GPU kernel must run on the GPU; the others run their C kernel on the
host, and strict mode turns those into SynthesisError naming the node."""

from __future__ import annotations

import ctypes.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from openinfer_jax.core.dtypes import PACKED_DTYPES
from openinfer_jax.core.errors import SynthesisError
from openinfer_jax.emit import Synthesizer
from tests.emit.cases import CASES
from tests.emit.harness import CC, parity, run_driver

HAVE_VULKAN = (
    ctypes.util.find_library("vulkan") is not None and Path("/usr/include/vulkan/vulkan.h").exists()
)
# Without glslc the shaders must already be in the SPIR-V cache ($OPENINFER_VK_CACHE).
needs_vulkan = pytest.mark.skipif(
    not (HAVE_VULKAN and shutil.which(CC) and (shutil.which("glslc") or os.environ.get("OPENINFER_VK_CACHE"))),
    reason="libvulkan-dev, a C compiler, or glslc (or a populated OPENINFER_VK_CACHE) missing",
)  # fmt: skip

# Why an op node of an example may run on the host: its inputs' shapes change at run time
# (cache slices), it has a packed operand, or its output overwrites an input (transpose).
HOST_REASONS = ("run-time shape", "packed ", "output overwrites an input")


@needs_vulkan
def test_params_read_at_run_time_run_on_the_host(tmp_path: Path) -> None:
    """Op params given as variables (test_parity_params' graph) keep working on the Vulkan
    target: those nodes run their C kernel on the host, after a sync."""
    import numpy as np

    from tests.emit.test_parity_params import GRAPH, OUTPUTS, _model, _step

    rng = np.random.default_rng(11)
    model = _model(tmp_path / "m.oinf")
    steps = [_step(rng, s) for s in range(3)]
    result = parity(tmp_path, model, GRAPH, steps, outputs=OUTPUTS, arch=Synthesizer("vulkan"))
    assert result["compared"] == 3 * len(OUTPUTS)
    report = result["plan"].vulkan
    assert report.reasons().get("params read at run time", 0) >= 10
    assert report.gpu >= 1


def _vulkan(case_arch: object) -> Synthesizer:
    return Synthesizer(case_arch).with_target("vulkan")  # type: ignore[arg-type]


def driver_stats(tmp: Path, case: object) -> dict[str, str]:
    """Run the built driver again and parse its `vk_*` report lines."""
    result = run_driver(tmp / "c" / "driver", case.model, case.steps, tmp / "again")  # type: ignore[attr-defined]
    assert result.returncode == 0, result.stderr
    return dict(re.findall(r"^(vk_\w+) (.+)$", result.stdout, re.M))


@needs_vulkan
@pytest.mark.parametrize("name", sorted(CASES))
def test_vulkan_example_matches_simulator(name: str, tmp_path: Path) -> None:
    case = CASES[name](tmp_path)
    result = parity(tmp_path, case.model, case.graph, case.steps, arch=_vulkan(case.arch))
    plan = result["plan"]
    assert plan.target == "vulkan" and plan.vulkan is not None
    assert result["compared"] >= len(case.steps)
    report = plan.vulkan
    for where, why in report.host:
        assert why.startswith(HOST_REASONS), f"{where} runs on the host: {why}"
    source = plan.files["prog.c"]
    if report.gpu:
        assert "oi_vk_run(" in source and "static const uint32_t SPV_0[" in source
        assert any(f.endswith(".comp") for f in plan.files)
    assert report.gpu >= 2 * len(report.host)  # most op nodes run on the GPU
    stats = driver_stats(tmp_path, case)
    assert float(stats["vk_dispatches_per_step"]) >= 1
    # Every GPU node found a prepared shape, cache-slice consumers included.
    assert float(stats["vk_fallbacks_per_step"]) == 0.0
    assert "vk_device" in stats
    assert "vulkan:" in plan.summary()


@needs_vulkan
def test_every_node_of_the_mlp_runs_on_the_gpu_in_one_submission(tmp_path: Path) -> None:
    case = CASES["mlp"](tmp_path)
    result = parity(tmp_path, case.model, case.graph, case.steps, arch=_vulkan(case.arch))
    report = result["plan"].vulkan
    assert report.host == () and report.gpu == 5
    stats = driver_stats(tmp_path, case)
    assert float(stats["vk_submits_per_step"]) == 1.0  # batched: one submit + wait per step
    assert float(stats["vk_dispatches_per_step"]) == 5.0


@pytest.mark.parametrize(
    ("name", "pattern"),
    [
        ("quantized_linear", r"block entry node `op .*` at \d+:\d+: runs on the host in the Vulkan "
                              r"target \(packed i4 .*\); strict mode"),
        ("condensed", r"block entry node `op matmul\(h, W\[l\]\) >> h` at \d+:\d+: runs on the host in the "
                      r"Vulkan target \(output overwrites an input the kernel still reads\)"),
    ],
)  # fmt: skip
def test_strict_mode_names_the_host_node(name: str, pattern: str, tmp_path: Path) -> None:
    case = CASES[name](tmp_path)
    synth = _vulkan(case.arch)
    with pytest.raises(SynthesisError, match=pattern):
        synth.synthesize(case.model, case.graph, strict=True)
    assert not list(tmp_path.glob("**/*.c"))  # nothing written


def test_strict_mode_accepts_an_all_gpu_graph(tmp_path: Path) -> None:
    if not shutil.which("glslc") and not os.environ.get("OPENINFER_VK_CACHE"):
        pytest.skip("glslc missing")
    case = CASES["moe_routing"](tmp_path)
    plan = _vulkan(case.arch).synthesize(case.model, case.graph, strict=True)
    assert plan.vulkan is not None and plan.vulkan.host == () and plan.vulkan.gpu == 6


def test_build_needs_only_cc_and_libvulkan(tmp_path: Path) -> None:
    """The emitted program embeds its SPIR-V: no shader compiler at build or run time."""
    if not (HAVE_VULKAN and shutil.which(CC)) or not (
        shutil.which("glslc") or os.environ.get("OPENINFER_VK_CACHE")
    ):
        pytest.skip("libvulkan-dev, cc or glslc missing")
    case = CASES["minimal"](tmp_path)
    plan = _vulkan(case.arch).synthesize(case.model, case.graph, name="prog")
    out = plan.emit(tmp_path / "src")
    for comp in out.glob("*.comp"):  # the GLSL is there for reading only
        comp.unlink()
    cmd = [CC, "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "prog.c", "oi_runtime.c",
           "oi_vulkan.c", "prog_driver.c", "-lvulkan", "-lm", "-o", "driver"]  # fmt: skip
    result = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (
        ".spv" not in plan.files["prog.c"] and "static const uint32_t SPV_" in plan.files["prog.c"]
    )
    ran = run_driver(out / "driver", case.model, case.steps, tmp_path / "run")
    assert ran.returncode == 0, ran.stderr
    assert "vk_submits_per_step 1.000" in ran.stdout
    # The arena in device-local host-visible memory (where offered) gives the same outputs.
    (tmp_path / "run" / "out2").mkdir()
    again = subprocess.run(
        [str(out / "driver"), str(case.model), str(len(case.steps)), str(tmp_path / "run" / "in"),
         str(tmp_path / "run" / "out2")],
        env={**os.environ, "OI_VK_MEMORY": "device"}, capture_output=True, text=True,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    for first in sorted((tmp_path / "run" / "out").iterdir()):
        assert (tmp_path / "run" / "out2" / first.name).read_bytes() == first.read_bytes()


# ---- the op conformance matrix and the model-building ops on the GPU -------------------------
# Every 10th cell of the matrix (ternary cells excluded, as in test_parity_ops), in 2 programs;
# the device JSON promises shaderFloat64 (lavapipe has it) so f64 cells run on the GPU too.
VK_STRIDE = 10
VK_CHUNKS = 2


def _gpu_arch(**features: bool) -> dict[str, object]:
    from openinfer_jax.emit.device import host_arch

    raw = {k: dict(v) for k, v in host_arch("vulkan").raw.items()}
    raw["features"].update(features)
    return raw


def _run_vulkan_cases(cases: list, tmp_path: Path) -> tuple[list[str], object]:
    """The cases as one Vulkan program (f64 on the GPU), run and compared with the simulator."""
    from tests.emit.test_parity_ops import run_cases

    return run_cases(cases, tmp_path, Synthesizer(_gpu_arch(shader_float64=True)))


@needs_vulkan
@pytest.mark.parametrize("chunk", range(VK_CHUNKS))
def test_conformance_sample_on_the_gpu_matches_simulator(chunk: int, tmp_path: Path) -> None:
    from tests.emit.test_parity_ops import TERNARY
    from tests.ops.conformance_cases import build_cases

    # _sample() is every 6th cell of the matrix; a different stride reaches other cells.
    cases = [c for c in build_cases() if not TERNARY & set(c.dtypes)][::VK_STRIDE][chunk::VK_CHUNKS]
    failures, plan = _run_vulkan_cases(cases, tmp_path)
    assert not failures, f"{len(failures)} of {len(cases)} cases differ:\n" + "\n".join(
        failures[:40]
    )
    report = plan.vulkan  # type: ignore[attr-defined]
    # The unpacked dtypes of every op with a kernel run on the GPU: the host keeps packed
    # dtypes and the ops the simulator backend has no kernel for.
    for where, why in report.host:
        assert why.startswith(("packed ", "no Vulkan kernel")), f"{where}: {why}"
    # most cases of unpacked dtypes run on the GPU (how many are packed depends on the draw)
    unpacked = [c for c in cases if not PACKED_DTYPES & set(c.dtypes)]
    assert report.gpu >= 0.6 * len(unpacked), (report.gpu, len(unpacked))


@needs_vulkan
def test_model_building_ops_on_the_gpu_match_simulator(tmp_path: Path) -> None:
    """The graphs of test_parity_nn (embedding, gather, attention, concat, batch_norm, pools,
    pad, rope, linear, conv1d/2d, norms) on the Vulkan target, random inputs, 2 steps."""
    import numpy as np

    from openinfer_jax.oinf import write_oinf
    from openinfer_jax.trace import load_graph
    from tests.emit.test_parity_nn import GRAPH, NORM_GRAPH

    rng = np.random.default_rng(0)
    model = tmp_path / "m.oinf"
    table = rng.standard_normal((10, 8)).astype(np.float32)
    write_oinf(model, sizevars={"V": 10, "D": 8}, metadata={}, tensors={"table": table})
    for k, text in enumerate((GRAPH, NORM_GRAPH)):
        graph = load_graph(text)
        dynamic = [d for d in graph.vars if d.kind.name == "DYNAMIC"]
        steps = [{d.name: _random(rng, d.dtype, d.dims) for d in dynamic} for _ in range(2)]
        outputs = [d.name for d in graph.vars if d.kind.name == "VOLATILE"]
        work = tmp_path / f"g{k}"
        work.mkdir()
        result = parity(work, model, text, steps, outputs=outputs, arch=Synthesizer("vulkan"))
        assert result["compared"] == 2 * len(outputs)
        report = result["plan"].vulkan
        for where, why in report.host:  # attention/kernels the simulator backend lacks
            assert why.startswith(("no Vulkan kernel", "attention")), f"{where}: {why}"
        assert report.gpu >= 0.7 * (report.gpu + len(report.host))


def _random(rng: object, dtype: object, dims: tuple) -> object:
    """Random inputs by dtype: normal floats, small signed/unsigned ints, random bools."""
    from openinfer_jax.core.dtypes import DType

    shape = tuple(int(d) for d in dims)
    if dtype is DType.BOOL:
        return rng.integers(0, 2, shape).astype(bool)  # type: ignore[attr-defined]
    if dtype.is_float:  # type: ignore[attr-defined]
        return rng.standard_normal(shape).astype(dtype.numpy)  # type: ignore[attr-defined]
    low = 0 if dtype.is_unsigned_int else -12  # type: ignore[attr-defined]
    return rng.integers(low, 50, shape).astype(dtype.numpy)  # type: ignore[attr-defined]


# ---- golden sources and determinism -------------------------------------------------------------
# A text graph (no absolute source paths in node locations) with a cache-slice consumer
# (shape variants), host cache nodes (syncs) and GPU nodes.
GOLDEN = Path(__file__).with_name("golden") / "cache_window_slice_vulkan"
_SPIRV = re.compile(r"(static const uint32_t SPV_\d+\[)\d+(\] = \{\n)(?:    .*\n)*?(\};)")


def _masked(text: str) -> str:
    """The SPIR-V words are glslc's (they change with its version): masked in the goldens."""
    return _SPIRV.sub(r"\1N\2    /* SPIR-V words from glslc */\n\3", text)


@pytest.mark.skipif(
    not (shutil.which("glslc") or os.environ.get("OPENINFER_VK_CACHE")), reason="no glslc"
)
def test_vulkan_sources_match_golden_and_are_deterministic(tmp_path: Path) -> None:
    from tests.emit.test_golden import _generated

    case = CASES["cache_window_slice"](tmp_path)
    plan = _vulkan(case.arch).synthesize(case.model, case.graph, name="window")
    again = _vulkan(case.arch).synthesize(case.model, case.graph, name="window")
    assert dict(plan.files) == dict(again.files)  # byte-identical, SPIR-V included
    files = {name: _masked(text) for name, text in _generated(dict(plan.files)).items()}
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(parents=True, exist_ok=True)
        for old in GOLDEN.iterdir():
            old.unlink()
        for fname, text in files.items():
            (GOLDEN / fname).write_text(text, encoding="utf-8")
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in sorted(GOLDEN.iterdir())}
    assert sorted(on_disk) == sorted(files), "file set changed; run with UPDATE_GOLDEN=1 and review"
    for fname, text in files.items():
        assert text == on_disk[fname], (
            f"{GOLDEN.name}/{fname} differs from golden (UPDATE_GOLDEN=1)"
        )
        assert str(tmp_path) not in text and "/work/" not in text  # no absolute paths


INPLACE = """
graph {
  dynamic { k0: f32[2, 5, 4]; pos: i32[5]; x0: f32[3, 8]; }
  volatile { k: f32[2, 5, 4]; r: f32[2, 5, 4]; x: f32[3, 8]; y: f32[3, 8]; }
  block entry {
    op add(k0, k0) >> k;
    op rope(k, pos, theta=100.0) >> k;
    op add(k, k) >> r;
    op abs(x0) >> x;
    op softmax(x, axis=1) >> x;
    op layer_norm(x, axis=1) >> y;
    op rope(r, pos) >> r;
    return;
  }
}
"""


@needs_vulkan
def test_in_place_ops_run_on_the_gpu(tmp_path: Path) -> None:
    """rope in place goes through a scratch tensor and a copy dispatch; softmax in place
    reads its row statistics first: all on the GPU, equal to the simulator."""
    import numpy as np

    from openinfer_jax.oinf import write_oinf

    rng = np.random.default_rng(5)
    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={})
    steps = [
        {
            "k0": rng.standard_normal((2, 5, 4)).astype(np.float32),
            "pos": rng.integers(0, 40, 5).astype(np.int32),
            "x0": rng.standard_normal((3, 8)).astype(np.float32),
        }
        for _ in range(2)
    ]
    outputs = ["k", "r", "x", "y"]
    result = parity(tmp_path, model, INPLACE, steps, outputs=outputs, arch=Synthesizer("vulkan"))
    assert result["compared"] == 2 * len(outputs)
    report = result["plan"].vulkan
    assert report.host == () and report.gpu == 7


@needs_vulkan
def test_prefix_preload_skips_entries_of_another_shape(tmp_path: Path) -> None:
    """`w.0: f32[2]`, `w.1: f32[4]` and `W(l): f32[4] @pattern("w.{l}")` reading only W[1]:
    the program is valid, so oi_init must not preload (and reject) w.0."""
    import numpy as np

    from openinfer_jax.oinf import write_oinf

    model = write_oinf(
        tmp_path / "m.oinf",
        tensors={
            "w.0": np.array([9, 9], np.float32),
            "w.1": np.array([1, 2, 3, 4], np.float32),
            "v.0": np.array([1, 1, 1, 1], np.float32),
            "v.1": np.array([2, 2, 2, 2], np.float32),
        },
    )
    graph = """
    graph {
      dynamic { x: f32[4]; }
      volatile { W(l): f32[4] @pattern("w.{l}"); V(l): f32[4] @pattern("v.{l}"); y: f32[4]; }
      block entry {
        op add(x, W[1]) >> y;
        loop k (i in 0..2) { op add(y, V[i]) >> y; }
        return;
      }
    }
    """
    steps = [{"x": np.zeros(4, np.float32)}, {"x": np.ones(4, np.float32)}]
    result = parity(tmp_path, model, graph, steps, outputs=["y"], arch=_vulkan("c"))
    assert result["compared"] == 2
    source = result["plan"].files["prog.c"]
    assert "preload V" in source and "preload W" not in source
