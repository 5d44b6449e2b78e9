"""`QuantizedTensor`: a block-quantized tensor in memory as three planes, and its (de)quantizers.

The planes are exactly the bytes of the file (docs/oinf.md §5.1), so the reader hands out
views on the mapping and the writer writes them as they are:

* ``quants``: uint8 ``[*lead, K * bits / 8]``: the codes of each row, packed LSB-first like
  every `.oinf` packed tensor (4-bit: element ``2i`` in the low nibble of byte ``i``, ``2i+1``
  in the high one; q8_0: one int8 byte per element).
* ``scales``: f16 or f32 ``[*lead, K / block]``.
* ``offsets``: the same shape (q4_1 only), else None.

``lead`` is the shape without its last axis ``K``; blocks run along ``K``. Values:
q8_0 and q4_0 ``scale * q`` (q signed: [-127, 127] and [-8, 7]), q4_1 ``scale * q + offset``
(q in [0, 15]), computed in f32 like GGUF's own dequantizer.

`quantize` follows the reference quantizers of GGML (round half away from zero for q8_0;
``d = max / -8`` for q4_0; ``d = (max - min) / 15`` for q4_1), so a tensor quantized here and
the same tensor quantized by llama.cpp hold the same codes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import OinfFormatError
from openinfer_jax.oinf.blockquant import BlockLayout, BlockScheme

__all__ = ["QuantizedTensor", "codes_of", "pack_codes", "quantize"]


@dataclass(frozen=True, eq=False)
class QuantizedTensor:
    """A block-quantized tensor: layout, logical shape and its quants/scales/offsets planes.

    Build one with `quantize`, `QuantizedTensor.from_codes`, or read one with
    `ModelLoader.quantized`. The arrays may be read-only views on a file mapping.
    """

    layout: BlockLayout
    shape: tuple[int, ...]
    quants: np.ndarray
    scales: np.ndarray
    offsets: np.ndarray | None = None

    def __post_init__(self) -> None:
        shape = tuple(int(d) for d in self.shape)
        object.__setattr__(self, "shape", shape)
        problems = self.layout.problems(shape)
        if problems:
            raise OinfFormatError(
                f"block quantization {self.layout.describe()}: " + "; ".join(problems)
            )
        lead, k = shape[:-1], shape[-1]
        want = {
            "quants": (np.dtype(np.uint8), (*lead, k * self.layout.data_dtype.bits // 8)),
            "scales": (self.layout.scale_dtype.numpy, (*lead, k // self.layout.block_size)),
        }
        if self.layout.scheme.has_offsets:
            want["offsets"] = want["scales"]
        elif self.offsets is not None:
            raise OinfFormatError(f"{self.layout.scheme} has no offsets; pass offsets=None")
        for name, (dtype, plane) in want.items():
            array = getattr(self, name)
            if not isinstance(array, np.ndarray) or array.dtype != dtype or array.shape != plane:
                got = (
                    f"{array.dtype}{list(array.shape)}"
                    if isinstance(array, np.ndarray)
                    else type(array).__name__
                )
                raise OinfFormatError(
                    f"{self.layout.scheme} plane {name} must be {dtype}{list(plane)} for shape "
                    f"{list(shape)}, got {got}"
                )

    # ---- facts -----------------------------------------------------------------------
    @property
    def scheme(self) -> BlockScheme:
        """q8_0, q4_0 or q4_1."""
        return self.layout.scheme

    @property
    def dtype(self) -> np.dtype[Any]:
        """The type of the values it stands for: float32."""
        return np.dtype(np.float32)

    @property
    def ndim(self) -> int:
        """Number of axes of the logical shape."""
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the three planes (what the tensor costs in memory and on disk)."""
        extra = self.offsets.nbytes if self.offsets is not None else 0
        return int(self.quants.nbytes + self.scales.nbytes + extra)

    # ---- construction ------------------------------------------------------------------
    @classmethod
    def from_codes(
        cls,
        layout: BlockLayout,
        codes: np.ndarray,
        scales: np.ndarray,
        offsets: np.ndarray | None = None,
    ) -> QuantizedTensor:
        """From unpacked integer codes (int8 for q8_0/q4_0, uint8 for q4_1) of the logical shape.

        Raises:
            OinfFormatError: codes out of the scheme's range, or planes of the wrong shape.
        """
        codes = np.asarray(codes)
        scales = np.asarray(scales, layout.scale_dtype.numpy)
        if offsets is not None:
            offsets = np.asarray(offsets, layout.scale_dtype.numpy)
        lo, hi = layout.data_dtype.value_range()
        if codes.size and (int(codes.min()) < lo or int(codes.max()) > hi):
            raise OinfFormatError(f"{layout.scheme} codes must lie in [{lo}, {hi}]")
        return cls(layout, codes.shape, pack_codes(codes, layout.data_dtype), scales, offsets)

    # ---- values ------------------------------------------------------------------------
    def codes(self) -> np.ndarray:
        """The integer codes, unpacked to the logical shape (int8 or uint8)."""
        return codes_of(self.quants, self.layout.data_dtype, self.shape)

    def dequantize(self) -> np.ndarray:
        """The f32 values (a new array of the logical shape)."""
        return _dequantize(
            self.codes(), self.scales, self.offsets, self.layout.block_size, self.shape
        )

    def rows(self, index: Any) -> QuantizedTensor:
        """Rows `index` of axis 0 (an int array, any shape): a gather that stays quantized."""
        idx = np.asarray(index)
        offsets = None if self.offsets is None else self.offsets[idx]
        return QuantizedTensor(
            self.layout, (*idx.shape, *self.shape[1:]), self.quants[idx], self.scales[idx], offsets
        )

    def __repr__(self) -> str:
        return f"QuantizedTensor({self.layout.describe()}, shape={list(self.shape)}, {self.nbytes} bytes)"


