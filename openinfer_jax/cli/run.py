"""`openinfer run`: simulate steps of a graph on a model and print or save the results.

    openinfer run --model m.oinf --graph g.graph [--steps N] [--input x=x.npy ...]
                  [--trace out.json] [--chrome-trace out.json] [--fetch y ...] [--device cpu]
                  [--devices N [--mesh data=2,model=2] [--shard PATTERN=SPEC ...]]

Inputs are `.npy` files inserted before every step. Without `--fetch`, every variable
written by the entry block is printed after the last step (summarized).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np

from openinfer_jax.core.errors import SimulationError
from openinfer_jax.sim import sharding_cli

__all__ = ["register", "run_command"]


def register(subparsers: Any) -> None:
    """Add the `run` subcommand."""
    parser = subparsers.add_parser(
        "run",
        help="simulate a graph on a model",
        description="Run steps of a graph{} program on a .oinf model with the simulator.",
    )
    parser.add_argument("--model", required=True, help="the .oinf model")
    parser.add_argument("--graph", required=True, help="graph{} text file (or .json graph)")
    parser.add_argument("--steps", type=int, default=1, help="steps to run (default 1)")
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="insert a dynamic input each step",
    )
    parser.add_argument(
        "--fetch", action="append", default=[], metavar="NAME", help="variable to print"
    )
    parser.add_argument("--trace", metavar="OUT.json", help="write the trace as JSON")
    parser.add_argument("--chrome-trace", metavar="OUT.json", help="write a Chrome/Perfetto trace")
    parser.add_argument("--device", default="cpu", help="cpu (default), gpu, vulkan or numpy")
    sharding_cli.add_arguments(parser)  # --devices/--mesh/--shard (docs/sharding.md)
    parser.set_defaults(handler=run_command)


def _parse_inputs(specs: list[str]) -> dict[str, np.ndarray]:
    inputs: dict[str, np.ndarray] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep or not name or not file:
            raise SimulationError(f"--input {spec!r}: expected NAME=FILE.npy")
        path = Path(file)
        if not path.is_file():
            raise SimulationError(f"--input {spec!r}: {path} does not exist")
        try:
            inputs[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise SimulationError(f"--input {spec!r}: cannot read {path} as .npy: {err}") from None
    return inputs


def _summary(value: np.ndarray) -> str:
    flat = value.reshape(-1)
    head = np.array2string(flat[:8], precision=5, separator=", ")
    more = f" ... ({flat.size} values)" if flat.size > 8 else ""
    return f"{value.dtype}{list(value.shape)} {head}{more}"


def run_command(args: argparse.Namespace) -> int:
    """Handler of `openinfer run`; returns the exit code."""
    from openinfer_jax.ir.nodes import Op, Transfer
    from openinfer_jax.sim import Simulator, write_chrome_trace, write_trace_json

    if args.steps < 1:
        raise SimulationError(f"--steps must be >= 1, got {args.steps}")
    model_path = Path(args.model)
    if not model_path.is_file():
        raise SimulationError(f"--model {model_path} does not exist")
    inputs = _parse_inputs(args.input)
    mesh, plan = sharding_cli.mesh_and_plan(args, args.device)
    sim = Simulator(str(model_path), Path(args.graph), device=args.device, mesh=mesh, sharding=plan)
    if args.trace or args.chrome_trace:
        sim.with_trace().with_timer()
    ex = sim.make_executor()
    for _ in range(args.steps):
        ex.insert(inputs)
        ex.step()
    names = args.fetch or [
        n.output.name if isinstance(n, Op) else n.dst.name
        for n in sim.entry.nodes
        if isinstance(n, (Op, Transfer))
    ]
    for name in dict.fromkeys(names):
        print(f"{name} = {_summary(ex.fetch(name))}")
    stats = ex.stats
    print(f"ran {stats['steps']} step(s); {stats['compilations']} XLA compilation(s)")
    for line in sharding_cli.summary(sim):
        print(line)
    if args.trace:
        write_trace_json(ex.trace(), args.trace)
        print(f"trace: {args.trace}")
    if args.chrome_trace:
        write_chrome_trace(ex.trace(), args.chrome_trace)
        print(f"chrome trace: {args.chrome_trace} (open in https://ui.perfetto.dev)")
    return 0
