"""Read safetensors checkpoints (single file or sharded with an index) lazily.

The header is parsed here rather than through `safetensors.safe_open`, because its NumPy
backend cannot return bf16 and because every rule of the format can then be checked with
a message naming the file and the byte offset. Layout (safetensors' own format doc):
``u64 header_size | header JSON | data``; each tensor entry holds ``dtype``, ``shape`` and
``data_offsets = [begin, end)`` relative to the start of the data, and ``__metadata__``
holds string pairs. Tensor bytes are read one tensor at a time when the writer asks.
"""

from __future__ import annotations

import itertools
import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np

from openinfer_jax.converters.checkpoint import Checkpoint, SourceTensor
from openinfer_jax.converters.hf_config import attach_hf_files
from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import ConversionError

__all__ = ["SAFETENSORS_DTYPES", "open_safetensors", "read_header"]

# safetensors dtype string -> .oinf DType (types without an .oinf equivalent are refused).
SAFETENSORS_DTYPES: dict[str, DType] = {
    "F64": DType.F64, "F32": DType.F32, "F16": DType.F16, "BF16": DType.BF16,
    "F8_E5M2": DType.F8, "I64": DType.I64, "I32": DType.I32, "I16": DType.I16,
    "I8": DType.I8, "U64": DType.U64, "U32": DType.U32, "U16": DType.U16, "U8": DType.U8,
    "BOOL": DType.BOOL,
}  # fmt: skip

# A header larger than this is certainly corrupt (safetensors itself caps it at 100 MB).
_MAX_HEADER = 100 * 1024 * 1024
INDEX_NAME = "model.safetensors.index.json"


