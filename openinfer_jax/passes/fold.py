"""Fold weight-only work out of the step: a transposed constant feeding a matmul.

Checkpoints in the PyTorch layout store a linear layer's weight as ``W [out, in]``; a graph
written with ``matmul`` transposes it first::

    op transpose(Wq[l], perm=[1, 0]) >> wt;
    op matmul(a, wt) >> q;

Run as written, every step copies the whole weight (for SmolLM2 ~540 MB per token). `W`
is a model constant, so the transpose is the same at every step: the pass rewrites the
pair to ``op linear(a, Wq[l]) >> q`` (``x @ W^T``, which reads `W` in its stored layout) and
drops the transpose, and the `assign` of ``wt`` when nothing else uses it.

Rewritten only when the result is unchanged: `W` is a volatile/constant tensor no node
writes, rank 2, transposed by ``perm=[1, 0]`` (or the default reverse); the transposed value
is read only as the right operand of plain (no ``acc``) matmuls with the same float dtype
(f32/f64) on both sides and the output, and is dead afterwards (the next access overwrites
it, or it is a scratch temporary of the entry block that the caller does not fetch).
"""

from __future__ import annotations

from dataclasses import replace

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ir.nodes import Assign, Block, Graph, Loop, Node, Op, Return, VarRef
from openinfer_jax.ir.walk import walk
from openinfer_jax.passes.context import PassContext, node_text
from openinfer_jax.passes.dataflow import Frame, access, dead_after

__all__ = ["fold_transposed_weights"]

_FOLDABLE_DTYPES = (DType.F32, DType.F64)


def _is_weight_transpose(node: Node, ctx: PassContext) -> bool:
    """`transpose(W) >> t` of a rank-2 model constant into a plain scratch temporary."""
    if not isinstance(node, Op) or node.op not in ("transpose", "permute"):
        return False
    (src,) = node.inputs
    dims = ctx.dims(src.name)
    perm = tuple(node.param("perm", ()) or ())  # type: ignore[arg-type]
    return (
        ctx.is_constant(src)
        and dims is not None
        and len(dims) == 2
        and perm in ((), (1, 0))
        and not node.output.indices
        and ctx.is_scratch(node.output.name)
        and ctx.dtype(src.name) in _FOLDABLE_DTYPES
    )


def _is_reader(node: Node, name: str, ctx: PassContext) -> bool:
    """`matmul(a, name) >> y` that reads `name` only as its right operand, same dtypes."""
    if not isinstance(node, Op) or node.op != "matmul" or node.params:
        return False
    a, b = node.inputs
    if b != VarRef(name) or a.name == name or node.output.name == name:
        return False
    want = ctx.dtype(name)
    return ctx.dtype(a.name) == want and ctx.dtype(node.output.name) == want


def _readers(path: tuple[Frame, ...], name: str, ctx: PassContext, block: str) -> list[int] | None:
    """Indices of the matmuls reading the value the transpose at ``path[-1]`` defines, or
    None when some other node may read it."""
    frame = path[-1]
    found: list[int] = []
    for j in range(frame.index + 1, len(frame.nodes)):
        node = frame.nodes[j]
        if isinstance(node, Return):  # the block ends here
            return found if ctx.end_dead(name, block) else None
        acc = access(node)
        if not acc.touches(name):
            continue
        if _is_reader(node, name, ctx):
            found.append(j)
            continue
        if not acc.barrier and name in acc.full_writes:
            return found
        return None
    last = replace(frame, index=len(frame.nodes) - 1)
    if dead_after((*path[:-1], last), name, frame.index, ctx.end_dead(name, block)):
        return found
    return None


class _Folder:
    def __init__(self, ctx: PassContext) -> None:
        self.ctx = ctx
        self.report: list[str] = []
        self.dropped: set[str] = set()
        self.origins: dict[int, Node] = {}  # id(new node) -> the node whose output it writes

    def sequence(
        self, nodes: tuple[Node, ...], outer: tuple[Frame, ...], loop: bool, block: str
    ) -> tuple[Node, ...]:
        out = list(nodes)
        for i, node in enumerate(nodes):
            if isinstance(node, Loop):
                body = self.sequence(node.body, (*outer, Frame(nodes, i, loop)), True, block)
                out[i] = replace(node, body=body)
        for i, node in enumerate(nodes):
            if not _is_weight_transpose(node, self.ctx):
                continue
            assert isinstance(node, Op)
            temp = node.output.name
            readers = _readers((*outer, Frame(nodes, i, loop)), temp, self.ctx, block)
            if not readers:
                continue
            weight = node.inputs[0]
            for j in readers:
                mm = out[j]
                assert isinstance(mm, Op)
                linear = Op("linear", (mm.inputs[0], weight), (), mm.output, loc=mm.loc)
                self.report.append(
                    f"folded {node_text(node)} into {node_text(mm)}: now `op linear("
                    f"{mm.inputs[0]}, {weight}) >> {mm.output}` reads {weight.name} in place"
                )
                out[j] = linear
                self.origins[id(linear)] = mm
            out[i] = None  # type: ignore[call-overload]
            self.dropped.add(temp)
        return tuple(n for n in out if n is not None)


def _drop_unused_assigns(graph: Graph, names: set[str]) -> Graph:
    """Remove the `assign` of each of `names` that no other node touches any more."""
    used: set[str] = set()
    for block in graph.blocks:
        for node in walk(block.nodes):
            if not isinstance(node, Assign):
                acc = access(node)
                used |= acc.reads | acc.writes
    unused = names - used

    def strip(nodes: tuple[Node, ...]) -> tuple[Node, ...]:
        kept: list[Node] = []
        for node in nodes:
            if isinstance(node, Assign) and node.name in unused:
                continue
            kept.append(replace(node, body=strip(node.body)) if isinstance(node, Loop) else node)
        return tuple(kept)

    return replace(graph, blocks=tuple(Block(b.name, strip(b.nodes), b.loc) for b in graph.blocks))


def fold_transposed_weights(
    graph: Graph, ctx: PassContext
) -> tuple[Graph, list[str], dict[int, Node]]:
    """Rewrite `transpose(W) >> t; matmul(a, t)` on model constants to `linear(a, W)`.

    Returns the new graph, one report line per folded transpose (the node and where its
    readers now read the weight) and, per new node (by id), the node it stands for. The graph is unchanged where the rewrite could change a
    result (see the module docstring).
    """
    folder = _Folder(ctx)
    blocks = tuple(
        Block(b.name, folder.sequence(b.nodes, (), False, b.name), b.loc) for b in graph.blocks
    )
    out = replace(graph, blocks=blocks)
    if folder.dropped:
        out = _drop_unused_assigns(out, folder.dropped)
    return out, folder.report, folder.origins
