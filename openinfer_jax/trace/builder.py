"""The Python DSL: a tracing builder that produces the same IR as the `graph{}` text.

A program reads like its text form::

    g = GraphBuilder()
    x = g.dynamic("x", "f32", "B", "D")
    W = g.volatile("W", "f32", "D", "D", index="l", pattern="W.{l}")
    step = g.persistent("step", "i32", init=0)
    K = g.persistent("K", "f16", "H", "Dh", index=("l", "t"), table=True)

    with g.block("entry") as b:
        h = b.assign("h", "f32", "B", "D")
        b.op.matmul(x, W[0]) >> h                 # an op is routed into its output with >>
        with b.loop("layers", "l", 0, "num_layers") as l:
            b.op.matmul(h, W[l]) >> h
            b.cache.write(h) >> K[l, step]        # persistent tables only through cache ops
        b.cache.increment(step)
        b.return_()
    graph = g.build()

Nothing runs: every call appends a declaration or node (with the `SourceLoc` of the
user's call) to the graph under construction. Because it is plain Python, helper
functions and Python loops can emit repeated structure (one transformer layer per
iteration). Mistakes the builder can see at once (unknown dtype, a setting given
positionally, routing into something undeclared, duplicate names, a handle of another
builder, an op never routed with `>>`) raise DslSyntaxError naming the user's file:line
with the source line and a caret. Semantic checks are `openinfer_jax.ir.validate`'s job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ir.nodes import (
    Assign,
    Await,
    Barrier,
    Block,
    Branch,
    CacheAccess,
    CacheDecrement,
    CacheIncrement,
    CacheIndex,
    CacheRead,
    CacheReset,
    CacheSlice,
    CacheWrite,
    Dep,
    Dim,
    Graph,
    Loop,
    MemoryKind,
    Node,
    Op,
    ParamValue,
    Return,
    SourceLoc,
    Transfer,
    VarDecl,
    VarRef,
    Yield,
)
from openinfer_jax.trace.builder_loc import builder_error, caller_loc
from openinfer_jax.trace.builder_values import (
    block_scheme_of,
    is_identifier,
    to_dims,
    to_dtype,
    to_param,
    to_scalar,
)

__all__ = [
    "BlockBuilder",
    "GraphBuilder",
    "Indexed",
    "LoopIndex",
    "Pending",
    "Var",
]

# Declaration attributes (keyword arguments of GraphBuilder.dynamic/volatile/...), as in the text.
_DECL_ATTRIBUTES = ("init", "ref", "pattern", "index", "table", "fixed", "auto_dim")


class _Handle:
    """Something that names a program entity and belongs to one GraphBuilder."""

    name: str
    builder: GraphBuilder

    def _check_owner(self, builder: GraphBuilder, what: str) -> None:
        if self.builder is not builder:
            raise builder_error(
                f"{what}: '{self.name}' belongs to another GraphBuilder; "
                f"use handles created by this builder"
            )


class Var(_Handle):
    """A declared variable or an `assign`ed temporary.

    Index it like the text does: ``W[l]`` for a prefix-table entry, ``K[l, step]`` or
    ``K[0:step]`` for a cache-table entry or slice, ``A[...]`` for the whole table (`A[]`).
    Route an op into it with ``b.op.add(x, y) >> var``.
    """

    def __init__(self, builder: GraphBuilder, name: str, decl: VarDecl | None) -> None:
        self.builder = builder
        self.name = name
        self.decl = decl

    def __getitem__(self, key: Any) -> Indexed:
        items = key if isinstance(key, tuple) else (key,)
        return Indexed(self, items, caller_loc())

    def __iter__(self) -> Any:
        # Without this, Python would iterate through __getitem__(0), (1), ... forever.
        raise builder_error(
            f"'{self.name}' is a program variable, not a Python sequence; index one entry like "
            f"{self.name}[l] or unroll with `for i in range(n): ... {self.name}[i]`"
        )

    def __repr__(self) -> str:
        return f"Var({self.name!r})"


class LoopIndex(_Handle):
    """The index variable of a `loop`, usable in indices (``W[l]``, ``K[l, step]``)."""

    def __init__(self, builder: GraphBuilder, name: str) -> None:
        self.builder = builder
        self.name = name

    def __repr__(self) -> str:
        return f"LoopIndex({self.name!r})"


class Indexed:
    """`var[items]`: becomes a VarRef (op/transfer operand) or a CacheAccess (cache ops)."""

    def __init__(self, var: Var, items: tuple[Any, ...], loc: SourceLoc | None) -> None:
        self.var = var
        self.items = items
        self.loc = loc

    @property
    def name(self) -> str:
        """The indexed variable's name."""
        return self.var.name

    def _index_value(self, item: Any, what: str) -> int | str:
        if isinstance(item, bool):
            raise builder_error(
                f"{what}: index {item!r} is a bool; expected an int or a name", self.loc
            )
        if isinstance(item, int):
            return item
        if isinstance(item, (Var, LoopIndex)):
            item._check_owner(self.var.builder, what)
            return item.name
        if isinstance(item, str) and is_identifier(item):
            return item
        raise builder_error(
            f"{what}: index {item!r} of '{self.var.name}' must be an int, a loop index or a "
            f"scalar variable",
            self.loc,
        )

    def as_ref(self, what: str) -> VarRef:
        """This access as an operand `W[l]` (only ints and names, no slices)."""
        indices = []
        for item in self.items:
            if isinstance(item, slice) or item is Ellipsis:
                raise builder_error(
                    f"{what}: slices like {self.var.name}[a:b] are only for cache.read/cache.write/"
                    f"cache.reset; an operand takes single indices like {self.var.name}[l]",
                    self.loc,
                )
            indices.append(self._index_value(item, what))
        return VarRef(self.var.name, tuple(indices))

    def as_cache(self, what: str) -> CacheAccess:
        """This access as a cache target: indices, half-open slices, or `...` for `A[]`."""
        if self.items == (Ellipsis,) or self.items == ():
            return CacheAccess(self.var.name, (), bracketed=True)
        indices: list[CacheIndex | CacheSlice] = []
        for item in self.items:
            if isinstance(item, slice):
                if item.step is not None:
                    raise builder_error(
                        f"{what}: cache slices have no step; write {self.var.name}[a:b]", self.loc
                    )
                start = None if item.start is None else self._index_value(item.start, what)
                stop = None if item.stop is None else self._index_value(item.stop, what)
                indices.append(CacheSlice(start, stop))
            elif item is Ellipsis:
                raise builder_error(
                    f"{what}: '...' stands alone for the whole table ({self.var.name}[...]), "
                    f"it cannot be mixed with indices",
                    self.loc,
                )
            else:
                indices.append(CacheIndex(self._index_value(item, what)))
        return CacheAccess(self.var.name, tuple(indices), bracketed=True)


