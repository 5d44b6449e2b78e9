"""Vulkan kernels for ops with a block-quantized weight (q8_0, q4_0, q4_1): linear, matmul,
embedding, gather along axis 0.

On the device a weight is three word buffers (`DeviceQuantized`): its codes as an i8/i4/u4
tensor (the file's bytes: 4-bit code ``e`` is bits ``4e..4e+3`` of the LSB-first stream, which
is what the packed loaders of vk/glsl.py read), and its per-block scales and offsets as f16
(or f32) tensors. Each kernel computes one output element per invocation and dequantizes the
codes it reads, ``scale * q (+ offset)`` in f32, so the weight is never expanded in device
memory. These are the correctness kernels of lavapipe and GPUs alike (no tiling); the C target
has the fast CPU kernels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from openinfer_jax.core.blocks import BlockLayout
from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import BackendError

__all__ = ["QUANT_OPS", "DeviceQuantized", "quant_kernel", "quantized_reason"]

# Ops with a kernel here, and the input they take quantized (docs/ops.md marks them with †).
QUANT_OPS = {"linear": (1,), "matmul": (0, 1), "embedding": (0,), "gather": (0,)}


@dataclass
class DeviceQuantized:
    """A block-quantized weight resident on the device: layout, logical shape, its buffers."""

    layout: BlockLayout
    shape: tuple[int, ...]
    codes: Any  # DeviceTensor of the codes (i8, i4 or u4), flat
    scales: Any  # DeviceTensor, f16 or f32, one per block
    offsets: Any = None  # q4_1

    @property
    def dtype(self) -> DType:
        """f32: the type of the values it stands for."""
        return DType.F32

    @property
    def numel(self) -> int:
        """Elements of the logical shape."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes of its device buffers."""
        return sum(t.nbytes for t in self.tensors())

    def tensors(self) -> list[Any]:
        """The buffers a kernel binds: codes, scales[, offsets]."""
        return [self.codes, self.scales] + ([self.offsets] if self.offsets is not None else [])


def quantized_reason(op: str, index: int, params: Mapping[str, Any]) -> str | None:
    """Why `op` cannot take a quantized input `index` on the device (None when it can)."""
    if index not in QUANT_OPS.get(op, ()):
        return f"{op}: no Vulkan kernel for a block-quantized input {index}"
    if op == "gather" and params.get("axis", 0) != 0:
        return "gather: a block-quantized table is gathered along axis 0 only"
    return None


def _dequant_function(layout: BlockLayout, codes: int, scales: int, offsets: int | None) -> str:
    """GLSL ``float deq(uint e)``: element `e` (flat) of the weight, from its bindings."""
    value = f"float(load{codes}(e))"
    term = f"{value} * float(load{scales}(e / pc.p[15]))"
    if offsets is not None:
        term += f" + float(load{offsets}(e / pc.p[15]))"
    return f"float deq(uint e) {{ return {term}; }}\n"


def _layout_dtypes(layout: BlockLayout) -> list[DType]:
    dtypes = [layout.data_dtype, layout.scale_dtype]
    return [*dtypes, layout.scale_dtype] if layout.scheme.has_offsets else dtypes


def quant_kernel(
    op: str,
    inputs: Sequence[Any],
    params: Mapping[str, Any],
    out_shape: Sequence[int],
) -> tuple[Any, list[Any]]:
    """The kernel of `op` with one `DeviceQuantized` input, and the tensors it binds (in order).

    Raises:
        BackendError: an op or operand form without a kernel here.
    """
    from openinfer_jax.vk.nn_kernels import _nn_kernel  # the element-per-invocation template

    index = next(i for i, t in enumerate(inputs) if isinstance(t, DeviceQuantized))
    weight: DeviceQuantized = inputs[index]
    reason = quantized_reason(op, index, params)
    if reason is not None:
        raise BackendError(reason)
    others = [t for t in inputs if t is not weight]
    layout = weight.layout
    n_out = int(np.prod(out_shape, dtype=np.int64))
    q = _layout_dtypes(layout)
    # bindings: the other inputs first (in op order), then codes, scales[, offsets]
    first_q = len(others)
    deq = _dequant_function(
        layout, first_q, first_q + 1, first_q + 2 if layout.scheme.has_offsets else None
    )
    in_dtypes = [t.dtype for t in others] + q
    label = f"{op}({layout.describe()})"
    words: list[int]
    if op == "linear":
        n, k = weight.shape
        bias = "    acc += float(load1(col));\n" if len(others) > 1 else ""
        body = (
            "    uint k = pc.p[0];\n    uint col = o % pc.p[1];\n    uint row = o / pc.p[1];\n"
            "    float acc = 0.0;\n"
            "    for (uint t = 0u; t < k; t++) acc += float(load0(row * k + t)) * deq(col * k + t);\n"
            f"{bias}    return acc;"
        )
        words = [n_out, k, n]
    elif op == "matmul" and index == 1:
        k, n = weight.shape
        body = (
            "    uint k = pc.p[0];\n    uint col = o % pc.p[1];\n    uint row = o / pc.p[1];\n"
            "    float acc = 0.0;\n"
            "    for (uint t = 0u; t < k; t++) acc += float(load0(row * k + t)) * deq(t * pc.p[1] + col);\n"
            "    return acc;"
        )
        words = [n_out, k, n]
    elif op == "matmul":
        _m, k = weight.shape
        if len(others[0].shape) != 2:
            raise BackendError("matmul: a block-quantized left operand needs a 2-D right operand")
        n = others[0].shape[1]
        body = (
            "    uint k = pc.p[0];\n    uint col = o % pc.p[1];\n    uint row = o / pc.p[1];\n"
            "    float acc = 0.0;\n"
            "    for (uint t = 0u; t < k; t++) acc += deq(row * k + t) * float(load0(t * pc.p[1] + col));\n"
            "    return acc;"
        )
        words = [n_out, k, n]
    else:  # embedding, gather along axis 0: row ids[r] of the table, clamped like the op
        size = weight.shape[0]
        row = int(np.prod(weight.shape[1:], dtype=np.int64))
        signed = others[0].dtype.is_signed_int
        wrap = "    if (t < 0) t += int(pc.p[1]);\n" if signed else ""
        body = (
            "    uint r = o / pc.p[0];\n    uint j = o % pc.p[0];\n"
            f"    int t = int(load0(r));\n{wrap}"
            "    t = clamp(t, 0, int(pc.p[1]) - 1);\n"
            "    return deq(uint(t) * pc.p[0] + j);"
        )
        words = [n_out, row, size]
    words = words + [0] * (16 - len(words)) + [layout.block_size]  # block size: pc.p[15]
    kernel = _nn_kernel(label, in_dtypes, DType.F32, body, words, functions=deq)
    return kernel, [*others, *weight.tensors()]
