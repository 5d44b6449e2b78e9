"""Lowering: the graph's nodes become the typed statements of `oi_step` (`c_stmt`).

Node kinds map to C as follows (semantics: the simulator, docs/semantics.md):

* ``op``: a call of a generated kernel (`openinfer_jax.emit.c_kernels`, one per op, dtypes,
  params and, for structured kernels, input shapes); an output that aliases an input of a
  kernel that is not alias-safe goes through the scratch buffer. On the Vulkan target an op
  node with a GPU kernel becomes prepared dispatches instead (`openinfer_jax.emit.vk_program`).
* ``assign``: reset the temporary's shape and zero it (the lifetime pass may drop the zeros).
  ``transfer``: a copy.
* ``loop``: a C ``for`` over int64; ``branch``: the target block inlined in an ``if``
  (a branch is a call, so execution resumes after it); ``return``: a ``goto`` to the end
  of the block being run.
* ``yield``/``await``: consumers run sequentially at entry's yield, each on snapshot copies
  of the variables it writes; at entry's await the one consumer that yields and writes a
  variable copies it back (the simulator's schedule, without threads).
* ``cache.*``: the runtime's `oi_table_*` functions on tables preallocated to capacity;
  overflow returns ``OI_ERR_CACHE_FULL``.
* ``barrier``/``dep``: a comment (the program runs nodes in order).

Every C statement that can fail is wrapped in ``OI_TRY``, which records the block/node.
Besides the statements, lowering collects what the rest of the program needs: the kernels,
consumer shadows, scratch and pack sizes, the undo journal's size, prefix slots and the
run-time yield state (`Lowered`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import SynthesisError
from openinfer_jax.emit.analysis import Analysis, OpInfo, resolve_dims
from openinfer_jax.emit.c_dense import AttentionLayout, EpilogueCode, runtime_headers
from openinfer_jax.emit.c_epilogue import epilogue_code
from openinfer_jax.emit.c_kernels import (
    ALIAS_SAFE,
    ROW_THREADED,
    KernelRequest,
    RuntimeParam,
    matmul_pack_bytes,
    render_kernel,
    runtime_params,
)
from openinfer_jax.emit.c_options import DenseOptions
from openinfer_jax.emit.c_quant import QUANT_HEADER, render_quant_kernel
from openinfer_jax.emit.c_stmt import (
    Access,
    Arm,
    AssignZero,
    CacheStmt,
    Conditional,
    Copy,
    ForLoop,
    Guarded,
    OpCall,
    Raw,
    Stmt,
)
from openinfer_jax.emit.c_trace import TraceSites
from openinfer_jax.emit.c_types import ctype
from openinfer_jax.emit.vk_program import VkOptions, VkState
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
    Loop,
    Node,
    Op,
    Return,
    Transfer,
    VarName,
    VarRef,
    Yield,
)
from openinfer_jax.ir.walk import walk
from openinfer_jax.passes.epilogue import EpiloguePlan

__all__ = ["KernelSet", "Lowered", "Scope", "dims_name", "lower"]


def dims_name(var: str) -> str:
    """The C array holding a variable's declared dims."""
    return f"D_{var}"


def c_string(text: str) -> str:
    """`text` safe inside a C string literal of an error message."""
    return text.replace("\\", "\\\\").replace('"', "'")


@dataclass
class Scope:
    """Names visible while lowering a node list: loop indices and consumer shadows."""

    loops: dict[str, str] = field(default_factory=dict)
    shadows: dict[str, str] = field(default_factory=dict)
    end_label: str = ""
    # (index, C variable) of the loops the simulator's trace reports for a node here: a
    # consumer runs with none (the simulator runs it outside entry's loops).
    traced: tuple[tuple[str, str], ...] = ()

    def inner(self, end_label: str | None = None, shadows: bool = True) -> Scope:
        """A nested scope (a loop body, a branch target; a consumer without `shadows`)."""
        return Scope(
            dict(self.loops),
            dict(self.shadows) if shadows else {},
            self.end_label if end_label is None else end_label,
            self.traced if shadows else (),
        )


