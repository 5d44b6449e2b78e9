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
import os
import sys
from collections.abc import Sequence

from openinfer_jax.core.errors import OpenInferError

__all__ = ["build_parser", "main", "package_version"]

# Each command and the module that registers it, in the order they appear in --help. Only the
# module of the command being run is imported, so `openinfer verify`/`inspect` never import
# JAX (the simulator and the op library do).
_COMMANDS = {
    "verify": "oinf",
    "inspect": "inspect",
    "show": "graph",
    "ops": "ops",
    "convert": "convert",
    "import": "onnx_import",
    "run": "run",
    "emit": "emit",
    "generate": "generate",
    "embed": "embed",
    "trace-diff": "trace_diff",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with the subcommand `command` registered (every one when None or
    not a known command, so `--help` and a mistyped command list them all)."""
    parser = argparse.ArgumentParser(
        prog="openinfer",
        description="OpenInfer-JAX: .oinf model packages, graph DSL, simulator, code generation.",
    )
    parser.add_argument("--version", action="version", version=f"openinfer-jax {package_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    wanted = [_COMMANDS[command]] if command in _COMMANDS else list(_COMMANDS.values())
    for name in wanted:
        module_name = f"{__name__}.{name}"
        if importlib.util.find_spec(module_name) is None:
            continue
        importlib.import_module(module_name).register(subparsers)
    return parser


def package_version() -> str:
    """The installed distribution's version (the source tree's `__version__` when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("openinfer-jax")
    except PackageNotFoundError:
        from openinfer_jax import __version__

        return __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (0 ok, 1 error or failed check)."""
    words = list(sys.argv[1:] if argv is None else argv)
    command = next((word for word in words if not word.startswith("-")), None)
    parser = build_parser(command)
    args = parser.parse_args(words)
    try:
        return int(args.handler(args) or 0)
    except OpenInferError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`openinfer inspect m.oinf | head`): not an error of ours.
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