# What an operand may be: a variable handle, a table entry, or the name of a declared variable.
Operand = Var | Indexed | str


class Pending:
    """A node waiting for its destination: route it with ``>> target``.

    `make` builds the node from the resolved destination; the builder reports any
    Pending never routed when `GraphBuilder.build()` runs, with its file:line.
    """

    def __init__(
        self,
        block: BlockBuilder,
        what: str,
        make: Callable[[Any, SourceLoc | None], Node],
        resolve: Callable[[Any, str], Any],
        loc: SourceLoc | None,
    ) -> None:
        self.block = block
        self.what = what
        self.loc = loc
        self._make = make
        self._resolve = resolve
        self._container = block._current()
        self.routed = False
        block.builder._pending[id(self)] = self

    def __rshift__(self, target: Any) -> Any:
        """Route the node's output into `target` and append the node to its block."""
        if self.routed:
            raise builder_error(f"{self.what} was already routed; each op has one output")
        destination = self._resolve(target, self.what)
        if self.block._current() is not self._container:
            raise builder_error(
                f"{self.what} was created in a different block or loop than where it is routed; "
                f"write `... >> target` in the same statement"
            )
        self.routed = True
        del self.block.builder._pending[id(self)]
        self.block._append(self._make(destination, self.loc))
        return target


