"""A vectorized fast path for the tensor table: the same rules, checked on all entries at once.

Opening a model must not cost more than reading a safetensors header, and a per-entry
Python loop over hundreds of tensors does. Here one cheap sequential scan finds where each
entry starts (the only step that must be sequential, since entries have variable length),
then NumPy checks every rule the slow parser would for the whole table in a few array
operations. The fast path only ever *accepts*: on any doubt (a violation, a quantized
tensor, dims large enough that overflow needs exact arithmetic) it returns None and the
caller runs the precise per-entry parser (parse.py), which reports the exact rule, offset
and field. So errors are identical, and a test checks that both paths agree on valid files.
"""

from __future__ import annotations

import re
import struct
from functools import partial
from itertools import repeat

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.oinf import spec
from openinfer_jax.oinf.entries import TensorInfo

__all__ = ["fast_tensor_table"]

_U32 = struct.Struct("<I").unpack_from
_BITS = np.zeros(256, dtype=np.int64)  # 0 marks "not a tensor dtype"
for _d in DType:
    if _d.is_tensor_type:
        _BITS[_d.code] = _d.bits
_DTYPES = {d.code: d for d in DType}
_NAME_BYTES = np.zeros(256, dtype=np.bool_)
_NAME_BYTES[
    np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-", np.uint8)
] = True
_LIMIT = 1 << 62  # offsets and sizes below this cannot overflow int64 arithmetic here
_EIGHT = np.arange(8)
_TWELVE = np.arange(12)
_NAME_TEXT = re.compile(r"[A-Za-z0-9._-]*")
_new_info = partial(
    tuple.__new__, TensorInfo
)  # NamedTuple construction without a Python-level call


