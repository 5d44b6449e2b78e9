"""Validation of nodes: operands, memory-kind access rules, ops (through the registry), cache
ops, transfers, branches, loops and deps.

Op-specific rules are not written here: each op's `OpDef` (openinfer_jax.ops.registry)
checks its params (`resolve_params`), dtypes and shapes (`infer`) and in-place policy
(`check_inplace`); an `OpCheckError` it raises is re-raised here with the node's location.
This module also records every use of a prefix table with the loops around it, for the
model check in `validate_tables`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

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
    Loop,
    MemoryKind,
    Node,
    Op,
    Return,
    SourceLoc,
    Transfer,
    VarName,
    VarRef,
    Yield,
)
from openinfer_jax.ir.printer import describe_node
from openinfer_jax.ir.validate_context import Context, VarInfo, did_you_mean, format_type
from openinfer_jax.ir.walk import walk

__all__ = ["NODE_KINDS", "NodeChecker", "TableUse"]

# The DSL keyword of each node kind; `dep` may name these (e.g. `before(cache.write)`).
NODE_KINDS: dict[type[Node], str] = {
    Assign: "assign", Op: "op", Transfer: "transfer", CacheRead: "cache.read",
    CacheWrite: "cache.write", CacheIncrement: "cache.increment", CacheDecrement: "cache.decrement",
    CacheReset: "cache.reset", Branch: "branch", Loop: "loop", Yield: "yield", Await: "await",
    Barrier: "barrier", Dep: "dep", Return: "return",
}  # fmt: skip

# Identifiers that are literals when used as a setting value (`clamp_max=inf`).
_LITERAL_NAMES = frozenset({"inf", "+inf", "-inf", "nan", "true", "false"})


@dataclass(frozen=True)
class TableUse:
    """One use of a prefix table (`W[l]`) and the loops around it (index name -> Loop)."""

    info: VarInfo
    ref: VarRef
    loops: dict[str, Loop]
    loc: SourceLoc | None
    where: str


class NodeChecker:
    """Walks every block and checks each node; `table_uses` collects prefix-table uses."""

    def __init__(self, ctx: Context, registry: Any) -> None:
        self.ctx = ctx
        self.registry = registry
        self.table_uses: list[TableUse] = []
        self.block_names = {b.name for b in ctx.graph.blocks}
        self._dispatch: dict[type[Node], Callable[..., None]] = {
            Op: self._op, Transfer: self._transfer, CacheRead: self._cache_read,
            CacheWrite: self._cache_write, CacheIncrement: self._counter,
            CacheDecrement: self._counter, CacheReset: self._cache_reset, Branch: self._branch,
            Loop: self._loop, Yield: self._names_exist, Await: self._names_exist,
            Return: self._return,
        }  # fmt: skip

    # ---- walking ------------------------------------------------------------------
    def run(self) -> None:
        """Check every node of every block."""
        for block in self.ctx.graph.blocks:
            self._block = block
            flat = list(walk(block.nodes))
            self._position = {id(n): i for i, n in enumerate(flat)}
            self._flat = flat
            self._nodes(block.nodes, {}, f"block '{block.name}'")

    def _nodes(self, nodes: Sequence[Node], loops: dict[str, Loop], prefix: str) -> None:
        for number, node in enumerate(nodes, start=1):
            where = f"{prefix}, node {number} ({describe_node(node)})"
            if isinstance(node, Dep):
                self._dep(node, where)
                continue
            handler = self._dispatch.get(type(node))
            if handler is not None:
                handler(node, loops, where)

    # ---- names and operands ----------------------------------------------------------
    def _index(
        self,
        value: int | str,
        loops: dict[str, Loop],
        loc: SourceLoc | None,
        where: str,
        owner: str,
    ) -> None:
        """A table index: an int, a loop index in scope, or a scalar integer variable."""
        if isinstance(value, int) or value in loops:
            return
        info = self.ctx.lookup(value)
        if info is not None and info.is_scalar and (info.dtype.is_int and not info.dtype.is_packed):
            return
        if info is not None:
            detail = f"'{value}' is {info.describe()}"
        else:
            detail = f"'{value}' is not a loop index in scope or a variable{did_you_mean(value, list(loops) + list(self.ctx.vars))}"
        self.ctx.error(
            f"index of '{owner}': {detail}; an index is an int, a loop index or a scalar integer variable",
            loc,
            where,
        )

    def _operand(
        self,
        ref: VarRef,
        loops: dict[str, Loop],
        loc: SourceLoc | None,
        where: str,
        role: str,
        quantized_ok: bool = False,
    ) -> VarInfo | None:
        ctx = self.ctx
        info = ctx.lookup(ref.name)
        if info is None:
            hint = " (a loop index cannot be an operand)" if ref.name in loops else ""
            ctx.error(f"{role} {ctx.unknown_name(ref.name)}{hint}", loc, where)
            return None
        if info.quant is not None and not quantized_ok:
            ctx.error(
                f"{role} '{ref.name}' is a block-quantized weight ({info.quant}); it is read-only "
                f"and only read by ops that take one ({self._quantized_takers()})",
                loc,
                where,
            )
            return None
        if info.kind is MemoryKind.PERSISTENT:
            ctx.error(
                f"{role} '{ref.name}' is persistent memory, which is accessed only through cache ops; "
                f"use `cache.read {ref} >> tmp` / `cache.write tmp >> {ref}`",
                loc,
                where,
            )
            return None
        indices = info.table_indices
        if indices:
            if len(ref.indices) != len(indices):
                ctx.error(
                    f"{role} '{ref}': prefix table {ref.name}({', '.join(indices)}) takes "
                    f"{len(indices)} index{'es' if len(indices) > 1 else ''}, got {len(ref.indices)}; "
                    f"write {ref.name}[{', '.join(indices)}]",
                    loc,
                    where,
                )
                return None
            for value in ref.indices:
                self._index(value, loops, loc, where, ref.name)
            self.table_uses.append(TableUse(info, ref, dict(loops), loc, where))
        elif ref.indices:
            ctx.error(f"{role} '{ref}': '{ref.name}' is not a table; remove the index", loc, where)
            return None
        return info

    def _writable(self, info: VarInfo, loc: SourceLoc | None, where: str, role: str) -> bool:
        if info.kind is MemoryKind.CONSTANT:
            self.ctx.error(
                f"{role} '{info.name}' is constant memory, which is read-only; write to a volatile "
                f"variable or an assign instead",
                loc,
                where,
            )
            return False
        if info.kind is MemoryKind.DYNAMIC:
            self.ctx.error(
                f"{role} '{info.name}' is dynamic memory, which only the host writes (Executor.insert); "
                f"write to a volatile variable or an assign instead",
                loc,
                where,
            )
            return False
        return True

    def _same_dims(self, a: tuple[Dim, ...], b: tuple[Dim, ...]) -> bool:
        sa, sb = self.ctx.dims.shape(a), self.ctx.dims.shape(b)
        if sa is not None and sb is not None:
            return sa == sb
        return tuple(str(d) for d in a) == tuple(str(d) for d in b)

    # ---- ops ------------------------------------------------------------------------------
    def _op(self, node: Op, loops: dict[str, Loop], where: str) -> None:
        ctx = self.ctx
        inputs = [
            self._operand(ref, loops, node.loc, where, f"input {i + 1}", quantized_ok=True)
            for i, ref in enumerate(node.inputs)
        ]
        output = self._operand(node.output, loops, node.loc, where, "output")
        if output is not None:
            self._writable(output, node.loc, where, "output")
        self._settings(node, loops, where)
        opdef = self.registry.get(node.op) if self.registry is not None else None
        if opdef is None:
            if self.ctx.strict and self.registry is not None:
                known = self.registry.names()
                ctx.error(
                    f"unknown op '{node.op}'{did_you_mean(node.op, known)}; "
                    f"`openinfer ops` lists the {len(known)} known ops",
                    node.loc,
                    where,
                )
            return
        if not self._quantized_inputs(node, opdef, inputs, where):
            return
        self._infer(node, opdef, inputs, output, where)

    def _quantized_takers(self) -> str:
        """`embedding (table), linear (w), ...`: the inputs that take a block-quantized weight."""
        if self.registry is None:
            return "linear, matmul, embedding, gather"
        takers = []
        for name in self.registry.names():
            opdef = self.registry.get(name)
            names = [spec.name for spec in opdef.inputs if spec.quantized]
            if names:
                takers.append(f"{name} ({', '.join(names)})")
        return ", ".join(takers)

    def _quantized_inputs(
        self, node: Op, opdef: Any, inputs: list[VarInfo | None], where: str
    ) -> bool:
        """Block-quantized inputs only where the op declares it takes one (InputSpec.quantized)."""
        from openinfer_jax.ops.registry import OpCheckError

        quantized = [
            i for i, info in enumerate(inputs) if info is not None and info.quant is not None
        ]
        ok = True
        for index in quantized:
            info = inputs[index]
            assert info is not None
            try:
                problem = opdef.quantized_input_problem(index, dict(node.params), quantized)
            except OpCheckError:
                problem = None  # a bad param: _infer reports it

            if problem is not None:
                self.ctx.error(
                    f"input {index + 1} '{node.inputs[index]}' is a block-quantized weight "
                    f"({info.quant}): {problem}; ops that take one: {self._quantized_takers()}",
                    node.loc,
                    where,
                )
                ok = False
        return ok

    def _settings(self, node: Op, loops: dict[str, Loop], where: str) -> None:
        seen: set[str] = set()
        for key, value in node.params:
            if key in seen:
                self.ctx.error(
                    f"setting '{key}' is given twice; give each setting once", node.loc, where
                )
            seen.add(key)
            if isinstance(value, VarName) and value.name.lower() not in _LITERAL_NAMES:
                info = self.ctx.lookup(value.name)
                if info is None and value.name not in loops:
                    self.ctx.error(
                        f"setting {key}={value.name}: {self.ctx.unknown_name(value.name)}; "
                        f"a setting names a scalar variable or is a literal",
                        node.loc,
                        where,
                    )
                elif info is not None and not info.is_scalar:
                    self.ctx.error(
                        f"setting {key}={value.name}: {info.describe()} is not a scalar; "
                        f"a setting variable must be a scalar",
                        node.loc,
                        where,
                    )

    def _infer(
        self, node: Op, opdef: Any, inputs: list[VarInfo | None], output: VarInfo | None, where: str
    ) -> None:
        from openinfer_jax.ops.registry import OpCheckError

        ctx = self.ctx
        keys = [key for key, _ in node.params]
        if any(info is None for info in inputs) or len(set(keys)) != len(keys):
            return  # already reported; inference would only repeat it
        known = [info for info in inputs if info is not None]
        in_dtypes = [info.dtype for info in known]
        shapes = [info.shape for info in known]  # resolved (or symbolic) when declared
        raw = dict(node.params)
        try:
            if all(s is not None for s in shapes):
                try:
                    out_dtype, out_shape = opdef.infer(in_dtypes, shapes, raw)  # resolves params
                except OpCheckError:
                    if not self._shape_needs_sizes(known, node):
                        raise
                    # Literal sizes in the params (reshape shape=[8]) against symbolic dims:
                    # only the model can tell; check what does not depend on sizes.
                    out_dtype, out_shape = (
                        opdef.output_dtype(in_dtypes, opdef.resolve_params(raw)),
                        None,
                    )
            else:
                out_dtype, out_shape = (
                    opdef.output_dtype(in_dtypes, opdef.resolve_params(raw)),
                    None,
                )
            opdef.check_inplace(node.output.name, [ref.name for ref in node.inputs])
        except OpCheckError as err:
            ctx.error(ctx.dims.humanize(str(err)), node.loc, where)
            return
        if output is None:
            return
        declared = output.shape
        if out_dtype is output.dtype and (
            out_shape is None or declared is None or tuple(out_shape) == declared
        ):
            return
        signature = ", ".join(format_type(i.dtype, i.dims) for i in known)
        if out_dtype is not output.dtype:
            ctx.error(
                f"output '{node.output}' is {format_type(output.dtype, output.dims)} but "
                f"{node.op}({signature}) produces {out_dtype.short}; declare '{node.output.name}' as "
                f"{out_dtype.short}{self._dims_text(output.dims)} or cast first",
                node.loc,
                where,
            )
            return
        if out_shape is not None and declared is not None:
            produced = ctx.dims.show(out_shape)
            ctx.error(
                f"output '{node.output}' has shape {ctx.dims.show(declared)} ({format_type(output.dtype, output.dims)}) "
                f"but {node.op}({signature}) produces shape {produced}; declare '{node.output.name}' "
                f"with shape {produced}",
                node.loc,
                where,
            )

    def _shape_needs_sizes(self, known: list[VarInfo], node: Op) -> bool:
        """True if a shape failure may be an artefact of symbolic sizes: no model, a
        symbolic input dim, and int-list params (shapes, axes, starts) that name real sizes."""
        if not self.ctx.dims.symbolic:
            return False
        symbolic = any(isinstance(d, str) for info in known for d in info.dims)
        literal_sizes = any(
            isinstance(v, tuple) and v and isinstance(v[0], int) for _, v in node.params
        )
        return symbolic and literal_sizes

    @staticmethod
    def _dims_text(dims: tuple[Dim, ...]) -> str:
        return f"[{', '.join(str(d) for d in dims)}]" if dims else ""

    # ---- transfer -------------------------------------------------------------------------
    def _transfer(self, node: Transfer, loops: dict[str, Loop], where: str) -> None:
        src = self._operand(node.src, loops, node.loc, where, "transfer source")
        dst = self._operand(node.dst, loops, node.loc, where, "transfer destination")
        if (
            dst is None
            or not self._writable(dst, node.loc, where, "transfer destination")
            or src is None
        ):
            return
        if src.dtype is not dst.dtype or not self._same_dims(src.dims, dst.dims):
            self.ctx.error(
                f"transfer needs equal dtype and shape: source '{node.src}' is "
                f"{self.ctx.shape_text(src)}, destination '{node.dst}' is {self.ctx.shape_text(dst)}",
                node.loc,
                where,
            )

    # ---- cache ops ----------------------------------------------------------------------------
    def _cache_target(
        self,
        access: CacheAccess,
        loops: dict[str, Loop],
        loc: SourceLoc | None,
        where: str,
        op: str,
        prefix_ok: bool = False,
    ) -> VarInfo | None:
        ctx = self.ctx
        info = ctx.lookup(access.name)
        if info is None:
            ctx.error(f"{op}: {ctx.unknown_name(access.name)}", loc, where)
            return None
        if info.kind is not MemoryKind.PERSISTENT:
            ctx.error(
                f"{op} works on persistent memory, but '{access.name}' is {info.describe()}; "
                f"declare it in `persistent {{ }}` or use op/transfer",
                loc,
                where,
            )
            return None
        indices = info.table_indices
        count = len(access.indices)
        if not indices and count:
            ctx.error(
                f"{op} {access}: '{access.name}' is not a table; write `{access.name}` without an index",
                loc,
                where,
            )
            return None
        flexible = prefix_ok or bool(info.decl and info.decl.auto_dim)
        if indices and count and (count > len(indices) or (count < len(indices) and not flexible)):
            ctx.error(
                f"{op} {access}: table {access.name}({', '.join(indices)}) takes {len(indices)} "
                f"index{'es' if len(indices) > 1 else ''}, got {count}; write "
                f"{access.name}[{', '.join(indices)}] (or {access.name}[] for the whole table)",
                loc,
                where,
            )
            return None
        for item in access.indices:
            if isinstance(item, CacheIndex):
                self._index(item.value, loops, loc, where, access.name)
            elif isinstance(item, CacheSlice):
                for bound in (item.start, item.end):
                    if bound is not None:
                        self._index(bound, loops, loc, where, access.name)
        return info

    def _access_dims(
        self, info: VarInfo, access: CacheAccess
    ) -> tuple[int, tuple[Dim, ...]] | None:
        """(number of leading table dims, entry dims) of what an access yields; None: unchecked."""
        if info.decl is not None and info.decl.auto_dim:
            return None  # auto_dim entries grow; their shape is known only at run time
        indices = info.table_indices
        if not indices:
            return 0, info.dims
        singles = sum(isinstance(i, CacheIndex) for i in access.indices)
        return len(indices) - singles, info.dims

    def _check_entry(
        self,
        op: str,
        node_loc: SourceLoc | None,
        where: str,
        table: VarInfo,
        access: CacheAccess,
        value: VarInfo,
        value_text: str,
    ) -> None:
        ctx = self.ctx
        if value.dtype is not table.dtype:
            ctx.error(
                f"{op}: '{value_text}' is {value.dtype.short} but {access} holds {table.dtype.short}; "
                f"the dtypes must be equal (cast with `op cast(..., to={table.dtype.short})` first)",
                node_loc,
                where,
            )
            return
        shape = self._access_dims(table, access)
        if shape is None:
            return
        leading, entry = shape
        dims = value.dims
        if leading == 0:
            ok = self._same_dims(dims, entry)
            expected = format_type(table.dtype, entry)
        else:
            ok = len(dims) == leading + len(entry) and self._same_dims(dims[leading:], entry)
            expected = (
                f"{table.dtype.short}[{', '.join(['n'] * leading + [str(d) for d in entry])}]"
            )
        if not ok:
            ctx.error(
                f"{op}: '{value_text}' is {format_type(value.dtype, value.dims)} but {access} is "
                f"{expected}; the shapes must match",
                node_loc,
                where,
            )

    def _cache_read(self, node: CacheRead, loops: dict[str, Loop], where: str) -> None:
        table = self._cache_target(node.src, loops, node.loc, where, "cache.read")
        dst = self._operand(node.dst, loops, node.loc, where, "cache.read destination")
        if (
            dst is None
            or not self._writable(dst, node.loc, where, "cache.read destination")
            or table is None
        ):
            return
        self._check_entry("cache.read", node.loc, where, table, node.src, dst, str(node.dst))

    def _cache_write(self, node: CacheWrite, loops: dict[str, Loop], where: str) -> None:
        src = self._operand(node.src, loops, node.loc, where, "cache.write source")
        table = self._cache_target(node.dst, loops, node.loc, where, "cache.write")
        if src is None or table is None:
            return
        self._check_entry("cache.write", node.loc, where, table, node.dst, src, str(node.src))

    def _cache_reset(self, node: CacheReset, loops: dict[str, Loop], where: str) -> None:
        self._cache_target(node.target, loops, node.loc, where, "cache.reset", prefix_ok=True)

    def _counter(
        self, node: CacheIncrement | CacheDecrement, loops: dict[str, Loop], where: str
    ) -> None:
        op = NODE_KINDS[type(node)]
        info = self._cache_target(CacheAccess(node.name), loops, node.loc, where, op)
        if node.amount < 1:
            self.ctx.error(f"{op} {node.amount}: the amount must be >= 1", node.loc, where)
        if info is None:
            return
        if not info.is_scalar or info.dtype.is_packed or info.dtype.name == "BOOL":
            self.ctx.error(
                f"{op} needs a persistent scalar of a non-packed, non-bool dtype, but '{node.name}' is "
                f"{info.describe()}{' (a table)' if info.table_indices else ''}",
                node.loc,
                where,
            )

    # ---- control flow ---------------------------------------------------------------------------
    def _branch(self, node: Branch, loops: dict[str, Loop], where: str) -> None:
        ctx = self.ctx
        for target in (node.then_block, node.else_block):
            if target is not None and target not in self.block_names:
                ctx.error(
                    f"branch target '{target}' is not a block{did_you_mean(target, self.block_names)}; "
                    f"blocks: {', '.join(sorted(self.block_names))}",
                    node.loc,
                    where,
                )
        if node.cond is None:
            if node.else_block is not None:
                ctx.error(
                    "an unconditional branch has no else block; write `branch cond then else;`",
                    node.loc,
                    where,
                )
            return
        if node.else_block is None:
            ctx.error(
                f"conditional branch on '{node.cond}' needs an else block: `branch {node.cond} "
                f"{node.then_block} other_block;`",
                node.loc,
                where,
            )
        info = ctx.lookup(node.cond)
        if info is None:
            ctx.error(f"branch condition {ctx.unknown_name(node.cond)}", node.loc, where)
        elif not info.is_scalar or info.dtype.is_packed:
            ctx.error(
                f"branch condition '{node.cond}' is {info.describe()}; a condition is a non-packed "
                f"scalar (e.g. `assign cond: bool[];`)",
                node.loc,
                where,
            )
        elif info.kind is MemoryKind.PERSISTENT:
            ctx.error(
                f"branch condition '{node.cond}' is persistent; read it with cache.read into a scalar first",
                node.loc,
                where,
            )

    def _bound(
        self, value: int | str, loops: dict[str, Loop], loc: SourceLoc | None, where: str
    ) -> None:
        ctx = self.ctx
        if isinstance(value, int) or value in loops:
            return
        info = ctx.lookup(value)
        if info is not None:
            if not info.is_scalar or not info.dtype.is_int or info.dtype.is_packed:
                ctx.error(
                    f"loop bound '{value}' is {info.describe()}; a bound is an int, a sizevar or a "
                    f"scalar integer variable",
                    loc,
                    where,
                )
            elif info.kind is MemoryKind.PERSISTENT:
                ctx.error(
                    f"loop bound '{value}' is persistent; read it with cache.read into a scalar first",
                    loc,
                    where,
                )
            return
        sizevars = ctx.dims.sizevars
        if sizevars is not None and value not in sizevars:
            ctx.error(
                f"loop bound '{value}' is neither a sizevar of the model nor a variable"
                f"{did_you_mean(value, list(sizevars) + list(ctx.vars))}; sizevars: "
                f"{', '.join(sorted(sizevars)) or 'none'}",
                loc,
                where,
            )

    def _loop(self, node: Loop, loops: dict[str, Loop], where: str) -> None:
        for bound in (node.start, node.end):
            self._bound(bound, loops, node.loc, where)
        if node.index in loops:
            self.ctx.error(
                f"loop index '{node.index}' is already the index of the enclosing loop "
                f"'{loops[node.index].name}'; pick another name",
                node.loc,
                where,
            )
        elif node.index in self.ctx.vars:
            self.ctx.error(
                f"loop index '{node.index}' has the name of {self.ctx.vars[node.index].describe()}; "
                f"pick another name",
                node.loc,
                where,
            )
        inner = {**loops, node.index: node}
        prefix = where.rsplit(", node ", 1)[0] + f", loop '{node.name}'"
        self._nodes(node.body, inner, prefix)

    def _names_exist(self, node: Yield | Await, loops: dict[str, Loop], where: str) -> None:
        for name in node.vars:
            if self.ctx.lookup(name) is None:
                self.ctx.error(
                    f"{NODE_KINDS[type(node)]} {self.ctx.unknown_name(name)}", node.loc, where
                )

    def _return(self, node: Return, loops: dict[str, Loop], where: str) -> None:
        if node.value is not None and self.ctx.lookup(node.value) is None:
            self.ctx.error(f"return {self.ctx.unknown_name(node.value)}", node.loc, where)

    def _dep(self, node: Dep, where: str) -> None:
        position = self._position[id(node)]
        flat = self._flat

        def matches(candidate: Node, name: str) -> bool:
            return NODE_KINDS.get(type(candidate)) == name or (
                isinstance(candidate, Op) and candidate.op == name
            )

        # Search outward from the dep: the node it orders is usually next to it.
        sides = (
            ("after", node.after, range(position - 1, -1, -1)),
            ("before", node.before, range(position + 1, len(flat))),
        )
        for label, name, indices in sides:
            if any(matches(flat[i], name) for i in indices):
                continue
            ops_before = sorted({n.op for n in flat[:position] if isinstance(n, Op)})
            side = "earlier" if label == "after" else "later"
            hint = (
                f"ops before it: {', '.join(ops_before)}"
                if label == "after" and ops_before
                else "an op name or a node kind such as cache.write"
            )
            self.ctx.error(
                f"dep {label}({name}): no {side} node in block '{self._block.name}' is op '{name}' "
                f"or a '{name}' node; expected {hint}",
                node.loc,
                where,
            )


def used_blocks(blocks: Sequence[Block]) -> set[str]:
    """Names of all blocks that some branch targets."""
    return {target for block in blocks for node in walk(block.nodes) for target in node.targets()}
