"""Dimensions as the DSL, the IR and `.oinf` sizevars write them: one reading for every layer.

A dim is a non-negative int, a sizevar name (``"B"``) or a product of those (``"3*D"``,
``"B*D"``), written as the DSL prints it. The JSON reader, validation, the reader's `resolve_dim`, the
simulator and the emitters all resolve dims here, so a dim means the same everywhere and a
malformed one (``"-3"``, ``"3**D"``, ``""``, ``True``) is refused everywhere with the same
message.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable, Iterable, Mapping

from openinfer_jax.core.errors import GraphValidationError

__all__ = ["Dim", "dim_factors", "missing_sizes", "resolve_dim", "resolve_dims"]

# A dimension: an int literal, a sizevar name ("B"), or a product written "3*D" / "B*D".
Dim = int | str

# A factor: a non-negative int literal or an identifier, exactly as the DSL writes a dim
# (no dots, no spaces), so a dim read from JSON or given to the reader prints back as text
# that parses to the same dim.
_FACTOR = re.compile(r"(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*))")


@functools.lru_cache(maxsize=4096)
def _parse(dim: str) -> tuple[int | str, ...]:
    factors: list[int | str] = []
    for part in dim.split("*"):
        match = _FACTOR.fullmatch(part)
        if match is None:
            raise GraphValidationError(
                f"malformed dimension {dim!r}: expected INT, NAME or a product like 3*D"
            )
        digits, name = match.groups()
        factors.append(int(digits) if digits is not None else name)
    return tuple(factors)


def dim_factors(dim: object) -> tuple[int | str, ...]:
    """The factors of a dim: ``4`` -> ``(4,)``, ``"3*D"`` -> ``(3, "D")``.

    Raises:
        GraphValidationError: a negative int, a bool or other non-dim value, or a string
            that is not a product of non-negative int literals and names.
    """
    if isinstance(dim, bool) or not isinstance(dim, (int, str)):
        # numpy integers count as ints (shapes computed with NumPy reach here too).
        if hasattr(dim, "__index__") and not isinstance(dim, bool):
            dim = operator.index(dim)
        else:
            raise GraphValidationError(
                f"a dimension must be an int or a string like 'B' or '3*D', got {dim!r}"
            )
    if isinstance(dim, int):
        if dim < 0:
            raise GraphValidationError(f"dimension {dim} is negative")
        return (dim,)
    return _parse(dim)


def missing_sizes(dims: Iterable[Dim], sizes: Mapping[str, int]) -> list[str]:
    """Names used by `dims` that `sizes` does not define, in order, each once.

    Raises:
        GraphValidationError: a malformed dim (see `dim_factors`).
    """
    out: dict[str, None] = {}
    for dim in dims:
        for factor in dim_factors(dim):
            if isinstance(factor, str) and factor not in sizes:
                out[factor] = None
    return list(out)


def resolve_dim(dim: Dim, size_of: Callable[[str], int | None]) -> int | None:
    """The size of `dim`, each name looked up with `size_of`; None if a name has no size.

    Raises:
        GraphValidationError: a malformed dim (see `dim_factors`).
    """
    total = 1
    for factor in dim_factors(dim):
        if isinstance(factor, str):
            value = size_of(factor)
            if value is None:
                return None
            factor = value
        total *= factor
    return total


def resolve_dims(dims: Iterable[Dim], sizes: Mapping[str, int]) -> tuple[int, ...] | None:
    """The sizes of `dims` from `sizes`, or None when a name is missing (`missing_sizes`
    says which).

    Raises:
        GraphValidationError: a malformed dim (see `dim_factors`).
    """
    out = []
    for dim in dims:
        value = resolve_dim(dim, sizes.get)
        if value is None:
            return None
        out.append(value)
    return tuple(out)
