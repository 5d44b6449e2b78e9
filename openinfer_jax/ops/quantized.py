"""Ops on block-quantized weights (q8_0, q4_0, q4_1): the value type and its JAX and NumPy kernels.

A block-quantized model weight reaches an op as a `QuantizedArray`: its codes, per-block
scales and (q4_1) offsets, never expanded in memory. Only inputs whose registry spec says
``quantized=True`` take one (linear `w`, matmul `a`/`b`, embedding `table`, gather `data`
along axis 0; validation rejects every other use, naming the node).

How each op reads it:

* **row-selecting ops** (embedding, gather along axis 0) pick rows of the three planes with
  the op's own kernel, then dequantize only the picked rows;
* **contracting ops** (linear, matmul) dequantize inside the same compiled region as the
  product. On XLA CPU the dequantized matrix is a temporary of one weight (L2/L3-sized for a
  decode step), written and read once per call; 4-bit codes are unpacked from 32-bit words
  (eight nibbles per word, one shift and mask each), which XLA vectorizes (docs/simulator.md
  gives the measured costs).

Values are ``scale * q`` (q8_0, q4_0) or ``scale * q + offset`` (q4_1) in f32, the same
arithmetic as `QuantizedTensor.dequantize` and GGUF's dequantizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from openinfer_jax.core.blocks import BlockLayout, BlockScheme

__all__ = ["ROW_SELECTING", "QuantizedArray", "dequantize", "lower_jax", "reference"]

# Ops that select rows (axis 0) of their quantized input: applied to each plane, then dequantized.
ROW_SELECTING = frozenset({"embedding", "gather"})


class QuantizedArray:
    """A block-quantized weight as an op operand: layout, logical shape and the three planes.

    The planes are NumPy arrays (the NumPy reference, views on the model file) or JAX arrays
    (the simulator's device memory; a JAX pytree, so it crosses `jax.jit` like an array).
    ``quants`` holds the codes of each row: int8 ``[..., K]`` for q8_0; for the 4-bit
    schemes uint32 words ``[..., K / 8]`` (``words``; eight codes per word, code ``k`` in
    bits ``4k..4k+3``: the file's LSB-first bytes read as little-endian words) or, when a
    row is not a whole number of words, uint8 ``[..., K / 2]``. ``dtype`` is float32: ops
    see the values, not the codes.
    """

    is_block_quantized = True

    def __init__(
        self,
        layout: BlockLayout,
        shape: Sequence[int],
        quants: Any,
        scales: Any,
        offsets: Any = None,
        words: bool = False,
    ) -> None:
        self.layout = layout
        self.shape = tuple(int(d) for d in shape)
        self.quants = quants
        self.scales = scales
        self.offsets = offsets
        self.words = words

    @classmethod
    def from_planes(
        cls,
        layout: BlockLayout,
        shape: Sequence[int],
        quants: np.ndarray,
        scales: Any,
        offsets: Any = None,
    ) -> QuantizedArray:
        """From the file's planes (uint8 codes bytes, as `QuantizedTensor` holds them); no copy."""
        codes = np.asarray(quants)
        if layout.data_dtype.bits == 8:
            return cls(layout, shape, codes.view(np.int8), scales, offsets)
        words = codes.shape[-1] % 4 == 0 and codes.flags.c_contiguous
        if words:
            codes = codes.view("<u4")
        return cls(layout, shape, codes, scales, offsets, words)

    # ---- array-like facts ---------------------------------------------------------------
    @property
    def dtype(self) -> np.dtype[Any]:
        """float32: the type of the values the weight stands for."""
        return np.dtype(np.float32)

    @property
    def ndim(self) -> int:
        """Number of axes of the logical shape."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements of the logical shape."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def scheme(self) -> BlockScheme:
        """q8_0, q4_0 or q4_1."""
        return self.layout.scheme

    @property
    def nbytes(self) -> int:
        """Bytes of the planes."""
        planes = (self.quants, self.scales, self.offsets)
        return int(
            sum(int(np.prod(p.shape)) * np.dtype(p.dtype).itemsize for p in planes if p is not None)
        )

    def planes(self) -> tuple[Any, ...]:
        """(quants, scales, offsets) without the missing offsets."""
        return (
            (self.quants, self.scales)
            if self.offsets is None
            else (self.quants, self.scales, self.offsets)
        )

    def with_planes(self, shape: Sequence[int], planes: Sequence[Any]) -> QuantizedArray:
        """The same layout over new planes (rows selected, moved to a device)."""
        offsets = planes[2] if len(planes) > 2 else None
        return QuantizedArray(self.layout, shape, planes[0], planes[1], offsets, self.words)

    def __repr__(self) -> str:
        return f"QuantizedArray({self.layout.describe()}, shape={list(self.shape)})"

    # ---- JAX pytree protocol (registered in `_register_pytree`) ------------------------------
    def tree_flatten(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """Children: the planes; static: layout, shape, words."""
        return self.planes(), (self.layout, self.shape, self.words)

    @classmethod
    def tree_unflatten(cls, aux: tuple[Any, ...], children: Sequence[Any]) -> QuantizedArray:
        """Inverse of `tree_flatten`."""
        layout, shape, words = aux
        offsets = children[2] if len(children) > 2 else None
        return cls(layout, shape, children[0], children[1], offsets, words)


def _register_pytree() -> None:
    import jax

    jax.tree_util.register_pytree_node_class(QuantizedArray)


_register_pytree()


# ---- dequantization ----------------------------------------------------------------------
def _codes(xp: Any, qa: QuantizedArray) -> Any:
    """The integer codes as f32 of the logical shape (4-bit signed codes sign-extended)."""
    k = qa.shape[-1]
    lead = qa.shape[:-1]
    if qa.layout.data_dtype.bits == 8:
        return qa.quants.astype(xp.float32)
    if qa.words:
        shifts = xp.arange(8, dtype=xp.uint32) * 4
        nibbles = (qa.quants[..., None] >> shifts) & 15
    else:
        nibbles = xp.stack([qa.quants & 15, qa.quants >> 4], axis=-1)
    nibbles = nibbles.reshape(*lead, k)
    if qa.layout.data_dtype.is_signed_int:  # two's complement nibbles (q4_0)
        return ((nibbles ^ 8).astype(xp.int32) - 8).astype(xp.float32)
    return nibbles.astype(xp.float32)


def _dequantize(xp: Any, qa: QuantizedArray) -> Any:
    block = qa.layout.block_size
    lead, k = qa.shape[:-1], qa.shape[-1]
    codes = _codes(xp, qa).reshape(*lead, k // block, block)
    values = codes * qa.scales.astype(xp.float32)[..., None]
    if qa.offsets is not None:
        values = values + qa.offsets.astype(xp.float32)[..., None]
    return values.reshape(qa.shape)


def dequantize(qa: QuantizedArray) -> Any:
    """The f32 values of `qa` (jit-traceable with JAX planes; NumPy in, NumPy out)."""
    if isinstance(qa.quants, np.ndarray):
        return _dequantize(np, qa)
    import jax.numpy as jnp

    return _dequantize(jnp, qa)


# ---- op kernels -----------------------------------------------------------------------------
def _select_rows(impl: Any, call: Any, arrays: Sequence[Any], index: int) -> QuantizedArray:
    """Apply a row-selecting kernel (embedding, gather axis 0) to each plane of input `index`."""
    qa: QuantizedArray = arrays[index]
    picked = []
    shape: tuple[int, ...] | None = None
    for plane in qa.planes():
        args = list(arrays)
        args[index] = plane
        out = impl(call, *args)
        picked.append(out)
        if shape is None:
            shape = (*out.shape[: out.ndim - 1], qa.shape[-1])
    assert shape is not None
    return qa.with_planes(shape, picked)


def _run(op: Any, impl: Any, call: Any, arrays: Sequence[Any]) -> Any:
    indices = [i for i, a in enumerate(arrays) if isinstance(a, QuantizedArray)]
    if op.name in ROW_SELECTING and indices == [0]:
        return dequantize(_select_rows(impl, call, arrays, 0))
    return impl(call, *[dequantize(a) if isinstance(a, QuantizedArray) else a for a in arrays])


def _linear_jax(x: Any, w: QuantizedArray, *bias: Any) -> Any:
    """`x @ W^T (+ bias)` as a product with the transposed dequantized weight.

    XLA CPU turns ``x @ transpose(dequantize(W))`` into one matrix-vector kernel that reads
    the codes (3 ms for the 49152x576 q8_0 logits of SmolLM2), while contracting W's second
    axis directly (`lax.dot_general`, what the f32 lowering does) fuses the dequantization
    into a naive loop nest (94 ms). Inputs are f32 (linear's type group), so no widening.
    """
    import jax.numpy as jnp

    y = jnp.matmul(x, dequantize(w).T)
    return y + bias[0] if bias else y


def lower_jax(op: Any, call: Any, arrays: Sequence[Any]) -> Any:
    """The JAX lowering of `op` with block-quantized inputs (see the module docstring)."""
    if op.name == "linear" and isinstance(arrays[1], QuantizedArray):
        return _linear_jax(*arrays)
    return _run(op, op.jax_impl, call, arrays)


def reference(op: Any, call: Any, arrays: Sequence[Any]) -> Any:
    """The NumPy reference of `op` with block-quantized inputs: the op on the dequantized values."""

    def ref(call: Any, *xs: Any) -> Any:
        return op.ref_impl(call, *[np.asarray(x) for x in xs])

    on_host = [
        a.with_planes(a.shape, [np.asarray(p) for p in a.planes()])
        if isinstance(a, QuantizedArray)
        else a
        for a in arrays
    ]
    return _run(op, ref, call, on_host)
