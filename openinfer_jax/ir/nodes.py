"""The graph IR: variable declarations and blocks of nodes.

Plain frozen dataclasses. Equality ignores source locations (`loc`), so the same
program written as `graph{}` text and through the Python builder compares equal.
Both frontends produce these classes; the simulator, the Vulkan backend and the
emitters consume only these classes (and a model).

Every node answers what it reads (`Node.reads`), writes (`Node.writes`), contains
(`Node.children`, a loop's body) and runs (`Node.targets`, a branch's blocks); walk nodes
with `openinfer_jax.ir.walk` and print them with `openinfer_jax.ir.printer`, never with
a local `isinstance` ladder.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePath

from openinfer_jax.core.blocks import BlockScheme
from openinfer_jax.core.dims import Dim
from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.names import VarName

__all__ = [
    "Assign",
    "Await",
    "Barrier",
    "Block",
    "Branch",
    "CacheAccess",
    "CacheDecrement",
    "CacheIncrement",
    "CacheIndex",
    "CacheRead",
    "CacheReset",
    "CacheSlice",
    "CacheWrite",
    "Dep",
    "Dim",
    "Graph",
    "Loop",
    "MemoryKind",
    "Node",
    "Op",
    "ParamValue",
    "Return",
    "ScalarValue",
    "SourceLoc",
    "Transfer",
    "VarDecl",
    "VarName",
    "VarRef",
    "Yield",
]


@dataclass(frozen=True)
class SourceLoc:
    """Where a declaration or node came from: a DSL line:column or a Python file:line.

    `snippet` is the source line, used to draw a caret under `column` in error messages.
    """

    line: int
    column: int = 1
    file: str | None = None
    snippet: str | None = None

    def __str__(self) -> str:
        head = f"{self.file}:" if self.file else ""
        return f"{head}{self.line}:{self.column}"

    def short(self) -> str:
        """``name:line:column`` with the file's base name: what emitted code and traces show,
        so they do not depend on the path the program was given by."""
        head = f"{PurePath(self.file).name}:" if self.file else ""
        return f"{head}{self.line}:{self.column}"

    def excerpt(self) -> str:
        """The source line and a caret under `column`, for error messages ("" without a snippet).

        Tabs before the column are kept so the caret lines up in a terminal.
        """
        if self.snippet is None:
            return ""
        pad = "".join(ch if ch == "\t" else " " for ch in self.snippet[: max(self.column - 1, 0)])
        return f"    {self.snippet}\n    {pad}^"


class MemoryKind(enum.Enum):
    """The four memory kinds of the DSL (docs/semantics.md)."""

    DYNAMIC = "dynamic"
    VOLATILE = "volatile"
    CONSTANT = "constant"
    PERSISTENT = "persistent"

    def __str__(self) -> str:
        return self.value


# A scalar literal as in `@init(...)` or a param value.
ScalarValue = bool | int | float


# Param values: scalars, string literals, dtypes, int lists, dtype lists (acc), variable names.
ParamValue = bool | int | float | str | DType | tuple[int, ...] | tuple[DType, ...] | VarName


@dataclass(frozen=True)
class VarDecl:
    """A declared variable: `name(i, j): dtype[dims] @attrs;` inside a memory section.

    `table_indices` are the `(i, j)` names of a prefix/cache table. `fixed` maps table
    indices to capacities (`@fixed(i=4)`), `auto_dim` lists indices that grow dims.
    `quant` is set for a block-quantized model weight (`W: q4_1[N, K]`): its values are
    `dtype` (f32), stored as codes and per-block scales (docs/dsl.md, quantized weights).
    """

    name: str
    kind: MemoryKind
    dtype: DType
    dims: tuple[Dim, ...] = ()
    init: ScalarValue | None = None
    ref: str | None = None
    pattern: str | None = None
    table_indices: tuple[str, ...] = ()
    table: bool = False
    auto_dim: tuple[str, ...] = ()
    fixed: tuple[tuple[str, int], ...] = ()
    quant: BlockScheme | None = None
    loc: SourceLoc | None = field(default=None, compare=False, repr=False)

    @property
    def type_name(self) -> str:
        """The DSL spelling of its element type: ``f32``, or the block scheme ``q4_1``."""
        return str(self.quant) if self.quant is not None else self.dtype.short

    @property
    def model_name(self) -> str:
        """The model tensor this variable links to (`@ref` if given, else its own name)."""
        return self.ref if self.ref is not None else self.name

    @property
    def is_table(self) -> bool:
        """True for prefix tables (`W(l)`) and cache tables (`K(l, t) @table`)."""
        return bool(self.table_indices)


@dataclass(frozen=True)
class VarRef:
    """A variable use, optionally indexed into a prefix table: `x`, `W[l]`, `W[0]`."""

    name: str
    indices: tuple[int | str, ...] = ()

    def index_names(self) -> tuple[str, ...]:
        """The names used as indices (`l` in `W[l]`)."""
        return tuple(i for i in self.indices if isinstance(i, str))

    def __str__(self) -> str:
        if not self.indices:
            return self.name
        return f"{self.name}[{', '.join(str(i) for i in self.indices)}]"


@dataclass(frozen=True)
class CacheIndex:
    """One index of a cache access: a literal (negative counts from the end) or a name."""

    value: int | str

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True)
class CacheSlice:
    """A half-open slice `start..end` of a cache table axis; None means open (`..5`, `2..`)."""

    start: int | str | None = None
    end: int | str | None = None

    def __str__(self) -> str:
        s = "" if self.start is None else str(self.start)
        e = "" if self.end is None else str(self.end)
        return f"{s}..{e}"


@dataclass(frozen=True)
class CacheAccess:
    """A persistent variable or table entry: `step`, `K[l, step]`, `A[0..5]`, `A[]`.

    `bracketed` distinguishes `A[]` (whole table, explicitly) from a bare `A`.
    """

    name: str
    indices: tuple[CacheIndex | CacheSlice, ...] = ()
    bracketed: bool = False

    def __post_init__(self) -> None:
        # Indices can only be written inside brackets, so `K[l]` is bracketed however it
        # was built; normalizing here keeps text, JSON and builder forms equal.
        if self.indices and not self.bracketed:
            object.__setattr__(self, "bracketed", True)

    def index_names(self) -> tuple[str, ...]:
        """The names used in the indices and slice bounds (`l`, `step` in `K[l, 0..step]`)."""
        out: list[str] = []
        for idx in self.indices:
            if isinstance(idx, CacheIndex):
                out += [idx.value] if isinstance(idx.value, str) else []
            else:
                out += [b for b in (idx.start, idx.end) if isinstance(b, str)]
        return tuple(out)

    def __str__(self) -> str:
        if not self.bracketed and not self.indices:
            return self.name
        return f"{self.name}[{', '.join(str(i) for i in self.indices)}]"


def _ref_names(ref: VarRef) -> Iterator[str]:
    """The names a use of `ref` reads: the variable and any named prefix-table index."""
    yield ref.name
    yield from ref.index_names()


def _unique(names: Iterator[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class Node:
    """Base class of every node. `loc` is the source location (not part of equality).

    The four questions every pass asks of a node are answered here, so no pass keeps its
    own per-kind table of them:

    - `reads()`: the names the node reads: variables (inputs, cache sources, a branch
      condition, variables named by params) and the loop indices or counters used in its
      indices and bounds, in order of appearance.
    - `writes()`: the variables whose value the node sets: an op's output, a transfer or
      `cache.read` destination, an `assign`ed temporary (zero-filled), a persistent variable
      changed by `cache.write`/`increment`/`decrement`/`reset`. `await` writes nothing (the
      values it makes visible were written elsewhere); `yield` reads what it publishes.
    - `children()`: nodes nested inside this one (a loop's body); `walk` recurses into them.
    - `targets()`: names of the blocks the node runs (a branch's then/else blocks).
    """

    def reads(self) -> tuple[str, ...]:
        """Names this node reads (not those of nested nodes); see the class docstring."""
        return ()

    def writes(self) -> tuple[str, ...]:
        """Variables this node writes (not those of nested nodes); see the class docstring."""
        return ()

    def children(self) -> tuple[Node, ...]:
        """Nodes nested directly inside this one (a loop's body), in order."""
        return ()

    def targets(self) -> tuple[str, ...]:
        """Names of the blocks this node runs (a branch's then/else blocks)."""
        return ()


@dataclass(frozen=True)
class Assign(Node):
    """`assign name: dtype[dims];` declares a zero-initialized temporary."""

    name: str
    dtype: DType
    dims: tuple[Dim, ...] = ()
    loc: SourceLoc | None = field(default=None, compare=False, repr=False)

    def writes(self) -> tuple[str, ...]:
        return (self.name,)


@dataclass(frozen=True)
class Op(Node):
    """`op name(inputs..., param=value...) >> output;`.

    `params` keeps the written order as (name, value) pairs.
    """

    op: str
    inputs: tuple[VarRef, ...]
    params: tuple[tuple[str, ParamValue], ...]
    output: VarRef
    loc: SourceLoc | None = field(default=None, compare=False, repr=False)

    def param(self, name: str, default: ParamValue | None = None) -> ParamValue | None:
        """The value of param `name`, or `default` if not given."""
        for key, value in self.params:
            if key == name:
                return value
        return default

    def reads(self) -> tuple[str, ...]:
        names = [n for ref in self.inputs for n in _ref_names(ref)]
        names += self.output.index_names()
        names += [v.name for _key, v in self.params if isinstance(v, VarName)]
        return _unique(iter(names))

    def writes(self) -> tuple[str, ...]:
        return (self.output.name,)


@dataclass(frozen=True)
class Transfer(Node):
    """`transfer src >> dst;` aliases src into dst (not guaranteed to copy)."""

    src: VarRef
    dst: VarRef
    loc: SourceLoc | None = field(default=None, compare=False, repr=False)

    def reads(self) -> tuple[str, ...]:
        return _unique(iter([*_ref_names(self.src), *self.dst.index_names()]))

    def writes(self) -> tuple[str, ...]:
        return (self.dst.name,)


@dataclass(frozen=True)
class CacheRead(Node):
    """`cache.read K[l, step] >> k;`"""

    src: CacheAccess
    dst: VarRef
    loc: SourceLoc | None = field(default=None, compare=False, repr=False)

    def reads(self) -> tuple[str, ...]:
        return _unique(iter([self.src.name, *self.src.index_names(), *self.dst.index_names()]))

    def writes(self) -> tuple[str, ...]:
        return (self.dst.name,)


@dataclass(frozen=True)
class CacheWrite(Node):
    """`cache.write k >> K[l, step];`"""

    src: VarRef
    dst: CacheAccess
    loc: SourceLoc | None = field(default=None, compare=False, repr=False)

    def reads(self) -> tuple[str, ...]:
        return _unique(iter([*_ref_names(self.src), *self.dst.index_names()]))

    def writes(self) -> tuple[str, ...]:
        return (self.dst.name,)


@dataclass(frozen=True)
class CacheIncrement(Node):
    """`cache.increment [N] name;`"""

    name: str
    amount: int = 1
    loc: SourceLoc | None = field(default=None, compare=False, repr=False)

    def reads(self) -> tuple[str, ...]:
        return (self.name,)

    def writes(self) -> tuple[str, ...]:
        return (self.name,)


@dataclass(frozen=True)
class CacheDecrement(Node):
    """`cache.decrement [N] name;`"""

    name: str
    amount: int = 1
    loc: SourceLoc | None = field(default=None, compare=False, repr=False)

    def reads(self) -> tuple[str, ...]:
        return (self.name,)

    def writes(self) -> tuple[str, ...]:
        return (self.name,)


@dataclass(frozen=True)
class CacheReset(Node):
    """`cache.reset step;`, `cache.reset K;`, `cache.reset K[l];`"""

    target: CacheAccess
    loc: SourceLoc | None = field(default=None, compare=False, repr=False)

    def reads(self) -> tuple[str, ...]:
        return self.target.index_names()

    def writes(self) -> tuple[str, ...]:
        return (self.target.name,)


@dataclass(frozen=True)
class Branch(Node):
    """`branch target;` (cond None) or `branch cond then_block else_block;`.

    A branch is a call: the target block runs, then execution resumes after the branch.
    """

    then_block: str
    cond: str | None = None
    else_block: str | None = None
    loc: SourceLoc | None = field(default=None, compare=False, repr=False)

    def reads(self) -> tuple[str, ...]:
        return () if self.cond is None else (self.cond,)

    def targets(self) -> tuple[str, ...]:
        return tuple(b for b in (self.then_block, self.else_block) if b is not None)


@dataclass(frozen=True)
class Loop(Node):
    """`loop name (index in start..end) { body }`: half-open; bounds are ints or names."""

    name: str
    index: str
    start: int | str
    end: int | str
    body: tuple[Node, ...]
    loc: SourceLoc | None = field(default=None, compare=False, repr=False)

    def reads(self) -> tuple[str, ...]:
        return _unique(b for b in (self.start, self.end) if isinstance(b, str))

    def children(self) -> tuple[Node, ...]:
        return self.body


@dataclass(frozen=True)
class Yield(Node):
    """`yield a, b;`"""

    vars: tuple[str, ...]
    loc: SourceLoc | None = field(default=None, compare=False, repr=False)

    def reads(self) -> tuple[str, ...]:
        return self.vars


@dataclass(frozen=True)
class Await(Node):
    """`await a, b;`"""

    vars: tuple[str, ...]
    loc: SourceLoc | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Barrier(Node):
    """`barrier;` an ordering boundary (no motion or fusion across it)."""

    loc: SourceLoc | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Dep(Node):
    """`dep after(a) before(b);` an explicit control dependency (names of ops/nodes)."""

    after: str
    before: str
    loc: SourceLoc | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Return(Node):
    """`return;`, or `return h;` as seed 002 writes it.

    `value` names the variable written after `return` (None for a bare `return;`).
    The runtime treats both alike; the name is kept so the program prints back as written.
    """

    value: str | None = None
    loc: SourceLoc | None = field(default=None, compare=False, repr=False)

    def reads(self) -> tuple[str, ...]:
        return () if self.value is None else (self.value,)


@dataclass(frozen=True)
class Block:
    """A named, ordered list of nodes."""

    name: str
    nodes: tuple[Node, ...]
    loc: SourceLoc | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Graph:
    """A program: variable declarations (in declaration order) and blocks (entry first by convention)."""

    vars: tuple[VarDecl, ...]
    blocks: tuple[Block, ...]

    def var(self, name: str) -> VarDecl | None:
        """The declaration named `name`, or None."""
        for decl in self.vars:
            if decl.name == name:
                return decl
        return None

    def block(self, name: str) -> Block | None:
        """The block named `name`, or None."""
        for blk in self.blocks:
            if blk.name == name:
                return blk
        return None

    def __str__(self) -> str:
        """The program as canonical `graph { ... }` text (see `openinfer_jax.ir.format_graph`)."""
        # Imported here: the printer imports this module.
        from openinfer_jax.ir.printer import format_graph

        return format_graph(self)
