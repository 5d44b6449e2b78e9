"""The Vulkan target's part of program generation: GPU placement, dispatch tables, syncs.

The Vulkan program is the C program (same control flow, arena, API) with op nodes that have
a GPU kernel dispatched on the device instead of calling their C kernel:

* **Placement.** An op node runs on the GPU when `vk_kernels.plan_vk_op` finds kernels for
  it (the simulator backend's GLSL generators) and its output does not overwrite an input the
  kernel still reads. Nodes whose shapes change at run time (cache-slice consumers) get one
  prepared variant per slice length (`vk_variants`). Every other op node runs its C kernel on
  the host, on the same host-visible coherent arena. `VkReport` counts both and says why each
  host node is there; ``strict=True`` turns any host node into a `SynthesisError` naming it.
* **Dispatches.** Each GPU node becomes one or more prepared dispatches (norms: a statistics
  pass then an apply pass): a descriptor set allocated at `oi_init` whose bindings are
  (arena, offset, range) slices, the push-constant words and the grid, all baked; shape
  variants share the descriptor sets, preloaded prefix-table entries get one set each. At run
  time the node picks the variant whose input shapes match (and the entry by its index) and
  records its dispatches; with no match it runs the C kernel instead.
* **Batching.** Dispatches are recorded into one command buffer with compute->compute
  barriers; `oi_vk_sync()` (submit + wait) is emitted before every statement that touches
  arena memory on the host: host op nodes, transfers, cache ops, zeroing assigns, loop bounds
  and branch conditions read from variables, consumer snapshots, and the end of the step.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from openinfer_jax.core.errors import SynthesisError
from openinfer_jax.emit.analysis import Analysis, OpInfo, resolve_dims
from openinfer_jax.emit.c_kernels import ALIAS_SAFE, runtime_params
from openinfer_jax.emit.c_types import ctype
from openinfer_jax.emit.vk_kernels import VkOpPlan, compile_spirv, plan_vk_op
from openinfer_jax.ir.nodes import (
    Await,
    Branch,
    CacheDecrement,
    CacheIncrement,
    CacheRead,
    CacheReset,
    CacheSlice,
    CacheWrite,
    Loop,
    Node,
    Op,
    Transfer,
    Yield,
)
from openinfer_jax.ir.walk import walk

if TYPE_CHECKING:
    from openinfer_jax.emit.memory import MemoryPlan

__all__ = ["ALIGN", "VkOptions", "VkReport", "VkState", "runtime_shaped"]

#: Arena alignment of the Vulkan target: binding offsets must be multiples of the device's
#: minStorageBufferOffsetAlignment, at most 256 on every known device (checked at oi_init).
ALIGN = 256


@dataclass(frozen=True)
class VkOptions:
    """What the Vulkan target takes from the device JSON and `synthesize`'s arguments."""

    features: Mapping[str, bool]
    tiles: str = "small"
    strict: bool = False
    # slice length -> id(op node) -> OpInfo at that length (`vk_variants.shape_variants`)
    variants: Mapping[int, Mapping[int, OpInfo]] = field(default_factory=dict)
    # prefix table -> number of entries (indices 0..n-1) preloaded into the arena at oi_init
    prefix_counts: Mapping[str, int] = field(default_factory=dict)
    shared_memory: int = 32768  # limits.max_shared_memory_bytes
    split_keys: bool = True  # device.type == "gpu"


@dataclass(frozen=True)
class VkReport:
    """Where the op nodes of a Vulkan program run. `host` lists (node, reason)."""

    gpu: int
    host: tuple[tuple[str, str], ...]
    dispatches: int
    pipelines: int
    sync_points: int
    variant_nodes: int = 0

    def reasons(self) -> dict[str, int]:
        """Host-node count per reason."""
        out: dict[str, int] = {}
        for _where, why in self.host:
            out[why] = out.get(why, 0) + 1
        return dict(sorted(out.items()))

    def summary(self) -> list[str]:
        """Lines for `Plan.summary`: GPU vs host op nodes, why, dispatches, sync points."""
        lines = [
            f"vulkan: {self.gpu} op nodes on the GPU ({self.variant_nodes} with run-time shapes; "
            f"{self.dispatches} prepared dispatches, {self.pipelines} pipelines), "
            f"{len(self.host)} on the host; "
            f"{self.sync_points} sync points (submit + wait) in the step code"
        ]
        for why, count in self.reasons().items():
            lines.append(f"  host x{count}: {why}")
        return lines


