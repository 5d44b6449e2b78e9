"""Graph validation: `validate(graph, model=None)` checks every rule of docs/validation.md.

All problems are collected, then raised together as one GraphValidationError whose
`errors` attribute lists them (`Issue`: message, location, block/node context). Each
message carries the source location (text line:column or Python file:line), the snippet
with a caret, the block and node, what is wrong and what is expected.

The passes, each in its own module:
  validate_decls   names, memory-kind attributes, @init literals, dims, model links
  validate_nodes   operands and memory-kind access, ops via the op registry, cache ops,
                   transfers, branches, loops, deps
  validate_tables  prefix tables resolve for every index a loop can reach (model only)
  validate_flow    yield/await rules and branch cycles
  validate_limits  the resource budget (loop nesting, tensor elements, @fixed sizes)

Without a model, checks that need sizes or tensors are skipped, and sizevars are treated
as distinct symbolic sizes (so `B` never matches `D`). `infer_var_types` gives the
simulator and backends every variable's dtype and (resolved) shape.
"""

from __future__ import annotations

from typing import Any

from openinfer_jax.core.limits import DEFAULT_LIMITS, Limits
from openinfer_jax.ir.nodes import Graph, SourceLoc
from openinfer_jax.ir.validate_context import Context, DimResolver, VarInfo
from openinfer_jax.ir.validate_decls import check_declarations
from openinfer_jax.ir.validate_flow import check_flow
from openinfer_jax.ir.validate_limits import check_limits
from openinfer_jax.ir.validate_nodes import NodeChecker
from openinfer_jax.ir.validate_report import Issue, ValidationErrors
from openinfer_jax.ir.validate_tables import check_tables

__all__ = ["Issue", "ValidationErrors", "VarInfo", "check", "infer_var_types", "validate"]


def _registry() -> Any:
    # Imported on first use: the op package pulls in JAX, which plain IR tooling does not need.
    from openinfer_jax.ops import registry

    return registry


def _sizevars(model: Any) -> dict[str, int] | None:
    if model is None:
        return None
    return {str(k): int(v) for k, v in dict(getattr(model, "sizevars", {}) or {}).items()}


def _order(issue: Issue) -> tuple[int, str, int, int]:
    loc = issue.loc
    if loc is None:
        return (0, "", 0, 0)
    return (1, loc.file or "", loc.line, loc.column)


def check(
    graph: Graph, model: Any = None, *, strict: bool = True, limits: Limits | None = None
) -> list[Issue]:
    """Every rule violation in `graph` (against `model` if given), in source order; [] if valid.

    `model` is anything with the ModelLoader surface used here: `sizevars` (name -> int),
    `tensors` (name -> TensorInfo with dtype/shape/has_data), `metadata`, `tensor(name)`.
    With `strict=False` unknown ops are not reported (their nodes are skipped), for tools
    that run before every op is registered. `limits` is the resource budget
    (`openinfer_jax.core.limits.DEFAULT_LIMITS` when None).
    """
    ctx = Context(graph=graph, model=model, strict=strict, dims=DimResolver(_sizevars(model)))
    check_declarations(ctx)
    check_limits(ctx, limits or DEFAULT_LIMITS)
    checker = NodeChecker(ctx, _registry())
    checker.run()
    check_tables(ctx, checker.table_uses)
    check_flow(ctx)
    unique: dict[tuple[str, SourceLoc | None, str | None], Issue] = {}
    for issue in ctx.issues:
        unique.setdefault((issue.message, issue.loc, issue.context), issue)
    return sorted(unique.values(), key=_order)


def validate(
    graph: Graph, model: Any = None, *, strict: bool = True, limits: Limits | None = None
) -> None:
    """Check `graph` (and its links to `model`, a ModelLoader, if given) within `limits`.

    Raises:
        GraphValidationError: (a `ValidationErrors`) listing every problem found; its
            `errors` attribute holds them as `Issue`s, the first one's location is `loc`.
    """
    issues = check(graph, model, strict=strict, limits=limits)
    if issues:
        raise ValidationErrors(issues)


def infer_var_types(graph: Graph, model: Any = None) -> dict[str, VarInfo]:
    """Dtype, dims and resolved shape of every declared variable and `assign`ed temporary.

    Shapes resolve against the model's sizevars (`VarInfo.shape` is None without a model
    or when a dim does not resolve). For tables the type is that of one entry. This does
    not validate: call `validate` first for error reporting; on a duplicate name the
    first declaration wins.
    """
    ctx = Context(graph=graph, model=model, strict=False, dims=DimResolver(_sizevars(model)))
    check_declarations(ctx)
    if model is None:
        # Symbolic stand-ins are an internal device of validation, not real shapes.
        return {
            name: VarInfo(i.name, i.kind, i.dtype, i.dims, None, i.decl, i.assign)
            for name, i in ctx.vars.items()
        }
    return dict(ctx.vars)