class _OpNamespace:
    """`b.op.<name>(inputs..., setting=value...)` or `b.op("name", ...)` build a pending op."""

    def __init__(self, block: BlockBuilder) -> None:
        self._block = block

    def __getattr__(self, op_name: str) -> Callable[..., Pending]:
        if op_name.startswith("__"):
            raise AttributeError(op_name)

        def call(*inputs: Any, **settings: Any) -> Pending:
            return self._block._op(op_name, inputs, settings)

        return call

    def __call__(self, op_name: str, *inputs: Any, **settings: Any) -> Pending:
        """The op named `op_name` (for names that are not Python identifiers)."""
        return self._block._op(op_name, inputs, settings)


class _CacheNamespace:
    """`b.cache.read/write/increment/decrement/reset`: the only access to persistent memory."""

    def __init__(self, block: BlockBuilder) -> None:
        self._block = block

    def read(self, source: Var | Indexed) -> Pending:
        """`cache.read source >> dst;` (route with ``>> dst``)."""
        block = self._block
        loc = caller_loc()
        access = block._cache_access(source, "cache.read")
        return Pending(
            block,
            f"cache.read {access}",
            lambda dst, where: CacheRead(access, dst, loc=where),
            block._ref_target,
            loc,
        )

    def write(self, source: Operand) -> Pending:
        """`cache.write source >> K[...];` (route with ``>> K[l, step]``)."""
        block = self._block
        loc = caller_loc()
        ref = block._operand(source, "cache.write")
        return Pending(
            block,
            f"cache.write {ref}",
            lambda dst, where: CacheWrite(ref, dst, loc=where),
            block._cache_target,
            loc,
        )

    def increment(self, var: Var | str, amount: int = 1) -> None:
        """`cache.increment [amount] var;`"""
        self._block._counter(CacheIncrement, "cache.increment", var, amount)

    def decrement(self, var: Var | str, amount: int = 1) -> None:
        """`cache.decrement [amount] var;`"""
        self._block._counter(CacheDecrement, "cache.decrement", var, amount)

    def reset(self, target: Var | Indexed) -> None:
        """`cache.reset target;` for a variable, a whole table or an indexed entry."""
        loc = caller_loc()
        access = self._block._cache_access(target, "cache.reset")
        self._block._append(CacheReset(access, loc=loc))


class _LoopScope:
    """The `with` body of a loop: collects nodes, appends the Loop node on exit."""

    def __init__(
        self,
        block: BlockBuilder,
        name: str,
        index: str,
        bounds: tuple[int | str, int | str],
        loc: SourceLoc | None,
    ) -> None:
        self.block = block
        self.name = name
        self.index = index
        self.bounds = bounds
        self.loc = loc
        self.entered = False

    def __enter__(self) -> LoopIndex:
        if self.entered:
            raise builder_error(
                f"loop '{self.name}' was already used; call b.loop(...) again", self.loc
            )
        if self.block.closed:
            raise builder_error(
                f"block '{self.block.name}' is closed; emit its nodes inside its `with` body",
                self.loc,
            )
        self.entered = True
        self.block._stack.append([])
        return LoopIndex(self.block.builder, self.index)

    def __exit__(self, exc_type: object, *rest: object) -> None:
        body = self.block._stack.pop()
        if exc_type is None:
            start, end = self.bounds
            self.block._append(Loop(self.name, self.index, start, end, tuple(body), loc=self.loc))


