"""The registry's declarations and its bad-input errors (OpCheckError, never a JAX error)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import GraphValidationError
from openinfer_jax.ir.nodes import VarName
from openinfer_jax.ops import registry
from openinfer_jax.ops.registry import FLOAT, OpCheckError, OpDef, acc_accepts

F32, F16, I8, I32, I64, U8, I4, T1 = (
    DType.F32, DType.F16, DType.I8, DType.I32, DType.I64, DType.U8, DType.I4, DType.T1,
)  # fmt: skip


def op(name: str) -> OpDef:
    found = registry.get(name)
    assert found is not None, name
    return found


# Broadcast and in-place policies of the original (reference §2a), as (broadcast, inplace).
POLICIES = {
    **dict.fromkeys(["add", "mul", "sub", "div", "floor_div", "rem"], (True, True)),
    **dict.fromkeys(["fma", "abs", "neg", "recip", "and", "or", "xor", "not", "shl", "shr"], (False, True)),
    "popcount": (False, False), "cast": (False, False),
    **dict.fromkeys(["eq", "ne", "lt", "le", "gt", "ge", "filter"], (False, False)),
    **dict.fromkeys(["is_finite", "is_nan", "is_inf", "is_neg"], (False, False)),
    "fill": (False, True), "matmul": (True, True), "relu": (False, True),
    **dict.fromkeys(
        ["argmax_axis", "argmin_axis", "max_axis", "min_axis", "sum_axis", "prod_axis", "mean_axis"],
        (False, False),
    ),
    **dict.fromkeys(["floor", "ceil", "round", "trunc", "clamp", "min", "max", "sign"], (False, True)),
}  # fmt: skip


def test_the_original_47_ops_are_registered_with_its_policies() -> None:
    assert len(POLICIES) == 47
    for name, (broadcast, inplace) in POLICIES.items():
        opdef = op(name)
        assert (opdef.broadcast_ok, opdef.inplace_ok) == (broadcast, inplace), name
        assert opdef.pure


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_check_inplace_follows_the_policy(name: str) -> None:
    opdef = op(name)
    opdef.check_inplace("y", ["x"])  # a fresh output is always fine
    if opdef.inplace_ok:
        opdef.check_inplace("x", ["x"])
    else:
        with pytest.raises(OpCheckError, match="does not support inplace"):
            opdef.check_inplace("x", ["x"])


def test_output_dtype_rules() -> None:
    assert op("add").infer([F16, F16], [(2,), (2,)]) == (F16, (2,))
    assert op("eq").infer([I4, I4], [(3,), (3,)]) == (DType.BOOL, (3,))
    assert op("popcount").infer([I8], [(3,)])[0] is U8
    assert op("sign").infer([F32], [(3,)])[0] is DType.I8
    assert op("argmax_axis").infer([F32], [(3, 4)], {"axis": 1}) == (I64, (3,))
    assert op("cast").infer([F32], [(3,)], {"to": "i4"})[0] is I4
    assert op("matmul").infer([I8, I8], [(2, 3), (3, 4)], {"acc": (I32, I64)}) == (I64, (2, 4))
    assert op("mean_axis").infer([I32], [(2, 3)], {"acc": (I32, F32), "axes": (1,)}) == (F32, (2,))
    assert op("filter").infer([DType.BOOL, U8, U8], [(2,)] * 3)[0] is U8


def test_acc_single_form_means_accumulator_and_output() -> None:
    assert op("matmul").resolve_params({"acc": I32})["acc"] == (I32, I32)
    assert op("matmul").resolve_params({"acc": ("f32", "f64")})["acc"] == (F32, DType.F64)
    assert op("sum_axis").infer([I8], [(4,)], {"acc": I32}) == (I32, ())


def test_acc_accepts_follows_signedness_and_width() -> None:
    assert acc_accepts(I4, I32) and acc_accepts(T1, I32) and acc_accepts(U8, DType.U32)
    assert not acc_accepts(U8, I32) and not acc_accepts(I64, I32) and not acc_accepts(F32, I32)
    assert acc_accepts(DType.BF16, F32) and not acc_accepts(DType.F64, F32)


def test_broadcasting_and_matmul_shapes() -> None:
    assert op("add").infer([F32, F32], [(3, 1), (4,)])[1] == (3, 4)
    assert op("matmul").infer([F32, F32], [(5, 2, 3), (3,)])[1] == (5, 2)
    assert op("matmul").infer([F32, F32], [(3,), (2, 3, 4)])[1] == (2, 4)
    assert op("matmul").infer([F32, F32], [(1, 2, 3), (6, 3, 4)])[1] == (6, 2, 4)
    assert op("sum_axis").infer([F32], [(2, 3, 4)], {"axes": (0, -1), "keepdims": True})[1] == (1, 3, 1)
    assert op("max_axis").infer([F32], [(2, 3)])[1] == ()


# ---- bad input: each case is (op, dtypes, shapes, params, words the message must contain) ----
BAD_INPUT = [
    ("add", [T1, T1], [(2,), (2,)], {}, ["input 0", "t1", "allowed:", "f32"]),
    ("add", [F32, F16], [(2,), (2,)], {}, ["same dtype", "f32", "f16"]),
    ("add", [F32], [(2,)], {}, ["takes 2 inputs", "a, b", "got 1"]),
    ("fma", [F32, F32], [(2,), (2,)], {}, ["takes 3 inputs"]),
    ("add", [F32, F32], [(3, 4), (5,)], {}, ["do not broadcast", "axis -1"]),
    ("min", [F32, F32], [(3, 4), (4,)], {}, ["does not support broadcasting", "(3, 4)", "(4,)"]),
    ("add", [F32, F32], [(2,), (2,)], {"acc": (F32, F32)}, ["acc is not supported", "matmul"]),
    ("matmul", [I8, I8], [(2, 3), (3, 2)], {"acc": (I32, DType.F32)}, ["does not match any accumulation rule", "[i32,i32]"]),
    ("matmul", [U8, U8], [(2, 3), (3, 2)], {"acc": (I32, I32)}, ["cannot accumulate u8", "[u32,u32]"]),
    ("sum_axis", [F32], [(2, 3)], {"acc": (I32, I32)}, ["cannot accumulate f32", "[f32,f32]"]),
    ("matmul", [F32, F32], [(2, 3), (4, 2)], {}, ["inner dimensions differ"]),
    ("matmul", [F32, F32], [(), (3,)], {}, ["rank >= 1"]),
    ("add", [F32, F32], [(2,), (2,)], {"alpha": 1.0}, ["unknown param 'alpha'", "none"]),
    ("relu", [F32], [(2,)], {"slope": 1.0}, ["unknown param 'slope'", "negative_slope", "alias alpha"]),
    ("relu", [F32], [(2,)], {"alpha": 0.1, "negative_slope": 0.2}, ["given twice"]),
    ("relu", [F32], [(2,)], {"clamp_max": "six"}, ["clamp_max must be a number"]),
    ("relu", [I8], [(2,)], {"alpha": 2.0}, ["0 <= negative_slope <= 1"]),
    ("shl", [I8], [(2,)], {"bits": -1}, ["bits must be >= 0"]),
    ("shl", [I8], [(2,)], {"bits": 1.5}, ["bits must be an integer"]),
    ("shl", [I4], [(2,)], {"bits": True}, ["bits must be an integer"]),
    ("cast", [F32], [(2,)], {}, ["'to'", "is required"]),
    ("cast", [F32], [(2,)], {"to": "f128"}, ["unknown dtype 'f128'"]),
    ("cast", [F32], [(2,)], {"to": T1}, ["to is t1", "allowed:"]),
    ("cast", [F32], [(2,)], {"to": I8, "rounding_mode": "up"}, ["'up'", "trunc, floor, ceil, nearest"]),
    ("cast", [F32], [(2,)], {"to": I8, "saturate": 1}, ["saturate must be true or false"]),
    ("sum_axis", [F32], [(2, 3)], {"axes": (2,)}, ["axis 2 is out of range for rank 2"]),
    ("sum_axis", [F32], [(2, 3)], {"axes": (1, -1)}, ["name an axis twice"]),
    ("sum_axis", [F32], [(2, 3)], {"axes": "rows"}, ["axes must be a list of integers"]),
    ("max_axis", [F32], [(2, 0)], {"axes": (1,)}, ["axis of size 0"]),
    ("argmax_axis", [F32], [()], {}, ["rank >= 1"]),
    ("fill", [I4], [(2,)], {"value": 9}, ["not a i4 value", "[-8, 7]"]),
    ("fill", [I8], [(2,)], {"value": 1.5}, ["not a i8 value"]),
    ("fill", [DType.BOOL], [(2,)], {"value": 2}, ["not a bool"]),
    ("fill", [F32], [(2,)], {}, ["'value'", "is required"]),
    ("div", [I8, I8], [(2,), (2,)], {"div_by_zero_mask": 1000}, ["div_by_zero_mask=1000", "[-128, 127]"]),
    ("filter", [F32, F32, F16], [(2,)] * 3, {}, ["inputs 1 and 2 must have the same dtype"]),
    ("is_nan", [I8], [(2,)], {}, ["allowed: f8, bf16, f16, f32, f64"]),
]  # fmt: skip


@pytest.mark.parametrize("name, dtypes, shapes, params, words", BAD_INPUT, ids=[f"{c[0]}-{i}" for i, c in enumerate(BAD_INPUT)])
def test_bad_input_raises_op_check_error(
    name: str, dtypes: list[DType], shapes: list[tuple[int, ...]], params: dict, words: list[str]
) -> None:
    with pytest.raises(OpCheckError) as info:
        op(name).infer(dtypes, shapes, params)
    assert isinstance(info.value, GraphValidationError)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_lowering_rejects_bad_input_before_jax_sees_it() -> None:
    with pytest.raises(OpCheckError, match="allowed"):
        op("is_nan").lower_jax(np.arange(3, dtype=np.int32))
    with pytest.raises(OpCheckError, match="does not support broadcasting"):
        op("max").lower_jax(np.ones((3, 4), np.float32), np.ones(4, np.float32))
    with pytest.raises(OpCheckError, match="inner dimensions"):
        op("matmul").reference(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
    with pytest.raises(OpCheckError, match="takes 2 inputs"):
        op("add").lower_jax(np.ones(2, np.float32))


def test_variable_params_are_kept_until_bound() -> None:
    relu = op("relu")
    resolved = relu.resolve_params({"negative_slope": VarName("slope"), "clamp_max": VarName("inf")})
    assert resolved["negative_slope"] == VarName("slope")
    assert resolved["clamp_max"] == math.inf
    with pytest.raises(OpCheckError, match="must be bound"):
        relu.lower_jax(np.ones(2, np.float32), negative_slope=VarName("slope"))
    assert op("cast").resolve_params({"to": VarName("bf16")})["to"] is DType.BF16


def test_resolve_params_is_idempotent() -> None:
    for name in POLICIES:
        opdef = op(name)
        raw = {"to": "i8"} if name == "cast" else {"value": 1} if name == "fill" else {}
        once = opdef.resolve_params(raw)
        assert opdef.resolve_params(once) == once


def test_registry_lookup_and_registration_errors() -> None:
    assert registry.get("no_such_op") is None
    assert registry.names() == sorted(registry.names())
    assert {"add", "matmul", "cast"} <= set(registry.names())
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(op("add"))
    assert op("add").dtypes >= FLOAT


def test_bind_variables_substitutes_runtime_scalars() -> None:
    fill = op("fill")
    params = fill.bind_variables({"value": VarName("alpha")}, {"alpha": 2})
    assert params["value"] == 2
    out = fill.lower_jax(np.zeros(3, np.int8), dtypes=[I4], **params)
    assert np.asarray(out).tolist() == [2, 2, 2]
    with pytest.raises(OpCheckError, match="names a variable with no scalar value"):
        fill.bind_variables({"value": VarName("beta")}, {})
    with pytest.raises(OpCheckError, match="must be a number"):
        op("relu").bind_variables({"negative_slope": VarName("s")}, {"s": "x"})  # type: ignore[dict-item]


def test_broadcast_errors_are_op_check_errors_in_lowering_too() -> None:
    with pytest.raises(OpCheckError, match="do not broadcast"):
        op("add").lower_jax(np.ones((3, 4), np.float32), np.ones(5, np.float32))


shape_st = st.lists(st.integers(1, 4), min_size=0, max_size=4).map(tuple)


@settings(max_examples=60, deadline=None, database=None)
@given(a=shape_st, b=shape_st, ones=st.lists(st.booleans(), min_size=4, max_size=4))
def test_broadcast_shapes_agree_with_numpy(a: tuple[int, ...], b: tuple[int, ...], ones: list[bool]) -> None:
    # Put 1s into b where asked, so compatible pairs are common, not just rare accidents.
    b = tuple(1 if ones[i] else d for i, d in enumerate(b))
    try:
        want = np.broadcast_shapes(a, b)
    except ValueError:
        with pytest.raises(OpCheckError):
            registry.broadcast_shapes("add", [a, b])
        return
    assert registry.broadcast_shapes("add", [a, b]) == want


@settings(max_examples=60, deadline=None, database=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4).map(tuple), data=st.data())
def test_reduction_shapes_agree_with_numpy(shape: tuple[int, ...], data: st.DataObject) -> None:
    distinct = st.sets(st.integers(-len(shape), len(shape) - 1), max_size=len(shape))
    axes = tuple(data.draw(distinct.filter(lambda s: len({a % len(shape) for a in s}) == len(s))))
    keepdims = data.draw(st.booleans())
    got = op("sum_axis").infer([F32], [shape], {"axes": axes, "keepdims": keepdims})[1]
    want = np.sum(np.zeros(shape), axis=axes or None, keepdims=keepdims).shape
    assert got == want
