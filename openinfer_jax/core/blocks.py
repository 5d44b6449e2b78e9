"""Block quantization schemes (q8_0, q4_0, q4_1) and block layouts: facts every layer shares.

A block-quantized tensor stores integer codes and one scale (q4_1: also one offset) per run
of `block_size` consecutive elements along its last axis; its values are f32:
``scale * q`` (q8_0, q4_0) or ``scale * q + offset`` (q4_1). The IR names a scheme in a
declaration (``W: q4_1[N, K]``), the `.oinf` format stores the layout (docs/oinf.md §5.1),
the backends read both. Nothing here imports JAX or another `openinfer_jax` package.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import OinfFormatError

__all__ = ["BLOCK_FIXED_SIZE", "BlockLayout", "BlockScheme", "block_payload_size"]

BLOCK_FIXED_SIZE = 56  # bytes of a per-block quant payload before its scales (docs/oinf.md §5.1)
_SCALE_DTYPES = (DType.F16, DType.F32)


class BlockScheme(enum.Enum):
    """A block quantization scheme; the value is its DSL / CLI spelling (``q4_1``).

    GGUF's Q8_0, Q4_0 and Q4_1 hold the same numbers; the codes are laid out differently
    (docs/oinf.md §5.1 compares the two layouts).
    """

    Q8_0 = "q8_0"
    Q4_0 = "q4_0"
    Q4_1 = "q4_1"

    def __str__(self) -> str:
        return self.value

    @property
    def data_dtype(self) -> DType:
        """The dtype of the integer codes in the data blob: i8, i4 or u4."""
        return _DATA_DTYPE[self]

    @property
    def has_offsets(self) -> bool:
        """True when each block also has an offset (q4_1: ``real = scale * q + offset``)."""
        return self is BlockScheme.Q4_1

    @property
    def quant_scheme(self) -> int:
        """The payload's `scheme` code: 1 symmetric, 2 asymmetric."""
        return 2 if self.has_offsets else 1

    @classmethod
    def parse(cls, name: str) -> BlockScheme:
        """The scheme spelled `name` (``"q4_1"``, case-insensitive).

        Raises:
            ValueError: an unknown name; the message lists the known ones.
        """
        try:
            return cls(name.strip().lower())
        except ValueError:
            known = ", ".join(s.value for s in cls)
            raise ValueError(
                f"unknown block quantization {name!r}; expected one of {known}"
            ) from None

    @classmethod
    def of(cls, dtype: DType, scheme_code: int) -> BlockScheme | None:
        """The scheme stored as (`dtype`, payload `scheme` code), or None for no known scheme (R35)."""
        for candidate in cls:
            if candidate.data_dtype is dtype and candidate.quant_scheme == scheme_code:
                return candidate
        return None


_DATA_DTYPE = {BlockScheme.Q8_0: DType.I8, BlockScheme.Q4_0: DType.I4, BlockScheme.Q4_1: DType.U4}


@dataclass(frozen=True)
class BlockLayout:
    """How a tensor is block-quantized: scheme, elements per block, type of scales/offsets."""

    scheme: BlockScheme
    block_size: int = 32
    scale_dtype: DType = DType.F16

    def __post_init__(self) -> None:
        if isinstance(self.scheme, str):
            object.__setattr__(self, "scheme", BlockScheme.parse(self.scheme))
        if self.scale_dtype not in _SCALE_DTYPES:
            raise OinfFormatError(f"block scales must be f16 or f32, got {self.scale_dtype} (R33)")

    @property
    def data_dtype(self) -> DType:
        """The dtype of the codes (i8, i4, u4)."""
        return self.scheme.data_dtype

    def blocks(self, shape: Sequence[int]) -> int:
        """Number of blocks of a tensor of `shape` (numel / block_size)."""
        numel = 1
        for d in shape:
            numel *= int(d)
        return numel // self.block_size if self.block_size else 0

    def payload_nbytes(self, shape: Sequence[int]) -> int:
        """Bytes of the quant payload: align8(56 + scale size * (scales + offsets)) (R33)."""
        count = self.blocks(shape)
        values = count * (2 if self.scheme.has_offsets else 1)
        return block_payload_size(values, self.scale_dtype)

    def problems(self, shape: Sequence[int]) -> list[str]:
        """The R34 rules a tensor of `shape` would break with this layout ([] when fine)."""
        found: list[str] = []
        bits = self.data_dtype.bits
        if len(shape) == 0:
            found.append(
                "a block-quantized tensor needs at least one axis (blocks run along the last)"
            )
            return found
        if self.block_size < 1:
            found.append(f"block_size {self.block_size} must be at least 1")
            return found
        if self.block_size * bits % 8:
            found.append(
                f"block_size {self.block_size} of {bits}-bit codes does not fill whole bytes; "
                "use an even block size"
            )
        if shape[-1] % self.block_size:
            found.append(
                f"block_size {self.block_size} does not divide the last axis ({shape[-1]}); "
                "pick a block size that divides it or keep the tensor unquantized"
            )
        return found

    def describe(self) -> str:
        """Short text such as ``q4_1 block 32 (f16 scales)``."""
        return f"{self.scheme} block {self.block_size} ({self.scale_dtype} scales)"


def block_payload_size(values: int, scale_dtype: DType) -> int:
    """Bytes of a per-block payload holding `values` scales and offsets of `scale_dtype`."""
    return (BLOCK_FIXED_SIZE + values * (scale_dtype.bits // 8) + 7) // 8 * 8
