"""`openinfer trace-diff`: the first node whose output differs between two traces.

    openinfer trace-diff SIM.json OTHER.json [--tol DTYPE=TOL ...] [--rtol TOL]

SIM.json is the simulator's trace with value summaries (`openinfer run --trace SIM.json
--trace-summaries`); OTHER.json another one, e.g. what an emitted program built with
``-DOI_TRACE`` wrote (``OI_TRACE_FILE=c.json ./driver ...``). Exit code 0 when every
summarized node agrees within the tolerance of its dtype, 1 at the first that does not
(printed: step, block, node index, the node as DSL text, its line:column, loop indices, and
which summary differs).
"""

from __future__ import annotations

import argparse
from typing import Any

from openinfer_jax.core.errors import SimulationError

__all__ = ["register", "trace_diff_command"]


def register(subparsers: Any) -> None:
    """Add the `trace-diff` subcommand."""
    from openinfer_jax.sim.summaries import TOLERANCE

    defaults = ", ".join(f"{k}={v:g}" for k, v in TOLERANCE.items())
    parser = subparsers.add_parser(
        "trace-diff",
        help="name the first node whose output differs between two traces",
        description="Compare a simulator trace with value summaries against another trace "
        "(an emitted program's -DOI_TRACE output) and name the first node that differs.",
    )
    parser.add_argument("reference", metavar="SIM.json", help="the simulator's trace")
    parser.add_argument("other", metavar="OTHER.json", help="the trace to check")
    parser.add_argument(
        "--tol", action="append", default=[], metavar="DTYPE=TOL",
        help=f"rtol = atol for one float dtype (defaults: {defaults}; integers are exact)",
    )  # fmt: skip
    parser.add_argument(
        "--rtol", type=float, metavar="TOL", help="one rtol = atol for every float dtype"
    )
    parser.set_defaults(handler=trace_diff_command)


def _tolerance(args: argparse.Namespace) -> dict[str, float]:
    from openinfer_jax.sim.summaries import TOLERANCE

    tol = {k: args.rtol for k in TOLERANCE} if args.rtol is not None else {}
    for spec in args.tol:
        name, sep, value = spec.partition("=")
        if not sep or name not in TOLERANCE:
            raise SimulationError(
                f"--tol {spec!r}: expected DTYPE=TOL with DTYPE one of {', '.join(TOLERANCE)}"
            )
        try:
            tol[name] = float(value)
        except ValueError:
            raise SimulationError(f"--tol {spec!r}: {value!r} is not a number") from None
    return tol


def trace_diff_command(args: argparse.Namespace) -> int:
    """Handler of `openinfer trace-diff`: 0 when the traces agree, 1 at the first difference."""
    from openinfer_jax.sim.summaries import compare_traces, load_trace

    reference, other = load_trace(args.reference), load_trace(args.other)
    result = compare_traces(reference, other, _tolerance(args))
    if result.untraced:
        nodes = ", ".join(f"{index} `{text}`" for index, text in result.untraced)
        print(f"not in the other trace (fused or folded by its passes?): {nodes}")
    if result.difference is None:
        print(f"no difference: {result.compared} node outputs agree")
        return 0
    print(result.difference.describe())
    return 1