def read_header(path: Path) -> tuple[int, dict[str, dict[str, Any]], dict[str, str]]:
    """Parse and check one safetensors file's header.

    Returns ``(data_start, entries, file_metadata)`` where entries maps a tensor name to
    ``{"dtype": DType, "shape": tuple, "begin": int, "end": int}`` with absolute offsets.

    Raises:
        ConversionError: for a truncated or corrupt header, an unknown dtype, a byte size
            that does not match the shape, or data past the end of the file.
    """
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise ConversionError(
                    f"{path}: truncated safetensors file ({size} bytes, no header size)"
                )
            (header_size,) = struct.unpack("<Q", head)
            if header_size > _MAX_HEADER or 8 + header_size > size:
                raise ConversionError(
                    f"{path}: header size field at offset 0 says {header_size} bytes but the file "
                    f"has {size} bytes; the file is truncated or not a safetensors file"
                )
            raw = f.read(header_size)
    except OSError as err:
        raise ConversionError(f"{path}: cannot read: {err}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        # ValueError: bad JSON, or an integer of more than 4300 digits; RecursionError:
        # arrays nested thousands deep
        why = "nested too deeply" if isinstance(err, RecursionError) else str(err)
        raise ConversionError(f"{path}: header JSON at offset 8 is corrupt: {why}") from None
    if not isinstance(header, dict):
        raise ConversionError(f"{path}: header at offset 8 must be a JSON object")
    data_start = 8 + header_size
    file_metadata = header.pop("__metadata__", None) or {}
    if not isinstance(file_metadata, dict):
        raise ConversionError(
            f"{path}: header __metadata__ must be a JSON object of strings, got "
            f"{type(file_metadata).__name__}"
        )
    entries: dict[str, dict[str, Any]] = {}
    for name, entry in header.items():
        entries[name] = _check_entry(path, name, entry, data_start, size)
    _check_no_overlap(path, entries)
    return data_start, entries, {str(k): str(v) for k, v in file_metadata.items()}


def _check_no_overlap(path: Path, entries: dict[str, dict[str, Any]]) -> None:
    """Two tensors' data must not share bytes (the format indexes each byte once)."""
    spans = sorted(
        (e["begin"], e["end"], name) for name, e in entries.items() if e["end"] > e["begin"]
    )
    for (_, prev_end, prev), (begin, _, name) in itertools.pairwise(spans):
        if begin < prev_end:
            raise ConversionError(
                f"{path}: tensor {name!r} data starts at byte {begin}, inside tensor {prev!r} "
                f"(which ends at {prev_end}); overlapping data is corrupt"
            )


def _check_entry(path: Path, name: str, entry: Any, data_start: int, size: int) -> dict[str, Any]:
    where = f"{path}: tensor {name!r}"
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= entry.keys():
        raise ConversionError(f"{where}: header entry needs dtype, shape and data_offsets")
    dtype = SAFETENSORS_DTYPES.get(entry["dtype"])
    if dtype is None:
        known = ", ".join(SAFETENSORS_DTYPES)
        raise ConversionError(
            f"{where}: dtype {entry['dtype']!r} has no .oinf equivalent (known: {known})"
        )
    shape = entry["shape"]
    offsets = entry["data_offsets"]
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise ConversionError(f"{where}: shape {shape!r} must be a list of non-negative integers")
    if not (
        isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
    ):
        raise ConversionError(f"{where}: data_offsets {offsets!r} must be two integers")
    begin, end = data_start + offsets[0], data_start + offsets[1]
    need = math.prod(shape) * dtype.itemsize  # exact: np.prod would wrap at 2**63
    if offsets[0] < 0 or end - begin != need:
        raise ConversionError(
            f"{where}: data_offsets {offsets} span {end - begin} bytes but {entry['dtype']}{shape} needs {need}"
        )
    if end > size:
        raise ConversionError(
            f"{where}: data ends at byte {end} but the file has only {size} bytes; the file is truncated"
        )
    return {"dtype": dtype, "shape": tuple(shape), "begin": begin, "end": end}


def _reader(path: Path, dtype: DType, shape: tuple[int, ...], begin: int, end: int) -> Any:
    """A loader that maps one tensor's bytes (only when called); the writer copies them out."""

    def load() -> np.ndarray:
        if end > path.stat().st_size:
            raise ConversionError(f"{path}: file shrank: tensor data at offset {begin} is gone")
        if end == begin:
            return np.zeros(shape, dtype=dtype.numpy)
        # A read-only mapping: no copy in Python; the page cache feeds the writer directly.
        return np.memmap(path, dtype=dtype.numpy, mode="r", offset=begin, shape=shape)

    return load


def _resolve(src: Path) -> list[Path]:
    """The shard files of a safetensors checkpoint given a file, an index or a directory."""
    if src.is_dir():
        if (src / INDEX_NAME).is_file():
            return _shards_from_index(src / INDEX_NAME)
        single = sorted(src.glob("*.safetensors"))
        if len(single) == 1:
            return single
        raise ConversionError(
            f"{src}: expected {INDEX_NAME} or exactly one .safetensors file, found {len(single)}"
        )
    if src.name.endswith(".json"):
        return _shards_from_index(src)
    return [src]


def _shards_from_index(index: Path) -> list[Path]:
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
        weight_map = data["weight_map"]
        files = sorted(set(weight_map.values()))
    except (
        OSError,
        UnicodeDecodeError,
        ValueError,  # bad JSON, or an int over 4300 digits
        RecursionError,  # nesting thousands deep
        KeyError,
        TypeError,
        AttributeError,
    ) as err:
        raise ConversionError(
            f"{index}: not a safetensors index (needs a weight_map object): {err}"
        ) from None
    shards = [index.parent / name for name in files]
    for shard in shards:
        if not shard.is_file():
            raise ConversionError(
                f"{index}: shard {shard.name} listed in weight_map does not exist"
            )
    return shards


def open_safetensors(src: str | Path) -> Checkpoint:
    """Open a safetensors checkpoint: a file, a sharded index json, or a directory.

    ``config.json`` next to the weights fills sizevars and metadata and is checked against
    the tensor shapes. Tensors keep the order of their data in each shard.

    Raises:
        ConversionError: for any broken rule (see `read_header`), a tensor present in two
            shards, or an index that names a tensor its shard does not hold.
    """
    src = Path(src)
    if not src.exists():
        raise ConversionError(f"{src}: no such file or directory")
    shards = _resolve(src)
    tensors: list[SourceTensor] = []
    seen: dict[str, Path] = {}
    file_meta: dict[str, str] = {}
    for shard in shards:
        _, entries, meta = read_header(shard)
        file_meta.update(meta)
        for name, e in sorted(entries.items(), key=lambda kv: kv[1]["begin"]):
            if name in seen:
                raise ConversionError(
                    f"tensor {name!r} is in both {seen[name].name} and {shard.name}"
                )
            seen[name] = shard
            tensors.append(
                SourceTensor(
                    name=name, dtype=e["dtype"], shape=e["shape"],
                    load=_reader(shard, e["dtype"], e["shape"], e["begin"], e["end"]),
                    origin=shard.name, stored_as=e["dtype"].short, stored_nbytes=e["end"] - e["begin"],
                )
            )  # fmt: skip
    if src.name.endswith(".json") or (src.is_dir() and (src / INDEX_NAME).is_file()):
        index = src if src.is_file() else src / INDEX_NAME
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        for name, file in weight_map.items():
            if seen.get(name, Path()).name != file:
                raise ConversionError(
                    f"{index}: weight_map puts {name!r} in {file} but that shard lacks it"
                )
    checkpoint = Checkpoint(format="safetensors", path=src, tensors=tensors)
    for key, value in file_meta.items():
        checkpoint.metadata[f"safetensors.{key}"] = value
    attach_hf_files(checkpoint, src if src.is_dir() else src.parent)
    return checkpoint