class KernelSet:
    """The kernels of a program: one C function per distinct kernel request.

    A request is keyed by op, dtypes and params; structured kernels bake ranks and axes
    in, so they are keyed by input shapes too. This is where a kernel is chosen for an op
    node (`function`).
    """

    def __init__(self, dense: DenseOptions | None = None) -> None:
        self.names: dict[str, str] = {}  # signature -> function name
        self.code: list[str] = []
        self.pack_bytes = 0  # the GEMM's per-thread panels (the f64 matmul's panel of B)
        self.dense = dense or DenseOptions()  # threads and blocking of the f32 GEMM/GEMV
        self.headers: set[str] = set()  # runtime kernel headers <name>.c includes

    def __len__(self) -> int:
        return len(self.names)

    def function(
        self,
        info: OpInfo,
        where: str,
        epilogue: EpilogueCode | None = None,
        constant_inputs: frozenset[int] = frozenset(),
        layout: AttentionLayout | None = None,
    ) -> str:
        """The C function that runs `info` (rendered on first use), with `epilogue` fused;
        `constant_inputs` are the positions of read-only model tensors (packed once)."""
        key = repr(
            (
                info.opdef.name,
                info.in_dtypes,
                info.out_dtype,
                sorted(info.params.items(), key=str),
                info.in_shapes if info.opdef.expr is None else (),
                epilogue,
                sorted(constant_inputs),
                layout,
                info.in_layouts,
            )
        )
        fn = self.names.get(key)
        if fn is None and info.in_layouts:
            # a block-quantized weight: the kernels of openinfer_jax.emit.c_quant
            scheme = next(lay for lay in info.in_layouts if lay is not None).scheme
            fn = f"k{len(self.names)}_{info.opdef.name}_{scheme}"
            self.code.append(render_quant_kernel(fn, info, where))
            self.headers.add(QUANT_HEADER)
            self.names[key] = fn
        elif fn is None:
            first = info.in_dtypes[0].short if info.in_dtypes else "x"
            fn = f"k{len(self.names)}_{info.opdef.name}_{first}" + ("_fused" if epilogue else "")
            request = KernelRequest(fn, info, where, self.dense, epilogue, constant_inputs, layout)
            self.code.append(render_kernel(request))
            self.pack_bytes = max(self.pack_bytes, matmul_pack_bytes(info, self.dense))
            self.headers.update(runtime_headers(info))
            if self.dense.threads > 1 and info.opdef.name in ROW_THREADED:
                self.headers.add("oi_parallel.h")
            self.names[key] = fn
        return fn


@dataclass
class Lowered:
    """The lowered step: its statements and everything else the program needs from them."""

    body: list[Stmt]
    kernels: KernelSet
    shadows: dict[str, tuple[str, str]]  # C name -> (consumer, var)
    scratch_elems: dict[DType, int]
    prefix_slots: list[tuple[str, int]]  # (slot name, bytes): prefix entries copied (Vulkan)
    journal_bytes: int  # undo journal: old bytes of table entries a step may overwrite
    yield_bits: dict[str, int]
    ran: set[str]
    used_labels: set[str]
    vk: VkState | None
    trace: TraceSites

    def yield_state(self, reset: bool) -> list[str]:
        """Declarations (or the step-start resets) of the run-time yield state."""
        if not self.yield_bits:
            return []
        names = ["oi_yielded", *(f"oi_ran_{b}" for b in sorted(self.ran))]
        if reset:
            return [f"    {n} = 0;" for n in names]
        return ["static uint64_t oi_yielded; /* a bit per variable entry has yielded */"] + [
            f"static int {n};" for n in names[1:]
        ]


