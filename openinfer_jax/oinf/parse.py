"""Parse and validate a whole `.oinf` buffer: header, the three tables, metadata and quant payloads.

This is the single implementation of the rules in docs/oinf.md; each check cites its rule
(R1..R37). Work is bounded by the buffer size: counts are checked against the bytes of
their section before looping (R13), every read goes through a bounds-checked `Cursor`,
and no array is built before its byte size has been checked against the file. Tensor
data itself is not touched here (only its extent), which is what keeps opening a model
independent of its size.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass, field

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.oinf import spec
from openinfer_jax.oinf.checks import Checker, Cursor
from openinfer_jax.oinf.entries import MetadataInfo, TensorInfo
from openinfer_jax.oinf.fastpath import fast_tensor_table
from openinfer_jax.oinf.metadata import MetadataValues, decode_metadata
from openinfer_jax.oinf.quant import decode_quant

__all__ = ["MetadataInfo", "ParsedModel", "TensorInfo", "parse_buffer"]

_META_FIXED = struct.Struct("<IIQQ")  # value_type, value_flags, value_nbytes, value_offset
_TENSOR_HEAD = struct.Struct("<III")  # dtype, ndim, flags
_TENSOR_TAIL = {
    1: struct.Struct("<QQ"),
    2: struct.Struct("<QQQQ"),
}  # data (and quant) nbytes/offset
_CODES = DType._value2member_map_


@dataclass
class ParsedModel:
    """Everything the tables say, after validation."""

    version: int = 0
    sizevars: dict[str, int] = field(default_factory=dict)
    metadata: MetadataValues = field(default_factory=MetadataValues)
    metadata_info: dict[str, MetadataInfo] = field(default_factory=dict)
    tensors: dict[str, TensorInfo] = field(default_factory=dict)


def _check_count(
    checker: Checker, count: int, min_size: int, start: int, end: int, what: str, count_offset: int
) -> None:
    # R13: bound the loop before it starts, so a lying count cannot make us spin or allocate.
    if count * min_size > end - start:
        checker.fail(
            "R13",
            f"{count} {what} entries need at least {count * min_size} bytes, the section has {end - start}",
            offset=count_offset,
            field=f"header.n_{what}",
            fatal=True,
        )


def _check_blob(
    checker: Checker,
    rule: str,
    offset: int,
    nbytes: int,
    offset_data: int,
    end: int,
    field_name: str,
    field_offset: int,
) -> bool:
    if offset % spec.SECTION_ALIGN or offset < offset_data or offset + nbytes > end:
        checker.fail(
            rule,
            f"blob [{offset}, {offset + nbytes}) must start on a multiple of 8 at or after offset_data {offset_data} "
            f"and end by the end of the file ({end})",
            offset=field_offset,
            field=field_name,
        )
        return False
    return True


# Over 80 lines on purpose: the header and the tables in the order docs/oinf.md lays them
# out, each step one rule; the order of the checks is the contract, read top to bottom.
def parse_buffer(buf: memoryview, checker: Checker, *, fast: bool = True) -> ParsedModel:
    """Validate `buf` against every rule and return its tables.

    `fast=False` skips the vectorized tensor-table path (fastpath.py); results are the same.

    Raises:
        OinfFormatError: in strict mode, at the first violation.
        StopParsing: in collecting mode, after a fatal violation (the checker holds the list).
    """
    model = ParsedModel()
    size = len(buf)
    if size < spec.HEADER_PADDED:  # R1
        checker.fail(
            "R1",
            f"the file has {size} bytes, the header alone needs {spec.HEADER_PADDED}",
            offset=0,
            field="header",
            fatal=True,
        )
    (magic, version, flags, n_sizevars, n_metadata, n_tensors, reserved,
     off_sizevars, off_metadata, off_tensors, off_data, file_size) = spec.HEADER.unpack_from(buf, 0)  # fmt: skip
    if magic != spec.MAGIC:  # R2
        checker.fail(
            "R2",
            f"magic is {bytes(magic)!r}, expected b'OINF\\x00'; this is not an .oinf file",
            offset=0,
            field="header.magic",
            fatal=True,
        )
    if version not in spec.SUPPORTED_VERSIONS:  # R3
        checker.fail(
            "R3",
            f"version {version} is not supported (1 or 2)",
            offset=5,
            field="header.version",
            fatal=True,
        )
    model.version = version
    if flags != 0:  # R4
        checker.fail("R4", f"header flags is {flags}, must be 0", offset=9, field="header.flags")
    if reserved != 0:  # R4
        checker.fail(
            "R4", f"header reserved is {reserved}, must be 0", offset=25, field="header.reserved"
        )
    if any(buf[spec.HEADER_SIZE : spec.HEADER_PADDED]):  # R5
        checker.fail(
            "R5",
            "header padding bytes 69..71 are not 0",
            offset=spec.HEADER_SIZE,
            field="header.padding",
        )
    if file_size != size:  # R6
        checker.fail(
            "R6",
            f"file_size says {file_size} bytes, the file has {size} (truncated or appended to?)",
            offset=61,
            field="header.file_size",
        )
    offsets = (off_sizevars, off_metadata, off_tensors, off_data)
    names = ("offset_sizevars", "offset_metadata", "offset_tensors", "offset_data")
    chain = (spec.HEADER_PADDED, *offsets, size)
    for i, (lo, hi) in enumerate(
        itertools.pairwise(chain)
    ):  # R7: sections in order, inside the file
        if lo > hi:
            which = names[min(i, 3)]
            checker.fail(
                "R7",
                f"section offsets must ascend from 72 to the file end {size}: {list(offsets)}",
                offset=29 + 8 * min(i, 3),
                field=f"header.{which}",
                fatal=True,
            )
    for i, off in enumerate(offsets):  # R8
        if off % spec.SECTION_ALIGN:
            checker.fail(
                "R8",
                f"{names[i]} {off} is not a multiple of 8",
                offset=29 + 8 * i,
                field=f"header.{names[i]}",
            )

    _parse_sizevars(buf, checker, model, n_sizevars, off_sizevars, off_metadata)
    blobs: list[tuple[int, int, str]] = []
    _parse_metadata(
        buf, checker, model, n_metadata, off_metadata, off_tensors, off_data, size, blobs
    )
    if fast and not checker.violations:
        accepted = fast_tensor_table(buf, version, n_tensors, off_tensors, off_data, off_data, size)
        if accepted is not None:
            starts, ends = _sorted_blobs(blobs, accepted[1], accepted[2])
            if bool((starts[1:] >= ends[:-1]).all()) and _gaps_are_zero(
                buf, starts, ends, off_data, size
            ):  # R32, R37
                model.tensors = accepted[0]
                return model
    # The precise per-entry parser: the fast path declined, so it finds and names the problem.
    _parse_tensors(buf, checker, model, n_tensors, off_tensors, off_data, size, blobs)
    if _check_overlaps(checker, blobs):
        empty = np.zeros(0, np.int64)
        starts, ends = _sorted_blobs(blobs, empty, empty)
        if not _gaps_are_zero(buf, starts, ends, off_data, size):  # R37
            _report_gap(buf, checker, starts, ends, off_data, size)
    return model


def _sorted_blobs(
    blobs: list[tuple[int, int, str]], offsets: np.ndarray, sizes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    # The non-empty blobs as sorted [start, end) arrays (the fast path's tensors come as arrays).
    starts = np.concatenate([np.asarray([b[0] for b in blobs], dtype=np.int64), offsets])
    lengths = np.concatenate([np.asarray([b[1] for b in blobs], dtype=np.int64), sizes])
    keep = lengths > 0
    starts, ends = starts[keep], starts[keep] + lengths[keep]
    order = np.argsort(starts, kind="stable")
    return starts[order], ends[order]


def _gaps(
    starts: np.ndarray, ends: np.ndarray, off_data: int, size: int
) -> tuple[np.ndarray, np.ndarray]:
    # The [start, end) runs of the data section that no blob covers (blobs do not overlap).
    gap_starts = np.concatenate([[off_data], ends]).astype(np.int64)
    gap_ends = np.concatenate([starts, [size]]).astype(np.int64)
    keep = gap_ends > gap_starts
    return gap_starts[keep], gap_ends[keep]


# Gaps are padding (under 64 bytes per blob for our writer): gathered at once up to this many
# bytes; larger gaps (an odd writer, or a hostile file) are scanned one by one without a copy.
_GATHER_LIMIT = 1 << 20


def _gaps_are_zero(
    buf: memoryview, starts: np.ndarray, ends: np.ndarray, off_data: int, size: int
) -> bool:
    """R37 for the data section: every byte outside the blobs is 0."""
    gap_starts, gap_ends = _gaps(starts, ends, off_data, size)
    lengths = gap_ends - gap_starts
    if not len(lengths):
        return True
    data = np.frombuffer(buf, dtype=np.uint8)
    if int(lengths.sum()) <= _GATHER_LIMIT:
        index = np.repeat(gap_starts - (np.cumsum(lengths) - lengths), lengths)
        return not data[index + np.arange(int(lengths.sum()))].any()
    return not any(
        data[a:b].any() for a, b in zip(gap_starts.tolist(), gap_ends.tolist(), strict=True)
    )


def _report_gap(
    buf: memoryview,
    checker: Checker,
    starts: np.ndarray,
    ends: np.ndarray,
    off_data: int,
    size: int,
) -> None:
    data = np.frombuffer(buf, dtype=np.uint8)
    for a, b in zip(*(g.tolist() for g in _gaps(starts, ends, off_data, size)), strict=True):
        nonzero = np.flatnonzero(data[a:b])
        if len(nonzero):
            checker.fail(
                "R37",
                f"byte {a + int(nonzero[0])} lies in the data section outside every blob "
                f"(the gap [{a}, {b})) and is not 0",
                offset=a + int(nonzero[0]),
                field="data section",
            )
            return


def _check_table_tail(
    buf: memoryview, checker: Checker, pos: int, end: int, table: str, offset_field: str
) -> None:
    # R37: a table section ends with its last entry plus zero padding up to the next section.
    if pos < end and any(buf[pos:end]):
        checker.fail(
            "R37",
            f"bytes after the last {table} entry (offsets {pos}..{end}) are not 0; "
            f"the entry count or {offset_field} is wrong",
            offset=pos,
            field=f"{table} table",
        )


def _parse_sizevars(
    buf: memoryview, checker: Checker, model: ParsedModel, count: int, start: int, end: int
) -> None:
    _check_count(checker, count, spec.MIN_ENTRY_SIZE["sizevars"], start, end, "sizevars", 13)
    cur = Cursor(buf, start, end, checker, "R14")
    for i in range(count):
        entry_pos = cur.pos
        name = cur.string(f"sizevar[{i}].name", name=True)
        value = cur.u64(f"sizevar[{i}] {name!r}.value")
        if name in model.sizevars:  # R12
            checker.fail(
                "R12",
                f"sizevar {name!r} appears twice",
                offset=entry_pos,
                field=f"sizevar[{i}].name",
            )
            continue
        model.sizevars[name] = value
    _check_table_tail(buf, checker, cur.pos, end, "sizevars", "header.offset_metadata")


def _parse_metadata(
    buf: memoryview,
    checker: Checker,
    model: ParsedModel,
    count: int,
    start: int,
    end: int,
    off_data: int,
    size: int,
    blobs: list[tuple[int, int, str]],
) -> None:
    _check_count(checker, count, spec.MIN_ENTRY_SIZE["metadata"], start, end, "metadata", 17)
    cur = Cursor(buf, start, end, checker, "R14")
    for i in range(count):
        entry_pos = cur.pos
        key = cur.string(f"metadata[{i}].key", name=True)
        fixed_pos = cur.pos
        where = f"metadata[{i}] {key!r}"
        vtype_code, vflags, nbytes, offset = cur.unpack(_META_FIXED, where)
        if key in model.metadata_info:  # R12
            checker.fail(
                "R12",
                f"metadata key {key!r} appears twice",
                offset=entry_pos,
                field=f"metadata[{i}].key",
            )
            continue
        if vtype_code not in _CODES:  # R15
            checker.fail(
                "R15",
                f"value_type {vtype_code} is not a known code (1..25)",
                offset=fixed_pos,
                field=f"{where}.value_type",
            )
            continue
        if vflags != 0:  # R16
            checker.fail(
                "R16",
                f"value_flags is {vflags}, must be 0",
                offset=fixed_pos + 4,
                field=f"{where}.value_flags",
            )
        if not _check_blob(
            checker, "R17", offset, nbytes, off_data, size, f"{where}.value_offset", fixed_pos + 16
        ):  # R17
            continue
        blobs.append((offset, nbytes, f"{where} value"))
        vtype = DType(vtype_code)
        value = decode_metadata(buf, offset, nbytes, vtype, checker, f"{where}.value")  # R18-R21
        if value is None:
            continue
        model.metadata_info[key] = MetadataInfo(key, vtype, offset, nbytes)
        model.metadata.set(key, value)
    _check_table_tail(buf, checker, cur.pos, end, "metadata", "header.offset_tensors")


# Over 80 lines on purpose: one tensor entry is read field by field in file order, each check
# next to the field it guards and citing its rule (docs/oinf.md); split into helpers, every
# field would need the cursor, version, entry index and blob list passed back and forth.
def _parse_tensors(
    buf: memoryview,
    checker: Checker,
    model: ParsedModel,
    count: int,
    start: int,
    end: int,
    size: int,
    blobs: list[tuple[int, int, str]],
) -> None:
    version = model.version
    _check_count(
        checker, count, spec.MIN_ENTRY_SIZE[("tensors", version)], start, end, "tensors", 21
    )
    allowed_flags = spec.TENSOR_FLAGS_BY_VERSION[version]
    tail = _TENSOR_TAIL[version]
    cur = Cursor(buf, start, end, checker, "R14")
    off_data = end  # the tensor table ends where the data section begins
    for i in range(count):
        entry_pos = cur.pos
        name = cur.string(f"tensor[{i}].name", name=True)
        where = f"tensor[{i}] {name!r}"
        head_pos = cur.pos
        code, ndim, flags = cur.unpack(_TENSOR_HEAD, where)
        if ndim > spec.MAX_NDIM:  # R23 (dims are still read through the bounded cursor)
            checker.fail(
                "R23",
                f"ndim {ndim} exceeds {spec.MAX_NDIM}",
                offset=head_pos + 4,
                field=f"{where}.ndim",
            )
        dims = cur.u64s(ndim, f"{where}.dims")
        tail_pos = cur.pos
        fields = cur.unpack(tail, where)
        data_nbytes, data_offset = fields[0], fields[1]
        quant_nbytes, quant_offset = (fields[2], fields[3]) if version >= 2 else (0, 0)
        if name in model.tensors:  # R12
            checker.fail(
                "R12", f"tensor {name!r} appears twice", offset=entry_pos, field=f"tensor[{i}].name"
            )
            continue
        ok = ndim <= spec.MAX_NDIM
        if code not in _CODES or not DType(code).is_tensor_type:  # R22
            hint = " (bitset is metadata-only)" if code == DType.BITSET.code else ""
            checker.fail(
                "R22",
                f"dtype code {code} is not a tensor dtype{hint}",
                offset=head_pos,
                field=f"{where}.dtype",
            )
            continue
        dtype = DType(code)
        if flags & ~allowed_flags:  # R24
            checker.fail(
                "R24",
                f"flags {flags:#x} sets bits other than {allowed_flags:#x} (version {version})",
                offset=head_pos + 8,
                field=f"{where}.flags",
            )
            ok = False
        has_data = bool(flags & spec.FLAG_HAS_DATA)
        has_quant = bool(flags & spec.FLAG_HAS_QUANT) and version >= 2
        for bit_set, nb, off, label, pos in (
            (has_data, data_nbytes, data_offset, "data", tail_pos),
            (has_quant, quant_nbytes, quant_offset, "quant", tail_pos + 16),
        ):
            if not bit_set and (nb or off):  # R25
                checker.fail(
                    "R25",
                    f"{label} flag is clear but {label}_nbytes={nb}, {label}_offset={off}",
                    offset=pos,
                    field=f"{where}.{label}_nbytes",
                )
                ok = False
        numel = 1
        for d in dims:
            numel *= d
        expected = dtype.nbytes(numel)
        if expected > spec.U64_MAX:  # R26: the GGUF shape-product overflow attack
            checker.fail(
                "R26",
                f"shape {list(dims)} holds {expected} bytes of {dtype.short}, beyond u64; a wrapped product must not pass",
                offset=head_pos + 12,
                field=f"{where}.dims",
            )
            continue
        if has_data:
            if data_nbytes != expected:  # R27
                checker.fail(
                    "R27",
                    f"data_nbytes is {data_nbytes}, shape {list(dims)} of {dtype.short} needs {expected}",
                    offset=tail_pos,
                    field=f"{where}.data_nbytes",
                )
                ok = False
            elif _check_blob(
                checker,
                "R28",
                data_offset,
                data_nbytes,
                off_data,
                size,
                f"{where}.data_offset",
                tail_pos + 8,
            ):  # R28
                blobs.append((data_offset, data_nbytes, f"{where} data"))
            else:
                ok = False
        quant = None
        if has_quant and _check_blob(
            checker,
            "R29",
            quant_offset,
            quant_nbytes,
            off_data,
            size,
            f"{where}.quant_offset",
            tail_pos + 24,
        ):  # R29
            blobs.append((quant_offset, quant_nbytes, f"{where} quant"))
            quant = decode_quant(
                buf, quant_offset, quant_nbytes, dims, checker, where, dtype, has_data
            )  # R29-R31, per-block payloads R33-R36
            ok = ok and quant is not None
        elif has_quant:
            ok = False
        if ok:
            model.tensors[name] = TensorInfo(
                name,
                dtype,
                tuple(dims),
                has_data,
                quant,
                data_offset if has_data else 0,
                data_nbytes if has_data else 0,
            )
    _check_table_tail(buf, checker, cur.pos, end, "tensors", "header.offset_data")


def _check_overlaps(checker: Checker, blobs: list[tuple[int, int, str]]) -> bool:
    # R32: sort the non-empty intervals once; each must start at or after the previous end.
    spans = sorted((off, off + nb, label) for off, nb, label in blobs if nb)
    ok = True
    for (_, prev_end, prev_label), (start, _, label) in itertools.pairwise(spans):
        if start < prev_end:
            ok = False
            checker.fail(
                "R32",
                f"{label} starts at {start}, inside {prev_label} (which ends at {prev_end})",
                offset=start,
                field=label,
            )
    return ok
