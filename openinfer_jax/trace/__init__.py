"""The DSL frontends: the `graph{}` text parser and the Python builder, both producing IR.

``parse(text)`` / ``parse_file(path)`` read `graph{}` text (docs/dsl.md); `GraphBuilder`
builds the same IR from Python (docs/dsl-python.md); `load_graph` takes any of a Graph,
program text or a text/JSON file.
"""

from __future__ import annotations

from openinfer_jax.trace.load import load_graph, parse_file
from openinfer_jax.trace.parser import parse

__all__ = ["load_graph", "parse", "parse_file"]

from openinfer_jax.trace.builder import (
    BlockBuilder,
    GraphBuilder,
    Indexed,
    LoopIndex,
    Pending,
    Var,
)

__all__ += ["BlockBuilder", "GraphBuilder", "Indexed", "LoopIndex", "Pending", "Var"]
