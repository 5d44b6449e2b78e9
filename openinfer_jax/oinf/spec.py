"""Constants of the `.oinf` layout and the numbered validation rules of docs/oinf.md.

Everything here is a fact about bytes on disk: the header structure, entry sizes, flag
bits, quant codes, the name alphabet and the string encoding. The writer and the reader
both import these, so the two cannot drift apart. `RULES` holds the one-line summary of
every rule R1..Rn; the reader cites the number in code and in each error message, and a
test checks that docs/oinf.md lists exactly the same rules.
"""

from __future__ import annotations

import re
import struct

__all__ = [
    "FLAG_HAS_DATA",
    "FLAG_HAS_QUANT",
    "HEADER",
    "HEADER_PADDED",
    "HEADER_SIZE",
    "MAGIC",
    "MAX_NDIM",
    "MIN_ENTRY_SIZE",
    "MIN_STRING_SIZE",
    "NAME_PATTERN",
    "QUANT_FIXED",
    "QUANT_FIXED_SIZE",
    "RULES",
    "SECTION_ALIGN",
    "SUPPORTED_VERSIONS",
    "TENSOR_FLAGS_BY_VERSION",
    "U64_MAX",
    "align_up",
    "encode_string",
    "is_valid_name",
    "is_valid_text",
    "string_size",
]

MAGIC = b"OINF\x00"
# magic, version, flags, n_sizevars, n_metadata, n_tensors, reserved,
# offset_sizevars, offset_metadata, offset_tensors, offset_data, file_size
HEADER = struct.Struct("<5sIIIIIIQQQQQ")
HEADER_SIZE = HEADER.size  # 69: packed, no internal alignment (original layout)
HEADER_PADDED = 72  # the header is zero-padded to the first 8-byte boundary
SUPPORTED_VERSIONS = (1, 2)
SECTION_ALIGN = 8  # sections and blobs start on multiples of 8

FLAG_HAS_DATA = 1
FLAG_HAS_QUANT = 2
# Tensor-entry flag bits each version allows; any other bit is an error (R24).
TENSOR_FLAGS_BY_VERSION = {1: FLAG_HAS_DATA, 2: FLAG_HAS_DATA | FLAG_HAS_QUANT}

# Our own cap on tensor rank (the original has none): bounds the work a hostile ndim can cause.
MAX_NDIM = 32
U64_MAX = (1 << 64) - 1

# scheme, scale_mode, zp_mode, reserved, scale_axis, scale_count, zp_axis, zp_count
QUANT_FIXED = struct.Struct("<IIIIQQQQ")
QUANT_FIXED_SIZE = QUANT_FIXED.size  # 48

NAME_PATTERN = re.compile(rb"[A-Za-z0-9._-]+")
MIN_STRING_SIZE = 8  # u32 length + at least one character, padded to 8

# Smallest possible encoded entry per table: used to bound counts before looping (R13).
MIN_ENTRY_SIZE = {
    "sizevars": MIN_STRING_SIZE + 8,
    "metadata": MIN_STRING_SIZE + 24,
    ("tensors", 1): MIN_STRING_SIZE + 12 + 16,
    ("tensors", 2): MIN_STRING_SIZE + 12 + 32,
}