def _spans(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    # Indices of the concatenated ranges [starts[i], starts[i] + lengths[i]).
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    return shift + np.arange(total)


def _shapes(dims: np.ndarray, firsts: np.ndarray, ndim: np.ndarray) -> list[tuple[int, ...]]:
    # Build the shape tuples one rank at a time (zip over columns yields tuples in C),
    # then put them back in file order.
    shapes: list[tuple[int, ...]] = [()] * len(ndim)
    for rank in np.unique(ndim).tolist():
        where = np.flatnonzero(ndim == rank)
        if rank == 0:
            continue
        rows = dims[firsts[where][:, None] + np.arange(rank)]
        for index, shape in zip(where.tolist(), zip(*rows.T.tolist())):
            shapes[index] = shape
    return shapes


# Over 80 lines on purpose: one vectorized pass in numbered stages that share the column
# arrays (starts, lengths, ndims); splitting the stages would copy or re-scan the columns.
def fast_tensor_table(
    buf: memoryview, version: int, count: int, start: int, end: int, off_data: int, size: int
) -> tuple[dict[str, TensorInfo], np.ndarray, np.ndarray] | None:
    """The validated tensor table, plus the data blobs' offsets and sizes; None to defer to the slow path."""
    tail = 32 if version >= 2 else 16
    if count * spec.MIN_ENTRY_SIZE[("tensors", version)] > end - start:  # R13
        return None
    # 1. Sequential scan for entry starts; every read is inside [start, end) (R9, R14, R23).
    starts: list[int] = []
    lengths: list[int] = []
    ndims: list[int] = []
    add_start, add_length, add_ndim, u32 = starts.append, lengths.append, ndims.append, _U32
    pos = start
    for _ in range(count):
        if pos + 4 > end:
            return None
        add_start(pos)
        length = u32(buf, pos)[0]
        add_length(length)
        head = pos + ((length + 11) & ~7)  # pos + align8(4 + length)
        if head + 12 > end:
            return None
        ndim = u32(buf, head + 4)[0]
        if ndim > spec.MAX_NDIM:
            return None
        add_ndim(ndim)
        pos = head + 12 + 8 * ndim + tail
    if pos > end or any(buf[pos:end]):  # R14; R37 (the table's zero tail)
        return None
    if count == 0:
        return {}, np.zeros(0, np.int64), np.zeros(0, np.int64)
    table = np.frombuffer(buf, dtype=np.uint8, count=end - start, offset=start)
    at = np.asarray(starts, dtype=np.int64) - start
    length_arr = np.asarray(lengths, dtype=np.int64)
    ndim_arr = np.asarray(ndims, dtype=np.int64)
    # 2. Names: non-empty and [A-Za-z0-9._-] (R10), zero padding (R11). Checking the
    # concatenation is exact because every name is non-empty.
    text = bytes(table).decode("latin-1")
    name_at = (at + 4).tolist()
    name_end = (at + 4 + length_arr).tolist()
    head = at + ((length_arr + 11) & ~7)
    names = list(map(text.__getitem__, map(slice, name_at, name_end)))
    if 0 in lengths or not _NAME_TEXT.fullmatch("".join(names)):
        return None
    # The 8 bytes before each entry's fixed fields end the string: its padding is their tail.
    pad_length = head - (at + 4 + length_arr)
    last_word = table[head[:, None] - 8 + _EIGHT]
    if (last_word[_EIGHT[None, :] >= 8 - pad_length[:, None]]).any():
        return None
    # 3. Fixed fields, gathered for all entries at once.
    fixed = table[head[:, None] + _TWELVE].view("<u4").reshape(count, 3).astype(np.int64)
    code, flags = fixed[:, 0], fixed[:, 2]
    tail_at = head + 12 + 8 * ndim_arr
    tails = table[tail_at[:, None] + np.arange(tail)].view("<u8").reshape(count, tail // 8)
    dims = table[_spans(head + 12, 8 * ndim_arr)].view("<u8")
    if (code > 255).any() or not _BITS[np.minimum(code, 255)].all():  # R22
        return None
    if (flags & ~spec.FLAG_HAS_DATA).any():  # R24; quantized tensors take the slow path
        return None
    if version >= 2 and tails[:, 2:].any():  # R25 (quant)
        return None
    if (tails[:, :2] >= _LIMIT).any() or (dims >= _LIMIT).any():
        return None
    has = flags == spec.FLAG_HAS_DATA
    nbytes, offset = tails[:, 0].astype(np.int64), tails[:, 1].astype(np.int64)
    if ((~has) & ((nbytes != 0) | (offset != 0))).any():  # R25 (data)
        return None
    # 4. numel per tensor; the float product flags anything too large for exact int64 (R26).
    numel = np.ones(count, dtype=np.int64)
    nonscalar = ndim_arr > 0
    firsts = np.cumsum(ndim_arr) - ndim_arr
    if nonscalar.any():
        # `not (<= bound).all()`, never `max() > bound`: a product that overflows to inf and
        # meets a zero dim is NaN, and NaN compares false, which would wave through every
        # other tensor's wrapped int64 product.
        with np.errstate(over="ignore", invalid="ignore"):
            products = np.multiply.reduceat(dims.astype(np.float64), firsts[nonscalar])
        if not (products <= 2.0**52).all():
            return None
        numel[nonscalar] = np.multiply.reduceat(dims.astype(np.int64), firsts[nonscalar])
    expected = (numel * _BITS[code] + 7) // 8
    if (has & (nbytes != expected)).any():  # R27
        return None
    if (
        has & ((offset % spec.SECTION_ALIGN != 0) | (offset < off_data) | (offset + nbytes > size))
    ).any():  # R28
        return None
    # 5. Python objects, in file order like the slow path; map/zip keep the per-entry work in C.
    shapes = _shapes(dims.astype(np.int64), firsts, ndim_arr)
    dtypes = map(_DTYPES.__getitem__, code.tolist())
    columns = zip(
        names, dtypes, shapes, has.tolist(), repeat(None), offset.tolist(), nbytes.tolist()
    )
    tensors = dict(zip(names, map(_new_info, columns)))
    if len(tensors) != count:  # R12
        return None
    return tensors, offset[has], nbytes[has]
