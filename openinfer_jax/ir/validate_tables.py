"""Validation of prefix tables against the model: every index a loop can reach must resolve.

For each use `W[l]` of a table declared `W(l): f32[D, D] @pattern("W.{l}")`, the values
each index can take are computed from literals and loop bounds (ints, sizevars, constant
scalars whose value is known before running: `@init`, model metadata, sizevars or a scalar
tensor). Every reachable pattern name must be a model tensor with the declared dtype and
shape. An index that is a runtime variable (e.g. a persistent `step`) cannot be enumerated;
such uses are checked at run time by the simulator instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from openinfer_jax.ir.nodes import Loop, MemoryKind
from openinfer_jax.ir.validate_context import Context, format_type
from openinfer_jax.ir.validate_decls import model_dtype_shape, model_quant, model_tensors
from openinfer_jax.ir.validate_nodes import TableUse

__all__ = ["MAX_ENUMERATED", "check_tables", "constant_value"]

# Above this many index combinations per use we check the first ones only (say so in docs).
MAX_ENUMERATED = 100_000
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def constant_value(ctx: Context, name: str) -> int | None:
    """The integer value of `name` known before running: a sizevar, or a constant scalar's value.

    A constant (or never-written volatile) scalar gets its value from @init, else from the
    model: a metadata entry, a sizevar or a one-element tensor named by its @ref/name.
    """
    sizevars = ctx.dims.sizevars or {}
    info = ctx.lookup(name)
    if info is None:
        return sizevars.get(name)
    decl = info.decl
    if (
        decl is None
        or not info.is_scalar
        or decl.kind not in (MemoryKind.CONSTANT, MemoryKind.VOLATILE)
    ):
        return None
    if isinstance(decl.init, int) and not isinstance(decl.init, bool):
        return decl.init
    model = ctx.model
    if model is None:
        return None
    linked = decl.model_name
    metadata = dict(getattr(model, "metadata", {}) or {})
    value: Any = metadata.get(linked, sizevars.get(linked))
    if value is None and linked in model_tensors(model):
        tensor = model_tensors(model)[linked]
        if getattr(tensor, "has_data", False) and int(_numel(tensor.shape)) == 1:
            value = model.tensor(linked).reshape(-1)[0]
    try:
        return int(value) if value is not None and not isinstance(value, (str, bytes)) else None
    except (TypeError, ValueError):
        return None


def _numel(shape: Any) -> int:
    total = 1
    for d in shape:
        total *= int(d)
    return total


def _bound(
    ctx: Context, value: int | str, loops: dict[str, Loop], ranges: dict[str, range]
) -> int | None:
    if isinstance(value, int):
        return value
    if value in loops:
        values = _loop_range(ctx, loops[value], loops, ranges)
        return None if values is None or len(values) == 0 else values[-1]  # O(1), not max()
    return constant_value(ctx, value)


def _loop_range(
    ctx: Context, loop: Loop, loops: dict[str, Loop], ranges: dict[str, range]
) -> range | None:
    if loop.index in ranges:
        return ranges[loop.index]
    ranges[loop.index] = range(0)  # guards against a bound that names its own loop
    start = _bound(ctx, loop.start, loops, ranges)
    end = _bound(ctx, loop.end, loops, ranges)
    result = range(start, end) if start is not None and end is not None else None
    if result is None:
        del ranges[loop.index]
        return None
    ranges[loop.index] = result
    return result


def _describe_loop(ctx: Context, loop: Loop, values: range) -> str:
    bounds = f"{loop.start}..{loop.end}"
    resolved = f"{values.start}..{values.stop}"
    shown = bounds if bounds == resolved else f"{bounds} = {resolved}"
    return f"loop '{loop.name}' runs {loop.index} in {shown}"


def _fill_pattern(pattern: str, values: dict[str, str]) -> str:
    """`pattern` with each `{index}` replaced by its value (`"W.{l}"`, {"l": "3"} -> `"W.3"`)."""

    def replace(match: re.Match[str]) -> str:
        return values.get(match.group(1), match.group(0))

    return _PLACEHOLDER.sub(replace, pattern)


def _first_combinations(choices: list[range | list[int]], limit: int) -> Iterator[tuple[int, ...]]:
    """The first `limit` index combinations, in `itertools.product` order, built lazily.

    `itertools.product` turns each range into a tuple first: a loop bound of 10**9 (a
    literal, a sizevar or metadata) would allocate gigabytes before the limit applies.
    """
    sizes = [len(c) for c in choices]
    total = 1
    for size in sizes:
        total *= size
    for number in range(min(total, limit)):
        combo: list[int] = []
        for values, size in zip(reversed(choices), reversed(sizes), strict=True):
            number, digit = divmod(number, size)
            combo.append(values[digit])
        yield tuple(reversed(combo))


def _check_use(ctx: Context, use: TableUse, tensors: dict[str, Any], checked: set[str]) -> None:
    decl = use.info.decl
    assert decl is not None and decl.pattern is not None
    ranges: dict[str, range] = {}
    choices: list[range | list[int]] = []
    notes: list[str] = []
    for value in use.ref.indices:
        if isinstance(value, int):
            choices.append([value])
        elif value in use.loops:
            values = _loop_range(ctx, use.loops[value], use.loops, ranges)
            if values is None:
                return  # a runtime bound: the simulator checks each index when it runs
            choices.append(values)
            notes.append(_describe_loop(ctx, use.loops[value], values))
        else:
            return  # a runtime index variable
    missing: list[str] = []
    for combo in _first_combinations(choices, MAX_ENUMERATED):
        mapping = dict(zip(decl.table_indices, (str(v) for v in combo), strict=True))
        name = _fill_pattern(decl.pattern, mapping)
        tensor = tensors.get(name)
        if tensor is None:
            missing.append(name)
            continue
        if name in checked:
            continue
        checked.add(name)
        file_dtype, file_shape = model_dtype_shape(tensor)
        file_quant = model_quant(tensor)
        if (
            file_dtype is not decl.dtype
            or file_quant is not decl.quant
            or (use.info.shape is not None and file_shape != use.info.shape)
        ):
            ctx.error(
                f"model tensor '{name}' (for {use.ref}) is {format_type(file_dtype, file_shape, file_quant)} but "
                f"table '{decl.name}' declares entries {ctx.shape_text(use.info)}; make them agree",
                use.loc,
                use.where,
            )
    if missing:
        more = (
            f" (and {len(missing) - 1} more: {', '.join(missing[1:4])}{', ...' if len(missing) > 4 else ''})"
            if len(missing) > 1
            else ""
        )
        reach = f" ({'; '.join(notes)})" if notes else ""
        ctx.error(
            f"{use.ref} can reach model tensor '{missing[0]}'{reach}, which the model does not have{more}; "
            f'@pattern("{decl.pattern}") must name a tensor for every reachable index',
            use.loc,
            use.where,
        )


def check_tables(ctx: Context, uses: list[TableUse]) -> None:
    """Check every prefix-table use against the model (no-op without a model)."""
    if ctx.model is None:
        return
    tensors = model_tensors(ctx.model)
    checked: set[str] = set()
    seen: set[tuple[str, tuple[int | str, ...], tuple[int, ...]]] = set()
    for use in uses:
        if use.info.decl is None or use.info.decl.pattern is None:
            continue
        # The same access inside the same loops resolves identically; check it once.
        key = (use.ref.name, use.ref.indices, tuple(id(loop) for loop in use.loops.values()))
        if key in seen:
            continue
        seen.add(key)
        _check_use(ctx, use, tensors, checked)
