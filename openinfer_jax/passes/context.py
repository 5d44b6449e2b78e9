"""What the passes know about a graph beyond its nodes: dtypes, ranks, which variables are
model constants, which values the caller wants to read after a step."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ir.nodes import Assign, Dim, Graph, MemoryKind, Node, VarRef
from openinfer_jax.ir.printer import format_node
from openinfer_jax.ir.walk import walk, walk_graph

__all__ = ["PassContext", "node_text"]


def node_text(node: Node) -> str:
    """A node as written (`op add(x, a) >> t;`) plus its source position when known."""
    loc = getattr(node, "loc", None)
    return f"`{format_node(node)}`" + (f" at {loc}" if loc is not None else "")


@dataclass(frozen=True)
class PassContext:
    """Facts about one graph the passes share.

    `constants` are model tensors (volatile or constant declarations) no node writes: their
    value is the same at every use. `temporaries` maps each `assign`ed name to its dtype
    and dims. `outputs` are the variables the caller fetches after a step (None: the declared
    variables only, so every temporary is scratch).
    `sizevars` resolve symbolic dims such as ``hidden_size`` or ``3*D``.
    """

    graph: Graph
    constants: frozenset[str]
    temporaries: Mapping[str, tuple[DType, tuple[Dim, ...]]]
    outputs: frozenset[str] | None
    sizevars: Mapping[str, int]

    @classmethod
    def of(
        cls, graph: Graph, sizevars: Mapping[str, int], outputs: Iterable[str] | None
    ) -> PassContext:
        """Collect the facts of `graph` (sizevars from its model)."""
        written = {name for node in walk_graph(graph) for name in node.writes()}
        constants = frozenset(
            d.name
            for d in graph.vars
            if d.kind in (MemoryKind.VOLATILE, MemoryKind.CONSTANT)
            and d.name not in written
            and not d.table
        )
        temps: dict[str, tuple[DType, tuple[Dim, ...]]] = {}
        for block in graph.blocks:
            for node in walk(block.nodes):
                if isinstance(node, Assign) and graph.var(node.name) is None:
                    temps.setdefault(node.name, (node.dtype, node.dims))
        return cls(
            graph,
            constants,
            temps,
            None if outputs is None else frozenset(outputs),
            dict(sizevars),
        )

    def dtype(self, name: str) -> DType | None:
        """The dtype of a declared variable or temporary."""
        decl = self.graph.var(name)
        if decl is not None:
            return decl.dtype
        temp = self.temporaries.get(name)
        return temp[0] if temp else None

    def dims(self, name: str) -> tuple[int, ...] | None:
        """The dims of a declared variable (a table's entry dims) or temporary, resolved;
        None when a dim is not a known size."""
        decl = self.graph.var(name)
        raw = decl.dims if decl is not None else self.temporaries.get(name, (None, None))[1]
        if raw is None:
            return None
        out = []
        for dim in raw:
            value = 1
            for term in str(dim).split("*"):
                term = term.strip()
                if term.lstrip("-").isdigit():
                    value *= int(term)
                elif term in self.sizevars:
                    value *= self.sizevars[term]
                else:
                    return None
            out.append(value)
        return tuple(out)

    def is_constant(self, ref: VarRef) -> bool:
        """A model tensor no node writes (a prefix-table entry `W[l]` included)."""
        return ref.name in self.constants

    def is_scratch(self, name: str) -> bool:
        """A temporary the caller does not fetch: its value may be dropped once dead."""
        return name in self.temporaries and (self.outputs is None or name not in self.outputs)

    def end_dead(self, name: str, block: str) -> bool:
        """Whether `name`'s value at the end of `block` is unobservable: an entry-block
        scratch temporary (other blocks return to their caller, which may read it)."""
        return block == "entry" and self.is_scratch(name)