class BlockBuilder:
    """Emits the nodes of one block; usable as a context manager (`with g.block("entry") as b`).

    Node-emitting methods mirror the text: `assign`, `op.<name>(...) >> out`,
    `transfer(src) >> dst`, `cache.*`, `branch`, `loop` (a context manager),
    `yield_`, `await_`, `barrier`, `dep`, `return_` (the trailing underscore avoids
    Python keywords).
    """

    def __init__(self, builder: GraphBuilder, name: str, loc: SourceLoc | None) -> None:
        self.builder = builder
        self.name = name
        self.loc = loc
        self.closed = False
        self._stack: list[list[Node]] = [[]]
        self.op = _OpNamespace(self)
        self.cache = _CacheNamespace(self)

    # ---- context manager ----------------------------------------------------------
    def __enter__(self) -> BlockBuilder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed = True

    # ---- internals ------------------------------------------------------------------
    def _current(self) -> list[Node]:
        return self._stack[-1]

    def _append(self, node: Node) -> None:
        if self.closed:
            raise builder_error(
                f"block '{self.name}' is closed; emit its nodes inside its `with` body"
            )
        self._current().append(node)

    def _name_of(self, value: Any, what: str) -> str:
        """A variable name from a handle or a string naming a declared/assigned variable."""
        if isinstance(value, (Var, LoopIndex)):
            value._check_owner(self.builder, what)
            return value.name
        if isinstance(value, str):
            if not self.builder._known(value):
                raise builder_error(
                    f"{what}: '{value}' is not declared; declare it (g.volatile(...), b.assign(...)) "
                    f"before using it{self.builder._suggest(value)}"
                )
            return value
        raise builder_error(f"{what}: expected a variable, got {type(value).__name__} {value!r}")

    def _operand(self, value: Any, what: str) -> VarRef:
        if isinstance(value, Indexed):
            value.var._check_owner(self.builder, what)
            return value.as_ref(what)
        return VarRef(self._name_of(value, what))

    def _ref_target(self, target: Any, what: str) -> VarRef:
        if not isinstance(target, (Var, Indexed, str)):
            raise builder_error(
                f"{what} >> {target!r}: the output must be a declared or assigned variable"
            )
        return self._operand(target, f"{what} >> output")

    def _cache_access(self, target: Any, what: str) -> CacheAccess:
        if isinstance(target, Indexed):
            target.var._check_owner(self.builder, what)
            return target.as_cache(what)
        return CacheAccess(self._name_of(target, what))

    def _cache_target(self, target: Any, what: str) -> CacheAccess:
        if not isinstance(target, (Var, Indexed, str)):
            raise builder_error(
                f"{what} >> {target!r}: the target must be a persistent variable or entry"
            )
        return self._cache_access(target, f"{what} >> target")

    def _op(self, op_name: str, inputs: tuple[Any, ...], settings: dict[str, Any]) -> Pending:
        loc = caller_loc()
        what = f"op {op_name}"
        if not is_identifier(op_name):
            raise builder_error(f"{what}: op names are identifiers like 'matmul'", loc)
        refs = []
        for position, value in enumerate(inputs):
            if not isinstance(value, (Var, Indexed, LoopIndex)) and not (
                isinstance(value, str) and is_identifier(value)
            ):
                raise builder_error(
                    f"{what}: positional argument {position + 1} is {value!r}; inputs are variables "
                    f"and settings must be given by name (e.g. {op_name}(x, alpha=0.1))",
                    loc,
                )
            refs.append(self._operand(value, what))
        params: tuple[tuple[str, ParamValue], ...] = tuple(
            (key, to_param(key, value, what)) for key, value in settings.items()
        )
        ref_tuple = tuple(refs)
        return Pending(
            self,
            what,
            lambda out, where: Op(op_name, ref_tuple, params, out, loc=where),
            self._ref_target,
            loc,
        )

    def _counter(
        self,
        node_type: type[CacheIncrement] | type[CacheDecrement],
        what: str,
        var: Any,
        amount: int,
    ) -> None:
        loc = caller_loc()
        if isinstance(amount, bool) or not isinstance(amount, int):
            raise builder_error(f"{what}: amount must be an int, got {amount!r}", loc)
        self._append(node_type(self._name_of(var, what), amount, loc=loc))

    def _names(self, values: tuple[Any, ...], what: str) -> tuple[str, ...]:
        if not values:
            raise builder_error(f"{what}: name at least one variable")
        return tuple(self._name_of(v, what) for v in values)

    # ---- nodes ----------------------------------------------------------------------
    def assign(self, name: str, dtype: str | DType, *dims: Dim) -> Var:
        """`assign name: dtype[dims];` a zero-initialized temporary; returns its handle."""
        loc = caller_loc()
        self.builder._claim_name(name, "assign", loc)
        node = Assign(
            name, to_dtype(dtype, f"assign {name}"), to_dims(dims, f"assign {name}"), loc=loc
        )
        self._append(node)
        return Var(self.builder, name, None)

    def transfer(self, source: Operand) -> Pending:
        """`transfer src >> dst;` (route with ``>> dst``)."""
        loc = caller_loc()
        ref = self._operand(source, "transfer")
        return Pending(
            self,
            f"transfer {ref}",
            lambda dst, where: Transfer(ref, dst, loc=where),
            self._ref_target,
            loc,
        )

    def branch(
        self,
        target_or_cond: Any,
        then_block: str | BlockBuilder | None = None,
        else_block: str | BlockBuilder | None = None,
    ) -> None:
        """`branch target;` or `branch cond then_block else_block;` (cond: a scalar variable)."""
        loc = caller_loc()

        def block_name(value: Any) -> str:
            if isinstance(value, BlockBuilder):
                if value.builder is not self.builder:
                    raise builder_error(
                        f"branch: block '{value.name}' belongs to another GraphBuilder", loc
                    )
                return value.name
            if isinstance(value, str) and is_identifier(value):
                return value
            raise builder_error(f"branch: a target is a block name or block, got {value!r}", loc)

        if then_block is None and else_block is None:
            self._append(Branch(block_name(target_or_cond), loc=loc))
            return
        if then_block is None or else_block is None:
            raise builder_error(
                "branch: a conditional branch needs both blocks: b.branch(cond, 'then', 'else')",
                loc,
            )
        cond = self._name_of(target_or_cond, "branch condition")
        self._append(
            Branch(block_name(then_block), cond=cond, else_block=block_name(else_block), loc=loc)
        )

    def loop(
        self, name: str, index: str, start: int | str | Var, end: int | str | Var
    ) -> _LoopScope:
        """`loop name (index in start..end) { ... }`: use as ``with b.loop(...) as l:``.

        Nodes emitted in the `with` body form the loop. Bounds are ints, sizevar names or
        scalar variables (handles or names); `l` is the loop index handle.
        """
        loc = caller_loc()
        if not is_identifier(name) or not is_identifier(index):
            raise builder_error(f"loop: name {name!r} and index {index!r} must be identifiers", loc)
        bounds = (self._bound(start, f"loop {name} bound"), self._bound(end, f"loop {name} bound"))
        return _LoopScope(self, name, index, bounds, loc)

    def _bound(self, value: Any, what: str) -> int | str:
        if isinstance(value, bool):
            raise builder_error(
                f"{what}: {value!r} is a bool; expected an int, sizevar or scalar variable"
            )
        if isinstance(value, int):
            return value
        if isinstance(value, (Var, LoopIndex)):
            value._check_owner(self.builder, what)
            return value.name
        if isinstance(value, str) and is_identifier(value):
            return value
        raise builder_error(
            f"{what}: expected an int, a sizevar name or a scalar variable, got {value!r}"
        )

    def yield_(self, *variables: Var | str) -> None:
        """`yield a, b;` hand variables to the consumer blocks (or end a consumer)."""
        loc = caller_loc()
        self._append(Yield(self._names(variables, "yield"), loc=loc))

    def await_(self, *variables: Var | str) -> None:
        """`await a, b;` wait until the consumers gave the variables back."""
        loc = caller_loc()
        self._append(Await(self._names(variables, "await"), loc=loc))

    def barrier(self) -> None:
        """`barrier;` no motion or fusion across this point."""
        self._append(Barrier(loc=caller_loc()))

    def dep(self, after: str, before: str) -> None:
        """`dep after(a) before(b);` an ordering edge between named ops or node kinds."""
        loc = caller_loc()
        for value in (after, before):
            if not isinstance(value, str) or not all(is_identifier(p) for p in value.split(".")):
                raise builder_error(
                    f"dep: {value!r} must name an op or node kind like 'matmul' or 'cache.write'",
                    loc,
                )
        self._append(Dep(after, before, loc=loc))

    def return_(self, value: Var | str | None = None) -> None:
        """`return;` end the block (`return h;` as seed 002 writes it, with a variable)."""
        loc = caller_loc()
        name = None if value is None else self._name_of(value, "return")
        self._append(Return(value=name, loc=loc))

    ret = return_

    def _finish(self) -> Block:
        self.closed = True
        return Block(self.name, tuple(self._stack[0]), loc=self.loc)


