"""Hugging Face `config.json` -> `.oinf` sizevars and typed metadata, and shape checks.

Integer size keys become sizevars under their Hugging Face names (a DSL graph writes
``f32[hidden_size]`` or binds its own short names to them). Every other scalar becomes typed
metadata (floats as f64 so nothing is rounded); lists of numbers become NDARRAY metadata.
The whole file is also kept verbatim as the string metadata ``config.json``, because `.oinf`
has no nested types. `check_shapes` compares the sizes with the tensors (table below) so a
config.json that disagrees with its weights fails before anything is written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from openinfer_jax.converters.checkpoint import Checkpoint, SourceTensor
from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import ConversionError

__all__ = [
    "SIZEVAR_KEYS",
    "ShapeRule",
    "attach_hf_files",
    "check_shapes",
    "config_to_oinf",
    "read_config",
]

# Integer config keys that describe sizes; they become sizevars (u64) with these names.
SIZEVAR_KEYS: tuple[str, ...] = (
    "hidden_size",
    "num_attention_heads",
    "num_hidden_layers",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "num_key_value_heads",
    "head_dim",
    "type_vocab_size",
    "n_embd",
    "n_head",
    "n_layer",
    "n_positions",
    "n_inner",
)

_NAME_OK = re.compile(r"[A-Za-z0-9._-]+")


def read_config(path: Path) -> dict[str, Any]:
    """Read a config.json file into a dict.

    Raises:
        ConversionError: if the file is not valid JSON or not a JSON object.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        # ValueError: bad JSON or an int over 4300 digits; RecursionError: deep nesting
        raise ConversionError(f"{path}: cannot read config.json: {err}") from None
    if not isinstance(data, dict):
        raise ConversionError(
            f"{path}: config.json must hold a JSON object, got {type(data).__name__}"
        )
    return data


def config_to_oinf(
    config: Mapping[str, Any], *, source: str = "config.json"
) -> tuple[dict[str, int], dict[str, Any], list[str]]:
    """Split a config dict into (sizevars, metadata, notes).

    A derived ``head_dim = hidden_size // num_attention_heads`` is added when the config has
    no head_dim, because attention graphs need it. Keys whose names break the `.oinf` name
    rule, nulls and nested objects are left out (they survive inside ``config.json``); each
    one is listed in notes.

    Raises:
        ConversionError: if a size key holds something other than a non-negative integer.
    """
    sizevars: dict[str, int] = {}
    metadata: dict[str, Any] = {}
    notes: list[str] = []
    for key, value in config.items():
        if key in SIZEVAR_KEYS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                if value is None:
                    continue
                raise ConversionError(
                    f"{source}: {key} must be a non-negative integer, got {value!r}; fix {source}"
                )
            sizevars[key] = value
            continue
        if not _NAME_OK.fullmatch(key):
            notes.append(
                f"{source}: key {key!r} is not a valid .oinf name; kept only in config.json"
            )
            continue
        converted = _metadata_value(value)
        if converted is None:
            if value is not None:
                notes.append(f"{source}: {key} ({type(value).__name__}) kept only in config.json")
            continue
        metadata[key] = converted
    if "head_dim" not in sizevars:
        hidden, heads = sizevars.get("hidden_size"), sizevars.get("num_attention_heads")
        if hidden and heads and hidden % heads == 0:
            sizevars["head_dim"] = hidden // heads
            notes.append(
                f"head_dim = hidden_size // num_attention_heads = {hidden // heads} (derived)"
            )
    metadata["config.json"] = json.dumps(dict(config), sort_keys=True)
    return sizevars, metadata, notes


def _metadata_value(value: Any) -> Any:
    """The `.oinf` metadata form of a JSON value, or None when it has none."""
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        # The writer picks the smallest integer type; values past i64/u64 cannot be stored.
        return value if -(2**63) <= value < 2**64 else None
    if isinstance(value, float):
        return (value, DType.F64)
    if (
        isinstance(value, list)
        and value
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in value)
    ):
        floats = any(isinstance(v, float) for v in value)
        return np.asarray(value, dtype=np.float64 if floats else np.int64)
    return None


@dataclass(frozen=True)
class ShapeRule:
    """`config[key]` must equal `shape[axis]` of every tensor whose source name matches."""

    key: str
    name: re.Pattern[str]
    axis: int