def pack_codes(codes: np.ndarray, dtype: DType) -> np.ndarray:
    """Integer codes of the logical shape -> the uint8 quants plane (LSB-first nibbles for 4-bit)."""
    codes = np.asarray(codes)
    if dtype.bits == 8:
        return codes.astype(np.int8).view(np.uint8)
    nib = (codes.astype(np.int16) & 0xF).astype(np.uint8)
    return (nib[..., 0::2] | (nib[..., 1::2] << 4)).astype(np.uint8)


def codes_of(quants: np.ndarray, dtype: DType, shape: Sequence[int]) -> np.ndarray:
    """The quants plane -> integer codes of `shape` (int8 for i8/i4, uint8 for u4)."""
    if dtype.bits == 8:
        return np.asarray(quants).view(np.int8).reshape(tuple(shape))
    q = np.asarray(quants)
    lo, hi = q & 0xF, q >> 4
    both = np.stack([lo, hi], axis=-1).reshape(tuple(shape))
    if dtype.is_signed_int:
        return ((both.astype(np.int8) ^ 8) - 8).astype(np.int8)
    return both.astype(np.uint8)


def _dequantize(
    codes: np.ndarray,
    scales: np.ndarray,
    offsets: np.ndarray | None,
    block: int,
    shape: Sequence[int],
) -> np.ndarray:
    lead, k = tuple(shape[:-1]), shape[-1]
    blocks = codes.reshape(*lead, k // block, block).astype(np.float32)
    values = blocks * scales.astype(np.float32)[..., None]
    if offsets is not None:
        values = values + offsets.astype(np.float32)[..., None]
    return values.reshape(tuple(shape)).astype(np.float32, copy=False)


def _round_half_away(x: np.ndarray) -> np.ndarray:
    rounded: np.ndarray = np.sign(x) * np.floor(np.abs(x) + 0.5)
    return rounded


def quantize(
    values: Any, scheme: BlockScheme | str, block_size: int = 32, scale_dtype: DType = DType.F16
) -> QuantizedTensor:
    """Quantize a float array along its last axis (GGML's reference rounding).

    Raises:
        OinfFormatError: a non-float or non-finite input, a block size that does not divide
            the last axis, or a scale that does not fit `scale_dtype` (use f32 scales).
    """
    layout = BlockLayout(
        BlockScheme.parse(scheme) if isinstance(scheme, str) else scheme, block_size, scale_dtype
    )
    x = np.asarray(values)
    if x.dtype.kind != "f" and x.dtype.name not in ("bfloat16", "float8_e5m2"):
        raise OinfFormatError(f"only float tensors can be block-quantized, got {x.dtype}")
    shape = tuple(x.shape)
    problems = layout.problems(shape)
    if problems:
        raise OinfFormatError(
            f"cannot quantize shape {list(shape)} to {layout.describe()}: " + "; ".join(problems)
        )
    x = x.astype(np.float32)
    if not np.all(np.isfinite(x)):
        raise OinfFormatError("cannot quantize a tensor holding inf or NaN")
    lead, k = shape[:-1], shape[-1]
    blocks = x.reshape(*lead, k // block_size, block_size)
    offsets = None
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if layout.scheme is BlockScheme.Q8_0:
            d = np.abs(blocks).max(axis=-1) / 127.0
            inv = np.where(d != 0, 1.0 / d, 0.0).astype(np.float32)
            codes = np.clip(_round_half_away(blocks * inv[..., None]), -127, 127).astype(np.int8)
        elif layout.scheme is BlockScheme.Q4_0:
            where = np.argmax(np.abs(blocks), axis=-1)[..., None]
            signed_max = np.take_along_axis(blocks, where, axis=-1)[..., 0]
            d = signed_max / -8.0
            inv = np.where(d != 0, 1.0 / d, 0.0).astype(np.float32)
            q = np.minimum(15, np.trunc(blocks * inv[..., None] + 8.5)).astype(np.int16)
            codes = (q - 8).astype(np.int8)
        else:
            lo = blocks.min(axis=-1)
            d = (blocks.max(axis=-1) - lo) / 15.0
            inv = np.where(d != 0, 1.0 / d, 0.0).astype(np.float32)
            q = np.trunc((blocks - lo[..., None]) * inv[..., None] + 0.5)
            codes = np.clip(q, 0, 15).astype(np.uint8)
            offsets = lo.astype(scale_dtype.numpy)
        scales = d.astype(np.float32).astype(scale_dtype.numpy)
    for name, plane in (("scale", scales), ("offset", offsets)):
        if plane is not None and not np.all(np.isfinite(plane.astype(np.float32))):
            raise OinfFormatError(
                f"a block {name} does not fit {scale_dtype} (values too large); quantize with scale_dtype=f32"
            )
    return QuantizedTensor.from_codes(layout, codes.reshape(shape), scales, offsets)
