"""The pass pipeline: weight folding, then bias fusion, with a report of what changed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from openinfer_jax.ir.nodes import Graph, Node
from openinfer_jax.passes.bias import fuse_bias
from openinfer_jax.passes.context import PassContext
from openinfer_jax.passes.fold import fold_transposed_weights

__all__ = ["PassReport", "optimize"]


@dataclass(frozen=True)
class PassReport:
    """What the passes changed: one line per folded weight and per fused node, and for each
    node a pass made (by ``id`` in the optimized graph) the original node whose output it
    writes (the matmul a folded `linear` replaces, the add whose output a `linear` with a
    fused bias writes), so a trace can name it like the simulator does."""

    folded: tuple[str, ...] = ()
    fused: tuple[str, ...] = ()
    origins: Mapping[int, Node] = field(default_factory=dict, compare=False)

    def lines(self) -> list[str]:
        """Human-readable lines (empty when nothing changed)."""
        return [*self.folded, *self.fused]


def optimize(
    graph: Graph, sizevars: Mapping[str, int], outputs: Iterable[str] | None = None
) -> tuple[Graph, PassReport]:
    """Run the passes on a validated graph.

    `sizevars` are the model's (they resolve symbolic dims); `outputs` the variables the
    caller fetches after a step (None: the declared variables; temporaries are scratch).
    """
    ctx = PassContext.of(graph, sizevars, outputs)
    graph, folded, origins = fold_transposed_weights(graph, ctx)
    ctx = PassContext.of(graph, sizevars, outputs)
    graph, fused, more = fuse_bias(graph, ctx)
    return graph, PassReport(tuple(folded), tuple(fused), {**origins, **more})
