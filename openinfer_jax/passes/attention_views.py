"""Plan attention operands read (and its output written) in place through reshapes and
transposes, instead of materializing each reordered copy.

Attention takes q, k, v and gives its output as [..., heads, seq, dim]; models keep those
tensors as [..., seq, heads, dim] or [..., seq, heads * dim] (a projection's output, a cache
of per-token entries), so graphs reorder them around each attention:

    op reshape(q, shape=[B, S, H, D]) >> q4;  op transpose(q4, perm=[0, 2, 1, 3]) >> qh;
    cache.read K[l, 0:end] >> ks;            op transpose(ks, perm=[1, 0, 2]) >> kt;
    op attention(qh, kt, vt) >> o;  op transpose(o, perm=[0, 2, 1, 3]) >> o4;  op reshape(o4, ...) >> a;

Each of those is a copy per step (for a decode step over a long cache, the transposes of
K and V cost more than the attention). The plan lets the attention kernel read `q`, `ks`
with strides and write `a` directly, and drops the reorderings (the graph is unchanged, so
every backend can still run it node by node). A cache read feeding such a transpose is
absorbed too (`AttentionView.tables`): the kernel reads the table's storage in place when
the selected entries are contiguous there (the backend copies them otherwise).

A reordering is absorbed only when nothing else sees its result: the transposed (or
reshaped) value is read by the attention (or the next reordering) alone and is dead
afterwards, the tensor read in place is not written in between, and an output written in
place is not touched between the attention and the reordering it replaces. Layout codes:
0 [.., H, S, D] (as is), 1 [.., S, H, D], 2 [.., S, H*D] with H given.
"""

from __future__ import annotations

from dataclasses import dataclass

from openinfer_jax.ir.nodes import CacheRead, Node, Op, VarRef
from openinfer_jax.passes.context import PassContext, node_text
from openinfer_jax.passes.dataflow import Frame, access, dead_after

__all__ = ["AttentionView", "plan_attention_view"]

Layout = tuple[int, int]


@dataclass(frozen=True)
class AttentionView:
    """Where an attention node reads q, k, v and writes its output, in which layouts, and
    the reorderings it absorbs."""

    inputs: tuple[VarRef, VarRef, VarRef]
    output: VarRef
    layout: tuple[Layout, Layout, Layout, Layout]
    absorbed: tuple[Node, ...]
    #: per q, k, v: the cache read whose selection the kernel reads in place (its output
    #: variable is the fallback buffer), or None
    tables: tuple[CacheRead | None, CacheRead | None, CacheRead | None] = (None, None, None)

    def describe(self, node: Op) -> str:
        """A report line."""
        names = ", ".join(
            f"`{n.op}`" if isinstance(n, Op) else "`cache.read`"
            for n in self.absorbed
            if isinstance(n, (Op, CacheRead))
        )
        return f"{node_text(node)} reads/writes in place through {names}"


def _swap(rank: int) -> tuple[int, ...]:
    """The permutation exchanging the heads and seq axes of a [..., a, b, dim] tensor."""
    return (*range(rank - 3), rank - 2, rank - 3, rank - 1)


def _is_swap(node: Node, ctx: PassContext) -> bool:
    if not isinstance(node, Op) or node.op not in ("transpose", "permute") or node.output.indices:
        return False
    (src,) = node.inputs
    dims = ctx.dims(src.name)
    if src.indices or dims is None or len(dims) < 3:
        return False
    return tuple(node.param("perm", ()) or ()) == _swap(len(dims))  # type: ignore[arg-type]


def _merges_last_two(node: Node, ctx: PassContext, split: bool) -> int | None:
    """Heads H when `node` is a reshape between [..., S, H*D] and [..., S, H, D] (`split`:
    from the first to the second, else back), else None."""
    if not isinstance(node, Op) or node.op != "reshape" or node.output.indices:
        return None
    (src,) = node.inputs
    a, b = ctx.dims(src.name), ctx.dims(node.output.name)
    if src.indices or a is None or b is None:
        return None
    flat, full = (a, b) if split else (b, a)
    if len(full) < 3 or len(flat) != len(full) - 1 or flat[:-1] != full[:-2]:
        return None
    return full[-2] if flat[-1] == full[-2] * full[-1] else None


