"""Loops too long to unroll: counted before a fused region unrolls them, run as `fori_loop`.

A fused (wide) region unrolls its loops into one XLA program, which is right for a loop
over 30 layers and wrong for one over 10**6 steps (the program, its compile time and the
Python walk that builds it all grow with the count). `unrolled_iterations` counts what a
region would unroll, stopping past the budget (`Limits.max_unrolled_iterations`); past it
the executor runs the region's nodes with the loop left a loop. A long loop whose body is
one pure region (ops, assigns, transfers; no prefix-table entries, no settings read from
variables, no ragged inputs) then runs as ONE `jax.lax.fori_loop` call: compiled once,
whatever the count; other bodies run iteration by iteration (memory stays bounded).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ir.nodes import Assign, Dep, Loop, Node, Op, Transfer, VarName, VarRef
from openinfer_jax.sim.plan import RegionPlan
from openinfer_jax.sim.regions import NodeShapes

__all__ = ["LoopTooLong", "fori_body_ok", "fori_region", "unrolled_iterations"]


class LoopTooLong(Exception):
    """A wide region would unroll more iterations than the budget (internal signal)."""


def unrolled_iterations(
    nodes: tuple[Node, ...],
    scope: dict[str, int],
    bound: Callable[[Any, dict[str, int], Loop, str], int],
    budget: int,
) -> int:
    """Loop iterations a region unrolls (nested ones included), counting stops past `budget`.

    `bound(value, scope, loop, which)` resolves a loop bound on the host (the executor's).
    """
    total = 0
    for node in nodes:
        if not isinstance(node, Loop):
            continue
        lo, hi = bound(node.start, scope, node, "start"), bound(node.end, scope, node, "end")
        if hi - lo > budget - total:
            return budget + 1
        for i in range(lo, hi):
            total += 1 + unrolled_iterations(
                node.body, {**scope, node.index: i}, bound, budget - total
            )
            if total > budget:
                return total
    return total


def fori_body_ok(region: RegionPlan) -> bool:
    """Whether a loop body region can run as a `fori_loop` (see the module docstring)."""
    if region.wide:
        return False
    for node in region.nodes:
        if not isinstance(node, (Op, Assign, Transfer, Dep)):
            return False
        refs: list[VarRef] = []
        if isinstance(node, Op):
            refs = [*node.inputs, node.output]
            if any(isinstance(v, VarName) for _k, v in node.params):
                return False
        elif isinstance(node, Transfer):
            refs = [node.src, node.dst]
        if any(r.indices for r in refs):
            return False
    return True


def fori_region(
    region: RegionPlan,
    dtypes: list[DType],
    out_dtypes: list[DType],
    params: list[dict[str, Any]],
    trace_op: Callable[..., None],
) -> Callable[[tuple[Any, ...], Any], tuple[Any, ...]]:
    """A jitted `(inputs, n) -> values of region.writes after n >= 1 runs of the region`.

    `inputs` are the values of `region.reads`; a run's writes feed the next run's reads
    (the loop-carried state). `n` is traced, so one compile serves every count.
    """
    reads, writes = region.reads, region.writes
    carried = list(dict.fromkeys([*reads, *writes]))
    read_dtypes = dict(zip(reads, dtypes))

    def once(values: dict[VarRef, Any]) -> dict[VarRef, Any]:
        env: dict[VarRef, tuple[Any, Any, DType]] = {
            ref: (values[ref], None, read_dtypes[ref]) for ref in reads
        }
        op_index = 0
        for node in region.nodes:
            if isinstance(node, Op):
                trace_op(node, env, (), params[op_index], out_dtypes[op_index], NodeShapes())
                op_index += 1
            elif isinstance(node, Assign):
                zeros = jnp.zeros(tuple(int(d) for d in node.dims), node.dtype.numpy)
                env[VarRef(node.name)] = (zeros, None, node.dtype)
            elif isinstance(node, Transfer):
                env[node.dst] = env[node.src]
        return {ref: env[ref][0] for ref in carried}

    def run(inputs: tuple[Any, ...], n: Any) -> tuple[Any, ...]:
        first = once(dict(zip(reads, inputs)))

        def body(_i: Any, carry: tuple[Any, ...]) -> tuple[Any, ...]:
            after = once(dict(zip(carried, carry)))
            return tuple(after[ref] for ref in carried)

        final = jax.lax.fori_loop(1, n, body, tuple(first[ref] for ref in carried))
        return tuple(dict(zip(carried, final))[ref] for ref in writes)

    return jax.jit(run)
