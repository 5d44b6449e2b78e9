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

from openinfer_jax.emit import Synthesizer
from openinfer_jax.errors import SynthesisError
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
    assert ".spv" not in plan.files["prog.c"] and "static const uint32_t SPV_" in plan.files["prog.c"]
    ran = run_driver(out / "driver", case.model, case.steps, tmp_path / "run")
    assert ran.returncode == 0, ran.stderr
    assert "vk_submits_per_step 1.000" in ran.stdout