class _Planner:
    def __init__(
        self,
        ctx: PassContext,
        nodes: tuple[Node, ...],
        outer: tuple[Frame, ...],
        loop: bool,
        block: str,
    ):
        self.ctx, self.nodes, self.outer, self.loop, self.block = ctx, nodes, outer, loop, block

    def _writer(self, name: str, before: int) -> int | None:
        """The nearest node before `before` writing `name` if no node between reads it."""
        for i in range(before - 1, -1, -1):
            acc = access(self.nodes[i])
            if acc.barrier:
                return None
            if name in acc.writes:
                return i
            if name in acc.reads:
                return None
        return None

    def _untouched(self, name: str, lo: int, hi: int) -> bool:
        """No node strictly between `lo` and `hi` touches `name`."""
        return not any(access(n).touches(name) for n in self.nodes[lo + 1 : hi])

    def _unwritten(self, name: str, lo: int, hi: int) -> bool:
        return not any(
            name in access(n).writes or access(n).barrier for n in self.nodes[lo + 1 : hi]
        )

    def _dead(self, name: str, at: int) -> bool:
        path = (*self.outer, Frame(self.nodes, at, self.loop))
        return dead_after(path, name, at, self.ctx.end_dead(name, self.block))

    def operand(self, ref: VarRef, j: int) -> tuple[VarRef, Layout, list[int]] | None:
        """(what to read, layout, absorbed indices) for input `ref` of the attention at `j`."""
        if ref.indices or not self._dead(ref.name, j):
            return None
        i = self._writer(ref.name, j)
        if i is None or not _is_swap(self.nodes[i], self.ctx):
            return None
        src = self.nodes[i].inputs[0]  # type: ignore[attr-defined]
        if not self._untouched(ref.name, i, j) or not self._unwritten(src.name, i, j):
            return None
        h = self._writer(src.name, i)
        if h is not None and self._dead(src.name, i) and self._untouched(src.name, h, i):
            if self._table_read(h, j):
                return src, (1, 0), [h, i]
            heads = _merges_last_two(self.nodes[h], self.ctx, split=True)
            base = self.nodes[h].inputs[0] if heads is not None else None  # type: ignore[attr-defined]
            if base is not None and self._unwritten(base.name, h, j):
                return base, (2, heads), [h, i]  # type: ignore[return-value]
        return src, (1, 0), [i]

    def _table_read(self, h: int, j: int) -> bool:
        """Whether node `h` is a whole-variable read of a (non-auto-dim) cache table whose
        table and selection variables nothing writes before the attention at `j`: it can
        be done at `j`, in place."""
        node = self.nodes[h]
        if not isinstance(node, CacheRead) or node.dst.indices:
            return False
        decl = self.ctx.graph.var(node.src.name)
        if decl is None or not decl.table or decl.auto_dim:
            return False
        return all(self._unwritten(name, h, j) for name in access(node).reads)

    def output(
        self, ref: VarRef, j: int, reads: set[str]
    ) -> tuple[VarRef, Layout, list[int]] | None:
        """(where to write, layout, absorbed indices) for the attention's output."""
        if ref.indices:
            return None
        k = next(
            (n for n in range(j + 1, len(self.nodes)) if access(self.nodes[n]).touches(ref.name)),
            None,
        )
        if k is None or not _is_swap(self.nodes[k], self.ctx) or not self._dead(ref.name, k):
            return None
        dst = self.nodes[k].output  # type: ignore[attr-defined]
        if dst.name in reads or not self._untouched(dst.name, j, k):
            return None
        m = next(
            (n for n in range(k + 1, len(self.nodes)) if access(self.nodes[n]).touches(dst.name)),
            None,
        )
        if m is not None and self._dead(dst.name, m):
            heads = _merges_last_two(self.nodes[m], self.ctx, split=False)
            final = self.nodes[m].output  # type: ignore[attr-defined]
            if heads is not None and final.name not in reads and self._untouched(final.name, j, m):
                return final, (2, heads), [k, m]
        return dst, (1, 0), [k]


def plan_attention_view(
    nodes: tuple[Node, ...],
    j: int,
    outer: tuple[Frame, ...],
    loop: bool,
    block: str,
    ctx: PassContext,
) -> AttentionView | None:
    """The in-place plan of the attention node ``nodes[j]``, or None when nothing can be
    absorbed."""
    node = nodes[j]
    assert isinstance(node, Op) and node.op == "attention"
    planner = _Planner(ctx, nodes, outer, loop, block)
    refs: list[VarRef] = []
    layouts: list[Layout] = []
    absorbed: list[int] = []
    tables: list[CacheRead | None] = []
    for ref in node.inputs[:3]:
        if sum(r == ref for r in node.inputs) > 1:  # the same tensor as q and k: leave it
            found = None
        else:
            found = planner.operand(ref, j)
        if found is None:
            refs.append(ref)
            layouts.append((0, 0))
            tables.append(None)
        else:
            refs.append(found[0])
            layouts.append(found[1])
            absorbed += found[2]
            first = nodes[found[2][0]]
            tables.append(first if isinstance(first, CacheRead) else None)
    reads = {r.name for r in refs} | {r.name for r in node.inputs}
    out = planner.output(node.output, j, reads)
    if out is not None:
        target, out_layout = out[0], out[1]
        absorbed += out[2]
    else:
        target, out_layout = node.output, (0, 0)
    if not absorbed:
        return None
    return AttentionView(
        (refs[0], refs[1], refs[2]),
        target,
        (layouts[0], layouts[1], layouts[2], out_layout),
        tuple(nodes[i] for i in sorted(absorbed)),
        (tables[0], tables[1], tables[2]),
    )