def _rules(key: str, axis: int, *patterns: str) -> list[ShapeRule]:
    return [ShapeRule(key, re.compile(p), axis) for p in patterns]


# Where each size shows up in the tensors of the families we know (PyTorch/HF names, flax
# names whose kernels are (in, out), GGUF names already in NumPy order).
SHAPE_RULES: tuple[ShapeRule, ...] = (
    *_rules("hidden_size", 1, r"(.*\.)?word_embeddings\.(weight|embedding)",
            r"(.*\.)?embed_tokens\.weight", r"token_embd\.weight"),
    *_rules("vocab_size", 0, r"(.*\.)?word_embeddings\.(weight|embedding)",
            r"(.*\.)?embed_tokens\.weight", r"token_embd\.weight"),
    *_rules("max_position_embeddings", 0, r"(.*\.)?position_embeddings\.(weight|embedding)"),
    *_rules("type_vocab_size", 0, r"(.*\.)?token_type_embeddings\.(weight|embedding)"),
    *_rules("intermediate_size", 0, r"(.*\.)?intermediate\.dense\.weight",
            r"(.*\.)?mlp\.up_proj\.weight", r"blk\.\d+\.ffn_up\.weight"),
    *_rules("intermediate_size", 1, r"(.*\.)?intermediate\.dense\.kernel"),
)  # fmt: skip

# Per-layer tensor names: the number of distinct layer indices must equal num_hidden_layers.
_LAYER_INDEX = re.compile(r"(?:^|.*\.)(?:layer|layers|h|blk)\.(\d+)\.")


def check_shapes(
    sizevars: Mapping[str, int], tensors: Iterable[SourceTensor], *, source: str
) -> None:
    """Check that config sizes agree with tensor shapes (SHAPE_RULES and the layer count).

    Raises:
        ConversionError: naming the config key, the tensor and both numbers.
    """
    layers: set[int] = set()
    for tensor in tensors:
        match = _LAYER_INDEX.match(tensor.name)
        if match:
            layers.add(int(match.group(1)))
        for rule in SHAPE_RULES:
            if rule.key not in sizevars or not rule.name.fullmatch(tensor.name):
                continue
            if len(tensor.shape) <= rule.axis:
                continue
            if tensor.shape[rule.axis] != sizevars[rule.key]:
                raise ConversionError(
                    f"{source} says {rule.key}={sizevars[rule.key]} but tensor {tensor.name!r} "
                    f"has shape {tensor.shape} (axis {rule.axis} should be {sizevars[rule.key]}); "
                    f"the config does not belong to these weights: fix {source} or the checkpoint"
                )
    expected = sizevars.get("num_hidden_layers")
    if expected is not None and layers and len(layers) != expected:
        raise ConversionError(
            f"{source} says num_hidden_layers={expected} but the tensors hold {len(layers)} "
            f"layers (indices {min(layers)}..{max(layers)}); fix {source} or the checkpoint"
        )


# JSON files of a Hugging Face model directory kept as (compact, ASCII) string metadata, so the
# .oinf alone is enough to tokenize (the key is the file name).
SIDECAR_FILES: tuple[str, ...] = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


def attach_hf_files(checkpoint: Checkpoint, directory: Path) -> None:
    """Fill a checkpoint's sizevars/metadata from config.json and tokenizer files in `directory`.

    Raises:
        ConversionError: for an unreadable config.json or one that disagrees with the tensors.
    """
    config_path = directory / "config.json"
    if config_path.is_file():
        sizevars, metadata, notes = config_to_oinf(
            read_config(config_path), source=str(config_path)
        )
        check_shapes(sizevars, checkpoint.tensors, source=str(config_path))
        checkpoint.sizevars.update(sizevars)
        checkpoint.metadata.update(metadata)
        checkpoint.notes.extend(notes)
    for name in SIDECAR_FILES:
        path = directory / name
        if path.is_file():
            try:
                # Re-dumped with ASCII escapes: .oinf strings are ASCII; the JSON stays equal.
                content = json.loads(path.read_text(encoding="utf-8"))
                checkpoint.metadata[name] = json.dumps(content, separators=(",", ":"))
            except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
                # ValueError: bad JSON or an int over 4300 digits; RecursionError: deep nesting
                raise ConversionError(f"{path}: cannot read: {err}") from None