def runtime_shaped(an: Analysis) -> set[str]:
    """Variables whose shape may change at run time: read from a cache-table slice, or
    computed (op, transfer) from such a variable."""
    nodes = [n for blk in an.graph.blocks for n in walk(blk.nodes)]
    dyn: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in nodes:
            target: str | None = None
            if isinstance(node, CacheRead) and node.src.name in an.tables:
                caps = an.tables[node.src.name].caps
                idx = node.src.indices
                if len(idx) < len(caps) or any(isinstance(i, CacheSlice) for i in idx):
                    target = node.dst.name
            elif isinstance(node, Op) and any(r.name in dyn for r in node.inputs):
                target = node.output.name
            elif isinstance(node, Transfer) and node.src.name in dyn:
                target = node.dst.name
            if target is not None and target not in dyn:
                dyn.add(target)
                changed = True
    return dyn


@dataclass
class _Dispatch:
    pipeline: int
    bindings: list[tuple[str, int]]  # (C address expression, range bytes)
    push: list[int]
    grid: tuple[int, int, int]
    where: str
    like: int | None = None  # a shape variant: the descriptor set of dispatch `like`


@dataclass(frozen=True)
class _Variant:
    """One prepared shape of a GPU node: input shapes, output shape, dispatches."""

    in_shapes: tuple[tuple[int, ...], ...]
    out_shape: tuple[int, ...]
    plan: VkOpPlan