class _Lowering:
    """One lowering run: positions, accesses, labels, temporaries."""

    def __init__(
        self,
        an: Analysis,
        target: str,
        vk: VkOptions | None,
        dense: DenseOptions | None,
        epilogues: EpiloguePlan | None = None,
    ) -> None:
        self.an = an
        self.epilogues = epilogues or EpiloguePlan()  # elementwise chains fused into kernels
        self.target = target
        # The Vulkan target's placement, dispatches and syncs (None for the C target).
        self.vk = VkState(an, vk or VkOptions({})) if target == "vulkan" else None
        self.kernels = KernelSet(dense)
        self.prefix_slots: list[tuple[str, int]] = []
        self.pos = 0
        self.pending: list[Access] = []  # accesses of the statement being built
        self.used_labels: set[str] = set()
        self.label_count = 0
        self.tmp_count = 0
        self.assign_count = 0
        self.scratch_elems: dict[DType, int] = {}
        self.shadows: dict[str, tuple[str, str]] = {}
        self.yielded: set[str] = set()
        self.ran: set[str] = set()
        # A yield inside a loop of entry: consumers run at the first yield that makes them
        # eligible, decided at run time (flags per consumer, a bit per yielded variable).
        self.yield_bits = _yield_bits(an)
        self.journal_bytes = 0
        self.trace = TraceSites(an, target)

    # ---- bookkeeping ------------------------------------------------------------------
    def touch(self, name: str, scope: Scope, write: bool = False) -> None:
        """Record an access at the current position (reads before writes within a node)."""
        self.pending.append(Access(self.pos, scope.shadows.get(name, name), write))

    def take(self) -> tuple[Access, ...]:
        """The accesses recorded since the last `take` (they belong to the next statement)."""
        out = tuple(self.pending)
        self.pending.clear()
        return out

    def var(self, name: str, scope: Scope) -> str:
        """The C tensor (an lvalue) of variable `name` in `scope`."""
        if name in scope.shadows:
            return scope.shadows[name]
        if name not in self.an.vars and name not in self.an.tables:
            raise SynthesisError(f"{name!r} is neither declared nor assigned")
        return f"V_{name}"

    def label(self, stem: str) -> str:
        self.label_count += 1
        return f"{stem}_{self.label_count}"

    def scalar(self, raw: int | str, scope: Scope, where: str, as_int: bool = True) -> str:
        """A C expression for an index/bound/condition: literal, loop index, variable, sizevar."""
        if isinstance(raw, int):
            return f"INT64_C({raw})"
        if raw in scope.loops:
            return scope.loops[raw]
        info = self.an.vars.get(raw)
        if info is not None:
            if as_int and info.dtype.is_float:
                raise SynthesisError(
                    f"{where}: {raw!r} is {info.dtype.short}; an index or bound must be an integer"
                )
            self.touch(raw, scope)
            fn = "oi_get_i64" if as_int else "oi_get_f64"
            return f"{fn}({self.var(raw, scope)}.data, {info.dtype.code}u)"
        if raw in self.an.sizevars:
            return f"INT64_C({self.an.sizevars[raw]})"
        raise SynthesisError(f"{where}: {raw!r} is not a loop index, variable or sizevar")

    def ref(
        self, ref: VarRef, scope: Scope, where: str, pre: list[str], write: bool = False
    ) -> str:
        """A C expression (address of an oi_tensor) for a use of `ref`; may add setup lines."""
        if not ref.indices:
            self.touch(ref.name, scope, write)
            return f"&{self.var(ref.name, scope)}"
        decl = self.an.prefixes.get(ref.name)
        if decl is None:
            raise SynthesisError(
                f"{where}: {ref} indexes {ref.name!r}, which is not a prefix table"
            )
        self.tmp_count += 1
        tmp = f"P{self.tmp_count}"
        args = ", ".join(self.scalar(i, scope, where) for i in ref.indices)
        pre.append(f"oi_tensor {tmp};")
        if write:  # overrides the entry for the rest of the step (c_prefix.py)
            pre.append(f'OI_TRY(oi_prefix_{ref.name}_write(&{tmp}, {args}), "{where}");')
            return f"&{tmp}"
        slot = "NULL"
        if self.target == "vulkan":
            # The GPU sees only the arena: the model tensor is copied into a slot of it.
            shape = resolve_dims(decl.dims, self.an.sizevars, f"variable {decl.name!r}")
            slot = f"PXS_{self.tmp_count}"
            self.prefix_slots.append((slot, math.prod(shape) * ctype(decl.dtype).size))
        pre.append(f'OI_TRY(oi_prefix_{ref.name}(&{tmp}, {slot}, {args}), "{where}");')
        return f"&{tmp}"

    def traced(self, node: Node, block: str, ref: VarRef, tensor: str, scope: Scope) -> str:
        """The trace statement after `node` wrote `ref` (the C tensor `tensor`); "" for a
        node the passes made (it has no number in the simulator's trace)."""
        return self.trace.call(node, block, str(ref), tensor, self.dtype_of(ref.name), scope.traced)

    def dtype_of(self, name: str) -> DType:
        """The dtype of a variable or of a prefix table's entries."""
        decl = self.an.prefixes.get(name)
        if decl is not None and name not in self.an.vars:
            return decl.dtype
        return self.an.vars[name].dtype

    def bound_of(self, name: str) -> int:
        """Elements a variable (or one entry of a prefix table) can hold."""
        if name in self.an.vars:
            return self.an.vars[name].bound
        decl = self.an.prefixes[name]
        return math.prod(resolve_dims(decl.dims, self.an.sizevars, f"variable {name!r}"))

    # ---- node lists -------------------------------------------------------------------
    def nodes(
        self, nodes: tuple[Node, ...], block: str, scope: Scope, out: list[Stmt], depth: int
    ) -> None:
        """Lower `nodes` of `block` into `out`; each node gets the next execution position."""
        for node in nodes:
            self.pos += 1
            where = c_string(self.an.where(node, block))
            if self.vk is not None and self.vk.node_needs_sync(node, block):
                out.append(Raw((self.vk.sync("", where),)))
            self.node(node, block, scope, out, depth, where)

    def node(
        self, node: Node, block: str, scope: Scope, out: list[Stmt], depth: int, where: str
    ) -> None:
        """Lower one node (dispatch on its kind)."""
        if isinstance(node, Op):
            out += self.op(node, block, scope, where)
        elif isinstance(node, Assign):
            out.append(self.assign(node, scope, where))
        elif isinstance(node, Transfer):
            pre: list[str] = []
            src = self.ref(node.src, scope, where, pre)
            dst = self.ref(node.dst, scope, where, pre, write=True)
            elem = ctype(self.dtype_of(node.dst.name)).size
            trace = self.traced(node, block, node.dst, dst, scope)
            out.append(Copy(dst, src, elem, where, tuple(pre), trace, accesses=self.take()))
        elif isinstance(node, Loop):
            out.append(self.loop(node, block, scope, depth, where))
        elif isinstance(node, Branch):
            out.append(self.branch(node, block, scope, depth, where))
        elif isinstance(node, Return):
            self.used_labels.add(scope.end_label)
            out.append(Raw((f"goto {scope.end_label};",)))
        elif isinstance(node, Yield):
            out += self.on_yield(node, block, scope, depth, where)
        elif isinstance(node, Await):
            out += self.on_await(node, block, scope)
        elif isinstance(node, CacheRead):
            if id(node) not in self.epilogues.absorbed:  # else read in place by an attention
                out.append(self.cache_read(node, block, scope, where))
        elif isinstance(node, CacheWrite):
            out.append(self.cache_write(node, scope, where))
        elif isinstance(node, (CacheIncrement, CacheDecrement)):
            out.append(self.cache_add(node, scope, where))
        elif isinstance(node, CacheReset):
            out.append(self.cache_reset(node, scope, where))
        elif isinstance(node, (Barrier, Dep)):
            kind = type(node).__name__.lower()
            out.append(Raw((f"/* {kind}: nodes already run in program order */",)))
        else:  # pragma: no cover - every IR node kind is listed above
            raise SynthesisError(
                f"{where}: node kind {type(node).__name__} is not supported by the C target"
            )

    def assign(self, node: Assign, scope: Scope, where: str) -> AssignZero:
        self.touch(node.name, scope, write=True)
        key = scope.shadows.get(node.name, node.name)
        info = self.an.vars[self.shadows[key][1] if key in self.shadows else key]
        self.assign_count += 1
        return AssignZero(
            self.assign_count - 1,
            key if key.startswith("S_") else f"V_{key}",
            len(info.shape),
            dims_name(info.name),
            ctype(info.dtype).size,
            where,
            accesses=self.take(),
        )

    def loop(self, node: Loop, block: str, scope: Scope, depth: int, where: str) -> ForLoop:
        lo = self.scalar(node.start, scope, where)
        hi = self.scalar(node.end, scope, where)
        bounds = self.take()
        var = f"L_{node.index}_{depth}"
        start = self.pos
        inner = scope.inner()
        inner.loops[node.index] = var
        inner.traced = (*scope.traced, (node.index, var))
        body: list[Stmt] = []
        self.nodes(node.body, block, inner, body, depth + 1)
        return ForLoop(var, lo, hi, tuple(body), start, self.pos, accesses=bounds)

    # ---- ops --------------------------------------------------------------------------
    def op(self, node: Op, block: str, scope: Scope, where: str) -> list[Stmt]:
        if id(node) in self.epilogues.absorbed:  # runs in the epilogue of the node before
            return []
        info = self.bind_params(self.an.ops[id(node)], scope, where)
        chain = self.epilogues.by_anchor.get(id(node)) if self.vk is None else None
        view = self.epilogues.views.get(id(node)) if self.vk is None else None
        inputs = (*view.inputs, *node.inputs[3:]) if view else node.inputs
        output = view.output if view else node.output
        code = None
        if chain is not None:
            infos = [self.an.ops[id(op)] for op in chain.ops]
            wheres = [self.an.where(op, "epilogue") for op in chain.ops]
            code = epilogue_code(node.output.name, chain.ops, infos, wheres)
        # Packed once by address: only in the C target, where a model tensor's address always
        # holds the same data (the Vulkan target's host nodes read staging copies it reuses).
        constant = frozenset(
            i for i, r in enumerate(node.inputs) if self.vk is None and self.constant_tensor(r.name)
        )
        fn = self.kernels.function(info, where, code, constant, view.layout if view else None)
        out: list[Stmt] = []
        if self.vk is not None:
            lines, on_gpu = self.vk.op_node(self, node, info, fn, scope, where)
            out.append(Raw(tuple(lines), accesses=self.take()))
            if on_gpu:  # (a GPU node never writes a prefix entry: its output is a variable)
                tensor = f"&{self.var(node.output.name, scope)}"
                trace = self.traced(node, block, node.output, tensor, scope)
                out += [Raw((trace,))] if trace else []
                return out
        pre: list[str] = []
        tables = view.tables if view else ()
        args = [
            self.table_view(tables[k], scope, where, pre)  # type: ignore[arg-type]
            if k < len(tables) and tables[k] is not None
            else self.ref(r, scope, where, pre)
            for k, r in enumerate(inputs)
        ]
        args += self.param_args(node, info, scope, where, pre)
        if chain is not None:  # the chain's other operands, then where its result goes
            running = node.output.name
            for op in chain.ops:
                args += [self.ref(r, scope, where, pre) for r in op.inputs if r.name != running]
                running = op.output.name
        dst = self.ref(output, scope, where, pre, write=True)
        # in place (a view): the value reaches memory as the output of the last absorbed node
        writer = (
            next(
                (n for n in view.absorbed if isinstance(n, Op) and n.output.name == output.name),
                node,
            )
            if view
            else node
        )
        traces = [self.traced(writer, block, output, dst, scope)]
        if chain is not None:
            final = self.ref(chain.output, scope, where, pre, write=True)
            args.append(final)
            traces = self.chain_traces(node, chain.ops, block, dst, final, scope)
        out_name = output.name
        # Entries of one prefix table may be the same entry at run time: go through scratch.
        aliased = any(r.name == out_name and (not r.indices or output.indices) for r in inputs)
        same_shape = all(
            s == info.out_shape for r, s in zip(inputs, info.in_shapes) if r.name == out_name
        )
        scratch = None
        if aliased and not (info.opdef.name in ALIAS_SAFE and same_shape):
            scratch = self.bound_of(out_name)
            self.scratch_elems[info.out_dtype] = max(
                self.scratch_elems.get(info.out_dtype, 0), scratch
            )
        call = OpCall(
            fn, dst, tuple(args), where, tuple(pre), scratch, ctype(info.out_dtype).size,
            tuple(t for t in traces if t), accesses=self.take(),
        )  # fmt: skip
        return [*out, call]

    def chain_traces(
        self, anchor: Op, ops: tuple[Op, ...], block: str, dst: str, final: str, scope: Scope
    ) -> list[str]:
        """Trace records after a kernel with a fused epilogue: the anchor's own value when no
        op of the chain overwrites it, and the chain's result under its last node (the values
        in between never reach memory, so those nodes are not traced)."""
        out = []
        if all(op.output.name != anchor.output.name for op in ops):
            out.append(self.traced(anchor, block, anchor.output, dst, scope))
        out.append(self.traced(ops[-1], block, ops[-1].output, final, scope))
        return out

    def table_view(self, node: CacheRead, scope: Scope, where: str, pre: list[str]) -> str:
        """The cache read `node`, done where its reader runs: a tensor pointing into the
        table's storage (contiguous entries), else the entries copied into `node.dst`."""
        name = node.src.name
        sel, n = self.selection(node.src, scope, where, pre)
        self.touch(name, scope)
        fallback = self.ref(node.dst, scope, where, pre, write=True)
        self.tmp_count += 1
        tmp = f"TV{self.tmp_count}"
        pre.append(f"oi_tensor {tmp};")
        pre.append(f'OI_TRY(oi_table_view(&TB_{name}, {sel}, {n}, {fallback}, &{tmp}), "{where}");')
        return f"&{tmp}"

    def constant_tensor(self, name: str) -> bool:
        """A model tensor (or prefix-table entry) no node writes: the same data every step."""
        if name in self.an.prefixes:
            return self.an.read_only(name)
        info = self.an.vars.get(name)
        return (
            info is not None
            and info.kind in ("volatile", "constant")
            and info.source == "tensor"
            and self.an.read_only(name)
        )

    def bind_params(self, info: OpInfo, scope: Scope, where: str) -> OpInfo:
        """`info` with the params given as names resolved like the simulator does: a loop
        index or a variable (scalar, persistent scalar) is read each time the op runs
        (`RuntimeParam`); validation rejects any other name."""
        named = {k: v for k, v in info.params.items() if isinstance(v, VarName)}
        if not named:  # (the Vulkan target runs such nodes on the host)
            return info
        params = dict(info.params)
        for key, value in named.items():
            if value.name in scope.loops or value.name in self.an.vars:
                params[key] = RuntimeParam(key)
            else:
                raise SynthesisError(
                    f"{where}: param {key}={value.name} names neither a scalar variable nor a loop "
                    "index"
                )
        return dataclasses.replace(info, params=params)

    def param_args(
        self, node: Op, info: OpInfo, scope: Scope, where: str, pre: list[str]
    ) -> list[str]:
        """Kernel arguments of the params read at run time (`bind_params`), in the kernel's
        order; a variable is checked to hold one element and read when the op runs."""
        named = self.an.ops[id(node)].params
        out = []
        for key in runtime_params(info):
            vname = named[key].name
            if vname in scope.loops:
                out.append(f"oi_param_i64({scope.loops[vname]})")
                continue
            self.touch(vname, scope)
            self.tmp_count += 1
            q = f"Q{self.tmp_count}"
            code = self.an.vars[vname].dtype.code
            pre.append(f"oi_param {q};")
            pre.append(f'OI_TRY(oi_param_of(&{self.var(vname, scope)}, {code}u, &{q}), "{where}");')
            out.append(q)
        return out

    # ---- control flow -----------------------------------------------------------------
    def branch(self, node: Branch, block: str, scope: Scope, depth: int, where: str) -> Conditional:
        if depth > 40:
            raise SynthesisError(
                f"{where}: branches nest too deep (a block that branches to itself?)"
            )
        cond = None
        if node.cond is not None:
            info = self.an.vars.get(node.cond)
            if info is not None and info.dtype.is_packed:
                raise SynthesisError(
                    f"{where}: branch condition {node.cond!r} is packed; use a non-packed scalar"
                )
            cond = self.scalar(node.cond, scope, where, as_int=False)
        accesses = self.take()
        targets = [node.then_block] if node.cond is None else [node.then_block, node.else_block]
        arms = []
        for target in targets:
            assert target is not None
            blk = self.an.graph.block(target)
            assert blk is not None
            end = self.label(f"end_{target}")
            body: list[Stmt] = []
            self.nodes(blk.nodes, target, scope.inner(end), body, depth + 1)
            arms.append(Arm(tuple(body), end if end in self.used_labels else None))
        return Conditional(cond, tuple(arms), accesses=accesses)

    def on_yield(self, node: Yield, block: str, scope: Scope, depth: int, where: str) -> list[Stmt]:
        if block != self.an.entry.name:
            self.used_labels.add(scope.end_label)
            return [Raw((f"goto {scope.end_label}; /* a consumer's yield ends it */",))]
        if self.yield_bits:
            return self.dynamic_yield(node, scope, depth, where)
        self.yielded |= set(node.vars)
        out: list[Stmt] = []
        for blk in self.an.consumers:
            if blk.name in self.ran or not _awaits(blk) <= self.yielded:
                continue
            self.ran.add(blk.name)
            out.append(
                Raw((f"/* consumer {blk.name}: runs here on snapshots of what it writes */",))
            )
            out += self.consumer_body(blk, scope, depth, where)
        return out

    def consumer_body(self, blk: Block, scope: Scope, depth: int, where: str) -> list[Stmt]:
        """A consumer block run in place: snapshot copies of the variables it writes (its
        writes go to the shadows), then its nodes, then its end label if a return uses it."""
        inner = scope.inner(self.label(f"end_{blk.name}"), shadows=False)
        out: list[Stmt] = []
        for var in sorted(self.an.consumer_writes[blk.name]):
            if var not in self.an.vars:
                continue
            cname = f"S_{blk.name}_{var}"
            self.shadows[cname] = (blk.name, var)
            inner.shadows[var] = cname
            self.touch(var, scope)
            size = ctype(self.an.vars[var].dtype).size
            line = f'OI_TRY(oi_copy(&{cname}, &V_{var}, {size}), "{where}");'
            out.append(Raw((line,), accesses=self.take()))
        self.nodes(blk.nodes, blk.name, inner, out, depth)
        if inner.end_label in self.used_labels:
            out.append(Raw((f"{inner.end_label}:;",)))
        return out

    def dynamic_yield(self, node: Yield, scope: Scope, depth: int, where: str) -> list[Stmt]:
        """A yield when some yield of entry is inside a loop: mark the variables yielded, then
        run each consumer that has not run in this step and whose awaited variables have all
        been yielded (the simulator's rule, evaluated at run time, in declaration order)."""
        bits = self.yield_bits
        mask = sum(1 << bits[v] for v in node.vars)
        out: list[Stmt] = [Raw((f"oi_yielded |= UINT64_C({mask});",))]
        for blk in self.an.consumers:
            awaits = _awaits(blk)
            if not awaits <= set(bits):
                continue  # never eligible: entry never yields all of it
            need = sum(1 << bits[v] for v in awaits)
            self.ran.add(blk.name)
            head = f"if (!oi_ran_{blk.name} && (oi_yielded & UINT64_C({need})) == UINT64_C({need}))"
            body: list[Stmt] = [
                Raw((f"oi_ran_{blk.name} = 1; /* consumer {blk.name}, on snapshots */",))
            ]
            body += self.consumer_body(blk, scope, depth + 1, where)
            out.append(Guarded(head, tuple(body)))
        return out

    def on_await(self, node: Await, block: str, scope: Scope) -> list[Stmt]:
        if block != self.an.entry.name:
            return []
        out: list[Stmt] = []
        for var in node.vars:
            writers = [
                blk.name
                for blk in self.an.consumers
                if blk.name in self.ran
                and var in self.an.consumer_writes[blk.name]
                and any(isinstance(n, Yield) and var in n.vars for n in blk.nodes)
            ]
            if len(writers) > 1:
                raise SynthesisError(
                    f"await {var}: consumers {', '.join(writers)} both mutate {var!r}; only one may"
                )
            if writers:
                self.touch(var, scope)
                size = ctype(self.an.vars[var].dtype).size
                guard = f"if (oi_ran_{writers[0]}) " if self.yield_bits else ""
                line = f'{guard}OI_TRY(oi_copy(&V_{var}, &S_{writers[0]}_{var}, {size}), "await {var}");'
                out.append(Raw((line,), accesses=self.take()))
        return out

    # ---- caches -----------------------------------------------------------------------
    def selection(
        self, access: CacheAccess, scope: Scope, where: str, out: list[str]
    ) -> tuple[str, int]:
        """The `oi_sel` array of a cache access (declared into `out`) and its length."""
        sels = []
        for idx in access.indices:
            if isinstance(idx, CacheIndex):
                sels.append(f"{{0, 0, 0, {self.scalar(idx.value, scope, where)}, 0}}")
            else:
                assert isinstance(idx, CacheSlice)
                lo = "0" if idx.start is None else self.scalar(idx.start, scope, where)
                hi = "0" if idx.end is None else self.scalar(idx.end, scope, where)
                sels.append(
                    f"{{1, {int(idx.start is not None)}, {int(idx.end is not None)}, {lo}, {hi}}}"
                )
        if not sels:
            return "NULL", 0
        self.tmp_count += 1
        name = f"sel{self.tmp_count}"
        out.append(f"oi_sel {name}[{len(sels)}] = {{{', '.join(sels)}}};")
        return name, len(sels)

    def persistent(self, name: str, where: str) -> None:
        """Check that `name` is a persistent variable (not a table)."""
        info = self.an.vars.get(name)
        if info is None or info.kind != "persistent":
            raise SynthesisError(f"{where}: {name!r} is not a persistent variable")

    def cache_read(self, node: CacheRead, block: str, scope: Scope, where: str) -> CacheStmt:
        pre: list[str] = []
        lines: list[str] = []
        name = node.src.name
        if name in self.an.tables:
            sel, n = self.selection(node.src, scope, where, lines)
            self.touch(name, scope)
            dst = self.ref(node.dst, scope, where, pre, write=True)
            lines += pre  # a prefix entry's overlay
            lines.append(f'OI_TRY(oi_table_read(&TB_{name}, {sel}, {n}, {dst}), "{where}");')
            lines += _nonempty(self.traced(node, block, node.dst, dst, scope))
            return CacheStmt(tuple(lines), accesses=self.take())
        self.persistent(name, where)
        if node.src.indices:
            raise SynthesisError(f"{where}: {name!r} is not a table; read it without indices")
        info = self.an.vars[name]
        _check_dtype(info.dtype, self.dtype_of(node.dst.name), where)
        self.touch(name, scope)
        dst = self.ref(node.dst, scope, where, pre, write=True)
        lines += pre  # a prefix entry's overlay
        size = ctype(info.dtype).size
        lines.append(f'OI_TRY(oi_copy({dst}, &V_{name}, {size}), "{where}");')
        lines += _nonempty(self.traced(node, block, node.dst, dst, scope))
        return CacheStmt(tuple(lines), accesses=self.take())

    def cache_write(self, node: CacheWrite, scope: Scope, where: str) -> CacheStmt:
        lines: list[str] = []
        src = self.ref(node.src, scope, where, lines)
        name = node.dst.name
        src_dtype = (
            self.an.vars[node.src.name].dtype
            if not node.src.indices
            else self.an.prefixes[node.src.name].dtype
        )
        if name in self.an.tables:
            _check_dtype(self.an.tables[name].dtype, src_dtype, where)
            sel, n = self.selection(node.dst, scope, where, lines)
            self.touch(name, scope)
            self.journal_bytes += self.block_bytes(name, node.dst)
            lines.append(f'OI_TRY(oi_table_write(&TB_{name}, {sel}, {n}, {src}), "{where}");')
            return CacheStmt(tuple(lines), accesses=self.take())
        self.persistent(name, where)
        info = self.an.vars[name]
        _check_dtype(info.dtype, src_dtype, where)
        self.touch(name, scope)
        lines.append(
            f"OI_TRY(oi_write_whole(&V_{name}, {src}, {len(info.shape)}, {dims_name(name)}, "
            f'{ctype(info.dtype).size}), "{where}");'
        )
        return CacheStmt(tuple(lines), accesses=self.take())

    def cache_add(self, node: CacheIncrement | CacheDecrement, scope: Scope, where: str) -> Raw:
        info = self.an.vars.get(node.name)
        if info is None or info.kind != "persistent" or info.shape:
            raise SynthesisError(f"{where}: {node.name!r} is not a persistent scalar")
        delta = node.amount if isinstance(node, CacheIncrement) else -node.amount
        self.touch(node.name, scope)
        line = f"oi_add_scalar(V_{node.name}.data, {info.dtype.code}u, INT64_C({delta}));"
        return Raw((line,), accesses=self.take())

    def cache_reset(self, node: CacheReset, scope: Scope, where: str) -> CacheStmt:
        name = node.target.name
        lines: list[str] = []
        if name in self.an.tables:
            sel, n = self.selection(node.target, scope, where, lines)
            self.touch(name, scope)
            self.journal_bytes += self.block_bytes(name, node.target)
            lines.append(f'OI_TRY(oi_table_reset(&TB_{name}, {sel}, {n}), "{where}");')
        else:
            self.persistent(name, where)
            self.touch(name, scope)
            lines.append(f'OI_TRY(oi_init_{name}(), "{where}");')
        return CacheStmt(tuple(lines), accesses=self.take())

    def block_bytes(self, name: str, access: CacheAccess) -> int:
        """Journal bytes one write/reset of `access` may need (entries it can overwrite + records)."""
        table = self.an.tables[name]
        if table.autod:
            # Auto-dim tables journal every row a write or reset overwrites: at most the
            # whole storage minus the table axes a scalar index picks, one record a row.
            dims = list(table.storage)
            axes = [k for k, a in enumerate(table.autod) if a < 0]
            for pos, k in enumerate(axes):
                idx = access.indices[k] if k < len(access.indices) else None
                if isinstance(idx, CacheIndex):
                    dims[pos] = 1
            rows = math.prod(dims[:-1]) if len(dims) > 1 else 1
            return math.prod(dims) * ctype(table.dtype).size + rows * 32
        entries = 1
        for k, cap in enumerate(table.caps):
            idx = access.indices[k] if k < len(access.indices) else None
            if idx is None or isinstance(idx, CacheSlice):
                entries *= cap
        entry_bytes = math.prod(table.entry) * ctype(table.dtype).size
        return entries * (entry_bytes + 32)


