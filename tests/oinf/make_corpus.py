"""Generate the bad-file corpus under tests/oinf/corpus/: one hand-made hostile file per case.

Each case breaks exactly one rule of docs/oinf.md (the first one a strict reader meets), built
with the independent struct-only encoder. Run ``.venv/bin/python tests/oinf/make_corpus.py``
to regenerate; test_corpus.py checks the committed files equal what this script builds.
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.oinf.minimal_encoder import Meta, Tensor, block_payload, build, quant_payload

CORPUS_DIR = Path(__file__).with_name("corpus")
F32x4 = struct.pack("<4f", 1, 2, 3, 4)


@dataclass(frozen=True)
class Case:
    """A corpus file: its name, the rule it breaks first, why, and how to build it."""

    name: str
    rule: str
    why: str
    make: Callable[[], bytes]


def _w(**over: int) -> Tensor:
    return Tensor(b"w", 10, [2, 2], F32x4, over=dict(over))


def _valid() -> bytes:
    return build(2, sizevars=[(b"B", 2)], metadata=[Meta(b"n", 5, b"\x07")], tensors=[_w()])


def _patch(data: bytes, offset: int, raw: bytes) -> bytes:
    return data[:offset] + raw + data[offset + len(raw) :]


def _quant(**kw: object) -> bytes:
    args: dict[str, object] = {
        "scheme": 1,
        "scale_mode": 1,
        "zp_mode": 0,
        "scale_axis": 0,
        "scales": [0.5],
        "zp_axis": 0,
        "zps": [],
    }
    args.update(kw)
    return quant_payload(**args)  # type: ignore[arg-type]


def _qt(q: bytes, **over: int) -> list[Tensor]:
    return [Tensor(b"q", 1, [2, 2], b"\x01\x02\x03\x04", quant=q, over=dict(over))]


def _blocked(payload: bytes, dtype: int = 1, dims: tuple[int, int] = (2, 8), **over: int) -> bytes:
    """A block-quantized tensor `b` (i8 codes 0..15 by default) with `payload` as its quant payload."""
    numel = dims[0] * dims[1]
    data = bytes(range(numel)) if dtype in (1, 5) else bytes((numel + 1) // 2)
    return build(2, tensors=[Tensor(b"b", dtype, list(dims), data, quant=payload, over=dict(over))])


def _ndarray(code: int, ndim: int, dims: list[int], data: bytes) -> bytes:
    body = struct.pack("<II", code, ndim) + struct.pack(f"<{len(dims)}Q", *dims) + data
    return body + b"\x00" * (-len(body) % 8)


CASES: list[Case] = [
    Case("empty", "R1", "zero-byte file", lambda: b""),
    Case("truncated_header", "R1", "40 bytes of a valid file", lambda: _valid()[:40]),
    Case("bad_magic", "R2", "magic GGUF", lambda: _patch(_valid(), 0, b"GGUF\x00")),
    Case("version_3", "R3", "unknown version", lambda: build(2, header={"version": 3})),
    Case("version_0", "R3", "version 0", lambda: build(2, header={"version": 0})),
    Case("header_flags", "R4", "header flags 1", lambda: build(2, header={"flags": 1})),
    Case(
        "header_reserved",
        "R4",
        "header reserved set",
        lambda: build(2, header={"reserved": 0xDEAD}),
    ),
    Case("header_padding", "R5", "byte 70 not zero", lambda: _patch(_valid(), 70, b"\x01")),
    Case(
        "file_size_bigger",
        "R6",
        "file_size claims 8 more bytes",
        lambda: _patch(_valid(), 61, struct.pack("<Q", len(_valid()) + 8)),
    ),
    Case("truncated_data", "R6", "valid file cut inside the tensor data", lambda: _valid()[:-5]),
    Case("appended_garbage", "R6", "bytes after the end", lambda: _valid() + b"\x00" * 8),
    Case(
        "offsets_descending",
        "R7",
        "offset_metadata < offset_sizevars",
        lambda: build(
            2, sizevars=[(b"B", 1)], header={"offset_sizevars": 88, "offset_metadata": 80}
        ),
    ),
    Case(
        "offset_before_header",
        "R7",
        "offset_sizevars inside the header",
        lambda: build(2, header={"offset_sizevars": 64}),
    ),
    Case(
        "offset_data_past_eof",
        "R7",
        "offset_data beyond the file",
        lambda: build(2, header={"offset_data": 1 << 40}),
    ),
    Case(
        "offset_huge",
        "R7",
        "offset_tensors near 2^64",
        lambda: build(2, header={"offset_tensors": (1 << 64) - 8}),
    ),
    Case(
        "offset_unaligned", "R8", "offset_metadata not a multiple of 8", lambda: _unaligned_offset()
    ),
    Case(
        "string_length_huge",
        "R9",
        "tensor name length 0xFFFFFFFF",
        lambda: build(2, tensors=[Tensor(b"w", 10, [2, 2], F32x4, name_length=0xFFFFFFFF)]),
    ),
    Case(
        "string_past_section",
        "R9",
        "metadata key length runs into the tensor table",
        lambda: build(2, metadata=[Meta(b"k", 5, b"\x01", key_length=60)], tensors=[_w()]),
    ),
    Case(
        "name_non_ascii",
        "R10",
        "UTF-8 bytes in a tensor name",
        lambda: build(2, tensors=[Tensor("wé".encode(), 10, [2, 2], F32x4)]),
    ),
    Case("name_empty", "R10", "empty sizevar name", lambda: build(2, sizevars=[(b"", 3)])),
    Case(
        "name_space",
        "R10",
        "space in a metadata key",
        lambda: build(2, metadata=[Meta(b"a b", 5, b"\x01")]),
    ),
    Case("string_padding", "R11", "non-zero string padding", lambda: _patch(_valid(), 78, b"\x01")),
    Case(
        "string_value_padding",
        "R11",
        "a STRING metadata value with a non-zero padding byte",
        lambda: build(2, metadata=[Meta(b"m", 14, struct.pack("<I", 3) + b"abc\x01")]),
    ),
    Case("duplicate_tensor", "R12", "tensor 'w' twice", lambda: build(2, tensors=[_w(), _w()])),
    Case(
        "duplicate_sizevar",
        "R12",
        "sizevar 'B' twice",
        lambda: build(2, sizevars=[(b"B", 1), (b"B", 2)]),
    ),
    Case(
        "count_huge_tensors",
        "R13",
        "n_tensors 0xFFFFFFFF (unchecked array length)",
        lambda: build(2, tensors=[_w()], header={"n_tensors": 0xFFFFFFFF}),
    ),
    Case(
        "count_huge_metadata",
        "R13",
        "n_metadata 2^31",
        lambda: build(2, metadata=[Meta(b"n", 5, b"\x01")], header={"n_metadata": 1 << 31}),
    ),
    Case(
        "count_huge_sizevars",
        "R13",
        "n_sizevars 0xFFFFFFFF",
        lambda: build(2, sizevars=[(b"B", 1)], header={"n_sizevars": 0xFFFFFFFF}),
    ),
    Case(
        "count_one_too_many",
        "R14",
        "n_sizevars + 1: the extra entry runs out of its section",
        lambda: build(
            2, sizevars=[(b"abcdefghijkl", 1), (b"mnopqrstuvwx", 2)], header={"n_sizevars": 3}
        ),
    ),
    Case(
        "metadata_unknown_type",
        "R15",
        "value_type 99",
        lambda: build(2, metadata=[Meta(b"m", 99, b"\x01")]),
    ),
    Case(
        "metadata_type_zero",
        "R15",
        "value_type 0",
        lambda: build(2, metadata=[Meta(b"m", 0, b"\x01")]),
    ),
    Case(
        "metadata_flags",
        "R16",
        "value_flags 1",
        lambda: build(2, metadata=[Meta(b"m", 5, b"\x01", over={"value_flags": 1})]),
    ),
    Case(
        "metadata_offset_past_eof",
        "R17",
        "value_offset + value_nbytes past EOF",
        lambda: build(2, metadata=[Meta(b"m", 5, b"\x01", over={"value_offset": 1 << 40})]),
    ),
    Case(
        "metadata_nbytes_huge",
        "R17",
        "value_nbytes 2^63",
        lambda: build(
            2,
            metadata=[Meta(b"m", 15, _ndarray(5, 1, [1], b"\x01"), over={"value_nbytes": 1 << 63})],
        ),
    ),
    Case(
        "metadata_offset_unaligned",
        "R17",
        "value_offset not a multiple of 8",
        lambda: build(2, metadata=[Meta(b"m", 5, b"\x01", over={"value_offset": 81})]),
    ),
    Case(
        "metadata_scalar_size",
        "R18",
        "u32 value with value_nbytes 2",
        lambda: build(2, metadata=[Meta(b"m", 7, b"\x01\x00\x00\x00", over={"value_nbytes": 2})]),
    ),
    Case(
        "metadata_string_length",
        "R19",
        "STRING length field 1000 in an 8-byte payload",
        lambda: build(2, metadata=[Meta(b"m", 14, struct.pack("<I", 1000) + b"abcd")]),
    ),
    Case(
        "metadata_bitset_count",
        "R20",
        "byte_count disagrees with bit_count",
        lambda: build(
            2,
            metadata=[
                Meta(b"m", 13, struct.pack("<II", 9, 1) + b"\x01\x00\x00\x00\x00\x00\x00\x00")
            ],
        ),
    ),
    Case(
        "metadata_bitset_high_bits",
        "R20",
        "unused high bits set",
        lambda: build(
            2, metadata=[Meta(b"m", 13, struct.pack("<II", 3, 1) + b"\xff" + b"\x00" * 7)]
        ),
    ),
    Case(
        "ndarray_ndim_huge",
        "R21",
        "NDARRAY ndim 0xFFFFFFFF (unchecked array length)",
        lambda: build(2, metadata=[Meta(b"m", 15, _ndarray(5, 0xFFFFFFFF, [], b""))]),
    ),
    Case(
        "ndarray_dims_overflow",
        "R21",
        "NDARRAY u8 dims [2^61, 8]: the product wraps to 0 in u64",
        lambda: build(2, metadata=[Meta(b"m", 15, _ndarray(5, 2, [1 << 61, 8], b""))]),
    ),
    Case(
        "ndarray_element_bitset",
        "R21",
        "NDARRAY element_type bitset",
        lambda: build(2, metadata=[Meta(b"m", 15, _ndarray(13, 1, [8], b"\x01"))]),
    ),
    Case(
        "tensor_dtype_unknown",
        "R22",
        "dtype 99",
        lambda: build(2, tensors=[Tensor(b"w", 99, [2, 2], F32x4)]),
    ),
    Case(
        "tensor_dtype_bitset",
        "R22",
        "dtype bitset (metadata-only)",
        lambda: build(2, tensors=[Tensor(b"w", 13, [8], b"\xff")]),
    ),
    Case(
        "tensor_dtype_string",
        "R22",
        "dtype string",
        lambda: build(2, tensors=[Tensor(b"w", 14, [8], b"\xff" * 8)]),
    ),
    Case(
        "tensor_ndim_huge",
        "R23",
        "ndim 0xFFFFFFFF",
        lambda: build(2, tensors=[_w(ndim=0xFFFFFFFF)]),
    ),
    Case(
        "tensor_ndim_33",
        "R23",
        "ndim 33",
        lambda: build(2, tensors=[Tensor(b"w", 5, [1] * 33, b"\x01")]),
    ),
    Case("tensor_flags_unknown", "R24", "flags bit 2", lambda: build(2, tensors=[_w(flags=5)])),
    Case(
        "tensor_v1_quant_flag",
        "R24",
        "HAS_QUANT in a version-1 file",
        lambda: build(1, tensors=[_w(flags=3)]),
    ),
    Case(
        "tensor_nodata_offset",
        "R25",
        "HAS_DATA clear, data_offset set",
        lambda: build(2, tensors=[Tensor(b"w", 10, [2], None, over={"data_offset": 128})]),
    ),
    Case(
        "tensor_noquant_nbytes",
        "R25",
        "HAS_QUANT clear, quant_nbytes set",
        lambda: build(2, tensors=[_w(quant_nbytes=48)]),
    ),
    Case(
        "shape_product_overflow",
        "R26",
        "dims [2^62+1, 4] f32: numel*4 wraps to 16 in u64, 16 bytes back it",
        lambda: build(2, tensors=[Tensor(b"w", 10, [(1 << 62) + 1, 4], F32x4)]),
    ),
    Case(
        "shape_product_overflow_nodata",
        "R26",
        "declared tensor of 2^70 bytes",
        lambda: build(2, tensors=[Tensor(b"w", 11, [1 << 40, 1 << 30], None)]),
    ),
    Case(
        "shape_product_nan",
        "R26",
        "f32[2^61+1, 8] backed by 32 bytes, beside a 0-element tensor whose float product is NaN",
        lambda: build(
            2,
            tensors=[
                Tensor(b"a", 10, [1 << 61] * 17 + [0], None),
                Tensor(b"w", 10, [(1 << 61) + 1, 8], F32x4 * 2),
            ],
        ),
    ),
    Case(
        "data_nbytes_mismatch",
        "R27",
        "data_nbytes 12 for a 16-byte tensor",
        lambda: build(2, tensors=[_w(data_nbytes=12)]),
    ),
    Case(
        "data_nbytes_packed",
        "R27",
        "i4[5] needs 3 bytes, says 5",
        lambda: build(2, tensors=[Tensor(b"w", 18, [5], b"\x00" * 5)]),
    ),
    Case(
        "data_offset_past_eof",
        "R28",
        "data_offset + data_nbytes past EOF",
        lambda: build(2, tensors=[_w(data_offset=1 << 20)]),
    ),
    Case(
        "data_offset_huge",
        "R28",
        "data_offset near 2^64 (offset + size overflows in C)",
        lambda: build(2, tensors=[_w(data_offset=(1 << 64) - 8)]),
    ),
    Case(
        "data_offset_unaligned", "R28", "data_offset not a multiple of 8", lambda: _unaligned_data()
    ),
    Case(
        "data_in_tables",
        "R28",
        "data_offset points into the tensor table",
        lambda: build(2, tensors=[_w(data_offset=72)]),
    ),
    Case(
        "quant_offset_past_eof",
        "R29",
        "quant payload past EOF",
        lambda: build(2, tensors=_qt(_quant(), quant_offset=1 << 30)),
    ),
    Case(
        "quant_nbytes_wrong",
        "R29",
        "quant_nbytes 56 for a 56-byte payload claiming 100 scales",
        lambda: build(2, tensors=_qt(_quant_lying_count())),
    ),
    Case(
        "quant_nbytes_small",
        "R29",
        "quant_nbytes 8",
        lambda: build(2, tensors=_qt(_quant(), quant_nbytes=8)),
    ),
    Case("quant_bad_scheme", "R30", "scheme 7", lambda: build(2, tensors=_qt(_quant(scheme=7)))),
    Case(
        "quant_reserved",
        "R30",
        "quant reserved 1",
        lambda: build(2, tensors=_qt(_quant(reserved=1))),
    ),
    Case(
        "quant_axis_out_of_range",
        "R31",
        "per-channel scale axis 5 on a 2-d tensor",
        lambda: build(2, tensors=_qt(_quant(scale_mode=2, scale_axis=5, scales=[1.0, 2.0]))),
    ),
    Case(
        "quant_count_mismatch",
        "R31",
        "per-channel count 3, dims[0] is 2",
        lambda: build(2, tensors=_qt(_quant(scale_mode=2, scale_axis=0, scales=[1.0, 2.0, 3.0]))),
    ),
    Case(
        "quant_symmetric_zp",
        "R31",
        "symmetric with a zero point",
        lambda: build(2, tensors=_qt(_quant(zp_mode=1, zps=[3]))),
    ),
    Case(
        "block_value_type",
        "R33",
        "per-block scales of value_type 3 (i32)",
        lambda: _blocked(block_payload(1, 4, [0.5] * 4, value_type=3)),
    ),
    Case(
        "block_scale_blob_size",
        "R33",
        "q8_0 [2, 8] block 4: scale_count 16 in a payload that holds 4 f16 scales",
        lambda: _blocked(block_payload(1, 4, [0.5] * 4, counts=(16, 0))),
    ),
    Case(
        "block_count_vs_shape",
        "R34",
        "q8_0 [2, 8] block 4 needs 4 scales, the payload has 2",
        lambda: _blocked(block_payload(1, 4, [0.5] * 2)),
    ),
    Case(
        "block_size_not_dividing",
        "R34",
        "q8_0 [2, 8] with block size 3 (does not divide the last axis)",
        lambda: _blocked(block_payload(1, 3, [0.5] * 5)),
    ),
    Case(
        "block_axis_not_last",
        "R34",
        "per-block scales along axis 0",
        lambda: _blocked(block_payload(1, 4, [0.5] * 4, scale_axis=0)),
    ),
    Case(
        "block_q41_without_offsets",
        "R34",
        "u4 asymmetric (q4_1) with no offsets",
        lambda: _blocked(block_payload(2, 8, [0.5] * 2), dtype=21),
    ),
    Case(
        "block_unknown_scheme",
        "R35",
        "f32 data with a per-block payload",
        lambda: build(
            2, tensors=[Tensor(b"b", 10, [2, 2], F32x4, quant=block_payload(1, 2, [0.5] * 2))]
        ),
    ),
    Case(
        "block_scale_nan",
        "R36",
        "q8_0 block scale 2 is NaN",
        lambda: _blocked(block_payload(1, 4, [0.5, 0.25, float("nan"), 1.0])),
    ),
    Case(
        "block_offset_inf",
        "R36",
        "q4_1 block offset 1 is +inf",
        lambda: _blocked(block_payload(2, 8, [0.5, 0.5], [0.0, float("inf")]), dtype=21),
    ),
    Case(
        "block_padding",
        "R37",
        "q8_0 [2, 8] block 8: a non-zero byte in the padding after the 2 f16 scales",
        lambda: _blocked(block_payload(1, 8, [0.5] * 2)[:-1] + b"\x01"),
    ),
    Case(
        "table_tail_nonzero",
        "R37",
        "a non-zero byte between the last tensor entry and offset_data",
        lambda: _patch(_valid(), _u64(_valid(), 53) - 1, b"\x01"),
    ),
    Case(
        "data_gap_nonzero",
        "R37",
        "a non-zero byte in the padding after a u8 metadata value",
        lambda: _patch(_valid(), _u64(_valid(), 53) + 1, b"\x01"),
    ),
    Case(
        "bitset_padding",
        "R37",
        "a BITSET value with a non-zero padding byte",
        lambda: build(
            2, metadata=[Meta(b"m", 13, struct.pack("<II", 3, 1) + b"\x05" + b"\x00" * 6 + b"\x01")]
        ),
    ),
    Case(
        "ndarray_padding",
        "R37",
        "an NDARRAY value with a non-zero padding byte",
        lambda: build(2, metadata=[Meta(b"m", 15, _ndarray(5, 1, [1], b"\x07")[:-1] + b"\x01")]),
    ),
    Case(
        "quant_padding",
        "R37",
        "a quant payload with a non-zero padding byte",
        lambda: build(2, tensors=_qt(_quant()[:-1] + b"\x01")),
    ),
    Case("overlapping_tensors", "R32", "two tensors share their bytes", lambda: _overlap_tensors()),
    Case(
        "metadata_overlaps_tensor",
        "R32",
        "a metadata value inside a tensor's data",
        lambda: _overlap_metadata(),
    ),
]


# Valid files at the edges of the rules: both readers must open them (corpus/valid/).
VALID_CASES: list[Case] = [
    Case(
        "declared_u1_huge",
        "OK",
        "declared u1[2^64-1]: 2^61 bytes, which fits in a u64 (R26)",
        lambda: build(2, tensors=[Tensor(b"w", 23, [(1 << 64) - 1], None)]),
    ),
    Case(
        "declared_i8_u64_max_bytes",
        "OK",
        "declared i8[2^64-1]: 2^64-1 bytes, the largest byte size a u64 holds (R26)",
        lambda: build(2, tensors=[Tensor(b"w", 1, [(1 << 64) - 1], None)]),
    ),
    Case(
        "empty_tensor_huge_dims",
        "OK",
        "f32[2^62, 0] with 0 bytes of data: valid, but NumPy cannot hold the shape",
        lambda: build(2, tensors=[Tensor(b"w", 10, [1 << 62, 0], b"")]),
    ),
    Case(
        "ndarray_empty_huge_dim",
        "OK",
        "NDARRAY u8[2^63, 0]: valid, but NumPy cannot hold the shape",
        lambda: build(2, metadata=[Meta(b"m", 15, _ndarray(5, 2, [1 << 63, 0], b""))]),
    ),
    Case(
        "string_value_empty",
        "OK",
        "an empty STRING metadata value (the original's verifier refuses it; we read it)",
        lambda: build(2, metadata=[Meta(b"m", 14, struct.pack("<I", 0) + b"\x00" * 4)]),
    ),
]
VALID_DIR = CORPUS_DIR / "valid"


def _u64(data: bytes, offset: int) -> int:
    return int(struct.unpack_from("<Q", data, offset)[0])


def _unaligned_offset() -> bytes:
    data = bytearray(build(2, sizevars=[(b"B", 1)]))
    data += b"\x00" * 8
    struct.pack_into("<Q", data, 37, 92)  # offset_metadata = 92: ascending but not 8-aligned
    struct.pack_into("<QQQ", data, 45, 96, 96, len(data))
    return bytes(data)


def _unaligned_data() -> bytes:
    base = build(2, tensors=[_w()])
    data_off = struct.unpack_from("<Q", base, 53)[0]
    return build(2, tensors=[_w(data_offset=data_off + 4)])


def _quant_lying_count() -> bytes:
    q = bytearray(_quant())
    struct.pack_into("<Q", q, 24, 100)  # scale_count 100 in a payload that holds one scale
    return bytes(q)


def _overlap_tensors() -> bytes:
    first = build(2, tensors=[Tensor(b"a", 10, [2, 2], F32x4), Tensor(b"b", 10, [2, 2], F32x4)])
    a_off = struct.unpack_from("<Q", first, 53)[0]  # offset_data == a's data offset
    return build(
        2,
        tensors=[
            Tensor(b"a", 10, [2, 2], F32x4),
            Tensor(b"b", 10, [2, 2], F32x4, over={"data_offset": a_off + 8}),
        ],
    )


def _overlap_metadata() -> bytes:
    first = build(2, metadata=[Meta(b"m", 7, b"\x01\x00\x00\x00")], tensors=[_w()])
    off_d = struct.unpack_from("<Q", first, 53)[0]
    return build(
        2,
        metadata=[Meta(b"m", 7, b"\x01\x00\x00\x00", over={"value_offset": off_d + 8})],
        tensors=[_w()],
    )


def main() -> int:
    """Write every case and a manifest (name -> rule, why)."""
    CORPUS_DIR.mkdir(exist_ok=True)
    for old in CORPUS_DIR.glob("*.oinf"):
        old.unlink()
    manifest = {}
    for case in CASES:
        (CORPUS_DIR / f"{case.name}.oinf").write_bytes(case.make())
        manifest[case.name] = {"rule": case.rule, "why": case.why}
    (CORPUS_DIR / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    VALID_DIR.mkdir(exist_ok=True)
    for old in VALID_DIR.glob("*.oinf"):
        old.unlink()
    for case in VALID_CASES:
        (VALID_DIR / f"{case.name}.oinf").write_bytes(case.make())
    print(f"wrote {len(CASES)} files to {CORPUS_DIR}, {len(VALID_CASES)} to {VALID_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
