"""A table-driven constructor for elementwise ops, so each op is one entry, not a class.

`elementwise` declares an op from its expression tree (`openinfer_jax.ops.expr`), which the
C and GLSL printers render, and optionally a pair of per-value functions (one over jnp arrays
in the compute type, one over the reference representation of `numpy_numeric`) wrapped with
the storage rules: widen the inputs, apply the function, store in the output dtype. Without
them the JAX lowering and the reference evaluate the tree. Ops whose inputs of different
dtypes need special handling (cast, filter) write their own implementations instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops import expr as ex
from openinfer_jax.ops import jax_numeric, numpy_numeric
from openinfer_jax.ops.registry import (
    ELEMENTWISE_TRAITS,
    Call,
    CheckRule,
    InputSpec,
    KernelParams,
    OpDef,
    OutputRule,
    ParamSpec,
    Traits,
    register,
)

__all__ = ["elementwise", "input_specs", "params_of"]

ValueFn = Callable[..., Any]


def input_specs(names: str, dtypes: frozenset[DType], group: str = "T") -> tuple[InputSpec, ...]:
    """Inputs named by the characters/words of `names` ("a b c"), all in one type group."""
    return tuple(InputSpec(name, dtypes, group) for name in names.split())


def params_of(*specs: ParamSpec) -> dict[str, ParamSpec]:
    """A params mapping in declaration order."""
    return {spec.name: spec for spec in specs}


def _jax_impl(fn: ValueFn, broadcast: bool) -> Callable[..., Any]:
    def impl(call: Call, *arrays: Any) -> Any:
        values = [jax_numeric.widen(a, d) for a, d in zip(arrays, call.in_dtypes)]
        if broadcast and len(values) > 1:
            # lax-level functions (lax.div, lax.rem) do not broadcast by themselves.
            values = list(jnp.broadcast_arrays(*values))
        return jax_numeric.store(fn(call, *values), call.out_dtype)

    return impl


def _tree_fn(op: str, xp: Any) -> ValueFn:
    """A per-value function that evaluates the registered op's tree with array module `xp`."""
    from openinfer_jax.ops import registry

    def fn(call: Call, *values: Any) -> Any:
        opdef = registry.get(op)
        assert opdef is not None
        tree = opdef.expression(call.in_dtypes, call.params)
        assert tree is not None, f"{op} has no tree for {call.in_dtypes[0].short}"
        params = opdef.prepared_params(call.in_dtypes, call.params)
        return ex.evaluate(tree, xp, values, params)

    return fn


def _ref_impl(fn: ValueFn) -> Callable[..., np.ndarray]:
    def impl(call: Call, *arrays: np.ndarray) -> np.ndarray:
        values = [numpy_numeric.ref_values(a, d) for a, d in zip(arrays, call.in_dtypes)]
        with np.errstate(all="ignore"):
            result = fn(call, *values)
        return numpy_numeric.store_ref(result, call.out_dtype)

    return impl


def elementwise(
    name: str,
    category: str,
    inputs: str,
    dtypes: frozenset[DType],
    jax_fn: ValueFn | None = None,
    ref_fn: ValueFn | None = None,
    *,
    expr: ex.ExprSpec,
    output: OutputRule | None = None,
    broadcast: bool = False,
    inplace: bool = True,
    params: Mapping[str, ParamSpec] | None = None,
    kernel_params: KernelParams | None = None,
    check: CheckRule | None = None,
    traits: Traits = ELEMENTWISE_TRAITS,
    doc: str = "",
) -> OpDef:
    """Declare and register an elementwise op whose inputs all share one dtype.

    `expr` is the per-element math (a tree, a family mapping or a switch; see
    `openinfer_jax.ops.expr`), which every backend renders. `jax_fn(call, *values)` gets jnp
    arrays in the compute type (`registry.compute_dtype`); `ref_fn(call, *values)` gets exact
    ints / f32-or-native floats / bools (`numpy_numeric.ref_values`). Both return values that
    the storage rules convert to the output dtype (integers wrap, floats round to nearest
    even). Left out, each evaluates `expr` (float trees: integer division and shifts have no
    array spelling there).
    """
    return register(
        OpDef(
            name=name,
            category=category,
            inputs=input_specs(inputs, dtypes),
            jax_impl=_jax_impl(jax_fn or _tree_fn(name, jnp), broadcast),
            ref_impl=_ref_impl(ref_fn or _tree_fn(name, np)),
            params=dict(params or {}),
            output=output or OutputRule(),
            broadcast=broadcast,
            inplace=inplace,
            traits=traits,
            expr=expr,
            kernel_params=kernel_params,
            check=check,
            doc=doc,
        )
    )