def _nonempty(line: str) -> list[str]:
    return [line] if line else []


def _check_dtype(want: DType, got: DType, where: str) -> None:
    if want is not got:
        raise SynthesisError(
            f"{where}: dtype {got.short} does not match the persistent variable's {want.short}"
        )


def _awaits(blk: Block) -> set[str]:
    return {v for n in blk.nodes if isinstance(n, Await) for v in n.vars}


def _yield_bits(an: Analysis) -> dict[str, int]:
    """Variable -> bit of the run-time yield state, when some yield of entry is inside a
    loop (else empty: consumers are placed at synthesis)."""
    nested = any(
        isinstance(n, Yield) for loop in an.entry.nodes if isinstance(loop, Loop)
        for n in walk(loop.body)
    )  # fmt: skip
    if not nested:
        return {}
    names = sorted({v for n in walk(an.entry.nodes) if isinstance(n, Yield) for v in n.vars})
    if len(names) > 64:
        raise SynthesisError(
            f"entry yields {len(names)} variables with a yield inside a loop; the C target tracks at most 64"
        )
    return {v: k for k, v in enumerate(names)}


def lower(
    an: Analysis,
    target: str = "c",
    vk: VkOptions | None = None,
    dense: DenseOptions | None = None,
    epilogues: EpiloguePlan | None = None,
) -> Lowered:
    """Lower the step of `an` (entry, with branch targets and consumers inlined); `dense`
    sets the threads and blocking of the f32 GEMM/GEMV kernels; `epilogues` the elementwise
    chains fused into them (C target).

    Raises:
        SynthesisError: a node the C target cannot express, naming the node and the limit.
    """
    low = _Lowering(an, target, vk, dense, epilogues)
    body: list[Stmt] = []
    low.nodes(an.entry.nodes, an.entry.name, Scope(end_label="step_end"), body, 1)
    for blk in an.consumers:
        if blk.name not in low.ran:
            raise SynthesisError(
                f"block {blk.name}: consumer never runs (entry never yields all of what it awaits)"
            )
    return Lowered(
        body,
        low.kernels,
        low.shadows,
        low.scratch_elems,
        low.prefix_slots,
        low.journal_bytes,
        low.yield_bits,
        low.ran,
        low.used_labels,
        low.vk,
        low.trace,
    )
