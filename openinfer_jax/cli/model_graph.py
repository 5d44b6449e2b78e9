"""The program of `run`, `emit` and `show`: a graph file, or a builder of `openinfer_jax.models`.

``--graph FILE`` reads graph{} text or graph JSON; ``--arch NAME`` (llama, bert) builds the
architecture's graph from the model's sizes instead, so a converted model runs with no graph
file. ``--save-graph FILE`` writes the built graph as graph{} text to read or edit (and to
pass back with ``--graph``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from openinfer_jax.core.errors import ArchitectureError

__all__ = ["add_arguments", "add_builder_options", "program", "split_arch"]

# Builder options; each is passed only when given (the builder has its own defaults).
_OPTIONS = (
    ("--chunk", "llama: tokens per step (prefill chunk; 1 = decode-only graph; default 16)"),
    ("--context", "llama: K/V cache capacity in tokens (default min(model context, 1024))"),
    ("--batch", "bert: sentences per step (default 1)"),
    ("--seq", "bert: tokens per sentence (default 128)"),
)


def add_builder_options(parser: argparse.ArgumentParser) -> None:
    """Add the builder options (--chunk, --context, --kv-dtype, --batch, --seq)."""
    from openinfer_jax.models.llama import KV_DTYPES

    for flag, help_text in _OPTIONS:
        parser.add_argument(flag, type=int, metavar="N", help=help_text)
    parser.add_argument(
        "--kv-dtype",
        choices=KV_DTYPES,
        help="llama: the K/V cache's type (default the activations', f32; f16 halves it)",
    )


def add_arguments(parser: argparse.ArgumentParser, *, arch_help: str) -> None:
    """Add --graph, --arch, the builder options and --save-graph."""
    parser.add_argument("--graph", help="graph{} text file (or .json graph)")
    parser.add_argument("--arch", action="append", default=[], metavar="NAME", help=arch_help)
    add_builder_options(parser)
    parser.add_argument(
        "--save-graph",
        metavar="FILE",
        help="with --arch: also write the built graph as graph{} text",
    )


def split_arch(values: list[str]) -> tuple[str | None, list[str]]:
    """(the model architecture among `values`, the other values) — emit's --arch takes both."""
    from openinfer_jax.models import architecture_names

    models = [v for v in values if v in architecture_names()]
    if len(models) > 1:
        raise ArchitectureError(f"--arch names two architectures: {', '.join(models)}")
    return (models[0] if models else None), [v for v in values if v not in models]


def program(args: argparse.Namespace, model: str | Path, arch: str | None) -> Any:
    """The graph to run: the --graph path, or the graph --arch builds for `model`.

    Raises:
        ArchitectureError: neither or both given, an unknown architecture, an option the
            architecture does not take, or a model that does not fit it.
    """
    if args.graph and arch:
        raise ArchitectureError("give --graph FILE or --arch NAME, not both")
    if args.graph:
        if args.save_graph:
            raise ArchitectureError(
                "--save-graph writes a graph built by --arch; drop it with --graph"
            )
        return Path(args.graph)
    if not arch:
        from openinfer_jax.models import architecture_names

        raise ArchitectureError(
            f"give the program: --graph FILE, or --arch NAME ({', '.join(architecture_names())}) "
            "to build it from the model"
        )
    from openinfer_jax.ir import format_graph
    from openinfer_jax.models import build_graph

    options = {flag[2:]: getattr(args, flag[2:]) for flag, _ in _OPTIONS}
    options["kv_dtype"] = args.kv_dtype
    try:
        graph = build_graph(model, arch, **options)
    except ValueError as err:
        raise ArchitectureError(f"--arch {arch}: {err}") from None
    if args.save_graph:
        Path(args.save_graph).write_text(format_graph(graph), encoding="utf-8")
    return graph
