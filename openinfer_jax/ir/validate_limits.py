"""Validation against the resource budget (`openinfer_jax.core.limits.Limits`).

What the program and the model fix is checked here, before anything is allocated: loop
nesting, the element count of every variable whose shape is known (literal dims, or dims
resolved through the model's sizevars) and of every `@fixed` table's storage, and `@fixed`
sizes against the cache-entry limit. Each message names the variable (or loop) and the
limit, and how to raise it.
"""

from __future__ import annotations

from openinfer_jax.core.limits import Limits
from openinfer_jax.ir.nodes import Loop, Node
from openinfer_jax.ir.validate_context import Context, VarInfo

__all__ = ["check_limits"]


def _raise_hint(name: str, value: int) -> str:
    return (
        f"above the limit {name}={value}; raise it with limits=Limits({name}=...) or "
        f"`--limit {name}=...` if this is meant"
    )


def _loops(ctx: Context, nodes: tuple[Node, ...], depth: int, limits: Limits, where: str) -> None:
    for node in nodes:
        if isinstance(node, Loop):
            if depth + 1 > limits.max_loop_depth:
                ctx.error(
                    f"loop '{node.name}' is nested {depth + 1} deep, "
                    f"{_raise_hint('max_loop_depth', limits.max_loop_depth)}; flatten the loops",
                    node.loc,
                    where,
                )
                continue  # one report per too-deep chain
            _loops(ctx, node.body, depth + 1, limits, where)


def _numel(shape: tuple[int, ...]) -> int:
    total = 1
    for d in shape:
        total *= d
    return total


def _known_shape(ctx: Context, info: VarInfo) -> tuple[int, ...] | None:
    """The variable's shape when it does not depend on unknown sizes."""
    if not ctx.dims.symbolic:
        return info.shape
    if all(isinstance(d, int) for d in info.dims):
        return tuple(int(d) for d in info.dims)  # literal dims: known without a model
    return None


def _check_var(ctx: Context, info: VarInfo, limits: Limits) -> None:
    shape = _known_shape(ctx, info)
    decl = info.decl
    fixed = dict(decl.fixed) if decl is not None else {}
    for index, size in fixed.items():
        if size > limits.max_cache_entries:
            ctx.error(
                f"'{info.name}' @fixed({index}={size}) holds {size} entries, "
                f"{_raise_hint('max_cache_entries', limits.max_cache_entries)}",
                info.loc,
                f"variable '{info.name}'",
            )
    if shape is None:
        return
    numel = _numel(shape)
    what = "entries of" if info.table_indices else ""
    if numel > limits.max_tensor_elements:
        ctx.error(
            f"'{info.name}' {ctx.shape_text(info)} has {numel:,} elements{' per entry' if what else ''}, "
            f"{_raise_hint('max_tensor_elements', limits.max_tensor_elements)}",
            info.loc,
            f"variable '{info.name}'",
        )
        return
    if decl is not None and decl.table and fixed and set(fixed) >= set(decl.table_indices):
        storage = numel * _numel(tuple(fixed[i] for i in decl.table_indices))
        if storage > limits.max_tensor_elements:
            ctx.error(
                f"table '{info.name}' preallocates {storage:,} elements "
                f"(@fixed sizes times the entry {ctx.shape_text(info)}), "
                f"{_raise_hint('max_tensor_elements', limits.max_tensor_elements)}",
                info.loc,
                f"variable '{info.name}'",
            )


def check_limits(ctx: Context, limits: Limits) -> None:
    """Report every loop, variable and fixed table beyond `limits`."""
    for block in ctx.graph.blocks:
        _loops(ctx, block.nodes, 0, limits, f"block '{block.name}'")
    for info in ctx.vars.values():
        _check_var(ctx, info, limits)
