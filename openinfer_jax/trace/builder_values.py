"""Turning Python values given to the builder into IR values: dtypes, dims, literals, params.

Each function either returns the IR value the `graph{}` parser would produce for the
same program, or raises a DslSyntaxError (through `builder_error`) saying what was given
and what is expected. Handles (variables, loop indices) are recognised through the
small `Named` protocol so this module does not depend on the builder's classes.
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any, Protocol, runtime_checkable

from openinfer_jax.core.blocks import BlockScheme
from openinfer_jax.core.dtypes import DType, dtype_from_name
from openinfer_jax.ir.nodes import Dim, ParamValue, ScalarValue, VarName
from openinfer_jax.trace.builder_loc import builder_error

__all__ = [
    "DTYPE_PARAMS",
    "Named",
    "block_scheme_of",
    "is_identifier",
    "to_dim",
    "to_dims",
    "to_dtype",
    "to_param",
    "to_scalar",
]

# Params whose identifier values are dtypes, as the text parser reads them (`to=f32`, `acc=i32`).
DTYPE_PARAMS = frozenset({"to", "acc"})

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DIM_FACTOR = r"(?:\d+|[A-Za-z_][A-Za-z0-9_]*)"
_DIM = re.compile(rf"^{_DIM_FACTOR}(?:\*{_DIM_FACTOR})*$")
# Types that describe metadata, never a tensor or a variable.
_NON_TENSOR = (DType.STRING, DType.NDARRAY)


@runtime_checkable
class Named(Protocol):
    """A builder handle that stands for a name in the program (variable or loop index)."""

    @property
    def name(self) -> str:
        """The program name of the handle."""
        ...


def is_identifier(text: str) -> bool:
    """True if `text` is a DSL identifier (`[A-Za-z_][A-Za-z0-9_]*`)."""
    return bool(_IDENT.match(text))


def _known_dtypes() -> str:
    return ", ".join(d.short for d in DType if d not in _NON_TENSOR)


def block_scheme_of(value: Any) -> BlockScheme | None:
    """The block scheme a declaration's type names (``"q4_1"`` or a BlockScheme), else None."""
    if isinstance(value, BlockScheme):
        return value
    if isinstance(value, str) and value.strip().lower() in {s.value for s in BlockScheme}:
        return BlockScheme(value.strip().lower())
    return None


def to_dtype(value: Any, what: str) -> DType:
    """A DType from a DType or its DSL name (``"f32"``); `what` names the place for errors."""
    if isinstance(value, DType):
        dtype = value
    elif isinstance(value, str):
        try:
            dtype = dtype_from_name(value)
        except ValueError:
            raise builder_error(
                f"{what}: unknown dtype {value!r}; expected one of {_known_dtypes()}"
            ) from None
    else:
        raise builder_error(
            f"{what}: dtype must be a name like 'f32' or a DType, got {type(value).__name__} {value!r}"
        )
    if dtype in _NON_TENSOR:
        raise builder_error(
            f"{what}: {dtype.short} is a metadata type, not a variable dtype; "
            f"expected one of {_known_dtypes()}"
        )
    return dtype


def to_dim(value: Any, what: str) -> Dim:
    """One dimension: a non-negative int, a sizevar name, or a product like ``"3*D"``."""
    if isinstance(value, bool) or not isinstance(value, (int, str, numbers.Integral)):
        raise builder_error(
            f"{what}: a dimension must be an int, a sizevar name or a product like '3*D', "
            f"got {type(value).__name__} {value!r}"
        )
    if isinstance(value, str):
        text = value.replace(" ", "")
        if text.isascii() and text.isdigit():  # not "²": str.isdigit takes any Unicode digit
            return int(text)
        if not _DIM.match(text):
            raise builder_error(
                f"{what}: bad dimension {value!r}; expected an int, a sizevar name or a product like '3*D'"
            )
        return text
    number = int(value)
    if number < 0:
        raise builder_error(f"{what}: dimension {number} is negative; expected a size >= 0")
    return number


def to_dims(values: tuple[Any, ...], what: str) -> tuple[Dim, ...]:
    """All dims of a declaration (a single list/tuple argument is accepted as the dims)."""
    if len(values) == 1 and isinstance(values[0], (list, tuple)):
        values = tuple(values[0])
    return tuple(to_dim(v, f"{what} dim {i + 1}") for i, v in enumerate(values))


def to_scalar(value: Any, what: str) -> ScalarValue:
    """A literal for `@init`: bool, int or float (NumPy scalars accepted)."""
    if isinstance(value, (bool,)) or type(value).__name__ == "bool_":
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        # The parser yields the `math.nan` object; reuse it so equal programs compare equal.
        return number if not math.isnan(number) else math.nan
    raise builder_error(
        f"{what}: expected a number or bool literal, got {type(value).__name__} {value!r}"
    )


def _param_sequence(key: str, items: list[Any] | tuple[Any, ...], what: str) -> ParamValue:
    if key in DTYPE_PARAMS or any(isinstance(v, DType) for v in items):
        return tuple(to_dtype(v, f"{what} {key}[{i}]") for i, v in enumerate(items))
    ints = []
    for i, item in enumerate(items):
        if isinstance(item, bool) or not isinstance(item, numbers.Integral):
            raise builder_error(
                f"{what}: {key}[{i}] is {item!r}; a list setting holds ints (e.g. axes=[0, 1]) "
                f"or dtypes (acc=['f32', 'f32'])"
            )
        ints.append(int(item))
    return tuple(ints)


def to_param(key: str, value: Any, what: str) -> ParamValue:
    """An op setting's value as the text parser would store it.

    bool/int/float stay as they are (NaN and inf included); strings are string literals,
    except for `to`/`acc` where a dtype name becomes a DType; a variable or loop handle
    becomes VarName; a list of ints an int tuple; a list of dtypes a DType tuple.
    """
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    if isinstance(value, DType):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if not math.isnan(number) else math.nan
    if isinstance(value, str):
        if key in DTYPE_PARAMS:
            return to_dtype(value, f"{what} setting {key}")
        return value
    if isinstance(value, (list, tuple)):
        return _param_sequence(key, value, what)
    if isinstance(value, Named):
        return VarName(value.name)
    raise builder_error(
        f"{what}: setting {key}={value!r} has type {type(value).__name__}; expected a number, bool, "
        f"string, dtype, list of ints/dtypes, or a variable"
    )
