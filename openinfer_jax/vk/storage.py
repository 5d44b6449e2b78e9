"""How tensors of each dtype lie in device buffers (host side of the layout).

Every device buffer is an array of 32-bit words, whatever the element type: Vulkan's
8- and 16-bit storage features are optional (and Kompute does not enable device
features), so narrow types are addressed by bit extraction from ``uint`` words.

* An element of a ``b``-bit type (b in 1, 2, 4, 8, 16, 32) is element ``i`` of the
  LSB-first bit stream: word ``(i*b) >> 5``, bit offset ``(i*b) & 31``. Because ``b``
  divides 32 no element straddles two words, and on a little-endian host this is
  byte-for-byte the `.oinf` on-disk layout (packed types LSB-first within each byte).
* 64-bit types take two words per element, low word first (little-endian).
* bool is one byte per element (0 or 1), like the `.oinf` file; t1 is one bit
  (0 = -1, 1 = +1) and t2 two-bit two's complement, also as in the file.

Buffers are rounded up to whole words (at least one word, since Vulkan has no
zero-sized buffers); the padding bits are zero and never read back.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from openinfer_jax.core.dtypes import DType, pack, unpack
from openinfer_jax.core.errors import BackendError

__all__ = ["STORABLE_DTYPES", "decode_words", "encode_words", "storage_words"]

STORABLE_DTYPES = frozenset(d for d in DType if d.is_tensor_type)


def storage_words(dtype: DType, numel: int) -> int:
    """Number of 32-bit words that `numel` elements of `dtype` occupy (at least 1)."""
    return max(1, (numel * dtype.bits + 31) // 32)


def encode_words(values: Any, dtype: DType) -> np.ndarray:
    """The uint32 word array holding `values` (simulator representation) as `dtype`.

    Packed types take unpacked int8/uint8 values in the type's range and are packed
    here; other types are converted to `dtype.numpy` first (so a float64 array can be
    uploaded as f32).

    Raises:
        BackendError: for a dtype that cannot be a tensor, or packed values out of range.
    """
    if dtype not in STORABLE_DTYPES:
        raise BackendError(f"{dtype.short} cannot be stored in a device tensor")
    array = np.asarray(values)
    if dtype.is_packed:
        try:
            raw = pack(array, dtype)
        except Exception as exc:  # pack raises OinfFormatError naming the bad element
            raise BackendError(f"cannot upload as {dtype.short}: {exc}") from None
    else:
        raw = np.ascontiguousarray(array, dtype=dtype.numpy).reshape(-1).view(np.uint8)
    words = np.zeros(storage_words(dtype, array.size), dtype=np.uint32)
    words.view(np.uint8)[: raw.size] = raw
    return words


def decode_words(words: np.ndarray, dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    """The simulator representation (a fresh array of `shape`) of a word buffer."""
    numel = math.prod(shape)
    raw = np.ascontiguousarray(words, dtype=np.uint32).view(np.uint8)
    if dtype.is_packed:
        return unpack(raw, dtype, numel).reshape(shape)
    nbytes = numel * dtype.itemsize
    return raw[:nbytes].view(dtype.numpy).reshape(shape).copy()