RULES: dict[str, str] = {
    "R1": "the file is at least 72 bytes long (69-byte header padded to 72)",
    "R2": 'the magic is the 5 bytes "OINF\\0"',
    "R3": "the version is 1 or 2",
    "R4": "header flags and header reserved are 0",
    "R5": "header padding bytes 69..71 are 0",
    "R6": "file_size equals the length of the file",
    "R7": "72 <= offset_sizevars <= offset_metadata <= offset_tensors <= offset_data <= file_size",
    "R8": "every section offset is a multiple of 8",
    "R9": "a string (u32 length, bytes, padding to a multiple of 8) lies inside its section",
    "R10": "a name is 1+ characters of [A-Za-z0-9._-]; a STRING value is printable ASCII (0x20-0x7E)",
    "R11": "string padding bytes are 0",
    "R12": "names are unique within each table",
    "R13": "a table's entry count times its smallest entry size fits in the section",
    "R14": "every table entry lies inside its section",
    "R15": "a metadata value_type is a known code (1..25)",
    "R16": "metadata value_flags is 0",
    "R17": "a metadata value lies in the data section: value_offset % 8 == 0, value_offset >= offset_data, value_offset + value_nbytes <= file_size",
    "R18": "a scalar metadata value has exactly its type's size (packed: 1 byte, bool: 1, bf16: 2, f8: 1)",
    "R19": "a STRING value is u32 length + bytes, value_nbytes == align8(4 + length)",
    "R20": "a BITSET value is u32 bit_count, u32 byte_count == ceil(bit_count/8), bytes; value_nbytes == align8(8 + byte_count); unused high bits are 0",
    "R21": "an NDARRAY value is u32 element_type (a tensor dtype), u32 ndim <= 32, u64 dims[ndim], data; value_nbytes == align8(8 + 8*ndim + data bytes)",
    "R22": "a tensor dtype is a tensor type code: 1..12 or 16..25 (not bitset 13, string 14, ndarray 15)",
    "R23": "a tensor has ndim <= 32",
    "R24": "tensor flags use only bit0 (HAS_DATA) in v1, bits 0-1 (HAS_DATA, HAS_QUANT) in v2",
    "R25": "a clear flag bit has its nbytes and offset both 0",
    "R26": "a tensor's byte size ceil(numel * bits / 8) fits in a u64 (no shape-product overflow)",
    "R27": "with HAS_DATA, data_nbytes == numel * itemsize (packed: ceil(numel * bits / 8))",
    "R28": "with HAS_DATA, data_offset % 8 == 0, data_offset >= offset_data, data_offset + data_nbytes <= file_size",
    "R29": "with HAS_QUANT, quant_offset % 8 == 0, quant_offset >= offset_data, in bounds, quant_nbytes >= 48 and (scale_mode 1/2) == align8(48 + 4*scale_count + 4*zp_count)",
    "R30": "quant codes: scheme in {1,2}, scale_mode in {1,2,3}, zp_mode in {0,1,2} (with scale_mode 3: {0,3}), reserved 0",
    "R31": "quant shape rules: per-tensor scale has axis 0 and count 1; per-channel has axis < ndim and count == dims[axis]; zero points follow their scale's mode and axis; symmetric has no zero point",
    "R32": "blobs (metadata values, tensor data, quant payloads) do not overlap",
    "R33": "a per-block payload (scale_mode 3) has u32 block_size and u32 value_type in {9 f16, 10 f32} after the fixed part, and quant_nbytes == align8(56 + size(value_type) * (scale_count + zp_count))",
    "R34": "per-block shape rules: ndim >= 1, blocks run along the last axis (scale_axis == ndim-1), block_size >= 1 divides dims[-1] and fills whole bytes, scale_count == numel / block_size; offsets (zp_mode 3) exactly for asymmetric, with zp_axis == scale_axis and zp_count == scale_count",
    "R35": "a per-block tensor has data and is one scheme: q8_0 = i8 symmetric, q4_0 = i4 symmetric, q4_1 = u4 asymmetric",
    "R36": "every scale and offset of a per-block payload is finite",
    "R37": "bytes nothing describes are 0: a table section after its last entry, the data section outside blobs, the padding inside BITSET, NDARRAY and quant payloads",
}


def align_up(value: int, alignment: int = SECTION_ALIGN) -> int:
    """Round `value` up to a multiple of `alignment` (a power of two or any positive int)."""
    return (value + alignment - 1) // alignment * alignment


def string_size(length: int) -> int:
    """Encoded size of a string of `length` bytes: 4 + length, padded to a multiple of 8."""
    return align_up(4 + length)


def is_valid_name(raw: bytes) -> bool:
    """True if `raw` is a legal table name (R10): 1+ bytes of ``[A-Za-z0-9._-]``."""
    return NAME_PATTERN.fullmatch(raw) is not None


# Printable ASCII: a regex scans a tokenizer's megabytes of metadata in C, not per byte.
_TEXT_PATTERN = re.compile(rb"[\x20-\x7e]*")


def is_valid_text(raw: bytes) -> bool:
    """True if `raw` is a legal STRING metadata value (R10): printable ASCII only."""
    return _TEXT_PATTERN.fullmatch(raw) is not None


def encode_string(text: str) -> bytes:
    """The on-disk form of `text`: u32 length, ASCII bytes, zero padding so 4+len is a multiple of 8.

    The caller validates the characters (names and values have different alphabets).
    """
    raw = text.encode("ascii")
    return struct.pack("<I", len(raw)) + raw + b"\x00" * (string_size(len(raw)) - 4 - len(raw))
