"""What every validation pass shares: the variable table, dim resolution and the issue list.

`VarInfo` is public (re-exported by `openinfer_jax.ir.validate`): the simulator and the
backends use `infer_var_types(graph, model)` to learn each variable's dtype and shape.

Dims resolve against the model's sizevars when a model is given. Without a model each
sizevar gets a distinct large prime as a stand-in ("symbolic" sizes), so shape rules can
still be checked: `B` matches `B`, never `D`, and `3*D` is three times `D`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from openinfer_jax.core.blocks import BlockScheme
from openinfer_jax.core.dims import dim_factors, missing_sizes, resolve_dim
from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import GraphValidationError
from openinfer_jax.ir.nodes import (
    Assign,
    Dim,
    Graph,
    MemoryKind,
    SourceLoc,
    VarDecl,
)
from openinfer_jax.ir.validate_report import Issue

__all__ = ["Context", "DimResolver", "VarInfo", "did_you_mean", "format_type"]


@dataclass(frozen=True)
class VarInfo:
    """A variable's type as validation (and the simulator) sees it.

    `kind` is the memory kind of a declared variable, or None for an `assign`ed temporary.
    `dims` are as written; `shape` is the resolved shape (ints) when a model is given and
    every dim resolves, else None. For tables, dims/shape describe ONE entry.
    """

    name: str
    kind: MemoryKind | None
    dtype: DType
    dims: tuple[Dim, ...]
    shape: tuple[int, ...] | None
    decl: VarDecl | None = None
    assign: Assign | None = None

    @property
    def loc(self) -> SourceLoc | None:
        """Where the variable was declared or assigned."""
        if self.decl is not None:
            return self.decl.loc
        return self.assign.loc if self.assign is not None else None

    @property
    def table_indices(self) -> tuple[str, ...]:
        """The table indices (`W(l)` -> ("l",)); empty for plain variables and temporaries."""
        return self.decl.table_indices if self.decl is not None else ()

    @property
    def quant(self) -> BlockScheme | None:
        """The block scheme of a block-quantized weight (`W: q4_1[N, K]`), else None."""
        return self.decl.quant if self.decl is not None else None

    @property
    def is_scalar(self) -> bool:
        """True for a non-table variable without dims (`step: i32`, `cond: bool[]`)."""
        return not self.dims and not self.table_indices

    def describe(self) -> str:
        """`volatile 'W' f32[D, D]` style text for messages."""
        kind = self.kind.value if self.kind is not None else "assigned"
        return f"{kind} '{self.name}' {format_type(self.dtype, self.dims, self.quant)}"


def format_type(dtype: DType, dims: Iterable[Dim], quant: BlockScheme | None = None) -> str:
    """`f32[B, D]`, `q4_1[N, K]` for a block-quantized weight, or `i32` for a scalar."""
    dims = tuple(dims)
    name = str(quant) if quant is not None else dtype.short
    return f"{name}[{', '.join(str(d) for d in dims)}]" if dims else name


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """A `" (did you mean 'x'?)"` suffix, or "" when nothing is close."""
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


# Stand-ins for unknown sizes are primes above this, so products of them never collide with
# the small literal sizes programs use.
_SYMBOLIC_START = 1_000_000


def _is_prime(n: int) -> bool:
    if n < 2 or n % 2 == 0:
        return n == 2
    k = 3
    while k * k <= n:
        if n % k == 0:
            return False
        k += 2
    return True


class DimResolver:
    """Resolves dims (`4`, `"B"`, `"3*D"`) to ints, from model sizevars or symbolic stand-ins."""

    def __init__(self, sizevars: Mapping[str, int] | None) -> None:
        self.sizevars = dict(sizevars) if sizevars is not None else None
        self._symbols: dict[str, int] = {}
        self._names: dict[int, str] = {}

    @property
    def symbolic(self) -> bool:
        """True when there is no model, so sizes are stand-ins."""
        return self.sizevars is None

    def unknown_names(self, dim: Dim) -> list[str]:
        """Sizevar names in `dim` that the model does not define (always [] without a model).

        Raises:
            GraphValidationError: a malformed dim (see `openinfer_jax.core.dims`).
        """
        if isinstance(dim, int):
            return []
        if self.sizevars is None:
            dim_factors(dim)  # a malformed dim is refused even without a model
            return []
        return missing_sizes([dim], self.sizevars)

    def _factor(self, factor: str) -> int | None:
        """A name's size: the model's sizevar, or (without a model) a symbolic stand-in."""
        if self.sizevars is not None:
            return self.sizevars.get(factor)
        if factor not in self._symbols:
            value = max(self._symbols.values(), default=_SYMBOLIC_START) + 1
            while not _is_prime(value):
                value += 1
            self._symbols[factor] = value
        return self._symbols[factor]

    def dim(self, dim: Dim) -> int | None:
        """The size of one dim, or None if a sizevar in it is unknown."""
        if isinstance(dim, int):
            return dim
        try:
            total = resolve_dim(dim, self._factor)
        except GraphValidationError:  # malformed: reported where dims are checked
            return None
        if total is None:
            return None
        if self.symbolic:
            self._names.setdefault(total, dim)
        return total

    def shape(self, dims: Iterable[Dim]) -> tuple[int, ...] | None:
        """The sizes of all dims, or None if any does not resolve."""
        out = []
        for d in dims:
            value = self.dim(d)
            if value is None:
                return None
            out.append(value)
        return tuple(out)

    def humanize(self, text: str) -> str:
        """Replace symbolic stand-in sizes in `text` (an op's message) by their sizevar names."""
        if not self.symbolic or not self._names:
            return text
        return re.sub(r"\d{7,}", lambda m: self._names.get(int(m.group(0)), m.group(0)), text)

    def show(self, shape: Iterable[int]) -> str:
        """A shape for messages: stand-ins print as their sizevar names."""
        parts = [self._names.get(v, str(v)) if self.symbolic else str(v) for v in shape]
        return f"[{', '.join(parts)}]"


@dataclass
class Context:
    """State shared by the passes of one `validate` call."""

    graph: Graph
    model: Any
    strict: bool
    dims: DimResolver
    vars: dict[str, VarInfo] = field(default_factory=dict)
    issues: list[Issue] = field(default_factory=list)

    def error(self, message: str, loc: SourceLoc | None, context: str | None = None) -> None:
        """Record one problem."""
        self.issues.append(Issue(message, loc, context))

    def lookup(self, name: str) -> VarInfo | None:
        """The declared or assigned variable `name`, or None."""
        return self.vars.get(name)

    def unknown_name(self, name: str) -> str:
        """Text for an unknown variable: what was given and what exists."""
        return f"'{name}' is not declared or assigned{did_you_mean(name, self.vars)}"

    def shape_text(self, info: VarInfo) -> str:
        """`f32[B, D]`, plus the resolved sizes when a model is given."""
        text = format_type(info.dtype, info.dims, info.quant)
        if (
            not self.dims.symbolic
            and info.shape is not None
            and any(isinstance(d, str) for d in info.dims)
        ):
            text += f" = {list(info.shape)}"
        return text
