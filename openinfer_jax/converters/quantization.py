"""Which tensors a conversion stores block-quantized (q8_0/q4_0/q4_1), and how much that moved them.

``--quantize SCHEME`` quantizes every floating tensor of two or more axes (blocks run along the
last axis; 1-D norms and biases stay as they are, like llama.cpp's); ``--quantize
SCHEME:GLOB`` only the tensors whose source or destination name matches (an integer tensor
matched by name is an error). ``--keep DTYPE:GLOB`` keeps matching tensors unquantized, in
DTYPE (f32, f16 or bf16). Tensors a GGUF file already stores as Q8_0/Q4_0/Q4_1 are kept
packed unless a float ``--dtype`` or a ``--keep`` asks for floats, or a ``--quantize
SCHEME:GLOB`` names them for another scheme.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from openinfer_jax.converters.checkpoint import SourceTensor
from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import ConversionError, OinfFormatError
from openinfer_jax.oinf.blockquant import BlockLayout, BlockScheme
from openinfer_jax.oinf.quantized import QuantizedTensor, quantize

__all__ = [
    "KeepRule",
    "QuantChoice",
    "QuantError",
    "QuantRule",
    "choose_quantization",
    "measure_error",
    "parse_keep",
    "parse_quantize",
    "quantize_array",
]

_KEEP_DTYPES = {"f32": DType.F32, "f16": DType.F16, "bf16": DType.BF16}


@dataclass(frozen=True)
class QuantRule:
    """``--quantize SCHEME[:GLOB]``: quantize matching tensors (all eligible ones without a glob)."""

    scheme: BlockScheme
    glob: str | None = None

    def matches(self, source: str, name: str) -> bool:
        """True if the rule applies to a tensor with this source and destination name."""
        return self.glob is None or _match(self.glob, source, name)


@dataclass(frozen=True)
class KeepRule:
    """``--keep DTYPE:GLOB``: keep matching tensors unquantized, stored as DTYPE."""

    dtype: DType
    glob: str

    def matches(self, source: str, name: str) -> bool:
        """True if the rule applies to a tensor with this source and destination name."""
        return _match(self.glob, source, name)


def _match(glob: str, source: str, name: str) -> bool:
    return fnmatch.fnmatchcase(source, glob) or fnmatch.fnmatchcase(name, glob)


def parse_quantize(text: str | QuantRule) -> QuantRule:
    """Parse ``q4_1`` or ``q8_0:tok_emb.*``.

    Raises:
        ConversionError: an unknown scheme (the message lists the known ones) or an empty glob.
    """
    if isinstance(text, QuantRule):
        return text
    scheme_text, sep, glob = text.partition(":")
    try:
        scheme = BlockScheme.parse(scheme_text)
    except ValueError as err:
        raise ConversionError(f"--quantize {text!r}: {err}") from None
    if sep and not glob:
        raise ConversionError(f"--quantize {text!r}: give a name glob after ':' or drop the ':'")
    return QuantRule(scheme, glob or None)


def parse_keep(text: str | KeepRule) -> KeepRule:
    """Parse ``f32:NAME_GLOB`` (also f16, bf16).

    Raises:
        ConversionError: naming the argument and the expected form.
    """
    if isinstance(text, KeepRule):
        return text
    dtype_text, sep, glob = text.partition(":")
    if not sep or not glob or dtype_text.lower() not in _KEEP_DTYPES:
        raise ConversionError(
            f"--keep {text!r}: expected DTYPE:NAME_GLOB with DTYPE one of "
            f"{', '.join(_KEEP_DTYPES)}, e.g. --keep 'f32:tok_emb.*'"
        )
    return KeepRule(_KEEP_DTYPES[dtype_text.lower()], glob)


@dataclass(frozen=True)
class QuantChoice:
    """What a tensor becomes: `dtype` (kept unquantized) or a block `layout`.

    `from_floats` is True when the conversion quantizes the float values itself (an error is
    measured), False when a packed source tensor is copied as it is (exact).
    """

    dtype: DType
    layout: BlockLayout | None = None
    from_floats: bool = False


def choose_quantization(
    source: SourceTensor,
    name: str,
    float_dtype: DType | None,
    rules: Sequence[QuantRule],
    keeps: Sequence[KeepRule],
    block_size: int,
) -> QuantChoice:
    """Decide how `source` (renamed `name`) is stored.

    `float_dtype` is the ``--dtype`` target for floating tensors (None keeps each source's).

    Raises:
        ConversionError: an explicitly named integer tensor, or a block size that does not
            divide the tensor's last axis (naming the tensor and what to change).
    """
    keep = next((k for k in keeps if k.matches(source.name, name)), None)
    if keep is not None:
        if not source.dtype.is_float:
            raise ConversionError(
                f"--keep {keep.dtype}:{keep.glob} matches {source.name!r}, a {source.dtype} tensor; "
                "only floating tensors take a float dtype: narrow the glob"
            )
        return QuantChoice(keep.dtype)
    rule = next((r for r in rules if r.matches(source.name, name)), None)
    if rule is None or (rule.glob is None and source.block is not None):
        if source.block is not None and float_dtype is None:
            return QuantChoice(source.block.data_dtype, source.block)  # packed GGUF, exact
        kept = float_dtype if float_dtype is not None and source.dtype.is_float else source.dtype
        return QuantChoice(kept)
    if not source.dtype.is_float:
        if rule.glob is None:
            return QuantChoice(source.dtype)  # integer/bool tensors are never quantized
        raise ConversionError(
            f"--quantize {rule.scheme}:{rule.glob} matches {source.name!r}, a {source.dtype} tensor; "
            "only floating tensors can be quantized: narrow the glob"
        )
    if len(source.shape) < 2 and rule.glob is None:
        kept = float_dtype if float_dtype is not None else source.dtype
        return QuantChoice(kept)  # 1-D norms and biases stay unquantized
    layout = BlockLayout(rule.scheme, block_size)
    problems = layout.problems(source.shape)
    if problems:
        raise ConversionError(
            f"--quantize {rule.scheme}: tensor {source.name!r} {list(source.shape)}: "
            + "; ".join(problems)
            + f"; pass --block N with N dividing {source.shape[-1] if source.shape else 0}, or "
            f"--keep 'f32:{source.name}'"
        )
    if source.block is not None and source.block == layout:
        return QuantChoice(layout.data_dtype, layout)  # already in this scheme: copy, exact
    return QuantChoice(layout.data_dtype, layout, from_floats=True)


@dataclass(frozen=True)
class QuantError:
    """How far quantization moved a tensor: max |error|, rms error, and rms error / rms value."""

    max_abs: float
    rms: float
    relative_rms: float


def measure_error(values: np.ndarray, quantized: QuantizedTensor) -> QuantError:
    """Compare `quantized` with the float `values` it was made from."""
    ref = np.asarray(values, np.float32)
    diff = quantized.dequantize() - ref
    rms = float(np.sqrt(np.mean(np.square(diff, dtype=np.float64)))) if diff.size else 0.0
    scale = float(np.sqrt(np.mean(np.square(ref, dtype=np.float64)))) if ref.size else 0.0
    return QuantError(
        float(np.abs(diff).max()) if diff.size else 0.0, rms, rms / scale if scale else 0.0
    )


def quantize_array(values: np.ndarray, layout: BlockLayout, what: str) -> QuantizedTensor:
    """`quantize` with the conversion's error type.

    Raises:
        ConversionError: non-finite values or scales beyond f16 (naming `what`).
    """
    try:
        return quantize(values, layout.scheme, layout.block_size, layout.scale_dtype)
    except OinfFormatError as err:
        raise ConversionError(f"{what}: {err}") from None
