"""An independent, deliberately naive `.oinf` encoder written from the reference spec alone.

It uses only `struct` (none of openinfer_jax), so comparing its bytes with `OinfWriter`
proves layout compatibility with the original format, and its override knobs let the
bad-file corpus lie about any single field. Layout as the original encoder: header
(69 bytes + 3 zero bytes), sizevars, metadata table, tensor table (each section
8-aligned), then metadata payloads, tensor data and quant payloads, each 8-aligned.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

HEADER_FMT = "<5sIIIIIIQQQQQ"


def align8(n: int) -> int:
    """Round up to a multiple of 8."""
    return (n + 7) // 8 * 8


def enc_string(raw: bytes, length: int | None = None) -> bytes:
    """u32 length + bytes + zero padding so 4+len is a multiple of 8 (length may lie)."""
    body = struct.pack("<I", len(raw) if length is None else length) + raw
    return body + b"\x00" * (align8(4 + len(raw)) - 4 - len(raw))


@dataclass
class Meta:
    """A metadata entry; `over` replaces any of value_type, value_flags, value_nbytes, value_offset."""

    key: bytes
    vtype: int
    payload: bytes
    over: dict[str, int] = field(default_factory=dict)
    key_length: int | None = None


@dataclass
class Tensor:
    """A tensor entry; `over` replaces dtype, ndim, flags, data_nbytes, data_offset, quant_nbytes, quant_offset."""

    name: bytes
    dtype: int
    dims: list[int]
    data: bytes | None
    quant: bytes | None = None
    over: dict[str, int] = field(default_factory=dict)
    name_length: int | None = None


def quant_payload(
    scheme: int,
    scale_mode: int,
    zp_mode: int,
    scale_axis: int,
    scales: list[float],
    zp_axis: int,
    zps: list[int],
    reserved: int = 0,
) -> bytes:
    """The v2 quant payload, padded to 8."""
    body = struct.pack(
        "<IIIIQQQQ",
        scheme,
        scale_mode,
        zp_mode,
        reserved,
        scale_axis,
        len(scales),
        zp_axis,
        len(zps),
    )
    body += struct.pack(f"<{len(scales)}f", *scales) + struct.pack(f"<{len(zps)}i", *zps)
    return body + b"\x00" * (align8(len(body)) - len(body))


def block_payload(
    scheme: int,
    block_size: int,
    scales: list[float],
    offsets: list[float] | None = None,
    scale_axis: int = 1,
    value_type: int = 9,
    counts: tuple[int, int] | None = None,
) -> bytes:
    """A per-block quant payload (scale_mode 3, docs/oinf.md §5.1), padded to 8.

    `value_type` 9 stores f16 scales/offsets, 10 f32; `counts` may lie about (scale_count, zp_count).
    """
    offsets = offsets or []
    scale_count, zp_count = counts if counts is not None else (len(scales), len(offsets))
    body = struct.pack(
        "<IIIIQQQQII",
        scheme,
        3,
        3 if offsets else 0,
        0,
        scale_axis,
        scale_count,
        scale_axis if offsets else 0,
        zp_count,
        block_size,
        value_type,
    )
    fmt = "e" if value_type == 9 else "f"
    body += struct.pack(f"<{len(scales) + len(offsets)}{fmt}", *scales, *offsets)
    return body + b"\x00" * (align8(len(body)) - len(body))


def build(
    version: int = 2,
    sizevars: list[tuple[bytes, int]] | None = None,
    metadata: list[Meta] | None = None,
    tensors: list[Tensor] | None = None,
    header: dict[str, Any] | None = None,
) -> bytes:
    """Encode a file; entries are written in the order given (the original sorts by name)."""
    sizevars = sizevars or []
    metadata = metadata or []
    tensors = tensors or []
    sv_table = b"".join(enc_string(n) + struct.pack("<Q", v) for n, v in sizevars)
    md_size = sum(len(enc_string(m.key)) + 24 for m in metadata)
    tail = 32 if version == 2 else 16
    t_size = sum(len(enc_string(t.name)) + 12 + 8 * len(t.dims) + tail for t in tensors)
    off_sv = 72
    off_md = align8(off_sv + len(sv_table))
    off_t = align8(off_md + md_size)
    off_d = align8(off_t + t_size)
    cursor = off_d
    md_offsets, data_offsets, quant_offsets = [], [], []
    for m in metadata:
        md_offsets.append(cursor)
        cursor += align8(len(m.payload))
    for t in tensors:
        data_offsets.append(cursor if t.data is not None else 0)
        if t.data is not None:
            cursor += align8(len(t.data))
    for t in tensors:
        quant_offsets.append(cursor if t.quant is not None else 0)
        if t.quant is not None:
            cursor += align8(len(t.quant))
    file_size = cursor
    md_table = b""
    for m, off in zip(metadata, md_offsets):
        f = {
            "value_type": m.vtype,
            "value_flags": 0,
            "value_nbytes": len(m.payload),
            "value_offset": off,
            **m.over,
        }
        md_table += enc_string(m.key, m.key_length) + struct.pack(
            "<IIQQ", f["value_type"], f["value_flags"], f["value_nbytes"], f["value_offset"]
        )
    t_table = b""
    for t, d_off, q_off in zip(tensors, data_offsets, quant_offsets):
        f = {
            "dtype": t.dtype,
            "ndim": len(t.dims),
            "flags": (1 if t.data is not None else 0) | (2 if t.quant is not None else 0),
            "data_nbytes": len(t.data) if t.data is not None else 0,
            "data_offset": d_off,
            "quant_nbytes": len(t.quant) if t.quant is not None else 0,
            "quant_offset": q_off,
            **t.over,
        }
        t_table += enc_string(t.name, t.name_length) + struct.pack(
            "<III", f["dtype"], f["ndim"], f["flags"]
        )
        t_table += struct.pack(f"<{len(t.dims)}Q", *t.dims) + struct.pack(
            "<QQ", f["data_nbytes"], f["data_offset"]
        )
        if version == 2:
            t_table += struct.pack("<QQ", f["quant_nbytes"], f["quant_offset"])
    h = {
        "magic": b"OINF\x00",
        "version": version,
        "flags": 0,
        "n_sizevars": len(sizevars),
        "n_metadata": len(metadata),
        "n_tensors": len(tensors),
        "reserved": 0,
        "offset_sizevars": off_sv,
        "offset_metadata": off_md,
        "offset_tensors": off_t,
        "offset_data": off_d,
        "file_size": file_size,
        **(header or {}),
    }
    out = bytearray(struct.pack(HEADER_FMT, *h.values()) + b"\x00\x00\x00")
    out += sv_table
    out += b"\x00" * (off_md - len(out))
    out += md_table
    out += b"\x00" * (off_t - len(out))
    out += t_table
    out += b"\x00" * (off_d - len(out))
    for m in metadata:
        out += m.payload + b"\x00" * (align8(len(m.payload)) - len(m.payload))
    for t in tensors:
        if t.data is not None:
            out += t.data + b"\x00" * (align8(len(t.data)) - len(t.data))
    for t in tensors:
        if t.quant is not None:
            out += t.quant
    return bytes(out)


def pack_bits(values: list[int], bits: int) -> bytes:
    """LSB-first packing of two's-complement `bits`-wide values, written with plain loops."""
    out = bytearray((len(values) * bits + 7) // 8)
    mask = (1 << bits) - 1
    for i, v in enumerate(values):
        bit = i * bits
        out[bit // 8] |= (v & mask) << (bit % 8)
    return bytes(out)
