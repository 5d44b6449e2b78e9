"""Validation of declarations: names, memory-kind attribute rules, @init literals, dims, model links.

Fills `Context.vars` with every declared variable and every `assign`ed temporary, so the
node passes can look types up. Each rule below is one line of docs/validation.md.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from openinfer_jax.core.blocks import BlockScheme
from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import GraphValidationError
from openinfer_jax.ir.nodes import Assign, Block, MemoryKind, VarDecl
from openinfer_jax.ir.validate_context import Context, VarInfo, did_you_mean, format_type
from openinfer_jax.ir.walk import walk

__all__ = [
    "check_declarations",
    "collect_assigns",
    "model_dtype_shape",
    "model_quant",
    "model_tensors",
]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_PREFIX_KINDS = (MemoryKind.VOLATILE, MemoryKind.CONSTANT)


def model_tensors(model: Any) -> dict[str, Any]:
    """The model's tensor index (name -> TensorInfo), {} without a model."""
    return dict(getattr(model, "tensors", {}) or {}) if model is not None else {}


def model_dtype_shape(info: Any) -> tuple[DType, tuple[int, ...]]:
    """(dtype, shape) of a model TensorInfo; a block-quantized tensor's values are f32."""
    dtype = DType.F32 if model_quant(info) is not None else info.dtype
    return dtype, tuple(int(d) for d in info.shape)


def model_quant(info: Any) -> BlockScheme | None:
    """The block scheme of a block-quantized model tensor (q8_0/q4_0/q4_1), else None."""
    block = getattr(info, "block", None)
    return block.scheme if block is not None else None


def _decl_where(decl: VarDecl) -> str:
    return f"{decl.kind.value} '{decl.name}'"


def _check_names(ctx: Context) -> None:
    seen: dict[str, VarDecl] = {}
    for decl in ctx.graph.vars:
        if not decl.name or not _IDENT.match(decl.name):
            ctx.error(
                f"variable name {decl.name!r} is not an identifier; use letters, digits and _",
                decl.loc,
                _decl_where(decl),
            )
        if decl.name in seen:
            first = seen[decl.name]
            at = f" (first declared at {first.loc})" if first.loc else ""
            ctx.error(
                f"duplicate variable '{decl.name}'{at}; each name is declared once",
                decl.loc,
                _decl_where(decl),
            )
        else:
            seen[decl.name] = decl
    blocks: dict[str, Block] = {}
    for block in ctx.graph.blocks:
        if not block.name or not _IDENT.match(block.name):
            ctx.error(f"block name {block.name!r} is not an identifier", block.loc, "block")
        if block.name in blocks:
            ctx.error(
                f"duplicate block '{block.name}'; block names are unique",
                block.loc,
                f"block '{block.name}'",
            )
        blocks.setdefault(block.name, block)
        if block.name in seen:
            ctx.error(
                f"block '{block.name}' has the name of a variable; use another name",
                block.loc,
                f"block '{block.name}'",
            )
    if "entry" not in blocks:
        listed = ", ".join(blocks) or "none"
        # Point at the first block, where an `entry` block would be expected.
        first_block = ctx.graph.blocks[0].loc if ctx.graph.blocks else None
        ctx.error(
            f"the graph has no `entry` block (blocks: {listed}); execution starts at `block entry {{ ... }}`",
            first_block,
            "graph",
        )


