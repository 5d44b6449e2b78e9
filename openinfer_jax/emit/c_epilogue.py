"""Elementwise epilogues of the C target's f32 linear/matmul/conv kernels.

`openinfer_jax.passes.epilogue` plans the chains (an op right after a linear, matmul or
conv that consumes its output, and so on); this module says which ops qualify (`fusable`),
which nodes can carry a chain (`is_anchor`), and renders a chain as the C statements the
kernel's epilogue runs per element (`epilogue_code`). Each op's C expression is the one its
own elementwise kernel uses (`c_kernels.elementwise_expression`), evaluated in the same
order and precision, so a fused program computes exactly what the unfused one does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from openinfer_jax.core.dtypes import DType
from openinfer_jax.emit.analysis import OpInfo
from openinfer_jax.emit.c_dense import EpilogueCode, fusion_anchor, runtime_headers
from openinfer_jax.emit.c_kernels import KernelRequest, elementwise_expression
from openinfer_jax.ir.nodes import Op, VarName

__all__ = ["epilogue_code", "fusable", "is_anchor", "strided_attention"]


def is_anchor(info: OpInfo) -> bool:
    """Whether the kernel of `info` can run an epilogue (f32 linear, matmul, conv)."""
    return fusion_anchor(info)


def strided_attention(info: OpInfo) -> bool:
    """Whether `info` is an attention the runtime kernel runs (it reads strided operands)."""
    return info.opdef.name == "attention" and runtime_headers(info) == ("oi_attention.h",)


def fusable(info: OpInfo) -> str | None:
    """None when the op can run in an f32 epilogue, else why not."""
    name = info.opdef.name
    if info.opdef.expr is None or name in ("fill", "filter", "where"):
        return f"{name} is not an elementwise op the epilogue can apply"
    if any(d is not DType.F32 for d in (*info.in_dtypes, info.out_dtype)):
        dtypes = ", ".join(d.short for d in (*info.in_dtypes, info.out_dtype))
        return f"it computes in {dtypes}, the fused kernel in f32 without the intermediate rounding"
    if any(isinstance(v, VarName) for v in info.params.values()):
        return "a param is read at run time"
    return None


def _kernel_clamp(anchor_output: str, op: Op, info: OpInfo) -> tuple[float, float] | None:
    """(lo, hi) when `op` is an f32 clamp with bounds known at synthesis that overwrites the
    anchor's output in place (``clamp(t) >> t``, a fused ReLU6): the kernel then clamps its
    outputs in registers as it stores them (``act`` in oi_gemm.h), the same operations as
    the clamp's own kernel; nothing can read the value before the clamp."""
    if info.opdef.name != "clamp" or info.out_dtype is not DType.F32:
        return None
    source, target = op.inputs[0], op.output
    if source.name != anchor_output or source.indices or target != source:
        return None
    bounds = []
    for key, absent in (("min", -math.inf), ("max", math.inf)):
        value = info.params.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return None  # read at run time
        bounds.append(absent if value is None else float(value))
    return bounds[0], bounds[1]


def epilogue_code(
    anchor_output: str, ops: Sequence[Op], infos: Sequence[OpInfo], where: Sequence[str]
) -> EpilogueCode:
    """The chain `ops` after a kernel writing `anchor_output`, as C statements on ``float v``
    (the running value) and ``E<k>[i]`` (the k-th other operand, in the order the ops list
    them); op k binds the subtrees its tree reuses to locals ``e<k>_<j>`` first. A leading
    in-place clamp with constant bounds becomes the kernel's own clamp (`EpilogueCode.clamp`)
    instead of a statement."""
    lines: list[str] = []
    extra = 0
    running = anchor_output
    clamp = _kernel_clamp(anchor_output, ops[0], infos[0]) if ops else None
    if clamp is not None:
        ops, infos, where = ops[1:], infos[1:], where[1:]
    for k, (op, info, at) in enumerate(zip(ops, infos, where)):
        operands: list[str] = []
        for ref in op.inputs:
            if ref.name == running and not ref.indices:
                operands.append("v")
            else:
                operands.append(f"E{extra}[i]")
                extra += 1
        printed = elementwise_expression(KernelRequest(f"epi{k}", info, at), operands, f"e{k}_")
        lines += [*printed.statements, f"v = (float)({printed.value});"]
        running = op.output.name
    return EpilogueCode(extra, tuple(lines), clamp)
