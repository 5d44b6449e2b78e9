"""Block-quantized tensors on disk: the per-block extension of the v2 quant payload (docs/oinf.md §5.1).

A block-quantized tensor is an ordinary i8/i4/u4 tensor entry (its data blob holds the integer
codes, packed as every packed tensor is) whose quant payload has ``scale_mode`` 3, *per-block*:
one scale (and for q4_1 one offset) per run of ``block_size`` consecutive elements along the
last axis. Payload: the 48-byte fixed part of every quant payload, then ``u32 block_size;
u32 value_type`` (9 = f16, 10 = f32: the type of scales and offsets), the scales, the offsets,
zero padding to a multiple of 8. Meaning: ``real = scale[b] * q`` (symmetric: q8_0, q4_0) or
``real = scale[b] * q + offset[b]`` (asymmetric: q4_1). This module holds those facts and the
payload's encoder and checked decoder (rules R33-R36); the planes in memory are
`openinfer_jax.oinf.quantized.QuantizedTensor`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from openinfer_jax.core.blocks import (
    BLOCK_FIXED_SIZE,
    BlockLayout,
    BlockScheme,
    block_payload_size,
)
from openinfer_jax.core.dtypes import DType
from openinfer_jax.oinf import spec
from openinfer_jax.oinf.checks import Checker

__all__ = [
    "BLOCK_FIXED_SIZE",
    "SCALE_MODE_BLOCK",
    "BlockLayout",
    "BlockQuant",
    "BlockScheme",
    "block_payload_size",
    "decode_block_quant",
    "encode_block_header",
]  # BlockScheme, BlockLayout, block_payload_size live in openinfer_jax.core.blocks

SCALE_MODE_BLOCK = 3  # `scale_mode` (and `zp_mode` for the offsets) of a per-block payload
_BLOCK_TAIL = struct.Struct("<II")  # block_size, value_type: right after the 48-byte fixed part
assert spec.QUANT_FIXED_SIZE + _BLOCK_TAIL.size == BLOCK_FIXED_SIZE


@dataclass(frozen=True)
class BlockQuant:
    """A decoded per-block quant payload: its layout and where its scales/offsets lie in the file.

    `TensorInfo.quant` holds one of these for a block-quantized tensor; the arrays are read
    by `ModelLoader.quantized` (views on the mapping, no copy).
    """

    layout: BlockLayout
    count: int  # number of blocks (scales)
    scales_offset: int  # absolute offset of the scales in the file
    offsets_offset: int | None  # absolute offset of the offsets (q4_1), else None

    @property
    def scheme(self) -> BlockScheme:
        """The block scheme (q8_0, q4_0, q4_1)."""
        return self.layout.scheme

    def describe(self) -> str:
        """Short text for `openinfer inspect`: ``q4_1 block 32 (f16 scales), 2304 blocks``."""
        return f"{self.layout.describe()}, {self.count} blocks"

    def arrays(self, buffer: Any, shape: Sequence[int]) -> tuple[np.ndarray, np.ndarray | None]:
        """(scales, offsets) as read-only views on `buffer`, shaped ``shape[:-1] + (blocks per row,)``."""
        per_row = shape[-1] // self.layout.block_size if self.layout.block_size else 0
        plane = (*shape[:-1], per_row)
        np_type = self.layout.scale_dtype.numpy
        scales = np.frombuffer(buffer, np_type, self.count, self.scales_offset).reshape(plane)
        offsets = None
        if self.offsets_offset is not None:
            offsets = np.frombuffer(buffer, np_type, self.count, self.offsets_offset).reshape(plane)
        return scales, offsets


def encode_block_header(layout: BlockLayout, shape: Sequence[int]) -> bytes:
    """The 56 bytes that start the payload of a tensor of `shape` with `layout`."""
    count = layout.blocks(shape)
    axis = len(shape) - 1
    offsets = layout.scheme.has_offsets
    return spec.QUANT_FIXED.pack(
        layout.scheme.quant_scheme,
        SCALE_MODE_BLOCK,
        SCALE_MODE_BLOCK if offsets else 0,
        0,
        axis,
        count,
        axis if offsets else 0,
        count if offsets else 0,
    ) + _BLOCK_TAIL.pack(layout.block_size, layout.scale_dtype.code)


def _first_non_finite(values: np.ndarray) -> int | None:
    """Index of the first inf/NaN of an f16/f32 array, or None. Bit test: no float traps."""
    if values.dtype.itemsize == 2:
        bits = values.view(np.uint16)
        bad = (bits & 0x7C00) == 0x7C00
    else:
        bits32 = values.view(np.uint32)
        bad = (bits32 & 0x7F800000) == 0x7F800000
    if not bad.any():
        return None
    return int(np.argmax(bad))


# Over 80 lines on purpose: the fields of a per-block payload in file order, each check next
# to the field it guards with its rule number (R33-R36).
def decode_block_quant(
    buf: memoryview,
    offset: int,
    nbytes: int,
    fixed: tuple[int, ...],
    dtype: DType,
    dims: Sequence[int],
    has_data: bool,
    checker: Checker,
    where: str,
) -> BlockQuant | None:
    """Check and decode a payload whose `scale_mode` is 3 (R33-R36); None after reporting.

    `fixed` is the unpacked 48-byte fixed part (already bounds-checked by R29's offset part).
    Reads the scales once to check they are finite (R36): 1/16 of a q4 tensor's bytes.
    """
    scheme_code, _, zp_mode, reserved, scale_axis, scale_count, zp_axis, zp_count = fixed
    field = f"{where}.quant"
    if nbytes < BLOCK_FIXED_SIZE:  # R33
        checker.fail(
            "R33",
            f"quant_nbytes {nbytes} is below the 56-byte fixed part of a per-block payload",
            offset=offset,
            field=f"{where}.quant_nbytes",
        )
        return None
    block_size, value_code = _BLOCK_TAIL.unpack_from(buf, offset + spec.QUANT_FIXED_SIZE)
    if value_code not in (DType.F16.code, DType.F32.code):  # R33
        checker.fail(
            "R33",
            f"value_type {value_code} of the block scales must be 9 (f16) or 10 (f32)",
            offset=offset + spec.QUANT_FIXED_SIZE + 4,
            field=f"{field}.value_type",
        )
        return None
    scale_dtype = DType(value_code)
    width = scale_dtype.bits // 8
    if nbytes != block_payload_size(
        scale_count + zp_count, scale_dtype
    ):  # R33 (counts bound memory)
        checker.fail(
            "R33",
            f"quant_nbytes {nbytes} != align8(56 + {width}*({scale_count} + {zp_count}))",
            offset=offset,
            field=f"{where}.quant_nbytes",
        )
        return None
    if reserved != 0 or zp_mode not in (0, SCALE_MODE_BLOCK):  # R30
        checker.fail(
            "R30",
            f"a per-block payload needs reserved 0 and zp_mode 0 or 3, got {reserved} and {zp_mode}",
            offset=offset,
            field=field,
        )
        return None
    scheme = BlockScheme.of(dtype, scheme_code)
    if scheme is None or not has_data:  # R35
        known = ", ".join(
            f"{s} = {s.data_dtype} {'asymmetric' if s.has_offsets else 'symmetric'}"
            for s in BlockScheme
        )
        checker.fail(
            "R35",
            f"{dtype} data with scheme {scheme_code}{'' if has_data else ' and no data'} is no "
            f"block scheme ({known}; with data)",
            offset=offset,
            field=field,
        )
        return None
    layout = BlockLayout(scheme, block_size, scale_dtype)
    problems = layout.problems(dims)
    ndim = len(dims)
    if not problems:
        if scale_axis != ndim - 1:
            problems.append(f"scale_axis {scale_axis} must be the last axis ({ndim - 1})")
        if scale_count != layout.blocks(dims):
            problems.append(
                f"scale_count {scale_count} != {layout.blocks(dims)} blocks of {block_size} in shape {list(dims)}"
            )
        want_zp = (scale_axis, scale_count) if scheme.has_offsets else (0, 0)
        if (zp_mode == SCALE_MODE_BLOCK) != scheme.has_offsets or (zp_axis, zp_count) != want_zp:
            problems.append(
                f"{scheme} needs zp_mode {3 if scheme.has_offsets else 0}, zp_axis {want_zp[0]} and "
                f"zp_count {want_zp[1]}, got {zp_mode}, {zp_axis}, {zp_count}"
            )
    if problems:  # R34
        checker.fail("R34", "; ".join(problems), offset=offset, field=field)
        return None
    base = offset + BLOCK_FIXED_SIZE
    values = np.frombuffer(buf, scale_dtype.numpy, scale_count + zp_count, base)
    bad = _first_non_finite(values)
    if bad is not None:  # R36
        kind = "scale" if bad < scale_count else "offset"
        index = bad if bad < scale_count else bad - scale_count
        checker.fail(
            "R36",
            f"{kind} {index} of the block payload is {float(values[bad])}; scales and offsets must be finite",
            offset=base + width * bad,
            field=f"{field}.{kind}s[{index}]",
        )
        return None
    padding = base + width * (scale_count + zp_count)
    if any(buf[padding : offset + nbytes]):  # R37
        checker.fail("R37", "quant payload padding bytes are not 0", offset=padding, field=field)
        return None
    return BlockQuant(layout, scale_count, base, base + width * scale_count if zp_count else None)
