"""Composite ops: an op declared as a composition of other registry ops.

A composite has its own declaration (inputs, params, dtype rule, shape rule, checks, docs),
so validation reports a bad call on the user's node; its meaning is an *expansion* written
once against a small builder interface:

    def expand(b: Builder, inputs: Sequence[V], params: Mapping[str, Any]) -> V:
        x, scale = inputs
        y = b.op("layer_norm", b.op("reshape", x, shape=(0, params["num_groups"], -1)), axis=2)
        ...
        return b.op("add", scaled, bias)

`b.op(name, *inputs, **params)` calls a registry op (a composite may call another
composite) and returns its value; `b.shape(v)` and `b.dtype(v)` describe a value. Three
builders run the same expansion:

* `openinfer_jax.passes.composites` emits IR nodes, so the simulator, the Vulkan backend and
  the emitters only ever see registry ops with kernels (`expand_composites`);
* `EagerBuilder` calls each op's JAX lowering or NumPy reference, which gives the composite's
  own `OpDef.lower_jax` / `OpDef.reference` (the tests' oracle stays an independent NumPy
  formula).

Expansions see static shapes (the declared bounds of the IR variables) and should use shape
params that stay right when a dim is shorter at run time (a cache slice): ``0`` (copy the
dim) and one ``-1`` (infer it) in reshape, negative axes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops import registry
from openinfer_jax.ops.registry import (
    Call,
    CheckRule,
    InputSpec,
    OpCheckError,
    OpDef,
    OutputRule,
    ParamSpec,
    ShapeRule,
    Traits,
)

__all__ = ["Builder", "Composite", "EagerBuilder", "composite"]


class Builder(Protocol):
    """What an expansion may do with values (`V`: whatever the builder uses)."""

    def op(self, name: str, *inputs: Any, **params: Any) -> Any:
        """The value of registry op `name` on `inputs` with raw `params`."""

    def shape(self, value: Any) -> tuple[int, ...]:
        """The static shape of a value."""

    def dtype(self, value: Any) -> DType:
        """The dtype of a value."""


Expansion = Callable[[Builder, Sequence[Any], Mapping[str, Any]], Any]


@dataclass(frozen=True)
class Composite:
    """How a composite op expands: `expand(builder, inputs, resolved params) -> value`."""

    expand: Expansion


@dataclass(frozen=True)
class _Value:
    array: Any
    dtype: DType


class EagerBuilder:
    """Runs an expansion on arrays, through each op's JAX lowering (`jax=True`, traceable
    under jit) or NumPy reference."""

    def __init__(self, jax: bool) -> None:
        self.jax = jax

    def op(self, name: str, *inputs: _Value, **params: Any) -> _Value:
        opdef = registry.get(name)
        assert opdef is not None, f"composite expansion calls unknown op {name!r}"
        dtypes = [v.dtype for v in inputs]
        run = opdef.lower_jax if self.jax else opdef.reference
        result = run(*(v.array for v in inputs), dtypes=dtypes, **params)
        return _Value(result, opdef.output_dtype(dtypes, opdef.resolve_params(params)))

    def shape(self, value: _Value) -> tuple[int, ...]:
        return tuple(int(d) for d in np.shape(value.array))

    def dtype(self, value: _Value) -> DType:
        return value.dtype


def _eager(expand: Expansion, jax: bool) -> Callable[..., Any]:
    def impl(call: Call, *arrays: Any) -> Any:
        values = [_Value(a, d) for a, d in zip(arrays, call.in_dtypes)]
        return expand(EagerBuilder(jax), values, call.params).array

    return impl


def composite(
    name: str,
    category: str,
    inputs: tuple[InputSpec, ...],
    expand: Expansion,
    *,
    shape_rule: ShapeRule,
    params: Mapping[str, ParamSpec] | None = None,
    output: OutputRule | None = None,
    min_inputs: int | None = None,
    check: CheckRule | None = None,
    inplace: bool = False,
    doc: str = "",
) -> OpDef:
    """Declare and register a composite op (see the module docstring).

    `min_inputs` makes trailing inputs optional (the expansion then gets fewer values).
    `shape_rule(in_shapes, params)` must raise `OpCheckError` for every call the expansion
    cannot take, so a bad call is reported on the user's node before any expansion.
    """

    def bounded_shape(
        shapes: Sequence[tuple[int, ...]], resolved: Mapping[str, Any]
    ) -> tuple[int, ...]:
        if len(shapes) > len(inputs):
            names = ", ".join(spec.name for spec in inputs)
            raise OpCheckError(
                f"{name} takes at most {len(inputs)} inputs ({names}), got {len(shapes)}"
            )
        return shape_rule(shapes, resolved)

    return registry.register(
        OpDef(
            name=name,
            category=category,
            inputs=inputs,
            jax_impl=_eager(expand, jax=True),
            ref_impl=_eager(expand, jax=False),
            params=dict(params or {}),
            output=output or OutputRule(),
            inplace=inplace,
            variadic=min_inputs is not None,
            min_inputs=min_inputs or len(inputs),
            shape_rule=bounded_shape,
            check=check,
            traits=Traits(),
            composite=Composite(expand),
            doc=doc,
        )
    )