def _check_table_attributes(ctx: Context, decl: VarDecl) -> None:
    where = _decl_where(decl)
    indices = decl.table_indices
    if len(set(indices)) != len(indices):
        ctx.error(
            f"table indices ({', '.join(indices)}) repeat a name; each index is named once",
            decl.loc,
            where,
        )
    if decl.kind is MemoryKind.DYNAMIC and indices:
        ctx.error(
            "dynamic variables cannot be tables; declare tables in volatile/constant (@pattern) "
            "or persistent (@table)",
            decl.loc,
            where,
        )
    if decl.kind is not MemoryKind.PERSISTENT:
        for attr, present in (
            ("@table", decl.table),
            ("@fixed", bool(decl.fixed)),
            ("@auto_dim", bool(decl.auto_dim)),
        ):
            if present:
                ctx.error(
                    f"{attr} is only allowed in persistent memory (cache tables); "
                    f"prefix tables in {decl.kind.value} use @pattern",
                    decl.loc,
                    where,
                )
    # With @table in volatile/constant the error above already says what to do.
    if decl.kind in _PREFIX_KINDS and indices and decl.pattern is None and not decl.table:
        ctx.error(
            f'prefix table {decl.name}({", ".join(indices)}) needs @pattern("...") naming its model '
            f'tensors, e.g. @pattern("{decl.name}.{{{indices[0]}}}")',
            decl.loc,
            where,
        )
    if decl.pattern is not None:
        _check_pattern(ctx, decl)
    if decl.kind is MemoryKind.PERSISTENT:
        _check_cache_table(ctx, decl)
    _check_fixed_auto(ctx, decl)


def _check_pattern(ctx: Context, decl: VarDecl) -> None:
    """`@pattern` is for prefix tables and names each table index exactly once."""
    assert decl.pattern is not None
    where, indices = _decl_where(decl), decl.table_indices
    if decl.kind not in _PREFIX_KINDS:
        ctx.error(
            "@pattern (prefix tables) is only allowed in volatile and constant memory; "
            "persistent tables use @table",
            decl.loc,
            where,
        )
    elif not indices:
        ctx.error(
            f"@pattern needs table indices: declare it as {decl.name}(i): ... @pattern(...)",
            decl.loc,
            where,
        )
    else:
        placeholders = _PLACEHOLDER.findall(decl.pattern)
        missing = [i for i in indices if i not in placeholders]
        extra = [p for p in placeholders if p not in indices]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"index {', '.join(missing)} is not used")
            if extra:
                parts.append(
                    f"placeholder {', '.join('{' + p + '}' for p in extra)} is not a table index"
                )
            ctx.error(
                f'@pattern("{decl.pattern}"): {"; ".join(parts)}; the placeholders must be exactly '
                f"the table indices ({', '.join(indices)})",
                decl.loc,
                where,
            )


def _check_cache_table(ctx: Context, decl: VarDecl) -> None:
    """A persistent declaration with table indices is a cache table (`@table`/`@auto_dim`)."""
    where, indices = _decl_where(decl), decl.table_indices
    if indices and not decl.table and not decl.auto_dim and decl.pattern is None:
        ctx.error(
            f"persistent {decl.name}({', '.join(indices)}) has table indices but no @table "
            f"(or @auto_dim); add @table",
            decl.loc,
            where,
        )
    if decl.table and not indices:
        ctx.error(
            f"@table needs table indices: declare it as {decl.name}(i): ... @table",
            decl.loc,
            where,
        )
    if indices and decl.dtype.is_packed:
        ctx.error(
            f"packed dtype {decl.dtype.short} is not allowed in cache tables; use i8/u8 or wider",
            decl.loc,
            where,
        )


def _check_fixed_auto(ctx: Context, decl: VarDecl) -> None:
    where = _decl_where(decl)
    indices = decl.table_indices
    known = (
        f"the table indices are ({', '.join(indices)})"
        if indices
        else f"'{decl.name}' has no table indices"
    )
    seen: set[str] = set()
    for name, size in decl.fixed:
        if name not in indices:
            ctx.error(
                f"@fixed({name}={size}) names '{name}', which is not a table index; {known}",
                decl.loc,
                where,
            )
        if name in seen:
            ctx.error(f"@fixed gives '{name}' twice; give each index once", decl.loc, where)
        seen.add(name)
        if size <= 0:
            ctx.error(f"@fixed({name}={size}): a fixed size must be > 0", decl.loc, where)
    seen = set()
    for name in decl.auto_dim:
        if name not in indices:
            ctx.error(
                f"@auto_dim({name}) names '{name}', which is not a table index; {known}",
                decl.loc,
                where,
            )
        if name in seen:
            ctx.error(f"@auto_dim lists '{name}' twice", decl.loc, where)
        seen.add(name)


