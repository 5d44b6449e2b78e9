"""The expression trees of elementwise ops (openinfer_jax/ops/expr.py) and their printers.

Typing catches declaration mistakes at registration; every registered tree prints in C and
GLSL for every dtype its op takes (or GLSL says which function it lacks); repeated subtrees
are computed once; the registry derives the capabilities a call needs from its tree."""

from __future__ import annotations

import math

import numpy as np
import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.emit.c_expr import render_c
from openinfer_jax.emit.c_kernels import c_literal
from openinfer_jax.ops import expr as ex
from openinfer_jax.ops import registry
from openinfer_jax.ops.elementwise import elementwise
from openinfer_jax.ops.expr import F64, Input, bind, cast, param, select
from openinfer_jax.ops.registry import FLOAT, SIGNED
from openinfer_jax.vk.expressions import UnsupportedExpr, render_glsl

x0, x1 = Input(0), Input(1)
F32, F16, I8, U8 = DType.F32, DType.F16, DType.I8, DType.U8


def test_typing_rules() -> None:
    tree = bind(x0 / (1 + abs(x0)), [F16], F16)
    assert tree.type is F32  # f16 computes in f32
    assert bind(x0 < 0, [I8], DType.BOOL).type is ex.PRED
    assert bind(cast(F64, x0) * param("s", F64), [I8], I8).type is F64
    with pytest.raises(TypeError, match="operands of different types"):
        bind(x0 + x1, [F32, DType.F64], F32)
    with pytest.raises(TypeError, match="not defined for"):
        bind(ex.exp(x0), [I8], I8)
    with pytest.raises(TypeError, match="input 1 used"):
        bind(x1, [F32], F32)
    with pytest.raises(TypeError, match="condition must be a truth value"):
        bind(select(x0, x0, x0), [F32], F32)


def test_a_declaration_with_a_typing_error_is_rejected_at_registration() -> None:
    with pytest.raises(ValueError, match=r"bad_tree.*exp is not defined"):
        elementwise("bad_tree", "test", "x", FLOAT | SIGNED, expr=ex.exp(x0))
    assert registry.get("bad_tree") is None


@pytest.mark.parametrize("op", sorted(o.name for o in registry.all_ops() if o.expr is not None))
def test_every_tree_prints_in_c_and_glsl_for_every_dtype(op: str) -> None:
    opdef = registry.get(op)
    assert opdef is not None
    for dtype in opdef.inputs[-1].dtypes:
        dtypes = [DType.BOOL if k == 0 and op in ("filter", "where") else dtype
                  for k in range(len(opdef.inputs))]  # fmt: skip
        for variant in ex.switch_variants(opdef.expr):
            params = opdef.resolve_params({"value": 1, **variant} if op == "fill" else variant)
            tree = opdef.expression(dtypes, params)
            assert tree is not None, (op, dtype)
            values = opdef.prepared_params(dtypes, params)
            c = render_c(tree, ["x0", "x1", "x2"], lambda n, ct, v=values: c_literal(v[n], ct),
                         literal=c_literal, width=dtype.bits)  # fmt: skip
            assert c.value
            try:
                glsl = render_glsl(tree, ["x0", "x1", "x2"], dtype.bits)
            except UnsupportedExpr as err:
                assert dtype is DType.F64 and "GLSL has no double" in str(err), (op, err)
                assert "float64_math" in opdef.capabilities(dtypes, params)
                continue
            assert {name for name, _ in glsl.params} <= set(values)


def test_repeated_subtrees_are_computed_once() -> None:
    m = abs(x0) + 1
    tree = bind(m * m + m, [F32], F32)
    c = render_c(tree, ["x0"], lambda n, ct: n, literal=c_literal)
    assert c.statements == (
        "const float t0 = ((x0 < 0.0f) ? -x0 : ((x0 == 0.0f) ? 0.0f : x0)) + 1.0f;",
    )
    assert c.value == "(t0 * t0) + t0"
    glsl = render_glsl(tree, ["x0"], 32)
    assert glsl.statements == ("float t0 = abs(x0) + float(1.0);",)
    assert glsl.value == "(t0 * t0) + t0"


def test_signed_arithmetic_wraps_through_unsigned_in_c() -> None:
    tree = bind(-x0 + x1, [DType.I64, DType.I64], DType.I64)
    text = render_c(tree, ["a", "b"], lambda n, ct: n, literal=c_literal).value
    assert text == "(int64_t)((uint64_t)((int64_t)(0 - (uint64_t)a)) + (uint64_t)b)"


def test_glsl_reports_the_missing_double_function() -> None:
    with pytest.raises(UnsupportedExpr, match="no double tanh"):
        render_glsl(bind(ex.tanh(x0), [DType.F64], DType.F64), ["x0"], 64)


def test_capabilities_come_from_dtypes_traits_and_trees() -> None:
    def needs(op: str, dtypes: list[DType], **params: object) -> frozenset[str]:
        opdef = registry.get(op)
        assert opdef is not None
        return opdef.capabilities(dtypes, params)

    assert needs("relu", [DType.I32]) == {"float64"}  # the slope multiply is in f64
    assert needs("relu", [F32]) == frozenset()
    assert needs("exp", [DType.F64]) == {"float64", "float64_math"}
    assert needs("sqrt", [DType.F64]) == {"float64"}
    assert needs("softmax", [DType.F64]) == {"float64", "float64_math"}  # traits.math
    assert needs("argmax_axis", [F32]) == frozenset()  # an i64 index needs no arithmetic
    assert needs("sum_axis", [DType.I32], acc=DType.I64) == {"int64"}


def test_evaluate_matches_the_formula() -> None:
    tree = bind(select(x0 < 0, param("alpha") * ex.expm1(x0), x0), [F32], F32)
    x = np.array([-3.0, -1e-7, 0.0, 2.5, math.nan, -math.inf], np.float32)
    got = ex.evaluate(tree, np, [x], {"alpha": 1.5})
    want = np.where(x < 0, np.float32(1.5) * np.expm1(x), x)
    np.testing.assert_array_equal(got, want)


def test_describe_writes_infix_text() -> None:
    assert ex.describe(x0 / (1 + abs(x0))) == "x0 / (1 + abs(x0))"
    assert ex.describe(select(x0 < 0, 0, x0)) == "(x0 < 0) ? 0 : x0"
