"""The `openinfer` command line.

Each sub-module of this package that defines ``register(subparsers)`` adds its own
subcommands (``verify``/``inspect`` in `oinf`, ``show`` in `graph`, ``ops`` in `ops`, ...).
A subcommand's handler returns an exit code. User mistakes arrive as `OpenInferError`
and are printed as one clear line on stderr with exit code 1, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

from openinfer_jax.errors import OpenInferError

__all__ = ["build_parser", "main"]

# Command modules, in the order their commands appear in --help.
_COMMAND_MODULES = ("oinf", "graph", "ops", "convert", "run", "emit")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="openinfer",
        description="OpenInfer-JAX: .oinf model packages, graph DSL, simulator, code generation.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMAND_MODULES:
        module_name = f"{__name__}.{name}"
        if importlib.util.find_spec(module_name) is None:
            continue
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (0 ok, 1 error or failed check)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except OpenInferError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