def _check_init(ctx: Context, decl: VarDecl) -> None:
    value = decl.init
    if value is None:
        return
    where = _decl_where(decl)
    dtype = decl.dtype
    if dtype is DType.BOOL:
        if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
            return
        ctx.error(
            f"@init({value!r}) does not fit bool; expected true, false, 0 or 1", decl.loc, where
        )
    elif isinstance(value, bool):
        ctx.error(
            f"@init({'true' if value else 'false'}) is a bool literal but '{decl.name}' is "
            f"{dtype.short}; true/false are only for bool",
            decl.loc,
            where,
        )
    elif dtype.is_float:
        if not isinstance(value, (int, float)):
            ctx.error(f"@init({value!r}) is not a number", decl.loc, where)
    elif dtype.is_int:
        if isinstance(value, float):
            ctx.error(
                f"@init({value!r}) is a float literal but '{decl.name}' is {dtype.short}; "
                f"write an integer",
                decl.loc,
                where,
            )
            return
        low, high = dtype.value_range()
        if not low <= value <= high:
            ctx.error(
                f"@init({value}) is out of range for {dtype.short}; expected {low}..{high}",
                decl.loc,
                where,
            )


def _check_dims(ctx: Context, dims: tuple[Any, ...], loc: Any, where: str) -> None:
    for dim in dims:
        if isinstance(dim, int):
            if dim < 0:
                ctx.error(f"dimension {dim} is negative; expected a size >= 0", loc, where)
            continue
        try:
            unknown = ctx.dims.unknown_names(dim)
        except GraphValidationError as err:  # not a product of ints and names
            ctx.error(str(err), loc, where)
            continue
        for name in unknown:
            known = ", ".join(sorted(ctx.dims.sizevars or {})) or "none"
            ctx.error(
                f"unknown size '{name}' in dims [{', '.join(str(d) for d in dims)}]{did_you_mean(name, ctx.dims.sizevars or {})}; "
                f"the model defines sizevars: {known}",
                loc,
                where,
            )


def _check_model_link(ctx: Context, decl: VarDecl, info: VarInfo) -> None:
    """A non-table variable linked to a model tensor (by @ref or name) must match it."""
    tensors = model_tensors(ctx.model)
    where = _decl_where(decl)
    linked = decl.model_name
    if linked in tensors:
        file_dtype, file_shape = model_dtype_shape(tensors[linked])
        file_quant = model_quant(tensors[linked])
        via = f'@ref("{linked}")' if decl.ref is not None else "its name"
        if (
            file_dtype is not decl.dtype
            or file_quant is not decl.quant
            or (info.shape is not None and info.shape != file_shape)
        ):
            want = format_type(
                file_dtype, decl.dims if info.shape == file_shape else file_shape, file_quant
            )
            ctx.error(
                f"'{decl.name}' is linked (by {via}) to model tensor '{linked}' which is "
                f"{format_type(file_dtype, file_shape, file_quant)}, but is declared {ctx.shape_text(info)}; "
                f"declare it {want} or link another tensor",
                decl.loc,
                where,
            )
        return
    metadata = dict(getattr(ctx.model, "metadata", {}) or {})
    sizevars = ctx.dims.sizevars or {}
    if linked in metadata:
        value = metadata[linked]
        if (
            isinstance(value, np.ndarray)
            and info.shape is not None
            and tuple(value.shape) != info.shape
        ):
            ctx.error(
                f"'{decl.name}' is linked to model metadata '{linked}' of shape {list(value.shape)}, "
                f"but is declared {ctx.shape_text(info)}",
                decl.loc,
                where,
            )
        elif not isinstance(value, np.ndarray) and decl.dims:
            ctx.error(
                f"'{decl.name}' is linked to scalar model metadata '{linked}' but is declared "
                f"{ctx.shape_text(info)}; declare it as a scalar",
                decl.loc,
                where,
            )
        return
    if linked in sizevars:
        return
    if decl.quant is not None:
        ctx.error(
            f"'{decl.name}' is a block-quantized weight ({decl.quant}) but the model has no tensor "
            f"'{linked}'{did_you_mean(linked, tensors)}; a {decl.quant} variable is read from the model",
            decl.loc,
            where,
        )
        return
    if decl.ref is not None:
        names = list(tensors) + list(metadata)
        ctx.error(
            f'@ref("{decl.ref}") names nothing in the model{did_you_mean(decl.ref, names)}; '
            f"expected a tensor or metadata key",
            decl.loc,
            where,
        )


