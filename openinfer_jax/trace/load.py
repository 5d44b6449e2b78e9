"""Reading a graph from any form a user may hand over: one home for every frontend.

The simulator, the synthesizer and ``openinfer show``/``run``/``emit`` all call `load_graph`,
so a graph given as a path, as text or as an IR object behaves the same everywhere (and
an unreadable file is the same `DslSyntaxError` everywhere).
"""

from __future__ import annotations

import os
from pathlib import Path

from openinfer_jax.core.errors import DslSyntaxError
from openinfer_jax.ir.nodes import Graph
from openinfer_jax.ir.serialize import from_json_text
from openinfer_jax.trace.parser import parse

__all__ = ["load_graph", "parse_file", "read_graph_file"]


def read_graph_file(path: str | os.PathLike[str]) -> str:
    """The text of a graph file (UTF-8; a leading byte-order mark is dropped).

    Raises:
        DslSyntaxError: the file cannot be read (missing, a directory, no permission) or is
            not UTF-8 text; the message names the file.
    """
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8-sig")  # a leading BOM is not part of the program
    except OSError as err:
        raise DslSyntaxError(f"{p}: cannot read the graph file: {err.strerror or err}") from None
    except UnicodeDecodeError as err:
        raise DslSyntaxError(
            f"{p}: byte {err.start} is not UTF-8; expected a UTF-8 text file"
        ) from None


def parse_file(path: str | os.PathLike[str]) -> Graph:
    """Parse the `graph{}` program in the file at `path` (UTF-8).

    Raises:
        DslSyntaxError: a syntax error (located as ``path:line:col``), or the file cannot be
            read or is not UTF-8 text.
    """
    return parse(read_graph_file(path), filename=str(Path(path)))


def load_graph(graph: Graph | str | os.PathLike[str]) -> Graph:
    """A `Graph` from a Graph, program text, or a path to a `graph{}` text or graph JSON file.

    A string containing ``{`` or a newline is program text, anything else a path. Text (or a
    file) starting with ``{``, or a file named ``*.json``, is graph JSON (docs/graph-json.md);
    everything else is `graph{}` text (docs/dsl.md).

    Raises:
        DslSyntaxError: the file cannot be read, or the text is not a valid program or graph
            JSON document (the message names the file and the place).
    """
    if isinstance(graph, Graph):
        return graph
    if isinstance(graph, str) and ("{" in graph or "\n" in graph):
        return _from_text(graph, filename=None, is_json=False)
    path = Path(graph)
    text = read_graph_file(path)
    return _from_text(text, filename=str(path), is_json=path.suffix.lower() == ".json")


def _from_text(text: str, *, filename: str | None, is_json: bool) -> Graph:
    if is_json or text.lstrip().startswith("{"):
        return from_json_text(text, filename=filename)
    return parse(text, filename=filename)
