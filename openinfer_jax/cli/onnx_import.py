"""`openinfer import model.onnx -o out/`: ONNX to graph{} program + .oinf (logic in
`openinfer_jax.onnx`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``import`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "import",
        help="import an ONNX model as a graph{} program and a .oinf",
        description=(
            "Import an ONNX model: writes OUT/NAME.graph (readable graph{} text), OUT/NAME.oinf "
            "(weights, sizevars) and OUT/NAME.report.txt. Nothing is written on error."
        ),
    )
    parser.add_argument("model", type=Path, help="the .onnx file")
    parser.add_argument("-o", "--out", type=Path, required=True, help="output directory")
    parser.add_argument("--name", help="file stem of the outputs (default: the model's stem)")
    parser.add_argument(
        "--dim", action="append", default=[], metavar="NAME=N",
        help="value of a symbolic input dim, e.g. --dim batch=1 (default 1); repeatable",
    )  # fmt: skip
    parser.add_argument(
        "--state", action="append", default=[], metavar="IN=OUT",
        help="keep graph input IN and output OUT as one persistent variable; repeatable",
    )  # fmt: skip
    parser.add_argument(
        "--const", action="append", default=[], metavar="NAME=FILE.npy",
        help="fold graph input NAME as a constant read from a .npy file; repeatable",
    )  # fmt: skip
    parser.add_argument("--no-loops", action="store_true", help="keep repeated layers unrolled")
    parser.add_argument("--force", action="store_true", help="overwrite existing outputs")
    parser.add_argument("--quiet", action="store_true", help="do not print the report")
    parser.set_defaults(handler=run)


def _pairs(values: list[str], what: str) -> dict[str, str]:
    from openinfer_jax.onnx import OnnxImportError

    out: dict[str, str] = {}
    for value in values:
        key, sep, rest = value.partition("=")
        if not sep or not key or not rest:
            raise OnnxImportError(f"{what} {value!r} must be NAME=VALUE")
        out[key] = rest
    return out


def run(args: argparse.Namespace) -> int:
    """Import and print the report; exit code 0 (errors raise OnnxImportError -> 1)."""
    import numpy as np

    from openinfer_jax.onnx import OnnxImportError, import_onnx

    dims: dict[str, int] = {}
    for key, value in _pairs(args.dim, "--dim").items():
        try:
            dims[key] = int(value)
        except ValueError:
            raise OnnxImportError(f"--dim {key}={value}: the value must be an integer") from None
    constants = {}
    for key, value in _pairs(args.const, "--const").items():
        try:
            constants[key] = np.load(value, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise OnnxImportError(
                f"--const {key}={value}: cannot read the .npy file: {err}"
            ) from None
    report = import_onnx(
        args.model, args.out, name=args.name, dims=dims, constants=constants,
        state=_pairs(args.state, "--state"), loops=not args.no_loops, force=args.force,
    )  # fmt: skip
    if not args.quiet:
        print(report.format(), file=sys.stdout)
    return 0
