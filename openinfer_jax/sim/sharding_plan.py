"""Sharding plans: which `PartitionSpec` each declared variable gets, checked against a mesh.

A plan is a mapping from a variable name, a glob pattern (``"W*"``, ``"h.*.w_qkv"``) or a
regular expression (a compiled `re.Pattern`, or a string starting with ``"re:"``) to a
`PartitionSpec` (or a tuple/list of axis names, or None for "replicate"). A key matches a
declared variable by its own name or, for a prefix table such as ``Wq(l) @pattern("q.{l}")``,
by the model tensor names it stands for (``"q.*"``). Exact names win over patterns; among
patterns the first one in the plan wins. Variables no key matches are replicated.

The spec of a variable describes the array the simulator holds for it:

- a plain variable or a prefix-table entry: its declared dims;
- a persistent cache table (``K(l, t): f32[H, Dh] @table``): the storage buffer
  ``[l, t, H, Dh]`` (table axes first, then the entry dims).

Every rule is checked when the plan is resolved (at `Simulator` construction) and a broken
rule raises `ShardingError` naming the variable and the dim: a mesh axis the mesh lacks, an
axis used twice, more spec entries than dims, a dim not divisible by the product of its mesh
axes, a plan key matching no variable.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jax.sharding import AbstractMesh, Mesh, PartitionSpec

from openinfer_jax.core.errors import ShardingError
from openinfer_jax.ir.nodes import Graph, MemoryKind, VarDecl

__all__ = [
    "PlanKey",
    "PlanValue",
    "VariableLayout",
    "auto_plan",
    "check_spec",
    "parse_spec",
    "resolve_plan",
    "spec_text",
    "variable_layouts",
]

PlanKey = str | re.Pattern[str]
PlanValue = PartitionSpec | Sequence[Any] | str | None

# Spellings of "this dim is not split" in the text form of a spec (CLI, JSON plans).
_REPLICATED_WORDS = ("", "none", "null", "_", "-", ":")


@dataclass(frozen=True)
class VariableLayout:
    """What the plan needs to know of one declared variable.

    `shape` is the array the simulator holds (storage shape for cache tables, with table
    axes at their current capacity); `growing` lists dims whose size changes at run time
    (table axes without `@fixed`, `@auto_dim` widened entry dims); `tensors` are the model
    tensor names the variable stands for (its `@ref`, or every `@pattern` expansion).
    """

    name: str
    kind: MemoryKind
    shape: tuple[int, ...]
    growing: frozenset[int]
    auto_dims: frozenset[int]
    tensors: tuple[str, ...]


def parse_spec(value: PlanValue, where: str) -> PartitionSpec:
    """A `PartitionSpec` from a plan value.

    Accepts a PartitionSpec, None (replicate), a tuple/list whose items are None, an axis
    name or a tuple of axis names, or text such as ``"None, model"`` / ``"(data, model), _"``.

    Raises:
        ShardingError: a value of another type or text that does not parse, naming `where`.
    """
    if value is None:
        return PartitionSpec()
    if isinstance(value, PartitionSpec):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):  # the form spec_text writes
            text = text[1:-1]
        return PartitionSpec(*_parse_spec_text(text, where))
    if isinstance(value, (tuple, list)):
        items: list[Any] = []
        for item in value:
            if item is None or isinstance(item, str):
                items.append(item)
            elif isinstance(item, (tuple, list)) and all(isinstance(a, str) for a in item):
                items.append(tuple(item))
            else:
                raise ShardingError(
                    f"{where}: spec entry {item!r} is not None, an axis name or a tuple of names"
                )
        return PartitionSpec(*items)
    raise ShardingError(
        f"{where}: {value!r} is not a PartitionSpec; use P(None, 'model'), a tuple of axis "
        "names, None (replicate) or text like 'None, model'"
    )


def _parse_spec_text(text: str, where: str) -> list[Any]:
    items: list[Any] = []
    # Split on commas outside parentheses: "(data, model), None" has two entries.
    depth, start, parts = 0, 0, []
    for pos, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise ShardingError(f"{where}: unbalanced ')' in spec {text!r}")
        elif char == "," and depth == 0:
            parts.append(text[start:pos])
            start = pos + 1
    if depth:
        raise ShardingError(f"{where}: unbalanced '(' in spec {text!r}")
    parts.append(text[start:])
    if len(parts) == 1 and not parts[0].strip():
        return []
    for part in parts:
        word = part.strip()
        if word.startswith("(") and word.endswith(")"):
            names = tuple(n.strip() for n in word[1:-1].split(",") if n.strip())
            for name in names:
                _check_axis_word(name, text, where)
            items.append(names)
        elif word.lower() in _REPLICATED_WORDS:
            items.append(None)
        else:
            _check_axis_word(word, text, where)
            items.append(word)
    return items


def _check_axis_word(word: str, text: str, where: str) -> None:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", word):
        raise ShardingError(
            f"{where}: {word!r} in spec {text!r} is not a mesh axis name (letters, digits, _)"
        )


def spec_text(spec: PartitionSpec) -> str:
    """A short readable form of a spec: ``P(None, ('data', 'model'))`` -> ``"[None, (data, model)]"``.

    `parse_spec` reads it back.
    """
    parts = []
    for item in spec:
        if item is None:
            parts.append("None")
        elif isinstance(item, tuple):
            parts.append("(" + ", ".join(item) + ")")
        else:
            parts.append(str(item))
    return "[" + ", ".join(parts) + "]"


def _matcher(key: PlanKey, where: str) -> Callable[[str], bool]:
    if isinstance(key, re.Pattern):
        pattern = key
        return lambda name: pattern.fullmatch(name) is not None
    if not isinstance(key, str) or not key:
        raise ShardingError(f"{where}: a plan key must be a non-empty name, glob or regex")
    if key.startswith("re:"):
        try:
            compiled = re.compile(key[3:])
        except re.error as err:
            raise ShardingError(f"{where}: bad regular expression {key[3:]!r}: {err}") from None
        return lambda name: compiled.fullmatch(name) is not None
    return lambda name: fnmatch.fnmatchcase(name, key)


def _is_exact(key: PlanKey) -> bool:
    return isinstance(key, str) and not key.startswith("re:") and not any(c in key for c in "*?[")


def resolve_plan(
    plan: Mapping[PlanKey, PlanValue] | None,
    layouts: Iterable[VariableLayout],
    mesh: Mesh | AbstractMesh,
) -> dict[str, PartitionSpec]:
    """The spec of every variable a plan key matches, checked against the mesh and shapes.

    Raises:
        ShardingError: a key matching no variable, a spec naming an axis the mesh lacks or
            using one twice, longer than the variable's rank, splitting a dim that is not
            divisible by the axis sizes or that grows at run time (auto-dim entry dims).
    """
    layout_list = list(layouts)
    entries = []
    for key, value in (plan or {}).items():
        label = f"sharding plan entry {key.pattern if isinstance(key, re.Pattern) else key!r}"
        entries.append((key, _matcher(key, label), parse_spec(value, label), label))
    chosen: dict[str, tuple[PartitionSpec, str]] = {}
    # Exact names first, then patterns in plan order: the first match wins.
    order = sorted(range(len(entries)), key=lambda i: (not _is_exact(entries[i][0]), i))
    used: set[int] = set()
    for layout in layout_list:
        names = (layout.name, *layout.tensors)
        hits = [i for i in order if any(entries[i][1](n) for n in names)]
        used.update(hits)  # an overridden entry still matches: it is not a typo
        if hits:
            _key, _match, spec, label = entries[hits[0]]
            chosen[layout.name] = (spec, label)
    unused = [entries[i][3] for i in range(len(entries)) if i not in used]
    if unused:
        known = ", ".join(sorted(lay.name for lay in layout_list)) or "none"
        raise ShardingError(
            f"{unused[0]} matches no declared variable (nor any model tensor a prefix table "
            f"stands for); declared variables: {known}"
        )
    by_name = {lay.name: lay for lay in layout_list}
    for name, (spec, label) in chosen.items():
        check_spec(by_name[name], spec, mesh, label)
    return {name: spec for name, (spec, _label) in chosen.items()}


def check_spec(
    layout: VariableLayout, spec: PartitionSpec, mesh: Mesh | AbstractMesh, label: str
) -> None:
    """Check one variable's spec against the mesh and its shape.

    Raises:
        ShardingError: naming the variable, the dim and what to change.
    """
    sizes = dict(mesh.shape)
    what = f"{label}: variable {layout.name!r} {list(layout.shape)}"
    if len(spec) > len(layout.shape):
        raise ShardingError(
            f"{what}: the spec {spec_text(spec)} has {len(spec)} entries but the variable has "
            f"{len(layout.shape)} dims; drop entries or use None for unsplit dims"
        )
    seen: set[str] = set()
    for dim, item in enumerate(spec):
        if item is None:
            continue
        axes = item if isinstance(item, tuple) else (item,)
        for axis in axes:
            if axis not in sizes:
                raise ShardingError(
                    f"{what}: dim {dim} names mesh axis {axis!r}, the mesh has axes "
                    f"{', '.join(f'{a}={n}' for a, n in sizes.items())}"
                )
            if axis in seen:
                raise ShardingError(
                    f"{what}: mesh axis {axis!r} splits more than one dim (dim {dim} again); "
                    "an axis may split one dim of a variable"
                )
            seen.add(axis)
        parts = 1
        for axis in axes:
            parts *= sizes[axis]
        if dim in layout.auto_dims:
            raise ShardingError(
                f"{what}: dim {dim} is an @auto_dim dim whose size grows by one per entry; it "
                "cannot be split, use None there"
            )
        extent = layout.shape[dim]
        if extent % parts:
            raise ShardingError(
                f"{what}: dim {dim} of size {extent} is not divisible by {parts} "
                f"(mesh axes {', '.join(axes)}); pick another dim or a smaller axis"
            )


def auto_plan(
    layouts: Iterable[VariableLayout], mesh: Mesh | AbstractMesh, axis: str
) -> dict[str, PartitionSpec]:
    """A tensor-parallel plan by shape alone: split one dim of every weight and cache over `axis`.

    For each model-backed or persistent variable of rank >= 1, the LAST dim that is fixed
    (not growing) and divisible by the axis size is split; dynamic inputs and scalars stay
    replicated. Used by `--devices N` on the CLI and by tests that want every example to
    really run sharded; hand-written plans place collectives better.

    Raises:
        ShardingError: `axis` is not an axis of the mesh.
    """
    sizes = dict(mesh.shape)
    if axis not in sizes:
        raise ShardingError(
            f"auto plan: mesh axis {axis!r} does not exist; the mesh has {', '.join(sizes)}"
        )
    size = sizes[axis]
    plan: dict[str, PartitionSpec] = {}
    for layout in layouts:
        if layout.kind is MemoryKind.DYNAMIC or not layout.shape:
            continue
        if layout.kind is not MemoryKind.PERSISTENT and not layout.tensors:
            continue
        for dim in reversed(range(len(layout.shape))):
            if dim in layout.growing or dim in layout.auto_dims:
                continue
            if layout.shape[dim] % size == 0 and layout.shape[dim] >= size:
                plan[layout.name] = PartitionSpec(*([None] * dim), axis)
                break
    return plan


def variable_layouts(
    graph: Graph,
    resolve: Callable[[VarDecl], tuple[int, ...]],
    tensor_names: Iterable[str],
    table_capacity: Callable[[VarDecl, str], int],
) -> list[VariableLayout]:
    """The `VariableLayout` of every declared variable of `graph`.

    `resolve(decl)` gives the declared dims as ints, `tensor_names` the model's tensors,
    `table_capacity(decl, index)` the initial capacity of a cache-table axis.
    """
    names = list(tensor_names)
    out = []
    for decl in graph.vars:
        dims = resolve(decl)
        growing: set[int] = set()
        auto: set[int] = set()
        tensors: tuple[str, ...] = ()
        if decl.kind is MemoryKind.PERSISTENT and decl.is_table:
            table_axes = [i for i in decl.table_indices if i not in decl.auto_dim]
            fixed = dict(decl.fixed)
            lead = tuple(table_capacity(decl, i) for i in table_axes)
            growing.update(k for k, i in enumerate(table_axes) if i not in fixed)
            auto.update(len(lead) + k for k in range(len(decl.auto_dim)))
            shape = (*lead, *dims)
        else:
            shape = dims
            if decl.is_table and decl.pattern is not None:
                glob = re.sub(r"\{[^}]*\}", "*", decl.pattern)
                tensors = tuple(n for n in names if fnmatch.fnmatchcase(n, glob))
            elif decl.model_name in names:
                tensors = (decl.model_name,)
        out.append(
            VariableLayout(
                decl.name, decl.kind, shape, frozenset(growing), frozenset(auto), tensors
            )
        )
    return out
