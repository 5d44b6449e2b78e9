"""``openinfer show GRAPH``: print a graph as text or JSON, or draw its control flow.

GRAPH is a ``graph{}`` text file or a graph JSON file (docs/graph-json.md); a ``.json``
suffix, or text starting with ``{``, selects JSON. ``--format dot`` writes Graphviz DOT
(see `openinfer_jax.ir.dot`), ``--format svg`` pipes it through ``dot -Tsvg``.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from openinfer_jax.core.errors import ArchitectureError, BackendError, DslSyntaxError
from openinfer_jax.ir import Graph, format_graph, to_json_text
from openinfer_jax.ir.dot import to_dot
from openinfer_jax.trace import load_graph

__all__ = ["FORMATS", "register", "render_graph"]

FORMATS = ("text", "json", "dot", "svg")
_DOT_TIMEOUT_S = 120


def _svg(dot_text: str) -> str:
    exe = shutil.which("dot")
    if exe is None:
        raise BackendError(
            "Graphviz 'dot' was not found on PATH; install graphviz (apt-get install graphviz) "
            "or use --format dot and render it elsewhere"
        )
    try:
        done = subprocess.run(
            [exe, "-Tsvg"],
            input=dot_text,
            capture_output=True,
            text=True,
            timeout=_DOT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise BackendError(f"running Graphviz 'dot -Tsvg' failed: {err}") from None
    if done.returncode != 0:
        raise BackendError(
            f"Graphviz 'dot -Tsvg' exited with {done.returncode}: {done.stderr.strip()}"
        )
    return done.stdout


def render_graph(graph: Graph, fmt: str, title: str = "graph") -> str:
    """The graph in one of `FORMATS` (svg needs Graphviz, else BackendError)."""
    if fmt == "text":
        return format_graph(graph)
    if fmt == "json":
        return to_json_text(graph) + "\n"
    if fmt == "dot":
        return to_dot(graph, title)
    if fmt == "svg":
        return _svg(to_dot(graph, title))
    raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def _show(args: argparse.Namespace) -> int:
    if args.model or args.arch:
        from openinfer_jax.cli import model_graph

        if not args.model:
            raise ArchitectureError("--arch builds the graph from a model: give --model M.oinf")
        arch = args.arch[-1] if args.arch else None
        if args.graph is not None:
            raise ArchitectureError("give a graph file or --model/--arch, not both")
        args.save_graph = None
        graph = model_graph.program(args, args.model, arch)
        title = f"{Path(args.model).stem}-{arch}"
    elif args.graph is None:
        raise DslSyntaxError("give a graph file, or --model M.oinf --arch NAME")
    else:
        graph = load_graph(args.graph)
        title = Path(args.graph).stem
    out = render_graph(graph, args.format, title=title)
    if args.output is None:
        sys.stdout.write(out)
        return 0
    try:
        Path(args.output).write_text(out, encoding="utf-8")
    except OSError as err:
        raise BackendError(
            f"{args.output}: cannot write the output: {err.strerror or err}"
        ) from None
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``show`` subcommand."""
    parser = subparsers.add_parser(
        "show",
        help="print a graph (text/JSON) or draw its control flow (DOT/SVG)",
        description="Print a graph{} program or graph JSON file as canonical text or JSON, "
        "or render its control-flow graph as Graphviz DOT or SVG.",
    )
    parser.add_argument(
        "graph", metavar="GRAPH", nargs="?", help="a .graph text file or a graph .json file"
    )
    parser.add_argument("--model", metavar="M.oinf", help="with --arch: the model to build for")
    parser.add_argument(
        "--arch", action="append", default=[], metavar="NAME",
        help="show the graph this architecture (llama, bert) builds for --model",
    )  # fmt: skip
    from openinfer_jax.cli.model_graph import add_builder_options

    add_builder_options(parser)
    parser.add_argument(
        "--format", "-f", choices=FORMATS, default="text", help="output format (default: text)"
    )
    parser.add_argument(
        "-o", "--output", metavar="OUT", default=None, help="write to OUT instead of stdout"
    )
    parser.set_defaults(handler=_show)
