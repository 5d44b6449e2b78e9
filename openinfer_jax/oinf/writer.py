"""`OinfWriter` and `write_oinf`: build a `.oinf` file atomically and tensor by tensor.

Declarations (`add_sizevar`, `add_metadata`, `add_tensor`) are validated as they come
and only recorded. At `close()` every size is known from the declarations, so the
header and the three tables are laid out first; then each tensor's bytes are produced
one at a time (calling its loader only then), written, and dropped. Peak memory is
therefore about the largest tensor, not the model.

The file appears at its destination only when complete: it is written to a temporary
`.NAME.PID-RANDOM.tmp` in the same directory, fsynced, then renamed over the destination
(`os.replace`). Any exception (a full disk
too: OinfFormatError) removes the temporary and leaves the destination as it was; a
temporary left by a killed writer is removed by the next write of the same destination.

Layout (byte-compatible with the original encoder, docs/oinf.md §Layout): tables sorted
by name; in the data section the metadata values, then the tensor data blobs, then the
quant payloads, in name order. With ``align=8`` and no quantized tensor the output is
byte-identical to the original encoder's; data blobs start on multiples of `align`.
A block-quantized tensor (`QuantizedTensor`, docs/oinf.md §5.1) is written as its codes,
immediately followed by its per-block payload (scales next to the codes they scale, and
a streamed conversion never holds the scales of earlier tensors).
"""

from __future__ import annotations

import glob
import os
import re
import secrets
import stat
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import OinfFormatError, OpenInferError
from openinfer_jax.oinf import spec
from openinfer_jax.oinf.arrays import to_disk, to_storage
from openinfer_jax.oinf.blockquant import BlockLayout, encode_block_header
from openinfer_jax.oinf.metadata import encode_metadata
from openinfer_jax.oinf.quant import QuantParams, encode_quant
from openinfer_jax.oinf.quantized import QuantizedTensor

__all__ = ["OinfWriter", "TensorSpec", "write_oinf"]

_U64 = struct.Struct("<Q")
_META_FIXED = struct.Struct("<IIQQ")
_TENSOR_HEAD = struct.Struct("<III")


@dataclass
class TensorSpec:
    """A tensor for `write_oinf`: `data` (array-like) or a `loader` (called once at write time),
    or neither (declared without data, which needs `dtype` and `shape`)."""

    data: Any = None
    dtype: DType | None = None
    shape: Sequence[int] | None = None
    quant: QuantParams | None = None
    loader: Callable[[], Any] | None = None
    block: BlockLayout | None = None


@dataclass
class _Tensor:
    name: str
    dtype: DType
    shape: tuple[int, ...]
    quant_payload: bytes | None
    source: np.ndarray | QuantizedTensor | Callable[[], Any] | None  # disk form, loader, or None
    nbytes: int
    block: BlockLayout | None = None  # block-quantized: the payload follows the data blob

    @property
    def block_nbytes(self) -> int:
        """Bytes of the per-block payload written right after the data (0 if not blocked)."""
        return self.block.payload_nbytes(self.shape) if self.block is not None else 0


def _check_name(name: Any, table: str, seen: Mapping[str, Any]) -> str:
    if (
        not isinstance(name, str)
        or not spec.is_valid_name(name.encode("ascii", "replace"))
        or not name.isascii()
    ):
        raise OinfFormatError(
            f"{table} name {name!r} must be 1+ characters of [A-Za-z0-9._-] (R10); rename it"
        )
    if name in seen:
        raise OinfFormatError(
            f"{table} {name!r} is declared twice (R12); names must be unique per table"
        )
    return name


def _check_shape(shape: Any, what: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in shape)
        if any(not float(d).is_integer() for d in shape):
            raise ValueError
    except (TypeError, ValueError):
        raise OinfFormatError(f"{what}: shape must be a sequence of ints, got {shape!r}") from None
    if any(d < 0 or d > spec.U64_MAX for d in dims):
        raise OinfFormatError(f"{what}: dims must be in [0, 2^64), got {dims}")
    if len(dims) > spec.MAX_NDIM:
        raise OinfFormatError(f"{what}: ndim {len(dims)} exceeds {spec.MAX_NDIM} (R23)")
    return dims


