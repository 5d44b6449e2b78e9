"""Print a `Graph` as canonical `graph { ... }` text.

The output parses back (``openinfer_jax.trace.parse``) to a graph equal to the input:
variables keep their order (consecutive declarations of one memory kind share a section),
params keep their written order, floats are printed with ``repr`` (shortest round-trip
form, always with a ``.`` or an exponent), and attributes appear in one fixed order.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ir.nodes import (
    Assign,
    Await,
    Barrier,
    Block,
    Branch,
    CacheAccess,
    CacheDecrement,
    CacheIncrement,
    CacheRead,
    CacheReset,
    CacheWrite,
    Dep,
    Dim,
    Graph,
    Loop,
    Node,
    Op,
    ParamValue,
    Return,
    ScalarValue,
    Transfer,
    VarDecl,
    VarName,
    VarRef,
    Yield,
)

__all__ = [
    "describe_node",
    "format_decl",
    "format_graph",
    "format_node",
    "format_param_value",
    "format_scalar",
]

_INDENT = "  "


def format_scalar(value: ScalarValue) -> str:
    """A literal as the DSL writes it: ``true``, ``-3``, ``0.01``, ``1e-06``, ``inf``, ``nan``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(float(value))


def format_string(value: str) -> str:
    """A double-quoted string literal; escapes follow JSON, as the lexer reads them."""
    return json.dumps(value, ensure_ascii=False)


def format_param_value(value: ParamValue) -> str:
    """A setting's value as the DSL writes it (`to=f16`, `axes=[0, 1]`, `value=alpha`)."""
    if isinstance(value, DType):
        return value.short
    if isinstance(value, VarName):
        return value.name
    if isinstance(value, str):
        return format_string(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(v.short if isinstance(v, DType) else str(v) for v in value) + "]"
    return format_scalar(value)


def _format_dims(dims: tuple[Dim, ...]) -> str:
    return "[" + ", ".join(str(d) for d in dims) + "]" if dims else ""


def format_decl(decl: VarDecl) -> str:
    """One declaration line without indentation: ``K(l, t): f16[H, Dh] @table;``."""
    parts = [decl.name]
    if decl.table_indices:
        parts.append("(" + ", ".join(decl.table_indices) + ")")
    parts.append(": " + decl.type_name + _format_dims(decl.dims))
    if decl.init is not None:
        parts.append(f" @init({format_scalar(decl.init)})")
    if decl.ref is not None:
        parts.append(f" @ref({format_string(decl.ref)})")
    if decl.pattern is not None:
        parts.append(f" @pattern({format_string(decl.pattern)})")
    if decl.table:
        parts.append(" @table")
    if decl.auto_dim:
        parts.append(" @auto_dim(" + ", ".join(decl.auto_dim) + ")")
    if decl.fixed:
        parts.append(" @fixed(" + ", ".join(f"{k}={v}" for k, v in decl.fixed) + ")")
    return "".join(parts) + ";"


def _op(node: Op) -> str:
    args = [str(ref) for ref in node.inputs]
    args += [f"{key}={format_param_value(value)}" for key, value in node.params]
    return f"op {node.op}({', '.join(args)}) >> {node.output};"


def _amount(keyword: str, name: str, amount: int) -> str:
    return f"{keyword} {name};" if amount == 1 else f"{keyword} {amount} {name};"


def _branch(node: Branch) -> str:
    if node.cond is None:
        return f"branch {node.then_block};"
    return f"branch {node.cond} {node.then_block} {node.else_block};"


def _ref(ref: VarRef | CacheAccess) -> str:
    return str(ref)


# One line per node kind (loops are printed by `_format_nodes`, they span lines).
_LINE_FORMATTERS: dict[type[Node], Callable[[Node], str]] = {
    Assign: lambda n: f"assign {n.name}: {n.dtype.short}{_format_dims(n.dims)};",  # type: ignore[attr-defined]
    Op: _op,  # type: ignore[dict-item]
    Transfer: lambda n: f"transfer {n.src} >> {n.dst};",  # type: ignore[attr-defined]
    CacheRead: lambda n: f"cache.read {_ref(n.src)} >> {n.dst};",  # type: ignore[attr-defined]
    CacheWrite: lambda n: f"cache.write {n.src} >> {_ref(n.dst)};",  # type: ignore[attr-defined]
    CacheIncrement: lambda n: _amount("cache.increment", n.name, n.amount),  # type: ignore[attr-defined]
    CacheDecrement: lambda n: _amount("cache.decrement", n.name, n.amount),  # type: ignore[attr-defined]
    CacheReset: lambda n: f"cache.reset {_ref(n.target)};",  # type: ignore[attr-defined]
    Branch: _branch,  # type: ignore[dict-item]
    Yield: lambda n: f"yield {', '.join(n.vars)};",  # type: ignore[attr-defined]
    Await: lambda n: f"await {', '.join(n.vars)};",  # type: ignore[attr-defined]
    Barrier: lambda n: "barrier;",
    Dep: lambda n: f"dep after({n.after}) before({n.before});",  # type: ignore[attr-defined]
    Return: lambda n: "return;" if n.value is None else f"return {n.value};",  # type: ignore[attr-defined]
}


def format_node(node: Node) -> str:
    """A one-line node (`op add(x, a) >> t0;`); a loop prints only its header line."""
    if isinstance(node, Loop):
        return f"loop {node.name} ({node.index} in {node.start}..{node.end}) {{"
    try:
        return _LINE_FORMATTERS[type(node)](node)
    except KeyError:
        raise TypeError(f"not an IR node: {type(node).__name__}") from None


def describe_node(node: Node) -> str:
    """A node as one line without its terminator, for messages, traces and emitted error
    strings (`op relu(h, clamp_max=6.0) >> h`, `loop layers (l in 0..L)`): the same text
    `str(graph)` prints, so a message quotes the program as written."""
    return format_node(node).removesuffix(" {").removesuffix(";")


def _format_nodes(nodes: tuple[Node, ...], depth: int, out: list[str]) -> None:
    pad = _INDENT * depth
    for node in nodes:
        out.append(pad + format_node(node))
        if isinstance(node, Loop):
            _format_nodes(node.body, depth + 1, out)
            out.append(pad + "}")


def _format_block(block: Block, depth: int, out: list[str]) -> None:
    out.append(f"{_INDENT * depth}block {block.name} {{")
    _format_nodes(block.nodes, depth + 1, out)
    out.append(f"{_INDENT * depth}}}")


def format_graph(graph: Graph) -> str:
    """The program as canonical text: ``graph { sections... blocks... }`` ending in a newline."""
    out = ["graph {"]
    i = 0
    decls = graph.vars
    while i < len(decls):
        # Consecutive declarations of one kind share a section, so order is preserved.
        kind = decls[i].kind
        out.append(f"{_INDENT}{kind.value} {{")
        while i < len(decls) and decls[i].kind is kind:
            out.append(_INDENT * 2 + format_decl(decls[i]))
            i += 1
        out.append(f"{_INDENT}}}")
    for block in graph.blocks:
        if len(out) > 1:
            out.append("")
        _format_block(block, 1, out)
    out.append("}")
    return "\n".join(out) + "\n"
