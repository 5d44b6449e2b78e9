"""The Vulkan target: C host code on the Vulkan API plus GLSL compute shaders (SPIR-V from
glslc), built against libvulkan and run on lavapipe (Mesa's CPU Vulkan driver); outputs must
match the simulator. Ops outside its f32 elementwise+matmul subset raise SynthesisError."""

from __future__ import annotations

import ctypes.util
import shutil
from pathlib import Path

import pytest

from openinfer_jax.emit import Synthesizer
from openinfer_jax.errors import SynthesisError
from tests.emit.cases import CASES
from tests.emit.harness import CC, parity

HAVE_VULKAN = (
    ctypes.util.find_library("vulkan") is not None and Path("/usr/include/vulkan/vulkan.h").exists()
)
needs_vulkan = pytest.mark.skipif(
    not (HAVE_VULKAN and shutil.which("glslc") and shutil.which(CC)),
    reason="libvulkan-dev, glslc or a C compiler missing",
)

VULKAN_EXAMPLES = ("minimal", "mlp", "residual_mlp_stack")


@needs_vulkan
@pytest.mark.parametrize("name", VULKAN_EXAMPLES)
def test_vulkan_example_matches_simulator(name: str, tmp_path: Path) -> None:
    case = CASES[name](tmp_path)
    result = parity(tmp_path, case.model, case.graph, case.steps, arch=Synthesizer("vulkan"))
    plan = result["plan"]
    assert plan.target == "vulkan"
    assert any(f.endswith(".comp") for f in plan.files)
    source = plan.files["prog.c"]
    assert "oi_vk_dispatch" in source and "static const uint32_t SPV_" in source
    assert result["compared"] >= len(case.steps)


@needs_vulkan
def test_vulkan_rejects_ops_outside_its_subset(tmp_path: Path) -> None:
    case = CASES["moe_routing"](tmp_path)
    with pytest.raises(
        SynthesisError,
        match=r"block entry node `op reshape\(score\) >> s`.*not supported by the Vulkan target",
    ):
        Synthesizer("vulkan").synthesize(case.model, case.graph)
