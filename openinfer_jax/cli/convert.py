"""`openinfer convert SRC -o OUT.oinf`: checkpoint conversion (logic lives in `openinfer_jax.converters`)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``convert`` subcommand."""
    from openinfer_jax.converters.cli import add_arguments, run

    parser: argparse.ArgumentParser = subparsers.add_parser(
        "convert",
        help="convert a safetensors / flax / orbax / GGUF checkpoint to .oinf",
        description="Convert a checkpoint to one .oinf package (streaming, atomic).",
    )
    add_arguments(parser)
    parser.set_defaults(handler=run)
