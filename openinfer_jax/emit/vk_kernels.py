"""Which op nodes of an emitted Vulkan program run on the GPU, and with which kernels.

The GLSL comes from the simulator's Vulkan backend (`openinfer_jax.vk.kernels`, read-only
here): a `Kernel` there is GLSL + push-constant words + grid, its source depends only on
dtypes and static params, and its bindings are the inputs then the output, each a word
buffer. The emitted program binds each of them to a slice of its one arena, so a tensor's
bytes must be laid out the same way in C and on the GPU: true for every dtype except the
packed integers (C unpacks them to one byte per element, the GPU packs them into words).

`plan_vk_op` turns one resolved op call (bounded shapes from the analysis) into a `VkOpPlan`
(one or more dispatches, push constants baked for those shapes), or into the reason why the
node runs on the host instead: a packed dtype, or what `openinfer_jax.vk.selection` (shared
with the simulator's backend) says: no kernel for the op or dtype, a device feature the
device JSON does not promise (``features.shader_int64``, default true;
``features.shader_float64``, default false), a kernel limit (broadcast rank). SPIR-V comes
from `openinfer_jax.vk.compiler` (glslc, cached on disk by source hash).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from openinfer_jax.core.errors import OpenInferError, SynthesisError
from openinfer_jax.emit.analysis import OpInfo

__all__ = [
    "DEFAULT_FEATURES",
    "VkOpPlan",
    "VkStep",
    "compile_spirv",
    "device_features",
    "matmul_tiles",
    "plan_vk_op",
]

#: Optional ``features`` keys of the device JSON that the Vulkan target reads, and their
#: defaults (shaderInt64 is near-universal on compute GPUs and lavapipe; shaderFloat64 is not).
DEFAULT_FEATURES: dict[str, bool] = {"shader_int64": True, "shader_float64": False}


@dataclass(frozen=True)
class VkStep:
    """One dispatch: the kernel and what each binding is: ``in<k>``, ``out``, ``scratch<k>``
    (a device-only temporary, e.g. a norm's row statistics) or ``const<k>``."""

    kernel: Any  # openinfer_jax.vk.kernels.Kernel (imported lazily: it pulls in NumPy params)
    roles: tuple[str, ...]


@dataclass(frozen=True)
class VkOpPlan:
    """The dispatches of one op node, the bytes of each scratch tensor, the little-endian
    bytes of each constant (rope frequencies), and the device features its kernels use
    (``shader_int64`` / ``shader_float64``)."""

    steps: tuple[VkStep, ...]
    scratch: tuple[int, ...]
    needs: frozenset[str]
    constants: tuple[bytes, ...] = ()


def device_features(raw_features: Mapping[str, Any]) -> dict[str, bool]:
    """The `DEFAULT_FEATURES` keys as the device JSON's ``features`` section sets them."""
    return {key: bool(raw_features.get(key, default)) for key, default in DEFAULT_FEATURES.items()}


def matmul_tiles(raw_preferences: Mapping[str, Any]) -> str:
    """The f32 matmul tile config: ``preferences.vk_matmul_tiles`` or ``"small"``.

    "small" (64x64 tiles) runs well on CPU drivers and any GPU; "large" is the H200 tuning.

    Raises:
        SynthesisError: the value names no tile config.
    """
    from openinfer_jax.vk.kernels import tile_config

    tiles = raw_preferences.get("vk_matmul_tiles", "small")
    if not isinstance(tiles, str) or (tiles != "generic" and tile_config(tiles) is None):
        raise SynthesisError(
            f"preferences.vk_matmul_tiles must be 'small', 'large', 'generic' or "
            f"'BMxBNxBKxTMxTN', got {tiles!r}"
        )
    return tiles


def plan_vk_op(
    info: OpInfo,
    features: Mapping[str, bool],
    tiles: str = "small",
    *,
    inplace: bool = False,
    shared_memory: int = 32768,
    split_keys: bool = True,
) -> VkOpPlan | str:
    """The GPU dispatches of one op call, or the reason it runs on the host (a short phrase).

    `inplace`: the output is also an input (rope then computes into a scratch tensor);
    `shared_memory`: the device's compute shared memory (``limits.max_shared_memory_bytes``);
    `split_keys`: decode-step attention may split over key ranges (right for GPUs).
    Which ops run and with which kernels is `openinfer_jax.vk.selection`'s answer, the same
    as the simulator's Vulkan backend gives; only packed dtypes are the emitter's own rule.
    """
    from openinfer_jax.vk import selection
    from openinfer_jax.vk.storage import encode_words

    for dtype in (*info.in_dtypes, info.out_dtype):
        if dtype.is_packed:
            return f"packed {dtype.short} (C unpacks it, the GPU packs it)"

    def missing(feature: str) -> str:
        return f"device JSON features.{feature} is false"

    try:
        chosen = selection.select(info.opdef.name, info.in_dtypes, info.params, features, missing)
    except OpenInferError as err:
        return str(err).split("\n")[0]
    if isinstance(chosen, str):
        return chosen
    plan = selection.plan_or_reason(
        chosen, [tuple(s) for s in info.in_shapes], tuple(info.out_shape), tiles=tiles,
        inplace=inplace, shared_memory=shared_memory, split_attention=split_keys,
    )  # fmt: skip
    if isinstance(plan, str):
        return plan
    names = {"input": "in", "output": "out", "scratch": "scratch", "constant": "const"}
    steps = tuple(
        VkStep(
            d.kernel,
            tuple("out" if b.kind == "output" else f"{names[b.kind]}{b.index}" for b in d.bindings),
        )
        for d in plan.dispatches
    )
    scratch = tuple(
        4 * max(1, (math.prod(shape) * dtype.bits + 31) // 32) for dtype, shape in plan.scratch
    )
    constants = tuple(encode_words(values, dtype).tobytes() for dtype, values in plan.constants)
    return VkOpPlan(steps, scratch, chosen.needs, constants)


def compile_spirv(sources: Sequence[str]) -> list[bytes]:
    """SPIR-V of each GLSL source (glslc, one process for the uncached ones; cached on disk
    by source hash, `$OPENINFER_VK_CACHE`).

    Raises:
        SynthesisError: glslc is missing (and a source is not cached) or rejects a shader.
    """
    from openinfer_jax.vk.compiler import compile_glsl, compile_many

    try:
        compile_many(list(sources))
        return [compile_glsl(src, f"kernel {k}") for k, src in enumerate(sources)]
    except OpenInferError as err:
        raise SynthesisError(f"the Vulkan target cannot compile its shaders: {err}") from None
