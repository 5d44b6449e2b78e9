"""Read flax checkpoints: msgpack files (`flax.serialization`) and orbax directories.

Both formats restore a nested parameter tree as a whole (their libraries offer no lazy
per-leaf read), so the tree is held in memory while the conversion runs; each leaf is
still cast and written one at a time. Nested keys are joined with dots:
``{"encoder": {"layer": {"0": {"kernel": ...}}}}`` -> ``encoder.layer.0.kernel``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from openinfer_jax.converters.checkpoint import Checkpoint, SourceTensor
from openinfer_jax.converters.extras import import_extra
from openinfer_jax.converters.hf_config import attach_hf_files
from openinfer_jax.core.dtypes import dtype_from_numpy
from openinfer_jax.core.errors import ConversionError

__all__ = ["flatten_tree", "is_orbax_dir", "open_flax_msgpack", "open_orbax"]

# Files orbax writes into a checkpoint directory; any one of them marks the directory as orbax.
ORBAX_MARKERS: tuple[str, ...] = (
    "_CHECKPOINT_METADATA",
    "_METADATA",
    "manifest.ocdbt",
    "checkpoint",
)


def is_orbax_dir(path: Path) -> bool:
    """True if `path` is a directory that looks like an orbax checkpoint."""
    return path.is_dir() and any((path / marker).exists() for marker in ORBAX_MARKERS)


def flatten_tree(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Yield ``(dotted_name, leaf)`` for every leaf of a nested dict/list tree, in key order."""
    if isinstance(tree, Mapping):
        for key, value in tree.items():
            yield from flatten_tree(value, f"{prefix}{key}.")
    elif isinstance(tree, list | tuple):
        for index, value in enumerate(tree):
            yield from flatten_tree(value, f"{prefix}{index}.")
    else:
        yield prefix[:-1], tree


def _tree_to_checkpoint(tree: Any, path: Path, fmt: str) -> Checkpoint:
    if not isinstance(tree, Mapping):
        raise ConversionError(
            f"{path}: expected a parameter tree (a mapping), got {type(tree).__name__}"
        )
    checkpoint = Checkpoint(format=fmt, path=path, tensors=[])
    for name, leaf in flatten_tree(tree):
        if isinstance(leaf, str | bytes) or leaf is None:
            checkpoint.notes.append(f"{name}: non-array leaf ({type(leaf).__name__}) skipped")
            continue
        array = np.asarray(leaf)
        try:
            dtype = dtype_from_numpy(array.dtype)
        except ValueError as err:
            raise ConversionError(f"{path}: leaf {name!r}: {err}") from None
        checkpoint.tensors.append(
            SourceTensor(
                name=name, dtype=dtype, shape=tuple(array.shape), load=_constant(array),
                origin=path.name, stored_as=dtype.short, stored_nbytes=int(array.nbytes),
            )
        )  # fmt: skip
    if not checkpoint.tensors:
        raise ConversionError(f"{path}: the checkpoint holds no arrays")
    attach_hf_files(checkpoint, path.parent if path.is_file() else path)
    return checkpoint


def _constant(array: np.ndarray) -> Any:
    def load() -> np.ndarray:
        return array

    return load


def open_flax_msgpack(path: str | Path) -> Checkpoint:
    """Open a flax msgpack checkpoint (as written by `flax.serialization.msgpack_serialize`).

    ``config.json`` and tokenizer files next to it are read as for safetensors.

    Raises:
        ConversionError: for a missing, truncated or corrupt file, or a tree without arrays.
    """
    serialization = import_extra("flax.serialization", "flax", "reading a flax msgpack checkpoint")

    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ConversionError(f"{path}: cannot read: {err}") from None
    try:
        tree = serialization.msgpack_restore(data)
    except Exception as err:  # msgpack raises ValueError, ExtraData, FormatError, TypeError...
        raise ConversionError(
            f"{path}: not a valid flax msgpack checkpoint ({type(err).__name__}: {err}); "
            "the file is truncated or corrupt"
        ) from None
    return _tree_to_checkpoint(tree, path, "flax-msgpack")


def open_orbax(path: str | Path) -> Checkpoint:
    """Open an orbax checkpoint directory, restored without a target into NumPy arrays.

    Raises:
        ConversionError: if the directory is not a readable orbax checkpoint.
    """
    ocp = import_extra("orbax.checkpoint", "flax", "reading an orbax checkpoint")

    path = Path(path).absolute()
    if not is_orbax_dir(path):
        raise ConversionError(
            f"{path}: not an orbax checkpoint directory (none of {', '.join(ORBAX_MARKERS)})"
        )
    try:
        tree = ocp.PyTreeCheckpointer().restore(path)
    except Exception as err:  # orbax/tensorstore raise many unrelated types for broken input
        raise ConversionError(
            f"{path}: cannot restore orbax checkpoint ({type(err).__name__}: {err})"
        ) from None
    return _tree_to_checkpoint(tree, path, "orbax")
