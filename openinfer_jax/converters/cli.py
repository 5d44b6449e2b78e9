"""`openinfer convert`: argument definitions and the handler (registered by openinfer_jax.cli.convert)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from openinfer_jax.converters.api import FORMATS, plan_conversion
from openinfer_jax.converters.display import (
    plan_table,
    progress_bar,
    quant_error_table,
    summary_table,
)
from openinfer_jax.converters.naming import PATTERNS
from openinfer_jax.converters.plan import OUTPUT_DTYPES, parse_sizevar
from openinfer_jax.converters.write import check_destination, write_plan
from openinfer_jax.core.errors import ConversionError

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the convert options to `parser`."""
    parser.add_argument(
        "src", help="checkpoint: .safetensors file/dir/index.json, .msgpack, orbax dir, .gguf"
    )
    parser.add_argument("-o", "--output", help="destination .oinf file (required unless --dry-run)")
    parser.add_argument(
        "--format", choices=sorted(FORMATS), help="source format (default: detected)"
    )
    parser.add_argument(
        "--dtype", choices=sorted(OUTPUT_DTYPES), help="cast floating tensors to this dtype"
    )
    parser.add_argument(
        "--rename", action="append", default=[], metavar="REGEX=REPL",
        help="rename rule (repeatable, first full match wins; groups as {1} or {name})",
    )  # fmt: skip
    parser.add_argument(
        "--pattern",
        choices=sorted(PATTERNS),
        help="preset rules giving per-layer names stem.param.{l}",
    )
    parser.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="GLOB",
        help="keep only matching source names",
    )
    parser.add_argument(
        "--exclude", action="append", default=[], metavar="GLOB", help="drop matching source names"
    )
    parser.add_argument(
        "--sizevar", action="append", default=[], metavar="NAME=VALUE",
        help="add or replace a sizevar (repeatable), e.g. a batch size: --sizevar B=2",
    )  # fmt: skip
    parser.add_argument(
        "--quantize", action="append", default=[], metavar="SCHEME[:GLOB]",
        help="block-quantize floating tensors of 2+ axes: q8_0, q4_0 or q4_1 (repeatable; "
        "with :GLOB only matching source/destination names)",
    )  # fmt: skip
    parser.add_argument(
        "--block", type=int, default=32, metavar="N",
        help="elements per quantization block along the last axis (default 32)",
    )  # fmt: skip
    parser.add_argument(
        "--keep", action="append", default=[], metavar="DTYPE:GLOB",
        help="keep matching tensors unquantized in DTYPE (f32, f16, bf16), e.g. 'f32:tok_emb.*'",
    )  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    parser.add_argument("--force", action="store_true", help="replace an existing output file")
    parser.add_argument("--quiet", action="store_true", help="no progress bar or summary")


def run(args: argparse.Namespace) -> int:
    """Handle `openinfer convert`; returns the exit code. Raises ConversionError for bad input."""
    console = Console(file=sys.stderr if not args.dry_run else sys.stdout)
    options: dict[str, Any] = dict(
        format=args.format, dtype=args.dtype, rename=args.rename, pattern=args.pattern,
        include=args.include, exclude=args.exclude,
        sizevars=dict(parse_sizevar(text) for text in args.sizevar),
        quantize=args.quantize, block_size=args.block, keep=args.keep,
    )  # fmt: skip
    if args.dry_run:
        plan = plan_conversion(args.src, **options)
        try:
            console.print(plan_table(plan))
            for note in plan.notes:
                console.print(f"note: {note}")
        finally:
            plan.checkpoint.close()
        return 0
    if not args.output:
        raise ConversionError("give the destination with -o OUT.oinf (or use --dry-run)")
    output = Path(args.output)
    check_destination(output, force=args.force)
    plan = plan_conversion(args.src, **options)
    try:
        if args.quiet:
            write_plan(plan, output, force=args.force)
            return 0
        with progress_bar(plan, console) as hook:
            report = write_plan(plan, output, force=args.force, on_tensor=hook)
    finally:
        plan.checkpoint.close()
    console.print(summary_table(report))
    errors = quant_error_table(report)
    if errors is not None:
        console.print(errors)
    for note in report.notes:
        console.print(f"note: {note}")
    return 0
