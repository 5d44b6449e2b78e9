"""`openinfer verify FILE...`: check `.oinf` files against every rule of docs/oinf.md."""

from __future__ import annotations

import argparse

from rich.console import Console

from openinfer_jax.oinf import verify_file

__all__ = ["register", "run_verify"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `verify` subcommand."""
    verify = subparsers.add_parser(
        "verify", help="check .oinf files against every rule of docs/oinf.md"
    )
    verify.add_argument("files", nargs="+", metavar="FILE")
    verify.set_defaults(handler=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    """Print every violated rule of each file; exit status 0 only if all files are valid."""
    console = Console(highlight=False)
    status = 0
    for path in args.files:
        violations = verify_file(path)
        if not violations:
            console.print(f"[green]OK[/green] {path}")
            continue
        status = 1
        console.print(f"[red]INVALID[/red] {path}: {len(violations)} violation(s)")
        for violation in violations:
            console.print(f"  {violation}", markup=False)
    return status