class OinfWriter:
    """Write a `.oinf` file. Use as a context manager; the file is written at `close()`.

    Args:
        path: destination file.
        version: 2 (default) or 1 (no quant fields, flags bit0 only).
        align: alignment of tensor data blobs, a power of two >= 8 (default 64).
        overwrite: if False, an existing destination is an error.

    Raises:
        OinfFormatError: for a bad version/align, or an existing destination with overwrite=False.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        version: int = 2,
        align: int = 64,
        overwrite: bool = True,
    ) -> None:
        if version not in spec.SUPPORTED_VERSIONS:
            raise OinfFormatError(f"version must be 1 or 2, got {version!r}")
        if not isinstance(align, int) or align < 8 or align & (align - 1):
            raise OinfFormatError(f"align must be a power of two >= 8, got {align!r}")
        self.path = Path(path)
        self.version = version
        self.align = align
        self.overwrite = overwrite
        if not overwrite and self.path.exists():
            raise OinfFormatError(f"{self.path} exists; pass overwrite=True or choose another path")
        self._sizevars: dict[str, int] = {}
        self._metadata: dict[str, tuple[DType, bytes]] = {}
        self._tensors: dict[str, _Tensor] = {}
        self._done = False

    # ---- declarations ------------------------------------------------------------
    def add_sizevar(self, name: str, value: int) -> None:
        """Declare sizevar `name` (a u64).

        Raises:
            OinfFormatError: for a bad or duplicate name, or a value that is not an int in [0, 2^64).
        """
        self._check_open()
        _check_name(name, "sizevar", self._sizevars)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise OinfFormatError(f"sizevar {name!r} must be an int, got {type(value).__name__}")
        if not 0 <= int(value) <= spec.U64_MAX:
            raise OinfFormatError(f"sizevar {name!r} = {value} is outside the u64 range")
        self._sizevars[name] = int(value)

    def add_metadata(self, key: str, value: Any) -> None:
        """Add a metadata value: int, float, bool, str, Bitset, np.ndarray, a NumPy scalar,
        or ``(value, DType.X)`` to force the type (docs/oinf.md §Metadata).

        Raises:
            OinfFormatError: for a bad or duplicate key or an unsupported/out-of-range value.
        """
        self._check_open()
        _check_name(key, "metadata", self._metadata)
        self._metadata[key] = encode_metadata(value, f"metadata {key!r}")

    def add_tensor(
        self,
        name: str,
        data: Any = None,
        *,
        dtype: DType | None = None,
        shape: Sequence[int] | None = None,
        quant: QuantParams | None = None,
        loader: Callable[[], Any] | None = None,
        block: BlockLayout | None = None,
    ) -> None:
        """Declare a tensor with `data`, with a `loader` called once at write time, or without data.

        `dtype` defaults to the data's NumPy type; with an explicit dtype the data is converted
        (floats round to nearest even, integers must fit, packed types are range-checked).
        A loader or a data-less tensor needs `dtype` and `shape`; a loader must return that shape.
        An array already in its target dtype is referenced, not copied, until `close()`: do
        not modify it in between.

        Block-quantized tensors: pass a `QuantizedTensor` as `data`, or `block=` (the layout),
        `shape=` and a loader that returns a `QuantizedTensor` of that layout and shape.

        Raises:
            OinfFormatError: for a bad/duplicate name, a bitset/string dtype, values out of
                range, a shape mismatch, or quant params that break R31/R34 (or any quant in v1).
        """
        self._check_open()
        _check_name(name, "tensor", self._tensors)
        what = f"tensor {name!r}"
        if data is not None and loader is not None:
            raise OinfFormatError(f"{what}: give data or loader, not both")
        if isinstance(data, QuantizedTensor) or block is not None:
            self._add_blocked(name, what, data, shape, block, loader, dtype, quant)
            return
        source: np.ndarray | Callable[[], Any] | None
        if data is not None:
            arr, dtype = to_storage(data, dtype, what)
            if shape is not None and _check_shape(shape, what) != arr.shape:
                raise OinfFormatError(
                    f"{what}: shape {tuple(shape)} does not match the data's shape {arr.shape}"
                )
            dims = tuple(int(d) for d in arr.shape)
            source = to_disk(arr, dtype)
        else:
            if dtype is None or shape is None:
                kind = "with a loader" if loader is not None else "without data"
                raise OinfFormatError(f"{what}: a tensor {kind} needs dtype= and shape=")
            if not isinstance(dtype, DType) or not dtype.is_tensor_type:
                raise OinfFormatError(
                    f"{what}: {dtype} cannot be a tensor dtype (bitset/string/ndarray are metadata-only)"
                )
            dims = _check_shape(shape, what)
            source = loader
        numel = 1
        for d in dims:
            numel *= d
        nbytes = dtype.nbytes(numel)
        if nbytes > spec.U64_MAX:
            raise OinfFormatError(
                f"{what}: shape {dims} of {dtype.short} is larger than 2^64 bytes (R26)"
            )
        quant_payload = None
        if quant is not None:
            if self.version < 2:
                raise OinfFormatError(
                    f"{what}: quantization needs format version 2; this writer writes version 1"
                )
            if not isinstance(quant, QuantParams):
                raise OinfFormatError(
                    f"{what}: quant must be a QuantParams, got {type(quant).__name__}"
                )
            problems = quant.problems(dims)
            if problems:
                raise OinfFormatError(f"{what}: quant params break R31: " + "; ".join(problems))
            quant_payload = encode_quant(quant)
        self._tensors[name] = _Tensor(name, dtype, dims, quant_payload, source, nbytes)

    def _add_blocked(
        self,
        name: str,
        what: str,
        data: Any,
        shape: Sequence[int] | None,
        block: BlockLayout | None,
        loader: Callable[[], Any] | None,
        dtype: DType | None,
        quant: QuantParams | None,
    ) -> None:
        if self.version < 2:
            raise OinfFormatError(
                f"{what}: block quantization needs format version 2; this writer writes version 1"
            )
        if quant is not None:
            raise OinfFormatError(f"{what}: a block-quantized tensor takes no quant= params")
        if isinstance(data, QuantizedTensor):
            if block is not None and block != data.layout:
                raise OinfFormatError(
                    f"{what}: block={block.describe()} differs from the data's {data.layout.describe()}"
                )
            block, dims = data.layout, data.shape
        elif loader is None or shape is None:
            raise OinfFormatError(
                f"{what}: block= needs shape= and a loader returning a QuantizedTensor"
            )
        else:
            dims = _check_shape(shape, what)
        assert block is not None
        if dtype is not None and dtype is not block.data_dtype:
            raise OinfFormatError(
                f"{what}: {block.scheme} codes are {block.data_dtype}, not {dtype}"
            )
        problems = block.problems(dims)
        if problems:
            raise OinfFormatError(f"{what}: {block.describe()} breaks R34: " + "; ".join(problems))
        numel = 1
        for d in dims:
            numel *= d
        nbytes = block.data_dtype.nbytes(numel)
        source = data if isinstance(data, QuantizedTensor) else loader
        self._tensors[name] = _Tensor(name, block.data_dtype, dims, None, source, nbytes, block)

    # ---- output ------------------------------------------------------------------
    def close(self) -> None:
        """Write the file (atomically). Calling it again does nothing.

        Raises:
            OinfFormatError: if a loader fails or returns the wrong dtype/shape, or the file
                cannot be written; the destination is then left untouched.
        """
        if self._done:
            return
        self._done = True
        directory = self.path.parent if str(self.path.parent) else Path(".")
        _remove_stale_temps(directory, self.path.name)
        tmp = _temp_name(directory, self.path.name)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as err:
            raise OinfFormatError(
                f"cannot create a file in {directory}: {err.strerror or err}"
            ) from None
        try:
            with os.fdopen(fd, "wb", closefd=False) as handle:
                self._write(handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.fchmod(fd, stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH)
            self._publish(tmp)
        except OSError as err:  # a full disk, `ulimit -f` (EFBIG), an I/O error
            raise OinfFormatError(
                f"cannot write {self.path}: {err.strerror or err}; nothing was written"
            ) from None
        finally:
            os.close(fd)
            tmp.unlink(missing_ok=True)

    def abort(self) -> None:
        """Discard everything declared; nothing is written."""
        self._done = True
        self._tensors.clear()

    def __enter__(self) -> OinfWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self.abort()
        else:
            self.close()

    # ---- internals ---------------------------------------------------------------
    def _check_open(self) -> None:
        if self._done:
            raise OinfFormatError(f"the writer for {self.path} is already closed")

    def _publish(self, tmp: Path) -> None:
        try:
            if self.overwrite:
                os.replace(tmp, self.path)
            else:
                # link() fails if the destination appeared meanwhile: no silent overwrite.
                os.link(tmp, self.path)
        except FileExistsError:
            raise OinfFormatError(
                f"{self.path} exists; pass overwrite=True or choose another path"
            ) from None
        except OSError as err:
            raise OinfFormatError(f"cannot write {self.path}: {err.strerror or err}") from None
        try:  # make the rename itself durable
            dir_fd = os.open(self.path.parent if str(self.path.parent) else ".", os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError:
            pass  # some filesystems cannot fsync a directory; the data itself is synced

    def _layout(
        self,
    ) -> tuple[
        list[tuple[str, int]],
        list[tuple[str, DType, bytes, int]],
        list[tuple[_Tensor, int, int]],
        tuple[int, ...],
    ]:
        sizevars = sorted(self._sizevars.items())
        metadata_keys = sorted(self._metadata)
        tensors = [self._tensors[n] for n in sorted(self._tensors)]
        tail = 32 if self.version >= 2 else 16
        size_sv = sum(spec.string_size(len(n)) + 8 for n, _ in sizevars)
        size_md = sum(spec.string_size(len(k)) + 24 for k in metadata_keys)
        size_t = sum(spec.string_size(len(t.name)) + 12 + 8 * len(t.shape) + tail for t in tensors)
        off_sv = spec.HEADER_PADDED
        off_md = spec.align_up(off_sv + size_sv)
        off_t = spec.align_up(off_md + size_md)
        off_d = spec.align_up(off_t + size_t)
        cursor = off_d
        metadata = []
        for key in metadata_keys:
            vtype, payload = self._metadata[key]
            metadata.append((key, vtype, payload, cursor))
            cursor = spec.align_up(cursor + len(payload))
        placed: list[tuple[_Tensor, int, int]] = []
        data_offsets = []
        for t in tensors:
            if t.source is None:
                data_offsets.append(0)
                continue
            cursor = spec.align_up(cursor, self.align)
            data_offsets.append(cursor)
            cursor = spec.align_up(cursor + t.nbytes)
            cursor += t.block_nbytes  # a per-block payload directly follows its codes
        # Quant payloads follow all data blobs, and their offsets are assigned in that same
        # order: this is the fix for the original encoder's interleaved-offset bug.
        for t, data_off in zip(tensors, data_offsets):
            quant_off = 0
            if t.block is not None:
                quant_off = spec.align_up(data_off + t.nbytes)
            elif t.quant_payload is not None:
                quant_off = cursor
                cursor += len(t.quant_payload)
            placed.append((t, data_off, quant_off))
        return sizevars, metadata, placed, (off_sv, off_md, off_t, off_d, cursor)

    def _write(self, out: BinaryIO) -> None:
        sizevars, metadata, tensors, (off_sv, off_md, off_t, off_d, file_size) = self._layout()
        header = spec.HEADER.pack(
            spec.MAGIC, self.version, 0, len(sizevars), len(metadata), len(tensors), 0,
            off_sv, off_md, off_t, off_d, file_size,
        )  # fmt: skip
        parts = [header.ljust(spec.HEADER_PADDED, b"\x00")]
        for name, value in sizevars:
            parts.append(spec.encode_string(name) + _U64.pack(value))
        parts.append(b"\x00" * (off_md - sum(map(len, parts))))
        for key, vtype, payload, offset in metadata:
            parts.append(
                spec.encode_string(key) + _META_FIXED.pack(vtype.code, 0, len(payload), offset)
            )
        parts.append(b"\x00" * (off_t - sum(map(len, parts))))
        for t, data_off, quant_off in tensors:
            flags = (spec.FLAG_HAS_DATA if t.source is not None else 0) | (
                spec.FLAG_HAS_QUANT if t.quant_payload or t.block else 0
            )
            entry = spec.encode_string(t.name) + _TENSOR_HEAD.pack(
                t.dtype.code, len(t.shape), flags
            )
            entry += struct.pack(f"<{len(t.shape)}Q", *t.shape)
            data_nbytes = t.nbytes if t.source is not None else 0
            entry += struct.pack("<QQ", data_nbytes, data_off)
            if self.version >= 2:
                entry += struct.pack("<QQ", len(t.quant_payload or b"") + t.block_nbytes, quant_off)
            parts.append(entry)
        parts.append(b"\x00" * (off_d - sum(map(len, parts))))
        out.write(b"".join(parts))
        position = off_d
        for _key, _vtype, payload, offset in metadata:
            position = self._pad_to(out, position, offset)
            out.write(payload)
            position += len(payload)
        for t, data_off, quant_off in tensors:
            if t.source is None:
                continue
            position = self._pad_to(out, position, data_off)
            if t.block is not None:
                position = self._write_blocked(out, t, position, quant_off)
                continue
            blob = self._materialize(t)
            out.write(blob)
            position += t.nbytes
            del blob  # drop each tensor before producing the next one
        for t, _, quant_off in tensors:
            if t.quant_payload is not None:
                position = self._pad_to(out, position, quant_off)
                out.write(t.quant_payload)
                position += len(t.quant_payload)
        position = self._pad_to(out, position, file_size)
        if position != file_size:  # internal consistency; never expected
            raise OpenInferError(f"internal error: wrote {position} bytes, layout says {file_size}")

    def _write_blocked(self, out: BinaryIO, t: _Tensor, position: int, quant_off: int) -> int:
        """Write the codes and the per-block payload of `t`; returns the new position."""
        what = f"tensor {t.name!r}"
        qt = t.source
        if callable(qt):
            try:
                qt = qt()
            except OpenInferError:
                raise
            except Exception as err:
                raise OinfFormatError(
                    f"{what}: its loader raised {type(err).__name__}: {err}"
                ) from err
        if not isinstance(qt, QuantizedTensor) or qt.layout != t.block or qt.shape != t.shape:
            got = repr(qt) if isinstance(qt, QuantizedTensor) else type(qt).__name__
            raise OinfFormatError(
                f"{what}: the loader must return a QuantizedTensor of {t.block.describe() if t.block else '?'} "
                f"and shape {list(t.shape)}, got {got}"
            )
        out.write(np.ascontiguousarray(qt.quants).reshape(-1).data)
        position = self._pad_to(out, position + t.nbytes, quant_off)
        parts = [
            encode_block_header(qt.layout, qt.shape),
            np.ascontiguousarray(qt.scales).tobytes(),
        ]
        if qt.offsets is not None:
            parts.append(np.ascontiguousarray(qt.offsets).tobytes())
        payload = b"".join(parts)
        out.write(payload)
        return position + len(payload)

    @staticmethod
    def _pad_to(out: BinaryIO, position: int, target: int) -> int:
        if target > position:
            out.write(b"\x00" * (target - position))
        return max(position, target)

    def _materialize(self, t: _Tensor) -> memoryview:
        what = f"tensor {t.name!r}"
        if callable(t.source):
            try:
                produced = t.source()
            except OpenInferError:
                raise
            except Exception as err:
                raise OinfFormatError(
                    f"{what}: its loader raised {type(err).__name__}: {err}"
                ) from err
            arr, _ = to_storage(produced, t.dtype, what)
            if tuple(arr.shape) != t.shape:
                raise OinfFormatError(
                    f"{what}: the loader returned shape {arr.shape}, declared {t.shape}"
                )
            disk = to_disk(arr, t.dtype)
        else:
            assert isinstance(t.source, np.ndarray)
            disk = t.source
        raw = np.ascontiguousarray(disk).reshape(-1).view(np.uint8)
        if raw.size != t.nbytes:  # internal consistency; never expected
            raise OpenInferError(
                f"internal error: {what} encodes to {raw.size} bytes, expected {t.nbytes}"
            )
        return raw.data


def write_oinf(
    path: str | os.PathLike[str],
    *,
    sizevars: Mapping[str, int] | None = None,
    metadata: Mapping[str, Any] | None = None,
    tensors: Mapping[str, Any] | None = None,
    version: int = 2,
    align: int = 64,
    overwrite: bool = True,
) -> Path:
    """Write a whole model in one call; `tensors` maps names to arrays or `TensorSpec`s.

    Returns the destination path.

    Raises:
        OinfFormatError: as `OinfWriter` does.
    """
    with OinfWriter(path, version=version, align=align, overwrite=overwrite) as writer:
        for name, value in (sizevars or {}).items():
            writer.add_sizevar(name, value)
        for key, value in (metadata or {}).items():
            writer.add_metadata(key, value)
        for name, value in (tensors or {}).items():
            if isinstance(value, TensorSpec):
                writer.add_tensor(
                    name,
                    value.data,
                    dtype=value.dtype,
                    shape=value.shape,
                    quant=value.quant,
                    loader=value.loader,
                    block=value.block,
                )
            else:
                writer.add_tensor(name, value)
    return Path(path)


# Temporary files are `.NAME.PID-RANDOM.tmp` beside the destination. A `kill -9` can leave
# one (no handler runs); the next write of the same destination removes the temporaries of
# processes that no longer run. (O_TMPFILE would leave nothing, but linking it into place
# through /proc fails on some filesystems, e.g. overlayfs containers.)
_TEMP = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)-[0-9a-z]+\.tmp")


def _temp_name(directory: Path, name: str) -> Path:
    return directory / f".{name}.{os.getpid()}-{secrets.token_hex(4)}.tmp"


def _remove_stale_temps(directory: Path, name: str) -> None:
    """Delete temporaries of `name` left by writers that were killed (their pid is gone)."""
    try:
        candidates = list(directory.glob(f".{glob.escape(name)}.*.tmp"))
    except OSError:
        return
    for path in candidates:
        match = _TEMP.fullmatch(path.name)
        if match is None or match.group("name") != name:
            continue
        try:
            os.kill(int(match.group("pid")), 0)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
        except (OSError, OverflowError, ValueError):
            continue  # alive under another user, or a pid we cannot check: keep it
