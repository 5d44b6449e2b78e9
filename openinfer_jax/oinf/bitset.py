"""`Bitset`: the value of a BITSET metadata entry (a sequence of bits, stored LSB-first)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

__all__ = ["Bitset"]


class Bitset:
    """An immutable sequence of bits; bit i lives in byte i//8 at bit position i%8.

    Build one from booleans (``Bitset([1, 0, 1])``) or from packed bytes
    (``Bitset.from_bytes(b"\\x05", 3)``). Equal when the bits are equal.
    """

    __slots__ = ("_bits",)

    def __init__(self, bits: Iterable[bool | int] = ()) -> None:
        self._bits = np.asarray([bool(b) for b in bits], dtype=np.bool_)
        self._bits.flags.writeable = False

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, bit_count: int) -> Bitset:
        """Unpack `bit_count` bits from `data` (LSB-first).

        Raises:
            ValueError: if `data` holds fewer than ceil(bit_count/8) bytes.
        """
        raw = np.frombuffer(bytes(data), dtype=np.uint8)
        if raw.size * 8 < bit_count:
            raise ValueError(f"{bit_count} bits need {(bit_count + 7) // 8} bytes, got {raw.size}")
        result = cls.__new__(cls)
        result._bits = np.unpackbits(raw, bitorder="little")[:bit_count].astype(np.bool_)
        result._bits.flags.writeable = False
        return result

    def to_bytes(self) -> bytes:
        """The packed bytes, ceil(len/8) of them, unused high bits 0."""
        return np.packbits(self._bits, bitorder="little").tobytes()

    def __len__(self) -> int:
        return int(self._bits.size)

    def __getitem__(self, index: int) -> bool:
        return bool(self._bits[index])

    def __iter__(self) -> Iterator[bool]:
        return (bool(b) for b in self._bits)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Bitset):
            return NotImplemented
        return bool(np.array_equal(self._bits, other._bits))

    def __hash__(self) -> int:
        return hash((len(self), self.to_bytes()))

    def __repr__(self) -> str:
        text = "".join("1" if b else "0" for b in self._bits[:64])
        more = "..." if len(self) > 64 else ""
        return f"Bitset({len(self)} bits: {text}{more})"
