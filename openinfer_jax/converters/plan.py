"""The conversion plan: which source tensor becomes which `.oinf` tensor, in which dtype.

Planning touches no tensor data, so a dry run and every name/dtype/collision check run
before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from openinfer_jax.converters.checkpoint import Checkpoint, SourceTensor
from openinfer_jax.converters.hf_config import check_shapes
from openinfer_jax.converters.naming import (
    NAME_RULE,
    RenameRule,
    check_name,
    rename,
    rules_for,
    selected,
)
from openinfer_jax.converters.quantization import (
    KeepRule,
    QuantError,
    QuantRule,
    choose_quantization,
    measure_error,
    parse_keep,
    parse_quantize,
    quantize_array,
)
from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import ConversionError
from openinfer_jax.oinf.blockquant import BlockLayout
from openinfer_jax.oinf.quantized import QuantizedTensor

__all__ = ["OUTPUT_DTYPES", "ConversionPlan", "PlannedTensor", "build_plan", "parse_sizevar"]

# --dtype choices: floating tensors are cast to these; integer and bool tensors keep theirs.
OUTPUT_DTYPES: dict[str, DType] = {"f32": DType.F32, "f16": DType.F16, "bf16": DType.BF16}


@dataclass(frozen=True)
class PlannedTensor:
    """One output tensor: its source, destination name, output dtype/shape and layout change.

    A block-quantized output has a `layout` (and `dtype` is its codes' dtype); `from_floats`
    says whether the conversion quantizes the float values (measuring the error) or copies a
    source that is already packed in that layout.
    """

    source: SourceTensor
    name: str
    dtype: DType
    shape: tuple[int, ...]
    transpose: bool
    layout: BlockLayout | None = None
    from_floats: bool = False

    @property
    def kind(self) -> str:
        """What is stored: a dtype (``f32``) or a block scheme (``q4_1``)."""
        return str(self.layout.scheme) if self.layout is not None else self.dtype.short

    @property
    def nbytes(self) -> int:
        """Bytes this tensor occupies in the `.oinf` file (codes and scales when quantized)."""
        data = self.dtype.nbytes(int(np.prod(self.shape, dtype=np.int64)))
        return data + (self.layout.payload_nbytes(self.shape) if self.layout is not None else 0)

    def load_quantized(self) -> tuple[QuantizedTensor, QuantError | None]:
        """The block-quantized tensor, and its error against the floats when quantized here.

        Raises:
            ConversionError: as `load`, or values that cannot be quantized.
        """
        assert self.layout is not None
        if not self.from_floats and self.source.load_block is not None and not self.transpose:
            try:
                return self.source.load_block(), None
            except ConversionError:
                raise
            except Exception as err:  # I/O and layout errors from the source
                raise ConversionError(
                    f"tensor {self.source.name!r} ({self.source.origin}): cannot read: {type(err).__name__}: {err}"
                ) from None
        values = self.load()
        quantized = quantize_array(values, self.layout, f"tensor {self.source.name!r}")
        return quantized, measure_error(values, quantized)

    def load(self) -> np.ndarray:
        """Load the source array and bring it to this tensor's layout and dtype.

        Raises:
            ConversionError: if the source produces an array of another shape than it declared,
                or the source read fails (naming the tensor and its file).
        """
        try:
            array = self.source.load()
        except ConversionError:
            raise
        except Exception as err:  # I/O, mmap and dequantization errors from the source
            raise ConversionError(
                f"tensor {self.source.name!r} ({self.source.origin}): cannot read: {type(err).__name__}: {err}"
            ) from None
        if tuple(array.shape) != self.source.shape:
            raise ConversionError(
                f"tensor {self.source.name!r} ({self.source.origin}): source declared shape "
                f"{self.source.shape} but produced {tuple(array.shape)}"
            )
        if self.transpose:
            array = array.T
        target = DType.F32 if self.layout is not None else self.dtype
        if array.dtype != target.numpy:
            array = array.astype(target.numpy)
        # Not np.ascontiguousarray: it turns a 0-d array into shape (1,).
        return array if array.flags.c_contiguous else array.copy(order="C")


@dataclass
class ConversionPlan:
    """Everything the writer needs: tensors in order, sizevars, metadata, and notes."""

    checkpoint: Checkpoint
    tensors: list[PlannedTensor]
    sizevars: dict[str, int]
    metadata: dict[str, Any]
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        """Total tensor bytes of the output."""
        return sum(t.nbytes for t in self.tensors)


def build_plan(
    checkpoint: Checkpoint,
    *,
    dtype: str | DType | None = None,
    rename_rules: Sequence[str | RenameRule] = (),
    pattern: str | None = None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    sizevars: Mapping[str, int] | None = None,
    quantize: Sequence[str | QuantRule] | str | None = None,
    block_size: int = 32,
    keep: Sequence[str | KeepRule] = (),
) -> ConversionPlan:
    """Plan a conversion: select, rename, choose dtypes and check names.

    `dtype` (``"f32"``, ``"f16"``, ``"bf16"``) casts floating tensors (and dequantizes GGUF
    Q8_0/Q4_0/Q4_1 tensors, which are otherwise kept packed); None keeps each source dtype.
    `quantize` (``"q4_1"``, ``"q8_0:tok_emb.*"``, or a list of these) block-quantizes
    floating tensors with `block_size` elements per block; `keep` (``"f32:NAME_GLOB"``) keeps
    matching tensors unquantized (see `openinfer_jax.converters.quantization`).
    Include/exclude globs match source names. `sizevars` adds sizevars (a batch size ``B``)
    or replaces the checkpoint's; replaced sizes are checked against the tensors again.

    Raises:
        ConversionError: for an unknown dtype or scheme, a bad rule or preset, a name
            breaking the `.oinf` name rule, two sources renamed to one name, a transpose of a
            non-2-D tensor, a block size that does not divide a quantized tensor's last axis,
            or a --quantize/--keep glob naming an integer tensor.
    """
    target = _target_dtype(dtype)
    rules = [
        parse_quantize(r) for r in ([quantize] if isinstance(quantize, str) else quantize or ())
    ]
    keeps = [parse_keep(k) for k in keep]
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
        raise ConversionError(
            f"--block {block_size!r}: a block size is a positive integer (32 by default)"
        )
    name_rules = rules_for(rename_rules, pattern)
    planned: list[PlannedTensor] = []
    skipped: list[str] = []
    owners: dict[str, str] = {}
    for tensor in checkpoint.tensors:
        if not selected(tensor.name, include, exclude):
            skipped.append(tensor.name)
            continue
        name, transpose = rename(tensor.name, name_rules)
        check_name(name, tensor.name)
        if name in owners:
            raise ConversionError(
                f"name collision: {owners[name]!r} and {tensor.name!r} would both be named {name!r}; "
                "change the --rename rules or --exclude one of them"
            )
        owners[name] = tensor.name
        shape = tensor.shape
        if transpose:
            if len(shape) != 2:
                raise ConversionError(
                    f"tensor {tensor.name!r}: cannot transpose shape {shape} (not 2-D)"
                )
            shape = (shape[1], shape[0])
        choice = choose_quantization(tensor, name, target, rules, keeps, block_size)
        planned.append(
            PlannedTensor(
                tensor, name, choice.dtype, shape, transpose, choice.layout, choice.from_floats
            )
        )
    notes_quant = _quantization_notes(planned, bool(rules))
    if not planned:
        raise ConversionError(
            f"{checkpoint.path}: no tensor left to convert after --include/--exclude "
            f"({len(checkpoint.tensors)} in the source)"
        )
    metadata: dict[str, Any] = {}
    notes = list(checkpoint.notes) + notes_quant
    for key, value in checkpoint.metadata.items():
        if not NAME_RULE.fullmatch(key):
            notes.append(f"metadata key {key!r} breaks the .oinf name rule; left out")
        elif isinstance(value, str) and not all(" " <= c <= "~" for c in value):
            # .oinf strings are printable ASCII (rule R10); keep the text exactly as UTF-8 bytes.
            metadata[key] = np.frombuffer(value.encode("utf-8"), dtype=np.uint8).copy()
            notes.append(
                f"metadata {key!r} is not printable ASCII; stored as UTF-8 bytes (u8 ndarray)"
            )
        else:
            metadata[key] = value
    if pattern is None and not rename_rules:
        notes += _preset_hint(metadata)
    all_sizevars = {**checkpoint.sizevars, **_checked_sizevars(sizevars or {})}
    if sizevars:
        check_shapes(all_sizevars, checkpoint.tensors, source="--sizevar")
    for key in all_sizevars:
        check_name(key, f"sizevar {key}")
    return ConversionPlan(checkpoint, planned, all_sizevars, metadata, skipped, notes)


# A source's model type -> the preset whose names openinfer_jax.models reads.
_PRESET_OF_MODEL_TYPE = {"bert": "bert", "llama": "llama", "mistral": "llama"}
_USER_OF_PRESET = {"bert": "embed", "llama": "generate"}


def _preset_hint(metadata: dict[str, Any]) -> list[str]:
    """A note when a checkpoint of a known architecture is converted without its preset."""
    kind = metadata.get("model_type", metadata.get("general.architecture"))
    preset = _PRESET_OF_MODEL_TYPE.get(kind) if isinstance(kind, str) else None
    if preset is None:
        return []
    return [
        f"a {kind} checkpoint converted without --pattern keeps the source's tensor names; "
        f"--arch {preset} and openinfer {_USER_OF_PRESET[preset]} read the names of "
        f"--pattern {preset}"
    ]


def _quantization_notes(planned: Sequence[PlannedTensor], quantizing: bool) -> list[str]:
    packed = [t for t in planned if t.layout is not None and not t.from_floats]
    expanded = [t for t in planned if t.layout is None and t.source.block is not None]
    notes = []
    if packed:
        kinds = sorted({t.kind for t in packed})
        notes.append(
            f"{len(packed)} tensors kept packed as stored ({', '.join(kinds)}), not dequantized"
        )
    if expanded:
        notes.append(
            f"{len(expanded)} block-quantized source tensors dequantized to {expanded[0].dtype}"
        )
    if quantizing:
        unquantized = [t for t in planned if t.layout is None and t.source.dtype.is_float]
        if unquantized:
            notes.append(
                f"{len(unquantized)} floating tensors left unquantized (1-D, or --keep): "
                + ", ".join(t.name for t in unquantized[:6])
                + (" ..." if len(unquantized) > 6 else "")
            )
    return notes


def parse_sizevar(text: str) -> tuple[str, int]:
    """Parse ``NAME=VALUE`` (a `--sizevar` argument) into a name and a non-negative int.

    Raises:
        ConversionError: naming the argument and the expected form.
    """
    name, sep, value = text.partition("=")
    if not sep or not NAME_RULE.fullmatch(name.strip()) or not value.strip().isdigit():
        raise ConversionError(
            f"--sizevar {text!r}: expected NAME=VALUE with NAME of [A-Za-z0-9._-]+ and VALUE a "
            "non-negative integer, e.g. --sizevar B=2"
        )
    return name.strip(), int(value)


def _checked_sizevars(sizevars: Mapping[str, int]) -> dict[str, int]:
    checked: dict[str, int] = {}
    for name, value in sizevars.items():
        if not NAME_RULE.fullmatch(name):
            raise ConversionError(
                f"sizevar name {name!r} breaks the .oinf name rule [A-Za-z0-9._-]+"
            )
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
            raise ConversionError(f"sizevar {name}={value!r}: a sizevar is a non-negative integer")
        checked[name] = value
    return checked


def _target_dtype(dtype: str | DType | None) -> DType | None:
    if dtype is None or isinstance(dtype, DType):
        return dtype
    try:
        return OUTPUT_DTYPES[dtype.lower()]
    except KeyError:
        raise ConversionError(
            f"--dtype {dtype!r}: choose one of {', '.join(OUTPUT_DTYPES)}"
        ) from None