def _check_quantized(ctx: Context, decl: VarDecl) -> None:
    """A block-quantized weight is a model tensor: constant/volatile, no @init, not a cache table."""
    where = _decl_where(decl)
    if decl.kind not in _PREFIX_KINDS:
        ctx.error(
            f"'{decl.name}' is a block-quantized weight ({decl.quant}), which comes from the model: "
            f"declare it in a constant or volatile section, not {decl.kind.value}",
            decl.loc,
            where,
        )
    if decl.init is not None:
        ctx.error(
            f"'{decl.name}' is a block-quantized weight ({decl.quant}); its values come from the model, "
            "remove @init",
            decl.loc,
            where,
        )
    if not decl.dims:
        ctx.error(
            f"'{decl.name}' is a block-quantized weight ({decl.quant}) without dims; blocks run along "
            f"the last axis: declare it {decl.quant}[N, K]",
            decl.loc,
            where,
        )


def collect_assigns(ctx: Context) -> None:
    """Add every `assign` to the variable table; report shadowing and duplicates."""
    for block in ctx.graph.blocks:
        for node in walk(block.nodes):
            if not isinstance(node, Assign):
                continue
            where = f"block '{block.name}' (assign {node.name})"
            existing = ctx.vars.get(node.name)
            if existing is not None:
                if existing.decl is not None:
                    ctx.error(
                        f"assign '{node.name}' shadows the declared {existing.describe()}"
                        f"{f' (line {existing.loc.line})' if existing.loc else ''}; "
                        f"pick another name or drop the assign",
                        node.loc,
                        where,
                    )
                else:
                    ctx.error(
                        f"'{node.name}' is assigned twice (first at {existing.loc}); "
                        f"assign each temporary once",
                        node.loc,
                        where,
                    )
                continue
            if node.dtype in (DType.STRING, DType.NDARRAY):
                ctx.error(f"{node.dtype.short} is not a tensor dtype", node.loc, where)
            _check_dims(ctx, node.dims, node.loc, where)
            ctx.vars[node.name] = VarInfo(
                node.name, None, node.dtype, node.dims, ctx.dims.shape(node.dims), assign=node
            )


def check_declarations(ctx: Context) -> None:
    """All declaration rules; fills `ctx.vars` with declared variables, then assigns."""
    _check_names(ctx)
    for decl in ctx.graph.vars:
        where = _decl_where(decl)
        if not decl.dtype.is_tensor_type:
            ctx.error(
                f"{decl.dtype.short} is a metadata type, not a variable dtype", decl.loc, where
            )
        _check_table_attributes(ctx, decl)
        if decl.quant is not None:
            _check_quantized(ctx, decl)
        _check_init(ctx, decl)
        _check_dims(ctx, decl.dims, decl.loc, where)
        info = VarInfo(
            decl.name, decl.kind, decl.dtype, decl.dims, ctx.dims.shape(decl.dims), decl=decl
        )
        ctx.vars.setdefault(decl.name, info)
        if ctx.model is not None and not decl.table_indices:
            _check_model_link(ctx, decl, info)
    collect_assigns(ctx)
