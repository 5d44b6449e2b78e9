"""`ModelLoader`: open a `.oinf` file lazily (mmap) and read its sizevars, metadata and tensors.

Opening validates the header and every table (parse.py) but touches no tensor data, so
it costs the same for a 20 MB and a 2 GB file. `tensor(name)` then returns a read-only
NumPy view straight on the mapping (no bytes copied) for byte-sized dtypes, and an
unpacked int8/uint8 copy for packed ones.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from openinfer_jax.core.dims import missing_sizes, resolve_dim
from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import OinfFormatError
from openinfer_jax.oinf.arrays import from_disk
from openinfer_jax.oinf.checks import Checker
from openinfer_jax.oinf.entries import MetadataInfo, TensorInfo
from openinfer_jax.oinf.metadata import MetadataValues
from openinfer_jax.oinf.parse import ParsedModel, parse_buffer
from openinfer_jax.oinf.quantized import QuantizedTensor

__all__ = ["ModelLoader", "UnknownNameError"]


class UnknownNameError(OinfFormatError):
    """A sizevar, metadata key or tensor name that the model does not have."""


class ModelLoader:
    """A validated, memory-mapped `.oinf` model. Use `ModelLoader.open(path)`, ideally in a `with`.

    Attributes:
        path: the file (None for `from_buffer`).
        version: the format version (1 or 2).
        sizevars: name -> value.
        metadata: key -> typed value (int, float, bool, str, Bitset, or a read-only np.ndarray);
            a read-only mapping that decodes BITSET and NDARRAY values on first access.
        metadata_info: key -> `MetadataInfo` (value type, offset, size).
        tensors: name -> `TensorInfo`.
    """

    def __init__(
        self, parsed: ParsedModel, buffer: Any, path: Path | None, mapping: mmap.mmap | None
    ) -> None:
        """Internal; use `open` or `from_buffer`."""
        self.path = path
        self.version = parsed.version
        self.sizevars: dict[str, int] = parsed.sizevars
        self.metadata: MetadataValues = parsed.metadata
        self.metadata_info: dict[str, MetadataInfo] = parsed.metadata_info
        self.tensors: dict[str, TensorInfo] = parsed.tensors
        self._buffer = buffer
        self._mapping = mapping
        self._cache: dict[str, np.ndarray] = {}
        self._closed = False

    # ---- construction ------------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> ModelLoader:
        """Map `path` read-only and validate it (docs/oinf.md, rules R1-R33).

        Raises:
            OinfFormatError: naming the offset, field and rule of the first violation,
                or when the file cannot be opened.
        """
        file_path = Path(path)
        try:
            with open(file_path, "rb") as handle:
                length = os.fstat(handle.fileno()).st_size
                if length == 0:  # mmap refuses empty files; R1 explains better anyway
                    Checker(strict=True).fail(
                        "R1", "the file is empty", offset=0, field="header", fatal=True
                    )
                mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as err:
            raise OinfFormatError(f"cannot open {file_path}: {err.strerror or err}") from None
        try:
            parsed = parse_buffer(memoryview(mapping), Checker(strict=True))
        except BaseException:
            # The traceback may still hold views of the mapping; then it is unmapped when freed.
            with contextlib.suppress(BufferError):
                mapping.close()
            raise
        return cls(parsed, mapping, file_path, mapping)

    @classmethod
    def from_buffer(cls, data: bytes | bytearray | memoryview) -> ModelLoader:
        """Validate an in-memory `.oinf` image (tests, network payloads).

        Raises:
            OinfFormatError: as for `open`.
        """
        view = memoryview(data).cast("B")
        return cls(parse_buffer(view, Checker(strict=True)), view, None, None)

    # ---- sizes -------------------------------------------------------------------
    def size_of(self, name: str) -> int:
        """The value of sizevar `name`.

        Raises:
            UnknownNameError: if the model has no such sizevar (the message lists those it has).
        """
        try:
            return self.sizevars[name]
        except KeyError:
            known = ", ".join(sorted(self.sizevars)) or "none"
            raise UnknownNameError(
                f"unknown sizevar {name!r}; the model defines: {known}", field=f"sizevar {name!r}"
            ) from None

    def resolve_dim(self, dim: int | str) -> int:
        """Resolve a dimension: an int, a sizevar name (``"B"``) or a product (``"3*D"``, ``"B*D"``).

        Raises:
            UnknownNameError: for an unknown sizevar.
            GraphValidationError: for a malformed expression or a negative literal.
        """
        value = resolve_dim(dim, self.sizevars.get)
        if value is None:
            self.size_of(missing_sizes([dim], self.sizevars)[0])  # raises UnknownNameError
        assert value is not None
        return value

    def resolve_shape(self, dims: Sequence[int | str]) -> tuple[int, ...]:
        """Resolve every dimension of `dims` (see `resolve_dim`)."""
        return tuple(self.resolve_dim(d) for d in dims)

    # ---- tensors -----------------------------------------------------------------
    def _info(self, name: str) -> TensorInfo:
        if self._closed:
            raise OinfFormatError(
                f"the model {self.path} is closed; open it again to read {name!r}"
            )
        try:
            return self.tensors[name]
        except KeyError:
            known = ", ".join(sorted(self.tensors)[:20]) or "none"
            raise UnknownNameError(
                f"unknown tensor {name!r}; the model has: {known}", field=f"tensor {name!r}"
            ) from None

    def tensor(self, name: str) -> np.ndarray:
        """The tensor's values: a read-only zero-copy view (byte-sized dtypes) or an unpacked copy (packed).

        A block-quantized tensor gives its dequantized f32 values (a new array, 4 bytes per
        element: use `quantized` to keep it packed).

        Raises:
            UnknownNameError: for an unknown tensor.
            OinfFormatError: if the tensor was declared without data (HAS_DATA=0) or the model is closed.
        """
        cached = self._cache.get(name)
        if cached is not None and not self._closed:
            return cached
        info = self._info(name)
        if not info.has_data:
            raise OinfFormatError(
                f"tensor {name!r} is declared without data (HAS_DATA=0); initialize it from @init or zeros",
                field=f"tensor {name!r}",
            )
        if info.block is not None:
            return self.quantized(name).dequantize()
        array = from_disk(
            self._buffer,
            info.data_offset,
            info.data_nbytes,
            info.dtype,
            info.shape,
            f"tensor {name!r}",
        )
        self._cache[name] = array
        return array

    def quantized(self, name: str) -> QuantizedTensor:
        """A block-quantized tensor as its packed planes: read-only views on the mapping, no copy.

        Raises:
            UnknownNameError: for an unknown tensor.
            OinfFormatError: if the tensor is not block-quantized (the message says what it is).
        """
        info = self._info(name)
        block = info.block
        if block is None:
            raise OinfFormatError(
                f"tensor {name!r} is {info.dtype}{list(info.shape)}, not block-quantized "
                "(q8_0/q4_0/q4_1); read it with tensor()",
                field=f"tensor {name!r}",
            )
        shape = info.shape
        width = info.data_nbytes // max(1, info.numel // shape[-1]) if shape[-1] else 0
        quants = np.frombuffer(self._buffer, np.uint8, info.data_nbytes, info.data_offset)
        scales, offsets = block.arrays(self._buffer, shape)
        return QuantizedTensor(
            block.layout, shape, quants.reshape(*shape[:-1], width), scales, offsets
        )

    def tensor_bytes(self, name: str) -> memoryview:
        """The tensor's raw on-disk bytes (packed types stay packed), without copying.

        Raises:
            UnknownNameError, OinfFormatError: as for `tensor`.
        """
        info = self._info(name)
        if not info.has_data:
            raise OinfFormatError(
                f"tensor {name!r} is declared without data (HAS_DATA=0)", field=f"tensor {name!r}"
            )
        return memoryview(self._buffer)[
            info.data_offset : info.data_offset + info.data_nbytes
        ].toreadonly()

    def metadata_type(self, key: str) -> DType:
        """The value type of metadata `key` (e.g. DType.U8 for a small int).

        Raises:
            UnknownNameError: for an unknown key.
        """
        try:
            return self.metadata_info[key].value_type
        except KeyError:
            raise UnknownNameError(
                f"unknown metadata key {key!r}", field=f"metadata {key!r}"
            ) from None

    # ---- lifetime ----------------------------------------------------------------
    def close(self) -> None:
        """Release the mapping. Arrays already returned stay valid (the mapping lives until they go)."""
        self._closed = True
        self._cache.clear()
        if self._mapping is not None:
            # NumPy views may still point into the mapping; it is then unmapped when the last one is freed.
            with contextlib.suppress(BufferError):
                self._mapping.close()
            self._mapping = None

    def __enter__(self) -> ModelLoader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"ModelLoader({str(self.path)!r}, v{self.version}, {len(self.sizevars)} sizevars, "
            f"{len(self.metadata)} metadata, {len(self.tensors)} tensors)"
        )