@dataclass
class VkState:
    """Everything the Vulkan target accumulates while the C generator walks the graph."""

    an: Analysis
    options: VkOptions
    dyn: set[str] = field(default_factory=set)
    sources: dict[str, int] = field(default_factory=dict)  # GLSL -> pipeline id
    labels: list[str] = field(default_factory=list)
    bindings: list[int] = field(default_factory=list)  # binding count per pipeline
    dispatches: list[_Dispatch] = field(default_factory=list)
    gpu_nodes: int = 0
    variant_nodes: int = 0
    host: list[tuple[str, str]] = field(default_factory=list)
    scratch: list[int] = field(default_factory=list)  # bytes of scratch buffer k
    constants: dict[bytes, int] = field(default_factory=dict)  # bytes -> constant id
    needs: set[str] = field(default_factory=set)
    syncs: int = 0
    preloaded: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # count, stride, bytes

    def __post_init__(self) -> None:
        self.dyn = runtime_shaped(self.an)

    # ---- placement ---------------------------------------------------------------------
    def placement(self, node: Op, info: OpInfo, alias_ok: bool) -> list[_Variant] | str:
        """The prepared shapes of a GPU op node (one unless its shapes change at run
        time), or why it runs on the host."""
        if info.in_layouts:
            # the weight stays packed in the loaded model, which only the host reads
            return "block-quantized weight (C kernel on the host)"
        aliased = any(r.name == node.output.name and not r.indices for r in node.inputs)
        if aliased and not alias_ok:
            return "output overwrites an input the kernel still reads"
        dyn = [r.name for r in node.inputs if r.name in self.dyn]
        if not dyn:
            plan = self._plan_op(info, aliased)
            if isinstance(plan, str):
                return plan
            return [_Variant(info.in_shapes, info.out_shape, plan)]
        variants: list[_Variant] = []
        seen: set[tuple[tuple[int, ...], ...]] = set()
        reason = f"run-time shape (from a cache slice: {dyn[0]})"
        for length in sorted(self.options.variants):
            at = self.options.variants[length].get(id(node))
            if at is None or at.in_shapes in seen or math.prod(at.out_shape) == 0:
                continue
            plan = self._plan_op(at, aliased)
            if isinstance(plan, str):
                reason = f"{plan} (run-time shape)"
                continue
            if variants and [s.roles for s in plan.steps] != [
                s.roles for s in variants[0].plan.steps
            ]:
                continue
            seen.add(at.in_shapes)
            variants.append(_Variant(at.in_shapes, at.out_shape, plan))
        return variants or reason

    def op_node(
        self, gen: Any, node: Op, info: OpInfo, fn: str, scope: Any, where: str
    ) -> tuple[list[str], bool]:
        """The C lines of `node` as GPU dispatches and True; or, after recording why it runs
        on the host, the sync before it and False (the C kernel call follows).

        `gen` is the C lowering (`c_lower._Lowering`): its `ref`/`var`/`scalar` give the C
        tensors. A prefix-table input indexed by a literal or a loop index reads its entry
        from the arena, where every entry was copied at oi_init (one descriptor set per entry);
        other prefix inputs are copied into an arena slot on the host first (a sync).
        """
        if runtime_params(info):  # GPU kernels bake their params
            self.host_node(where, "params read at run time")
            return [self.sync("", where)], False
        if node.output.indices:  # the C path writes the entry's overlay on the host
            self.host_node(where, "writes a prefix-table entry")
            return [self.sync("", where)], False
        same_shape = all(
            s == info.out_shape
            for r, s in zip(node.inputs, info.in_shapes)
            if r.name == node.output.name
        )
        placed = self.placement(node, info, info.opdef.name in ALIAS_SAFE and same_shape)
        if isinstance(placed, str):
            self.host_node(where, placed)
            return [self.sync("", where)], False
        pre: list[str] = []
        fallback: list[str] = []  # prefix lookups of the host path (model memory, no copy)
        inputs: list[tuple[str, str, int]] = []
        index: tuple[str, int] | None = None  # (C index expression, entries)
        preload: dict[int, tuple[str, int]] = {}  # input k -> (table, stride)
        for k, r in enumerate(node.inputs):
            table = self._preloadable(r, scope)
            if table is not None:
                expr = gen.scalar(r.indices[0], scope, where)
                count, stride, nbytes = self.preloaded[table]
                if index is None or index[0] == expr:
                    index = (expr, count)
                    gen.tmp_count += 1
                    tmp = f"P{gen.tmp_count}"
                    fallback.append(f"oi_tensor {tmp};")
                    fallback.append(f'OI_TRY(oi_prefix_{table}(&{tmp}, NULL, {expr}), "{where}");')
                    preload[k] = (table, stride)
                    inputs.append((f"&{tmp}", f"OI_VK_PREFIX_{table}", nbytes))
                    continue
            tensor = gen.ref(r, scope, where, pre)
            if r.indices:  # a prefix-table entry, copied into its arena slot first
                slot, nbytes = gen.prefix_slots[-1]
                inputs.append((tensor, slot, nbytes))
            else:
                cname = gen.var(r.name, scope)
                inputs.append(
                    (tensor, f"(unsigned char *){cname}.data", tensor_bytes(self.an, r.name))
                )
        dst = gen.ref(node.output, scope, where, pre, write=True)
        cname = gen.var(node.output.name, scope)
        target = (dst, f"(unsigned char *){cname}.data", tensor_bytes(self.an, node.output.name))
        call = f"{fn}({dst}, {', '.join(t for t, _a, _n in inputs)})"
        lines = self.emit_gpu_op(placed, inputs, target, call, pre, where, index, preload, fallback)
        return lines, True

    def _preloadable(self, ref: Any, scope: Any) -> str | None:
        """The prefix table of `ref` when its entries can be preloaded (see `op_node`)."""
        if len(ref.indices) != 1 or ref.name not in self.options.prefix_counts:
            return None
        idx = ref.indices[0]
        if not (isinstance(idx, int) or idx in scope.loops):
            return None  # a variable: reading it needs the host
        if ref.name not in self.preloaded:
            decl = self.an.prefixes[ref.name]
            shape = resolve_dims(decl.dims, self.an.sizevars, f"variable {ref.name!r}")
            nbytes = prefix_bytes(shape, decl.dtype)
            stride = (max(nbytes, 4) + ALIGN - 1) // ALIGN * ALIGN
            self.preloaded[ref.name] = (self.options.prefix_counts[ref.name], stride, nbytes)
        return ref.name

    def _plan_op(self, info: OpInfo, inplace: bool) -> VkOpPlan | str:
        opts = self.options
        return plan_vk_op(
            info,
            opts.features,
            opts.tiles,
            inplace=inplace,
            shared_memory=opts.shared_memory,
            split_keys=opts.split_keys,
        )

    def host_node(self, where: str, reason: str) -> None:
        """Record a host op node (a SynthesisError in strict mode)."""
        if self.options.strict:
            raise SynthesisError(
                f"{where}: runs on the host in the Vulkan target ({reason}); strict mode "
                "allows only GPU op nodes (synthesize without strict=True to run it on the host)"
            )
        self.host.append((where, reason))

    def sync(self, ind: str, where: str) -> str:
        """The C statement that submits pending dispatches and waits (before host work),
        indented by `ind`."""
        self.syncs += 1
        return f'{ind}OI_TRY(oi_vk_sync(), "{where}");'

    def _pipeline(self, kernel: Any, n_bindings: int) -> int:
        pid = self.sources.get(kernel.source)
        if pid is None:
            pid = len(self.sources)
            self.sources[kernel.source] = pid
            self.labels.append(kernel.label)
            self.bindings.append(n_bindings)
        return pid

    def _roles(
        self, plan: VkOpPlan, io: Mapping[str, tuple[str, int]]
    ) -> dict[str, tuple[str, int]]:
        roles = dict(io)
        for k, nbytes in enumerate(plan.scratch):
            if k == len(self.scratch):
                self.scratch.append(0)
            self.scratch[k] = max(self.scratch[k], nbytes)
            roles[f"scratch{k}"] = (f"OI_VK_SCRATCH{k}", nbytes)
        for k, data in enumerate(plan.constants):
            cid = self.constants.setdefault(data, len(self.constants))
            roles[f"const{k}"] = (f"OI_VK_CONST{cid}", len(data))
        return roles

    def add_variants(
        self, variants: list[_Variant], io: Mapping[str, tuple[str, int]], where: str
    ) -> list[list[int]]:
        """Register every variant's dispatches; variants after the first share the first's
        descriptor sets (same bindings, other push constants). Returns ids per variant."""
        ids: list[list[int]] = []
        for v, var in enumerate(variants):
            plan = var.plan
            self.needs |= plan.needs
            roles = self._roles(plan, io)
            row = []
            for k, step in enumerate(plan.steps):
                pid = self._pipeline(step.kernel, len(step.roles))
                push = [int(w) for w in step.kernel.push]
                grid = (
                    int(step.kernel.grid[0]),
                    int(step.kernel.grid[1]),
                    int(step.kernel.grid[2]),
                )
                binds = [roles[r] for r in step.roles]
                like = ids[0][k] if v else None
                row.append(len(self.dispatches))
                self.dispatches.append(_Dispatch(pid, binds, push, grid, where, like))
            ids.append(row)
        return ids

    # ---- emission ----------------------------------------------------------------------
    def emit_gpu_op(
        self,
        variants: list[_Variant],
        inputs: list[tuple[str, str, int]],
        out: tuple[str, str, int],
        host_call: str,
        pre: list[str],
        where: str,
        index: tuple[str, int] | None = None,
        preload: Mapping[int, tuple[str, int]] | None = None,
        fallback: list[str] | None = None,
    ) -> list[str]:
        """C lines of a GPU op node: pick the prepared variant whose input shapes match,
        set the output shape, record its dispatches; with no match, sync and run the C
        kernel. `inputs`/`out` are (tensor expression, address expression, range bytes).
        With `index` (C expression, entries), the inputs in `preload` (k -> table, stride)
        are preloaded prefix entries: one set of dispatches per entry, picked by the index;
        `fallback` are the lines that look them up for the host path."""
        preload = preload or {}
        entries = index[1] if index is not None else 1
        ids = []  # [variant][entry] -> dispatch ids
        for e in range(entries):
            io = {f"in{k}": (addr, rng) for k, (_t, addr, rng) in enumerate(inputs)}
            for k, (table, stride) in preload.items():
                io[f"in{k}"] = (f"(OI_VK_PREFIX_{table} + {e * stride})", inputs[k][2])
            io["out"] = (out[1], out[2])
            ids.append(self.add_variants(variants, io, where))
        self.gpu_nodes += 1
        self.variant_nodes += len(variants) > 1
        nv, steps = len(variants), len(ids[0][0])
        guarded = [(k, t) for k, t in enumerate(inputs) if k not in preload]
        rows = [
            [x for k, _t in guarded for x in (len(var.in_shapes[k]), *var.in_shapes[k])] or [0]
            for var in variants
        ]
        out_nd = len(variants[0].out_shape)
        i = "    "  # inside the node's C block
        lines = ["{"]
        if pre:  # a prefix-table slot is filled on the host: earlier dispatches may read it
            lines.append(self.sync(i, where))
            lines.extend(f"{i}{p}" for p in pre)
        lines.append(f"{i}static const int64_t in_dims[{nv}][{len(rows[0])}] = {_table(rows)};")
        lines.append(
            f"{i}static const int64_t out_dims[{nv}][{max(out_nd, 1)}] = "
            f"{_table([list(v.out_shape) or [0] for v in variants])};"
        )
        by_variant = [[ids[e][v] for e in range(entries)] for v in range(nv)]
        lines.append(
            f"{i}static const int runs[{nv}][{entries}][{steps}] = "
            "{" + ", ".join(_table(rows_) for rows_ in by_variant) + "};"
        )
        if guarded:
            ts = ", ".join(t[0] for _k, t in guarded)
            lines.append(f"{i}const oi_tensor *ins[{len(guarded)}] = {{{ts}}};")
            pick = f"oi_vk_pick(ins, {len(guarded)}, &in_dims[0][0], {len(rows[0])}, {nv})"
        else:
            pick = "0"
        lines.append(f"{i}const int v = {pick};")
        if index is not None:
            lines.append(f"{i}const int64_t e = {index[0]};")
            lines.append(f"{i}if (v >= 0 && e >= 0 && e < {entries}) {{")
        else:
            lines.append(f"{i}const int64_t e = 0;")
            lines.append(f"{i}if (v >= 0) {{")
        lines.append(f'{i}    OI_TRY(oi_set_shape({out[0]}, {out_nd}, out_dims[v]), "{where}");')
        for k in range(steps):
            lines.append(f'{i}    OI_TRY(oi_vk_run(runs[v][e][{k}]), "{where}");')
        lines.append(f"{i}}} else {{  /* no prepared shape: the C kernel on the host */")
        lines.extend(f"{i}    {f}" for f in fallback or [])
        lines.append(f"{i}    oi_vk_fallback();")
        lines.append(f'{i}    OI_TRY(oi_vk_sync(), "{where}");')
        lines.append(f'{i}    OI_TRY({host_call}, "{where}");')
        lines.append(f"{i}}}")
        lines.append("}")
        return lines

    def node_needs_sync(self, node: Node, block: str) -> bool:
        """True when a non-op node touches arena memory on the host (or reads a variable)."""
        if isinstance(
            node,
            (Transfer, CacheRead, CacheWrite, CacheIncrement, CacheDecrement, CacheReset, Await),
        ):
            return True
        if isinstance(node, Loop):
            return any(isinstance(b, str) and b in self.an.vars for b in (node.start, node.end))
        if isinstance(node, Branch):
            return node.cond is not None
        if isinstance(node, Yield):
            return block == self.an.entry.name
        return False

    def buffers(self) -> list[tuple[str, int]]:
        """Extra pinned arena buffers: scratch tensors and constants of the GPU kernels."""
        out = [(f"vkscratch{k}", n) for k, n in enumerate(self.scratch)]
        out += [(f"vkconst{cid}", len(data)) for data, cid in self.constants.items()]
        out += [
            (f"vkprefix:{t}", n * stride) for t, (n, stride, _b) in sorted(self.preloaded.items())
        ]
        return out

    def report(self) -> VkReport:
        """The placement summary of the generated program."""
        return VkReport(
            self.gpu_nodes,
            tuple(self.host),
            len(self.dispatches),
            len(self.sources),
            self.syncs,
            self.variant_nodes,
        )

    def needs_mask(self) -> str:
        """The `needs` argument of oi_vk_init."""
        flags = {"shader_int64": "OI_VK_NEED_INT64", "shader_float64": "OI_VK_NEED_FLOAT64"}
        return " | ".join(flags[n] for n in sorted(self.needs)) or "0u"

    def globals(self, mem: MemoryPlan) -> tuple[list[str], dict[str, str]]:
        """C definitions (SPIR-V arrays, scratch/constant slots) and the GLSL files."""
        spirv = compile_spirv(list(self.sources))
        lines: list[str] = []
        files: dict[str, str] = {}
        for table in sorted(self.preloaded):
            offset = mem.buffers[f"vkprefix:{table}"].offset
            lines.append(f"#define OI_VK_PREFIX_{table} (A + {offset})")
        for k in range(len(self.scratch)):
            lines.append(f"#define OI_VK_SCRATCH{k} (A + {mem.buffers[f'vkscratch{k}'].offset})")
        for data, cid in self.constants.items():
            lines.append(f"#define OI_VK_CONST{cid} (A + {mem.buffers[f'vkconst{cid}'].offset})")
            lines.append(f"static const unsigned char VKC_{cid}[{len(data)}] = {{")
            for i in range(0, len(data), 16):
                lines.append("    " + ", ".join(f"0x{b:02x}" for b in data[i : i + 16]) + ",")
            lines.append("};")
        for (source, pid), label, words in zip(self.sources.items(), self.labels, spirv):
            fname = _kernel_file(pid, label)
            files[fname] = source
            ints = [int.from_bytes(words[i : i + 4], "little") for i in range(0, len(words), 4)]
            lines.append(f"/* SPIR-V of {fname}: {label} */")
            lines.append(f"static const uint32_t SPV_{pid}[{len(ints)}] = {{")
            for i in range(0, len(ints), 8):
                lines.append("    " + ", ".join(f"0x{v:08x}u" for v in ints[i : i + 8]) + ",")
            lines.append("};")
        return lines, files

    def init_lines(self) -> list[str]:
        """oi_init statements after oi_bind: constants, pipelines, every prepared dispatch."""
        lines = [f"    memcpy(OI_VK_CONST{cid}, VKC_{cid}, sizeof VKC_{cid});"
                 for cid in self.constants.values()]  # fmt: skip
        for table, (count, stride, _nbytes) in sorted(self.preloaded.items()):
            lines.append("    {  /* every entry of the prefix table, where the kernels read it */")
            lines.append("        int64_t e;")
            lines.append("        oi_tensor t;")
            lines.append(f"        for (e = 0; e < {count}; e++)")
            lines.append(
                f'            OI_TRY(oi_prefix_{table}(&t, OI_VK_PREFIX_{table} + e * {stride}, e), "preload {table}");'
            )
            lines.append("    }")
        for pid, (label, n) in enumerate(zip(self.labels, self.bindings)):
            lines.append(
                f'    OI_TRY(oi_vk_pipeline({pid}, SPV_{pid}, sizeof SPV_{pid}, {n}), "pipeline {_c_text(label)}");'
            )
        for d, disp in enumerate(self.dispatches):
            n = len(disp.bindings)
            push = ", ".join(f"{w}u" for w in disp.push) or "0u"
            gx, gy, gz = disp.grid
            lines.append("    {")
            lines.append(
                f"        static const uint32_t push[{max(len(disp.push), 1)}] = {{{push}}};"
            )
            if disp.like is None:
                offs = ", ".join(f"(size_t)({addr} - A)" for addr, _r in disp.bindings)
                rngs = ", ".join(str(_word_bytes(r)) for _a, r in disp.bindings)
                lines.append(f"        const size_t off[{n}] = {{{offs}}};")
                lines.append(f"        static const size_t rng[{n}] = {{{rngs}}};")
                lines.append(
                    f"        OI_TRY(oi_vk_prepare({d}, {disp.pipeline}, {n}, off, rng, push, "
                    f'{len(disp.push)}u, {gx}u, {gy}u, {gz}u), "prepare {disp.where}");'
                )
            else:
                lines.append(
                    f"        OI_TRY(oi_vk_variant({d}, {disp.like}, {disp.pipeline}, push, "
                    f'{len(disp.push)}u, {gx}u, {gy}u, {gz}u), "prepare {disp.where}");'
                )
            lines.append("    }")
        return lines


def _table(rows: list[list[int]]) -> str:
    return "{" + ", ".join("{" + ", ".join(str(x) for x in r) + "}" for r in rows) + "}"


def tensor_bytes(an: Analysis, var: str) -> int:
    """Bytes a variable's buffer holds at its bound."""
    info = an.vars[var]
    return info.bound * ctype(info.dtype).size


def prefix_bytes(dims: tuple[int, ...], dtype: Any) -> int:
    """Bytes of one prefix-table entry."""
    return math.prod(dims) * ctype(dtype).size


def _word_bytes(n: int) -> int:
    """A binding range: whole 32-bit words (shaders read and write words), at least one."""
    return max(4, (n + 3) // 4 * 4)


def _kernel_file(pid: int, label: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9]+", "_", label.split("(")[0]).strip("_") or "kernel"
    return f"vk{pid}_{stem}.comp"


def _c_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', "'")
