"""The composite-expansion pass: every node of a composite op becomes the registry ops it is
made of (`openinfer_jax.ops.composite`), before any backend sees the graph.

``op group_norm(x, s, b, num_groups=2) >> y;`` becomes, in place in its block or loop body,
``assign y__reshape0: f32[...]; op reshape(x, shape=[0, 2, -1]) >> y__reshape0; ...`` with
the last op writing ``y`` itself. Every new node carries the user's node location (its
line:column), and every temporary is named ``<output>__<op><k>``, so a trace or an error
message points back to the user's node. The pass first checks the user's node against the
composite's own declaration, so a bad call is reported there, never inside the expansion.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ir.nodes import Assign, Block, Graph, Loop, Node, Op, Transfer, VarRef
from openinfer_jax.ir.validate import infer_var_types
from openinfer_jax.ir.validate_context import DimResolver
from openinfer_jax.ir.validate_report import Issue, ValidationErrors
from openinfer_jax.ir.walk import walk_graph
from openinfer_jax.ops import registry
from openinfer_jax.ops.registry import OpCheckError

__all__ = ["expand_composites"]


@dataclass(frozen=True)
class _Value:
    """A value of the expansion: a variable reference with its dtype and static shape."""

    ref: VarRef
    dtype: DType
    shape: tuple[int, ...]


def expand_composites(graph: Graph, model: Any = None) -> tuple[Graph, list[str], frozenset[str]]:
    """Replace every composite op node by its expansion (see the module docstring): the new
    graph (`graph` itself when it has no composite node), one report line per expanded node,
    the names of the temporaries.

    Raises:
        GraphValidationError: a composite node whose call breaks the op's declaration, or
            whose input shapes do not resolve (no model for its sizevars), naming the node.
    """
    if not any(_is_composite(node) for node in walk_graph(graph)):
        return graph, [], frozenset()
    expander = _Expander(graph, model)
    blocks = tuple(
        Block(blk.name, expander.nodes(blk.nodes, blk.name), blk.loc) for blk in graph.blocks
    )
    return Graph(graph.vars, blocks), expander.report, frozenset(expander.temporaries)


def _is_composite(node: Node) -> bool:
    if not isinstance(node, Op):
        return False
    opdef = registry.get(node.op)
    return opdef is not None and opdef.composite is not None


class _Expander:
    def __init__(self, graph: Graph, model: Any) -> None:
        self.types = infer_var_types(graph, model)
        # Without a model only literal dims resolve (a sizevar has no size to take).
        self.dims = DimResolver(dict(getattr(model, "sizevars", None) or {}))
        self.taken = set(self.types)
        self.report: list[str] = []
        self.temporaries: list[str] = []

    def nodes(self, nodes: Sequence[Node], block: str) -> tuple[Node, ...]:
        out: list[Node] = []
        for node in nodes:
            if isinstance(node, Loop):
                body = self.nodes(node.body, block)
                out.append(Loop(node.name, node.index, node.start, node.end, body, node.loc))
            elif _is_composite(node):
                assert isinstance(node, Op)
                out.extend(self.expand(node, block))
            else:
                out.append(node)
        return tuple(out)

    def fail(self, node: Op, block: str, message: str) -> ValidationErrors:
        from openinfer_jax.ir.validate_nodes import describe_node

        return ValidationErrors([Issue(message, node.loc, f"block {block}, {describe_node(node)}")])

    def expand(self, node: Op, block: str) -> list[Node]:
        opdef = registry.get(node.op)
        assert opdef is not None and opdef.composite is not None
        values = []
        for ref in node.inputs:
            info = self.types.get(ref.name)
            if info is None:
                raise self.fail(node, block, f"input {ref} is not a declared variable")
            shape = info.shape if info.shape is not None else self.dims.shape(info.dims)
            if shape is None:
                dims = ", ".join(str(d) for d in info.dims)
                raise self.fail(node, block,
                                f"composite op {node.op} needs the sizes of its inputs, and {ref}'s "
                                f"dims [{dims}] do not resolve; pass the model that defines them")  # fmt: skip
            values.append(_Value(ref, info.dtype, tuple(shape)))
        raw = dict(node.params)
        try:
            # The user's call against the composite's own declaration, first.
            opdef.infer([v.dtype for v in values], [v.shape for v in values], raw)
            opdef.check_inplace(node.output.name, [ref.name for ref in node.inputs])
            builder = _Builder(self, node)
            result = opdef.composite.expand(builder, values, opdef.resolve_params(raw))
        except OpCheckError as err:
            raise self.fail(node, block, str(err)) from None
        nodes = builder.finish(result)
        ops = ", ".join(n.op for n in nodes if isinstance(n, Op))
        where = f"{node.loc}: " if node.loc is not None else f"block {block}: "
        self.report.append(f"{where}op {node.op} >> {node.output} -> {ops}")
        return nodes

    def fresh(self, stem: str) -> str:
        name, k = stem, 1
        while name in self.taken:
            name, k = f"{stem}_{k}", k + 1
        self.taken.add(name)
        self.temporaries.append(name)
        return name


class _Builder:
    """Emits IR nodes for one composite node (`openinfer_jax.ops.composite.Builder`)."""

    def __init__(self, expander: _Expander, node: Op) -> None:
        self.expander = expander
        self.node = node
        self.emitted: list[Node] = []
        self.count = 0

    def op(self, name: str, *inputs: _Value, **params: Any) -> _Value:
        opdef = registry.get(name)
        assert opdef is not None, f"composite {self.node.op} calls unknown op {name!r}"
        dtypes, shapes = [v.dtype for v in inputs], [v.shape for v in inputs]
        if opdef.composite is not None:  # a composite made of composites expands in place
            opdef.infer(dtypes, shapes, params)
            return opdef.composite.expand(self, list(inputs), opdef.resolve_params(params))  # type: ignore[no-any-return]
        dtype, shape = opdef.infer(dtypes, shapes, params)
        temp = self.expander.fresh(f"{self.node.output.name}__{name}{self.count}")
        self.count += 1
        loc = self.node.loc
        ref = VarRef(temp)
        self.emitted.append(Assign(temp, dtype, tuple(shape), loc))
        self.emitted.append(Op(name, tuple(v.ref for v in inputs), tuple(params.items()), ref, loc))
        return _Value(ref, dtype, tuple(shape))

    def shape(self, value: _Value) -> tuple[int, ...]:
        return value.shape

    def dtype(self, value: _Value) -> DType:
        return value.dtype

    def finish(self, result: _Value) -> list[Node]:
        """The emitted nodes, the last op writing the user's output instead of a temporary."""
        out = self.node.output
        last = self.emitted[-1] if self.emitted else None
        if isinstance(last, Op) and last.output == result.ref:
            self.expander.temporaries.remove(result.ref.name)
            nodes = [n for n in self.emitted[:-1]
                     if not (isinstance(n, Assign) and n.name == result.ref.name)]  # fmt: skip
            return [*nodes, Op(last.op, last.inputs, last.params, out, last.loc)]
        assert result.ref in self.node.inputs, (
            "an expansion returns its last op's value or an input"
        )
        return [*self.emitted, Transfer(result.ref, out, self.node.loc)]
