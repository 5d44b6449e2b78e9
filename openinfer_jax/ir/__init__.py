"""The graph IR: node classes, canonical text printing, JSON and validation.

Both DSL frontends produce these classes; every later stage consumes only them.
``str(graph)`` / `format_graph` print ``graph { ... }`` text, `to_json` / `from_json`
convert to and from the versioned JSON schema of docs/graph-json.md.
"""

from __future__ import annotations

from openinfer_jax.ir.nodes import (
    Assign,
    Await,
    Barrier,
    Block,
    Branch,
    CacheAccess,
    CacheDecrement,
    CacheIncrement,
    CacheIndex,
    CacheRead,
    CacheReset,
    CacheSlice,
    CacheWrite,
    Dep,
    Dim,
    Graph,
    Loop,
    MemoryKind,
    Node,
    Op,
    ParamValue,
    Return,
    ScalarValue,
    SourceLoc,
    Transfer,
    VarDecl,
    VarName,
    VarRef,
    Yield,
)
from openinfer_jax.ir.printer import format_graph
from openinfer_jax.ir.serialize import (
    GRAPH_JSON_FORMAT,
    GRAPH_JSON_VERSION,
    from_json,
    from_json_text,
    to_json,
    to_json_text,
)

__all__ = [
    "GRAPH_JSON_FORMAT",
    "GRAPH_JSON_VERSION",
    "Assign",
    "Await",
    "Barrier",
    "Block",
    "Branch",
    "CacheAccess",
    "CacheDecrement",
    "CacheIncrement",
    "CacheIndex",
    "CacheRead",
    "CacheReset",
    "CacheSlice",
    "CacheWrite",
    "Dep",
    "Dim",
    "Graph",
    "Loop",
    "MemoryKind",
    "Node",
    "Op",
    "ParamValue",
    "Return",
    "ScalarValue",
    "SourceLoc",
    "Transfer",
    "VarDecl",
    "VarName",
    "VarRef",
    "Yield",
    "format_graph",
    "from_json",
    "from_json_text",
    "to_json",
    "to_json_text",
]

from openinfer_jax.ir.validate import (
    Issue,
    ValidationErrors,
    VarInfo,
    check,
    infer_var_types,
    validate,
)

__all__ += ["Issue", "ValidationErrors", "VarInfo", "check", "infer_var_types", "validate"]
