"""Which op nodes of an emitted Vulkan program run on the GPU, and with which kernels.

The GLSL comes from the simulator's Vulkan backend (`openinfer_jax.vk.kernels`, read-only
here): a `Kernel` there is GLSL + push-constant words + grid, its source depends only on
dtypes and static params, and its bindings are the inputs then the output, each a word
buffer. The emitted program binds each of them to a slice of its one arena, so a tensor's
bytes must be laid out the same way in C and on the GPU: true for every dtype except the
packed integers (C unpacks them to one byte per element, the GPU packs them into words).

`plan_vk_op` turns one resolved op call (bounded shapes from the analysis) into a `VkOpPlan`
(one or more dispatches, push constants baked for those shapes), or into the reason why the
node runs on the host instead: no kernel for the op or dtype, a packed dtype, a device
feature the device JSON does not promise (``features.shader_int64``, default true;
``features.shader_float64``, default false), a kernel limit (broadcast rank). SPIR-V comes
from `openinfer_jax.vk.compiler` (glslc, cached on disk by source hash).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import OpenInferError, SynthesisError
from openinfer_jax.emit.analysis import OpInfo
from openinfer_jax.ir.nodes import VarName

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
    """
    from openinfer_jax.vk import kernels

    op = info.opdef.name
    if op not in kernels.kernel_ops():
        return f"no Vulkan kernel for op {op}"
    dtypes = [*info.in_dtypes, info.out_dtype]
    for dtype in dtypes:
        if dtype.is_packed:
            return f"packed {dtype.short} (C unpacks it, the GPU packs it)"
    for key, value in info.params.items():
        if isinstance(value, VarName):
            return f"param {key} is a variable"
    needs = _needs(op, info)
    for need in sorted(needs):
        if not features.get(need, False):
            return f"device JSON features.{need} is false"
    try:
        return _plan(op, info, tiles, needs, (inplace, shared_memory, split_keys))
    except OpenInferError as err:  # a kernel limit (rank, grid) or no expression for a family
        return str(err).split("\n")[0]


def _needs(op: str, info: OpInfo) -> frozenset[str]:
    from openinfer_jax.vk.glsl import glsl_type

    needed: list[DType] = list(info.in_dtypes)
    if op not in ("argmax_axis", "argmin_axis"):
        needed.append(info.out_dtype)  # arg* write i64 indices as two words, no int64 math
    acc = info.params.get("acc") if info.opdef.acc_rules else None
    if acc is not None:
        needed.append(acc[0])
    if op == "relu" and info.in_dtypes[0].is_int:
        needed.append(DType.F64)  # integer relu multiplies by the slope in f64
    if op in ("softmax", "log_softmax", "layer_norm", "rms_norm") and DType.F64 in needed:
        needed.append(DType.F64)
    caps = {glsl_type(d).capability for d in needed}
    return frozenset(c for c in caps if c is not None)


def _plan(
    op: str, info: OpInfo, tiles: str, needs: frozenset[str], nn: tuple[bool, int, bool]
) -> VkOpPlan | str:
    """The kernel(s) of `op` at the call's bounded shapes (mirrors the simulator backend)."""
    from openinfer_jax.vk import kernels
    from openinfer_jax.vk.expressions import ELEMENTWISE
    from openinfer_jax.vk.glsl import glsl_type

    dtypes, shapes = list(info.in_dtypes), [tuple(s) for s in info.in_shapes]
    params, out, out_shape = info.params, info.out_dtype, tuple(info.out_shape)
    ins = tuple(f"in{k}" for k in range(len(dtypes)))

    def one(kernel: Any, roles: Sequence[str] = (*ins, "out")) -> VkOpPlan:
        return VkOpPlan((VkStep(kernel, tuple(roles)),), (), needs)

    if op in _nn_ops():
        return _nn(op, info, tiles, needs, *nn)

    if op in kernels.NORMALIZATIONS:
        if op in ("softmax", "log_softmax") and dtypes[0] is DType.F64:
            return f"{op}: no Vulkan kernel for f64 inputs (GLSL's exp takes no doubles)"
        axes = kernels.norm_axes(op, len(shapes[0]), int(params.get("axis", -1)))
        stats = kernels.norm_stats_kernel(op, dtypes[0], shapes[0], axes)
        apply = kernels.norm_apply_kernel(
            op, dtypes[0], shapes, axes, float(params.get("epsilon", 0.0))
        )
        width = 8 if dtypes[0] is DType.F64 else 4
        steps = (
            VkStep(stats, ("in0", "scratch0")),
            VkStep(apply, ("in0", "scratch0", *ins[1:], "out")),
        )
        return VkOpPlan(steps, (int(stats.push[0]) * width,), needs)
    name = "gelu_tanh" if op == "gelu" and params.get("approximate") == "tanh" else op
    if name in ELEMENTWISE and ELEMENTWISE[name].expr_for(glsl_type(dtypes[0]).family) is None:
        return f"no Vulkan kernel for {op} on {dtypes[0].short}"
    if op == "fill":
        return one(kernels.fill_kernel(dtypes[0], out_shape, params["value"]), ("out",))
    return one(kernels.op_kernel(op, dtypes, shapes, params, out, out_shape, tiles))


def _nn_ops() -> tuple[str, ...]:
    """The model-building ops of the simulator backend (vk/nn_kernels.py), if present."""
    try:
        from openinfer_jax.vk import nn_kernels
    except ImportError:  # an older simulator backend: these ops run on the host
        return ()
    return tuple(nn_kernels.NN_OPS)


def _nn(
    op: str,
    info: OpInfo,
    tiles: str,
    needs: frozenset[str],
    inplace: bool,
    shared_memory: int,
    split_keys: bool,
) -> VkOpPlan | str:
    """A model-building op through `vk.nn_kernels.nn_plan` (bindings mapped to roles)."""
    from openinfer_jax.vk import nn_kernels
    from openinfer_jax.vk.storage import encode_words

    reason = nn_kernels.unsupported_reason(op, list(info.in_dtypes), info.params)
    if reason is not None:
        return reason
    plan = nn_kernels.nn_plan(
        op, list(info.in_dtypes), [tuple(s) for s in info.in_shapes], info.params,
        info.out_dtype, tuple(info.out_shape), tiles, inplace, shared_memory, split_keys,
    )  # fmt: skip
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
    return VkOpPlan(steps, scratch, needs, constants)


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