class GraphBuilder:
    """Builds a Graph from Python calls; see the module docstring for a complete program.

    Declarations (`dynamic`, `volatile`, `constant`, `persistent`) take the name, the
    dtype, the dims as further positional arguments, and the text's attributes as
    keywords: ``init=``, ``ref=``, ``pattern=``, ``index=`` (table indices, ``"l"`` or
    ``("l", "t")``), ``table=True``, ``fixed={"t": 128}``, ``auto_dim=("i", "j")``.
    """

    def __init__(self) -> None:
        self._vars: list[VarDecl] = []
        self._blocks: list[BlockBuilder] = []
        self._names: dict[str, SourceLoc | None] = {}
        self._pending: dict[int, Pending] = {}

    # ---- names ----------------------------------------------------------------------
    def _known(self, name: str) -> bool:
        return name in self._names

    def _suggest(self, name: str) -> str:
        import difflib

        close = difflib.get_close_matches(name, list(self._names), n=1)
        return f" (did you mean '{close[0]}'?)" if close else ""

    def _claim_name(self, name: Any, what: str, loc: SourceLoc | None) -> None:
        if not isinstance(name, str) or not is_identifier(name):
            raise builder_error(
                f"{what}: name {name!r} is not an identifier like 'h' or 'W_q'", loc
            )
        if name in self._names:
            first = self._names[name]
            where = (
                f" (first declared at {first.file}:{first.line})" if first and first.file else ""
            )
            raise builder_error(
                f"{what}: duplicate name '{name}'{where}; names must be unique", loc
            )
        self._names[name] = loc

    # ---- declarations ---------------------------------------------------------------
    def _declare(
        self,
        kind: MemoryKind,
        name: str,
        dtype: str | DType,
        dims: tuple[Any, ...],
        attributes: dict[str, Any],
    ) -> Var:
        loc = caller_loc()
        what = f"{kind.value} {name}"
        unknown = [key for key in attributes if key not in _DECL_ATTRIBUTES]
        if unknown:
            raise builder_error(
                f"{what}: unknown attribute {unknown[0]!r}; expected one of {', '.join(_DECL_ATTRIBUTES)}",
                loc,
            )
        self._claim_name(name, kind.value, loc)
        quant = block_scheme_of(dtype)
        decl = VarDecl(
            name=name,
            kind=kind,
            dtype=DType.F32 if quant is not None else to_dtype(dtype, what),
            quant=quant,
            dims=to_dims(dims, what),
            init=None
            if attributes.get("init") is None
            else to_scalar(attributes["init"], f"{what} init"),
            ref=self._text_attr(attributes.get("ref"), f"{what} ref", loc),
            pattern=self._text_attr(attributes.get("pattern"), f"{what} pattern", loc),
            table_indices=self._idents(attributes.get("index", ()), f"{what} index", loc),
            table=self._flag(attributes.get("table", False), f"{what} table", loc),
            auto_dim=self._idents(attributes.get("auto_dim", ()), f"{what} auto_dim", loc),
            fixed=self._fixed(attributes.get("fixed", ()), f"{what} fixed", loc),
            loc=loc,
        )
        self._vars.append(decl)
        return Var(self, name, decl)

    @staticmethod
    def _text_attr(value: Any, what: str, loc: SourceLoc | None) -> str | None:
        if value is None or isinstance(value, str):
            return value
        raise builder_error(f"{what}: expected a string, got {type(value).__name__} {value!r}", loc)

    @staticmethod
    def _flag(value: Any, what: str, loc: SourceLoc | None) -> bool:
        if isinstance(value, bool):
            return value
        raise builder_error(f"{what}: expected True or False, got {value!r}", loc)

    @staticmethod
    def _idents(value: Any, what: str, loc: SourceLoc | None) -> tuple[str, ...]:
        items = (value,) if isinstance(value, str) else value
        if not isinstance(items, (tuple, list)) or not all(
            isinstance(v, str) and is_identifier(v) for v in items
        ):
            raise builder_error(
                f"{what}: expected a name or a tuple of names like ('l', 't'), got {value!r}", loc
            )
        return tuple(items)

    @staticmethod
    def _fixed(value: Any, what: str, loc: SourceLoc | None) -> tuple[tuple[str, int], ...]:
        pairs = list(value.items()) if isinstance(value, dict) else value
        try:
            result = tuple((str(k), v) for k, v in pairs)
        except (TypeError, ValueError):
            raise builder_error(
                f"{what}: expected a dict like {{'t': 128}}, got {value!r}", loc
            ) from None
        for key, size in result:
            if not is_identifier(key) or isinstance(size, bool) or not isinstance(size, int):
                raise builder_error(
                    f"{what}: expected index=int pairs like {{'t': 128}}, got {value!r}", loc
                )
        return result

    def dynamic(self, name: str, dtype: str | DType, *dims: Any, **attributes: Any) -> Var:
        """Declare a `dynamic` variable (inserted by the host each step)."""
        return self._declare(MemoryKind.DYNAMIC, name, dtype, dims, attributes)

    def volatile(self, name: str, dtype: str | DType, *dims: Any, **attributes: Any) -> Var:
        """Declare a `volatile` variable (reset every step from the model, `init` or zeros)."""
        return self._declare(MemoryKind.VOLATILE, name, dtype, dims, attributes)

    def constant(self, name: str, dtype: str | DType, *dims: Any, **attributes: Any) -> Var:
        """Declare a `constant` variable (read-only, from the model or `init`)."""
        return self._declare(MemoryKind.CONSTANT, name, dtype, dims, attributes)

    def persistent(self, name: str, dtype: str | DType, *dims: Any, **attributes: Any) -> Var:
        """Declare a `persistent` variable or cache table (kept across steps, cache ops only)."""
        return self._declare(MemoryKind.PERSISTENT, name, dtype, dims, attributes)

    def undeclared(self, name: str) -> Var:
        """A handle to a name this builder does not declare (for program fragments).

        The builder normally refuses names it has not seen, to catch typos at once; a
        fragment that uses variables declared elsewhere names them through this handle, and
        `validate` reports any that stay undeclared.
        """
        loc = caller_loc()
        if not isinstance(name, str) or not is_identifier(name):
            raise builder_error(f"undeclared: name {name!r} is not an identifier", loc)
        return Var(self, name, None)

    # ---- blocks ---------------------------------------------------------------------
    def block(self, name: str) -> BlockBuilder:
        """Start block `name`; use as ``with g.block("entry") as b:`` (or keep the handle)."""
        loc = caller_loc()
        if not isinstance(name, str) or not is_identifier(name):
            raise builder_error(f"block: name {name!r} is not an identifier", loc)
        for existing in self._blocks:
            if existing.name == name:
                raise builder_error(
                    f"block: duplicate block name '{name}'; block names must be unique", loc
                )
        block = BlockBuilder(self, name, loc)
        self._blocks.append(block)
        return block

    def build(self) -> Graph:
        """The Graph built so far (declarations in order, blocks in creation order).

        Raises:
            DslSyntaxError: if an op/transfer/cache.read/cache.write was never routed with `>>`.
        """
        if self._pending:
            first = min(self._pending.values(), key=lambda p: p.loc.line if p.loc else 0)
            count = len(self._pending)
            more = f" ({count - 1} more unrouted)" if count > 1 else ""
            raise builder_error(
                f"{first.what} is never routed to an output; add `>> target` after the call{more}",
                first.loc,
            )
        return Graph(tuple(self._vars), tuple(block._finish() for block in self._blocks))
