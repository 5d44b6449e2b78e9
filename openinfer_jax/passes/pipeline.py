"""The pass pipelines: composite expansion for every backend (`prepare`); weight folding,
then bias fusion for the C target (`optimize`); with a report of what changed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from openinfer_jax.ir.nodes import Graph, Node
from openinfer_jax.passes.bias import fuse_bias
from openinfer_jax.passes.composites import expand_composites
from openinfer_jax.passes.context import PassContext
from openinfer_jax.passes.fold import fold_transposed_weights

__all__ = ["PassReport", "optimize", "prepare"]


@dataclass(frozen=True)
class PassReport:
    """What the passes changed: one line per expanded composite node, folded weight and
    fused node; `temporaries` are the variables the expansions introduced (not the user's:
    not fetchable by default); for each node a pass made (by ``id`` in the optimized graph)
    `origins` names the original node whose output it writes (the matmul a folded `linear`
    replaces, the add whose output a `linear` with a fused bias writes), so a trace can name
    it like the simulator does."""

    folded: tuple[str, ...] = ()
    fused: tuple[str, ...] = ()
    origins: Mapping[int, Node] = field(default_factory=dict, compare=False)
    expanded: tuple[str, ...] = ()
    temporaries: frozenset[str] = field(default_factory=frozenset)

    def lines(self) -> list[str]:
        """Human-readable lines (empty when nothing changed)."""
        return [*self.expanded, *self.folded, *self.fused]

    def then(self, later: PassReport) -> PassReport:
        """This report followed by the report of passes run after it."""
        return PassReport(
            folded=self.folded + later.folded,
            fused=self.fused + later.fused,
            origins={**self.origins, **later.origins},
            expanded=self.expanded + later.expanded,
            temporaries=self.temporaries | later.temporaries,
        )


def prepare(graph: Graph, model: Any = None) -> tuple[Graph, PassReport]:
    """The passes every backend runs on a validated graph (composite expansion); `model` is
    a ModelLoader or None.

    Raises:
        GraphValidationError: a composite node the expansion cannot take, named with its
            source location (e.g. input sizes that do not resolve without a model).
    """
    graph, lines, temporaries = expand_composites(graph, model)
    return graph, PassReport(expanded=tuple(lines), temporaries=temporaries)


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
