"""Plan elementwise epilogues: chains of elementwise ops that a backend may apply inside the
linear/matmul/conv kernel producing their input, while its output tile is still in cache.

    op conv2d(x, w, b) >> t;   op clamp(t, min=0.0, max=6.0) >> t;   op add(t, r) >> t;

The graph is not changed (every backend can still run it node by node); the plan names, per
producing node (the *anchor*), the nodes that form its epilogue. A backend that fuses runs
the anchor's kernel as before and then, per block of final outputs, the chain's operations
on each element in the same order and precision: the results are the same as unfused.

A chain is the run of nodes right after the anchor that each read the running value (the
anchor's output, then each op's output) exactly once plus operands of the same shape that
are not chain values. It stops at the first node that does not fit, or when:

* the op is not fusable (`fusable` gives the reason: another dtype, params read at run time);
  with ``strict`` (the device JSON's ``preferences.prefer_fusion``) such an op that reads the
  running value is a `SynthesisError` naming the node, since fusing it would change results;
* a chain value other than the anchor's output (which keeps its value) is still read after
  the op that consumes it, or a chain op writes one of the anchor's inputs (the kernel is
  still reading them while the epilogue runs), or the anchor's output aliases an input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from openinfer_jax.core.errors import SynthesisError
from openinfer_jax.ir.nodes import Graph, Loop, Node, Op, VarRef
from openinfer_jax.passes.attention_views import AttentionView, plan_attention_view
from openinfer_jax.passes.context import PassContext, node_text
from openinfer_jax.passes.dataflow import Frame, dead_after

__all__ = ["Epilogue", "EpiloguePlan", "plan_epilogues"]


@dataclass(frozen=True)
class Epilogue:
    """The chain fused into `anchor`: `ops` in order; `output` receives the final value."""

    anchor: Op
    ops: tuple[Op, ...]

    @property
    def output(self) -> VarRef:
        """Where the last op of the chain writes."""
        return self.ops[-1].output


@dataclass
class EpiloguePlan:
    """Epilogues by anchor node (``id(node)`` of the planned graph), attention nodes that read
    and write in place (`openinfer_jax.passes.attention_views`), and the absorbed nodes."""

    by_anchor: dict[int, Epilogue] = field(default_factory=dict)
    views: dict[int, AttentionView] = field(default_factory=dict)
    absorbed: set[int] = field(default_factory=set)
    report: list[str] = field(default_factory=list)
    #: variables some write of which never reaches memory (an absorbed node's output, an
    #: anchor's own value under its chain, an attention output written in place elsewhere):
    #: not fetchable by default, like a folded temporary
    hidden: set[str] = field(default_factory=set)


class _Planner:
    def __init__(
        self,
        ctx: PassContext,
        anchor: Callable[[Op], bool],
        fusable: Callable[[Op], str | None],
        strict: bool,
        strided: Callable[[Op], bool],
    ) -> None:
        self.ctx = ctx
        self.anchor = anchor
        self.strided = strided
        self.fusable = fusable
        self.strict = strict
        self.plan = EpiloguePlan()

    def sequence(
        self, nodes: tuple[Node, ...], outer: tuple[Frame, ...], loop: bool, block: str
    ) -> None:
        i = 0
        while i < len(nodes):
            node = nodes[i]
            if isinstance(node, Loop):
                self.sequence(node.body, (*outer, Frame(nodes, i, loop)), True, block)
            if isinstance(node, Op) and node.op == "attention" and self.strided(node):
                view = plan_attention_view(nodes, i, outer, loop, block, self.ctx)
                if view is not None and not any(id(n) in self.plan.absorbed for n in view.absorbed):
                    self.plan.views[id(node)] = view
                    self.plan.absorbed.update(id(n) for n in view.absorbed)
                    self.plan.report.append(view.describe(node))
                    self.plan.hidden.update(
                        n.output.name
                        for n in (node, *view.absorbed)
                        if isinstance(n, Op) and n.output.name != view.output.name
                    )
                    self.plan.hidden.update(t.dst.name for t in view.tables if t is not None)
            if isinstance(node, Op) and self._is_anchor(node):
                chain = self._chain(nodes, i, outer, loop, block)
                if chain:
                    self.plan.by_anchor[id(node)] = Epilogue(node, tuple(chain))
                    self.plan.absorbed.update(id(op) for op in chain)
                    final = chain[-1].output.name
                    self.plan.hidden.update(
                        op.output.name for op in (node, *chain[:-1]) if op.output.name != final
                    )
                    names = ", ".join(f"`{op.op}`" for op in chain)
                    self.plan.report.append(f"fused {names} into {node_text(node)} as its epilogue")
                    i += len(chain)
            i += 1

    def _is_anchor(self, node: Op) -> bool:
        out = node.output
        return (
            not out.indices
            and all(r.name != out.name for r in node.inputs)
            and self.ctx.dims(out.name) is not None
            and self.anchor(node)
        )

    def _chain(
        self, nodes: tuple[Node, ...], i: int, outer: tuple[Frame, ...], loop: bool, block: str
    ) -> list[Op]:
        anchor = nodes[i]
        assert isinstance(anchor, Op)
        y = anchor.output.name
        dims = self.ctx.dims(y)
        anchor_inputs = {r.name for r in anchor.inputs}
        chain: list[Op] = []
        value, written = y, {y: False}  # the running value; chain vars written by the chain
        for j in range(i + 1, len(nodes)):
            node = nodes[j]
            if not isinstance(node, Op) or VarRef(value) not in node.inputs:
                break
            others = [r for r in node.inputs if r != VarRef(value)]
            if len(others) != len(node.inputs) - 1 or node.output.indices:
                break
            if any(r.indices or r.name in written or self.ctx.dims(r.name) != dims for r in others):
                break
            reason = self.fusable(node)
            if reason is not None:
                if self.strict:
                    raise SynthesisError(
                        f"{node_text(node)} cannot be fused into {node_text(anchor)}: {reason}; "
                        "fusing it would change results (preferences.prefer_fusion is true: "
                        "set it to false to leave such nodes unfused)"
                    )
                break
            out = node.output.name
            if out in anchor_inputs or self.ctx.dims(out) != dims:
                break
            if out != value and (value != y or written[y]):
                # the chain leaves `value`: no one may read it afterwards
                path = (*outer, Frame(nodes, j, loop))
                if not dead_after(path, value, j, self.ctx.end_dead(value, block)):
                    break
            chain.append(node)
            written[out] = True
            value = out
        return chain


def plan_epilogues(
    graph: Graph,
    ctx: PassContext,
    anchor: Callable[[Op], bool],
    fusable: Callable[[Op], str | None],
    strict: bool = False,
    strided: Callable[[Op], bool] = lambda op: False,
) -> EpiloguePlan:
    """The epilogue chains of `graph` (see the module docstring), and the attention nodes
    whose reorderings can be absorbed.

    `anchor(op)` says whether the backend can fuse into `op`'s kernel; `fusable(op)` returns
    None when it can apply `op` in an epilogue, else the reason it cannot; `strided(op)`
    whether its attention kernel reads and writes strided operands.

    Raises:
        SynthesisError: with `strict`, an op reading an anchor's running value that cannot be
            fused exactly, naming it and the anchor.
    """
    planner = _Planner(ctx, anchor, fusable, strict, strided)
    for block in graph.blocks:
        planner.sequence(block.nodes, (), False, block.name)
    return planner.plan
