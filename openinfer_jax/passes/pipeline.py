"""The pass pipeline: weight folding, then bias fusion, with a report of what changed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from openinfer_jax.ir.nodes import Graph
from openinfer_jax.passes.bias import fuse_bias
from openinfer_jax.passes.context import PassContext
from openinfer_jax.passes.fold import fold_transposed_weights

__all__ = ["PassReport", "optimize"]


@dataclass(frozen=True)
class PassReport:
    """What the passes changed: one line per folded weight and per fused node."""

    folded: tuple[str, ...] = ()
    fused: tuple[str, ...] = ()

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
    graph, folded = fold_transposed_weights(graph, ctx)
    ctx = PassContext.of(graph, sizevars, outputs)
    graph, fused = fuse_bias(graph, ctx)
    return graph, PassReport(tuple(folded), tuple(fused))
