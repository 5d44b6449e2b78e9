"""Can this op run on Vulkan, and with which kernels: one answer for every Vulkan path.

The simulator's Vulkan backend (`openinfer_jax.vk.backend`) and the emitted Vulkan target
(`openinfer_jax.emit.vk_kernels`) both ask here, so an op runs on the GPU in one exactly
when it does in the other, with the same GLSL:

* `select` decides from the op, dtypes and params alone: the op has a kernel (an expression
  tree, or a structured kernel in kernels.py / nn_kernels.py), no param is a run-time
  variable, the device offers the capabilities the registry says the call needs
  (`OpDef.capabilities`: ``int64`` -> shaderInt64, ``float64`` -> shaderFloat64; GLSL has
  no ``float64_math`` at all), and the tree prints for those types;
* `plan` turns a selected call with concrete shapes into dispatches (`NnPlan`: kernels
  whose bindings name inputs, the output, scratch tensors and host constants), or raises
  `BackendError` for a kernel limit (broadcast rank, attention head dims...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from openinfer_jax.core.dtypes import NARROW_FLOATS, DType
from openinfer_jax.core.errors import OpenInferError
from openinfer_jax.vk import kernels, nn_kernels
from openinfer_jax.vk.nn_kernels import Binding, Dispatch, NnPlan

__all__ = ["FEATURES", "Selection", "plan", "select"]

#: The Vulkan device feature behind each capability of `OpDef.capabilities`.
FEATURES: dict[str, str] = {"int64": "shader_int64", "float64": "shader_float64"}

_OUT = Binding("output")


@dataclass(frozen=True)
class Selection:
    """An op call that runs on Vulkan: its declaration, resolved params, output dtype and
    the device features its kernels use (``shader_int64`` / ``shader_float64``)."""

    op: str
    opdef: Any  # openinfer_jax.ops.registry.OpDef (imported lazily: ops load JAX)
    params: dict[str, Any]
    in_dtypes: tuple[DType, ...]
    out: DType
    needs: frozenset[str]


def select(
    op: str,
    in_dtypes: Sequence[DType],
    params: Mapping[str, Any],
    features: Mapping[str, bool],
    missing: Callable[[str], str] | None = None,
) -> Selection | str:
    """The call if it runs on Vulkan, else the reason (a short phrase starting with
    ``no Vulkan kernel``, ``param``, or `missing(feature)` for a feature `features` lacks).

    Raises:
        OpCheckError: the dtypes or params break the op's declaration.
    """
    from openinfer_jax.ops import registry  # lazy: importing ops loads JAX

    opdef = registry.get(op)
    if opdef is None or op not in kernels.kernel_ops():
        return f"no Vulkan kernel for op {op}"
    for name, value in params.items():  # kernels bake their params (push constants)
        if type(value).__name__ in ("VarName", "RuntimeParam"):
            return f"param {name} is a variable"
    resolved = opdef.resolve_params(params)
    out = opdef.output_dtype(list(in_dtypes), resolved)
    narrow = [d for d in (*in_dtypes, out) if d in NARROW_FLOATS]
    if narrow:
        return f"no Vulkan kernel for {narrow[0].short} (narrow floats run on the CPU)"
    if op == "bitcast" and kernels.bitcast_expr(in_dtypes[0], out) is None:
        return f"no Vulkan kernel for bitcast from {in_dtypes[0].short} to {out.short}"
    needs = opdef.capabilities(list(in_dtypes), resolved)
    if "float64_math" in needs:
        return (
            "no Vulkan kernel for f64 inputs (GLSL has no double exp, log, tanh, erf, sin or cos)"
        )
    if op in nn_kernels.NN_OPS:
        reason = nn_kernels.unsupported_reason(op, list(in_dtypes), resolved)
        if reason is not None:
            return reason
    if opdef.expr is not None and op != "fill":
        tree = opdef.expression(list(in_dtypes), resolved)
        if tree is None:
            return f"no Vulkan kernel for {op} on {in_dtypes[0].short}"
    wanted = frozenset(FEATURES[c] for c in needs)
    for feature in sorted(wanted):
        if not features.get(feature, False):
            return missing(feature) if missing else f"the device lacks {feature}"
    return Selection(op, opdef, resolved, tuple(in_dtypes), out, wanted)


def plan(
    sel: Selection,
    in_shapes: Sequence[tuple[int, ...]],
    out_shape: tuple[int, ...],
    *,
    tiles: str,
    inplace: bool = False,
    shared_memory: int = 32768,
    split_attention: bool = True,
) -> NnPlan:
    """The dispatches of a selected call at these shapes.

    `inplace`: the output buffer is also an input; `tiles`: the f32 matmul tile config;
    `shared_memory`: the device's compute shared memory; `split_attention`: decode-step
    attention may split over key ranges (right for GPUs).

    Raises:
        BackendError: a kernel limit (the message says which), or a tree GLSL cannot print.
    """
    op, dtypes, params = sel.op, list(sel.in_dtypes), sel.params
    shapes = [tuple(int(d) for d in s) for s in in_shapes]
    inputs = tuple(Binding("input", k) for k in range(len(dtypes)))
    if op in nn_kernels.NN_OPS:
        return nn_kernels.nn_plan(op, dtypes, shapes, params, sel.out, out_shape, tiles,
                                  inplace, shared_memory, split_attention)  # fmt: skip
    if op in kernels.NORMALIZATIONS:
        axes = kernels.norm_axes(op, len(shapes[0]), int(params.get("axis", -1)))
        stats = kernels.norm_stats_kernel(op, dtypes[0], shapes[0], axes)
        apply = kernels.norm_apply_kernel(op, dtypes[0], shapes, axes,
                                          float(params.get("epsilon", 0.0)))  # fmt: skip
        scratch = Binding("scratch")
        stats_dtype = DType.F64 if dtypes[0] is DType.F64 else DType.F32
        return NnPlan(
            (Dispatch(stats, (inputs[0], scratch)),
             Dispatch(apply, (inputs[0], scratch, *inputs[1:], _OUT))),
            scratch=((stats_dtype, (int(stats.push[0]),)),),
        )  # fmt: skip
    if op == "fill":
        return NnPlan(
            (Dispatch(kernels.fill_kernel(dtypes[0], out_shape, params["value"]), (_OUT,)),)
        )
    kernel = kernels.op_kernel(op, dtypes, shapes, params, sel.out, out_shape, tiles)
    return NnPlan((Dispatch(kernel, (*inputs, _OUT)),))


def plan_or_reason(sel: Selection, *args: Any, **kwargs: Any) -> NnPlan | str:
    """`plan`, with a kernel limit returned as its reason (first line) instead of raised."""
    try:
        return plan(sel, *args, **kwargs)
    except OpenInferError as err:
        return str(err).split("\n")[0]
