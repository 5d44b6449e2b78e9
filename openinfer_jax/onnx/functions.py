"""ONNX function ops without a converter: their schema's function body, inlined.

Many newer ONNX ops (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss, LinearAttention,
CausalConvWithState, AffineGrid, the window functions...) are defined by ONNX as a function
of simpler ops. When the importer has no converter for such an op, it imports the body
instead: the body's formal inputs and outputs become the node's, its internal values get a
prefix unique to the node, attribute references take the node's attributes (or the schema's
defaults), and subgraphs (a Scan's body) are renamed the same way. Context-dependent bodies
(whose nodes depend on the input types) are built from the inputs' dtypes and shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["function_body"]


def function_body(
    node: Any,
    opset: int,
    input_types: Sequence[Any | None],
    prefix: str,
    default_opset: int | None = None,
) -> tuple[list[Any], int] | None:
    """The nodes of `node`'s function body, renamed into the graph, and the body's opset.

    `opset` is the version of the node's domain the model imports; `input_types` holds one
    ``onnx.TypeProto`` per input slot (None for an absent one). The body's default-domain
    opset is the one its function declares, else `default_opset` (the model's), else
    `opset`. Returns None when the op has no function body in its schema for `opset`.
    """
    import onnx
    import onnx.defs

    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    except onnx.defs.SchemaError:
        return None
    function = _function(schema, node, opset, input_types)
    if function is None:
        return None
    body_opset = next(
        (int(o.version) for o in function.opset_import if o.domain in ("", "ai.onnx")),
        default_opset if default_opset is not None else opset,
    )
    attrs = {a.name: a for a in node.attribute}
    for name, spec in schema.attributes.items():
        if name not in attrs and spec.default_value.name:
            attrs[name] = spec.default_value
    names: dict[str, str] = {}
    for i, formal in enumerate(function.input):
        names[formal] = node.input[i] if i < len(node.input) else ""
    for i, formal in enumerate(function.output):
        if i < len(node.output) and node.output[i]:
            names[formal] = node.output[i]

    def rename(name: str) -> str:
        if not name:
            return ""
        return names.get(name, prefix + name)

    return [_renamed(n, rename, attrs) for n in function.node], body_opset


def _function(schema: Any, node: Any, opset: int, input_types: Sequence[Any | None]) -> Any:
    """The FunctionProto of the newest body for `opset` (plain or context-dependent)."""
    import onnx

    plain = [v for v in schema.function_opset_versions if v <= opset]
    dependent = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    function = onnx.FunctionProto()
    if dependent and (not plain or max(dependent) >= max(plain)):
        types = [
            (t if t is not None else onnx.TypeProto()).SerializeToString() for t in input_types
        ]
        try:
            text = schema.get_context_dependent_function_with_opset_version(
                max(dependent), node.SerializeToString(), types
            )
        except Exception:  # the schema's builder rejects these inputs: no body to inline
            return None
        if not text:
            return None
        function.ParseFromString(text)
        return function
    if plain:
        function.ParseFromString(schema.get_function_with_opset_version(max(plain)))
        return function
    return None


def _renamed(node: Any, rename: Callable[[str], str], attrs: dict[str, Any]) -> Any:
    """A copy of body node `node` with its values renamed and attribute references resolved."""
    import onnx

    out = onnx.NodeProto()
    out.op_type = node.op_type
    out.domain = node.domain
    out.name = rename(node.name or f"{node.op_type}_{'_'.join(node.output)}")
    out.input.extend(rename(n) for n in node.input)
    out.output.extend(rename(n) for n in node.output)
    for attr in node.attribute:
        if attr.ref_attr_name:
            given = attrs.get(attr.ref_attr_name)
            if given is None:
                continue  # an optional attribute the node leaves out: the op's default
            resolved = onnx.AttributeProto()
            resolved.CopyFrom(given)
            resolved.name = attr.name
            out.attribute.append(resolved)
            continue
        copy = onnx.AttributeProto()
        copy.CopyFrom(attr)
        if attr.type == onnx.AttributeProto.GRAPH:
            _rename_graph(copy.g, rename, attrs)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for graph in copy.graphs:
                _rename_graph(graph, rename, attrs)
        out.attribute.append(copy)
    return out


def _rename_graph(graph: Any, rename: Callable[[str], str], attrs: dict[str, Any]) -> None:
    """Rename a body's subgraph in place: its own values and the outer values it reads."""
    for info in (*graph.input, *graph.output, *graph.value_info):
        info.name = rename(info.name)
    for init in graph.initializer:
        init.name = rename(init.name)
    nodes = [_renamed(n, rename, attrs) for n in graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
