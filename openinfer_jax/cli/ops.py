"""`openinfer ops [NAME...] [--markdown] [--category C]`: show the op registry."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from openinfer_jax.ops import registry
from openinfer_jax.ops.docgen import compact_dtypes, render_markdown
from openinfer_jax.ops.registry import REQUIRED, OpCheckError, OpDef

__all__ = ["register", "run_ops"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `ops` subcommand."""
    parser = subparsers.add_parser(
        "ops", help="list the ops with their dtypes, params and policies"
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="show only these ops")
    parser.add_argument("--category", help="show only ops of this category (arith, reduction, ...)")
    parser.add_argument(
        "--markdown", action="store_true", help="print docs/ops.md (the generated reference page)"
    )
    parser.set_defaults(handler=run_ops)


def _selected(names: list[str], category: str | None) -> list[OpDef]:
    """The ops to show; unknown names or categories are user errors listing what exists."""
    ops = registry.all_ops()
    if category is not None:
        categories = sorted({op.category for op in ops})
        if category not in categories:
            raise OpCheckError(f"unknown op category {category!r}; known: {', '.join(categories)}")
        ops = [op for op in ops if op.category == category]
    if names:
        unknown = [n for n in names if registry.get(n) is None]
        if unknown:
            raise OpCheckError(
                f"unknown op {', '.join(map(repr, unknown))}; known ops: {', '.join(registry.names())}"
            )
        ops = [op for op in ops if op.name in names]
    return ops


def _params(op: OpDef) -> str:
    parts = []
    for spec in op.params.values():
        default = "" if spec.default in (None, REQUIRED, ()) else f"={spec.default}"
        required = "!" if spec.default is REQUIRED else ""
        parts.append(f"{spec.name}{required}{default}")
    return " ".join(parts) or "-"


def run_ops(args: argparse.Namespace) -> int:
    """Print the table (or the markdown page); exit 0."""
    if args.markdown:
        sys.stdout.write(render_markdown())
        return 0
    ops = _selected(list(args.names), args.category)
    table = Table(title=f"{len(ops)} ops", show_lines=False)
    for column in (
        "op",
        "category",
        "inputs",
        "dtypes",
        "params (! = required)",
        "out",
        "bcast",
        "inplace",
    ):
        table.add_column(column, overflow="fold")
    for op in ops:
        inputs = ", ".join(spec.name for spec in op.inputs) + ("..." if op.variadic else "")
        out = op.output.describe() + (" / acc" if op.acc_rules else "")
        table.add_row(
            op.name, op.category, inputs, compact_dtypes(op.dtypes), _params(op), out,
            "yes" if op.broadcast else "no", "yes" if op.inplace else "no",
        )  # fmt: skip
    Console(highlight=False, width=max(140, Console().width)).print(table)
    return 0
