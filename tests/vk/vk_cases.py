"""The parity matrix of the Vulkan tests: op x dtype x variant cases and their inputs.

Every case runs one op on the device and compares with the op registry's NumPy
reference (`OpDef.reference`): exact for integers, bool and packed types; for floats
within `tolerance` (documented in docs/vulkan.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from openinfer_jax.core.dtypes import NARROW_FLOATS, DType
from openinfer_jax.ops import registry
from openinfer_jax.ops.registry import acc_accepts
from openinfer_jax.vk.kernels import NORMALIZATIONS, REDUCTIONS

# Ops whose float results go through transcendental functions or division (driver accuracy:
# Vulkan allows a few ulp for exp, sqrt and division, and GPUs use it).
TRANSCENDENTAL = frozenset(
    {"exp", "log", "tanh", "sigmoid", "silu", "sqrt", "rsqrt", "recip", "div",
     "attention", "rope", "batch_norm", "avg_pool", "global_average_pool",
     "sin", "cos", "tan", "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "pow"}
)  # fmt: skip
# The drivers' GLSL asin/acos/atan (lavapipe: about 1e-4 relative; docs/vulkan.md).
DRIVER_APPROXIMATE = frozenset({"asin", "acos", "atan"})
_MANTISSA = {DType.F8: 2, DType.BF16: 7, DType.F16: 10, DType.F32: 23, DType.F64: 52}


@dataclass(frozen=True)
class Case:
    """One device run: op, input dtypes and shapes, params, and how to check it."""

    op: str
    dtypes: tuple[DType, ...]
    shapes: tuple[tuple[int, ...], ...]
    params: dict[str, Any] = field(default_factory=dict, hash=False)
    inplace: bool = False
    inplace_index: int = 0  # which input is also the output when `inplace`
    seed: int = 0

    @property
    def id(self) -> str:
        """A readable pytest id."""
        bits = [self.op, "-".join(d.short for d in self.dtypes),
                "x".join(",".join(map(str, s)) for s in self.shapes)]  # fmt: skip
        if self.params:
            bits.append(",".join(f"{k}={_short(v)}" for k, v in sorted(self.params.items())))
        if self.inplace:
            bits.append("inplace")
        return "|".join(bits)


def _short(value: Any) -> str:
    if isinstance(value, DType):
        return value.short
    if isinstance(value, tuple):
        return "[" + ",".join(_short(v) for v in value) + "]"
    return str(value)


def sample(
    dtype: DType, shape: tuple[int, ...], rng: np.random.Generator, *, edges: bool = True
) -> np.ndarray:
    """Random values of `dtype` (simulator representation) with edge values mixed in."""
    n = int(np.prod(shape, dtype=np.int64))
    if dtype is DType.BOOL:
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    if dtype is DType.T1:
        return rng.choice(np.array([-1, 1], np.int8), n).reshape(shape)
    if dtype.is_float:
        values = rng.normal(0.0, 4.0, n)
        special = [math.nan, math.inf, -math.inf, -0.0, 0.0, 0.5, -0.5, 2.5, -1.5, 1.0]
        if edges and n >= 4:
            spots = rng.choice(n, size=min(n // 3, len(special)), replace=False)
            values[spots] = special[: len(spots)]
        return values.astype(dtype.numpy).reshape(shape)
    low, high = dtype.value_range()
    values = rng.integers(
        low, high, n, endpoint=True, dtype=np.int64 if dtype is not DType.U64 else np.uint64
    )
    if edges and n >= 4:
        special = [v for v in (low, high, 0, 1, -1) if low <= v <= high]
        spots = rng.choice(n, size=min(n // 3, len(special)), replace=False)
        for spot, value in zip(spots, special):
            values[spot] = value
    return values.astype(dtype.numpy).reshape(shape)


def tolerance(op: str, dtype: DType, reduce_len: int = 1) -> tuple[float, float]:
    """(rtol, atol) for a float result of `dtype` from `op`.

    Low-precision floats: one unit in the last place of the storage type (the device and
    the reference both compute in f32 and round to nearest even, so most results are
    identical). f32: 1e-6 relative for arithmetic, 1e-5 for transcendental functions and
    for sums/products whose order differs (times the reduced length); f64: 1e-12.
    """
    if op in DRIVER_APPROXIMATE and dtype is not DType.F64:
        return max(1e-3, 2.0 ** (1 - _MANTISSA[dtype])), 1e-6
    if dtype in (DType.F8, DType.BF16, DType.F16):
        ulp = 2.0 ** -_MANTISSA[dtype]
        return ulp * (1 + math.log2(max(reduce_len, 1))), ulp * 2.0**-14
    if dtype is DType.F64:
        return 1e-12 * max(reduce_len, 1), 1e-300
    base = 1e-5 if op in TRANSCENDENTAL else 1e-6
    return base * max(reduce_len, 1), 1e-6 * max(reduce_len, 1)


def _dtype_order(dtypes: frozenset[DType]) -> list[DType]:
    return sorted(dtypes, key=lambda d: d.value)


#: Every op whose math is an expression tree (rendered to GLSL by vk/expressions.py); fill
#: has its own kernel and cases.
TREE_OPS = sorted(op.name for op in registry.all_ops() if op.expr is not None and op.name != "fill")


def _f64_math(op: str) -> bool:
    opdef = registry.get(op)
    assert opdef is not None
    f64 = [DType.F64] * len(opdef.inputs)
    return DType.F64 in opdef.inputs[0].dtypes and "float64_math" in opdef.capabilities(f64, {})


# (op, dtype) pairs that have no Vulkan kernel by design: GLSL's exp/log/tanh take no
# doubles. `supports` must name the reason, and the simulator runs them on the CPU.
FALLBACKS = [(op, DType.F64) for op in (*TREE_OPS, *NORMALIZATIONS) if _f64_math(op)]
assert {op for op, _ in FALLBACKS} >= {"exp", "log", "tanh", "sigmoid", "silu", "gelu", "softmax",
                                       "log_softmax"}  # fmt: skip


def _elementwise_cases() -> list[Case]:
    cases = []
    for op in TREE_OPS:
        opdef = registry.get(op)
        assert opdef is not None
        arity = len(opdef.inputs)
        for dtype in _dtype_order(opdef.inputs[-1].dtypes):
            if (op, dtype) in FALLBACKS:
                continue
            if op == "filter":
                dtypes = (DType.BOOL if dtype is not DType.F32 else DType.F32, dtype, dtype)
            elif op == "where":
                dtypes = (DType.BOOL, dtype, dtype)
            else:
                dtypes = (dtype,) * arity
            variants: list[dict[str, Any]] = [{}]
            if op in ("shl", "shr"):
                variants = [{"bits": b} for b in (0, 1, dtype.bits - 1, dtype.bits, dtype.bits + 3)]
            elif op in ("div", "floor_div") and dtype.is_int:
                variants = [{}, {"div_by_zero_mask": dtype.value_range()[1]}]
            elif op in ("div", "recip") and dtype.is_float:
                variants = [{}, {"div_by_zero_mask": 7.0}]
            elif op == "clamp":
                variants = [{}, {"min": -2.5, "max": 3.7}, {"min": 1}]
            elif op == "relu":
                variants = [{}, {"negative_slope": 0.5, "clamp_max": 3.0}]
            elif op == "gelu":
                variants = [{}, {"approximate": "tanh"}]
            for params in variants:
                if arity == 2 and opdef.broadcast_ok:
                    cases.append(Case(op, dtypes, ((2, 3, 5), (3, 1)), params))
                    # prelu broadcasts one way (slope to x's shape): there x is the larger.
                    wide = ((3, 45), (1, 45)) if op == "prelu" else ((1, 45), (3, 45))
                    cases.append(Case(op, dtypes, wide, params))
                elif arity == 3 and opdef.broadcast_ok:
                    cases.append(Case(op, dtypes, ((3, 1), (2, 3, 5), (5,)), params))
                    cases.append(Case(op, dtypes, ((2, 45),) * 3, params))
                else:
                    cases.append(Case(op, dtypes, ((2, 45),) * arity, params))
            same_out = opdef.output_dtype(list(dtypes), opdef.resolve_params(variants[-1])) is dtype
            if opdef.inplace_ok and same_out and op != "filter":
                at = 1 if op == "where" else 0  # where's output has the dtype of a, not cond
                cases.append(Case(op, dtypes, ((3, 21),) * arity, variants[-1], inplace=True,
                                  inplace_index=at))  # fmt: skip
    return cases


_MOVEMENT_PARAMS: dict[str, list[dict[str, Any]]] = {
    "transpose": [{"perm": (2, 0, 1)}, {}],
    "permute": [{"perm": (1, 2, 0)}],
    "reshape": [{"shape": (5, -1)}, {"shape": (0, 20)}],
    "slice": [{"starts": (-1, 1), "ends": (-100, 4), "axes": (2, 1), "steps": (-2, 2)},
              {"starts": (1,), "ends": (3,)}],
}  # fmt: skip


def _movement_cases() -> list[Case]:
    cases = []
    for op, variants in _MOVEMENT_PARAMS.items():
        opdef = registry.get(op)
        if opdef is None:
            continue
        for dtype in _dtype_order(opdef.inputs[0].dtypes):
            for params in variants:
                cases.append(Case(op, (dtype,), ((3, 4, 5),), params))
    return cases


_NORM_VARIANTS: dict[str, list[tuple[int, dict[str, Any]]]] = {
    # (number of inputs, params)
    "softmax": [(1, {}), (1, {"axis": 1})],
    "log_softmax": [(1, {"axis": 0})],
    "layer_norm": [(1, {}), (2, {}), (3, {"axis": 1, "epsilon": 1e-3})],
    "rms_norm": [(1, {}), (2, {"axis": -1})],
}


def _norm_cases() -> list[Case]:
    cases = []
    for op, variants in _NORM_VARIANTS.items():
        opdef = registry.get(op)
        if opdef is None:
            continue
        for dtype in _dtype_order(opdef.inputs[0].dtypes):
            if (op, dtype) in FALLBACKS:
                continue
            for count, params in variants:
                axis = params.get("axis", -1) % 3
                tail = (3, 4, 7)[axis:]
                shapes = ((3, 4, 7), *[tail] * (count - 1))
                cases.append(Case(op, (dtype,) * count, shapes, params))
            cases.append(Case(op, (dtype,), ((3, 4, 7),), variants[0][1], inplace=True))
    return cases


def _gather_cases() -> list[Case]:
    cases = []
    for op, params in (("embedding", {}), ("gather", {"axis": 1}), ("gather", {"axis": -1})):
        opdef = registry.get(op)
        if opdef is None:
            continue
        index_dtypes = _dtype_order(opdef.inputs[1].dtypes)
        for k, dtype in enumerate(_dtype_order(opdef.inputs[0].dtypes)):
            index = index_dtypes[k % len(index_dtypes)]
            cases.append(Case(op, (dtype, index), ((5, 4, 3), (2, 3)), params))
        for index in index_dtypes:
            cases.append(Case(op, (DType.F32, index), ((5, 4, 3), (7,)), params))
    return cases


def _fill_cases() -> list[Case]:
    opdef = registry.get("fill")
    assert opdef is not None
    cases = []
    for dtype in _dtype_order(opdef.inputs[0].dtypes):
        if dtype.is_float:
            value: Any = -1.75
        elif dtype is DType.BOOL:
            value = True
        elif dtype is DType.T1:
            value = -1
        else:
            value = dtype.value_range()[1]
        cases.append(Case("fill", (dtype,), ((3, 13),), {"value": value}))
    return cases


def _cast_cases() -> list[Case]:
    opdef = registry.get("cast")
    assert opdef is not None
    targets = opdef.params["to"].allowed
    cases = []
    # The narrow floats have no Vulkan kernels (tests/ops/test_narrow_floats.py checks the reason).
    for src in _dtype_order(opdef.inputs[0].dtypes - NARROW_FLOATS):
        for dst in _dtype_order(frozenset(targets) - NARROW_FLOATS):
            cases.append(Case("cast", (src,), ((5, 13),), {"to": dst}))
            if src.is_float and dst.is_int:
                for mode in ("floor", "ceil", "nearest"):
                    cases.append(
                        Case("cast", (src,), ((5, 13),), {"to": dst, "rounding_mode": mode})
                    )
            if dst.is_int and src is not DType.BOOL:
                cases.append(Case("cast", (src,), ((5, 13),), {"to": dst, "saturate": False}))
    return cases


def _bitcast_cases() -> list[Case]:
    pairs = [(DType.F32, DType.I32), (DType.U32, DType.F32), (DType.I8, DType.U8),
             (DType.U16, DType.I16), (DType.U8, DType.BOOL), (DType.BOOL, DType.I8)]  # fmt: skip
    return [Case("bitcast", (src,), ((5, 13),), {"to": dst}) for src, dst in pairs]


def _reduce_cases() -> list[Case]:
    cases = []
    for op in REDUCTIONS:
        opdef = registry.get(op)
        if opdef is None:
            continue
        for dtype in _dtype_order(opdef.inputs[0].dtypes):
            if op.startswith("arg"):
                variants: list[dict[str, Any]] = [{"axis": 1}, {"axis": -1, "select_first": False},
                                                  {"axis": 0, "keepdims": True}]  # fmt: skip
            else:
                variants = [{"axes": (1,)}, {"axes": (0, 2), "keepdims": True}, {}]
                for acc in opdef.acc_rules:
                    if acc_accepts(dtype, acc[0]):
                        variants.append({"axes": (2,), "acc": acc})
            for params in variants:
                cases.append(Case(op, (dtype,), ((3, 4, 7),), params))
    return cases


def _matmul_cases() -> list[Case]:
    opdef = registry.get("matmul")
    assert opdef is not None
    cases = []
    for dtype in _dtype_order(opdef.inputs[0].dtypes):
        cases.append(Case("matmul", (dtype, dtype), ((3, 5), (5, 4))))
        cases.append(Case("matmul", (dtype, dtype), ((2, 1, 3, 5), (3, 5, 6))))
        for acc in opdef.acc_rules:
            if acc_accepts(dtype, acc[0]):
                cases.append(Case("matmul", (dtype, dtype), ((2, 3, 5), (5, 4)), {"acc": acc}))
    # the tiled f32 path: edges that are not multiples of the tile, batch broadcast
    cases.append(Case("matmul", (DType.F32, DType.F32), ((70, 33), (33, 65))))
    cases.append(Case("matmul", (DType.F32, DType.F32), ((2, 1, 17, 40), (3, 40, 9))))
    cases.append(Case("matmul", (DType.F32, DType.F32), ((7,), (7, 5))))
    return cases


# ---- the model-building ops (vk/nn_kernels.py) ----------------------------------------------------
# (op, dtype) pairs of these ops that fall back: GLSL has no double exp/sin/cos.
NN_FALLBACKS = [("attention", DType.F64), ("rope", DType.F64)]
_FLOATS = [DType.F8, DType.BF16, DType.F16, DType.F32, DType.F64]


def _floats(op: str) -> list[DType]:
    return [d for d in _FLOATS if (op, d) not in NN_FALLBACKS]


def _linear_cases() -> list[Case]:
    cases = []
    for dtype in _floats("linear"):
        cases.append(Case("linear", (dtype, dtype), ((3, 5), (4, 5))))
        cases.append(Case("linear", (dtype,) * 3, ((2, 3, 5), (7, 5), (7,))))
    # the tiled f32 path (8+ rows): edges that are not multiples of the tile, with/without bias
    cases.append(Case("linear", (DType.F32,) * 3, ((70, 33), (65, 33), (65,))))
    cases.append(Case("linear", (DType.F32,) * 2, ((2, 9, 16), (3, 16))))
    cases.append(Case("linear", (DType.F32,) * 3, ((5,), (4, 5), (4,))))  # a vector x
    return cases


def _rope_cases() -> list[Case]:
    cases = []
    for dtype in _floats("rope"):
        cases.append(Case("rope", (dtype, DType.I32), ((2, 5, 8), (5,))))
        cases.append(Case("rope", (dtype, DType.I64), ((3, 4, 6), ()),
                          {"interleaved": True, "theta": 500000.0}))  # fmt: skip
    positions = sorted(_index_dtypes(), key=lambda d: d.value)
    for index in positions:
        cases.append(Case("rope", (DType.F32, index), ((2, 3, 10), (3,)), {"rotary_dim": 4}))
    cases.append(Case("rope", (DType.F32, DType.U32), ((4, 7, 6), ()), {"rotary_dim": 2}))
    cases.append(Case("rope", (DType.F16, DType.I32), ((2, 5, 8), (5,)), inplace=True))
    cases.append(Case("rope", (DType.F32, DType.I32), ((3, 4, 6), (4,)), {"interleaved": True},
                      inplace=True))  # fmt: skip
    return cases


def _index_dtypes() -> frozenset[DType]:
    opdef = registry.get("rope")
    assert opdef is not None
    return opdef.inputs[1].dtypes


def _attention_cases() -> list[Case]:
    cases = []
    q, k, v = (2, 4, 3, 8), (2, 2, 5, 8), (2, 2, 5, 6)  # grouped: 4 query heads on 2 kv heads
    for dtype in _floats("attention"):
        cases.append(Case("attention", (dtype,) * 3, (q, k, v)))
        cases.append(Case("attention", (dtype,) * 3, (q, k, v), {"causal": True}))
        cases.append(Case("attention", (dtype,) * 4, (q, k, v, (2, 1, 1, 5)), {"scale": 0.2}))
        cases.append(Case("attention", (dtype, dtype, dtype, DType.BOOL), (q, k, v, (3, 5))))
    f32 = (DType.F32,) * 3
    # a decode step (Sq = 1), more keys than a work group, a v head dim past one column
    cases.append(Case("attention", f32, ((1, 2, 1, 16), (1, 1, 70, 16), (1, 1, 70, 70)),
                      {"causal": True}))  # fmt: skip
    # more queries than keys with causal: the first queries see no key and give zeros
    cases.append(Case("attention", f32, ((3, 4, 8), (3, 2, 8), (3, 2, 4)), {"causal": True}))
    cases.append(
        Case(
            "attention",
            (*f32, DType.BOOL),
            ((2, 2, 3, 4), (2, 2, 6, 4), (2, 2, 6, 3), (2, 2, 3, 6)),
            {"causal": True},
        )
    )
    cases.append(Case("attention", (*f32, DType.F32), ((2, 3, 4), (2, 5, 4), (2, 5, 4), (3, 5))))
    # the tiled kernel (8+ queries, head dims <= 128): partial query blocks and key chunks,
    # grouped heads, masks with hidden rows, head dims at the limit and past it (row kernel)
    tiled = ((1, 4, 20, 8), (1, 2, 37, 8), (1, 2, 37, 12))
    for dtype in _floats("attention"):
        cases.append(Case("attention", (dtype,) * 3, tiled, {"causal": True}))
        cases.append(Case("attention", (dtype,) * 4, (*tiled, (1, 1, 20, 37))))
    cases.append(Case("attention", (*f32, DType.BOOL),
                      ((2, 2, 19, 4), (2, 2, 9, 4), (2, 2, 9, 3), (2, 2, 19, 9)), {"causal": True}))  # fmt: skip
    cases.append(
        Case("attention", (*f32, DType.BOOL), ((3, 16, 5), (3, 21, 5), (3, 21, 5), (16, 21)))
    )
    cases.append(Case("attention", f32, ((1, 1, 9, 128), (1, 1, 20, 128), (1, 1, 20, 128))))
    cases.append(Case("attention", f32, ((1, 1, 9, 160), (1, 1, 20, 160), (1, 1, 20, 7))))
    # decode steps over long caches: keys split into ranges (partials, then a merge)
    long = ((1, 2, 1, 16), (1, 1, 600, 16), (1, 1, 600, 20))
    for dtype in _floats("attention"):
        cases.append(Case("attention", (dtype,) * 3, long, {"causal": True}))
    cases.append(Case("attention", (*f32, DType.BOOL),
                      ((2, 1, 8), (2, 1100, 8), (2, 1100, 8), (2, 1, 1100))))  # fmt: skip
    cases.append(Case("attention", (*f32, DType.F32), (*long, (1, 1, 1, 600))))
    # f32 queries over an f16/bf16 cache (k and v share a dtype, q's may differ): the row
    # kernel, the tiled one, and key ranges
    for kv in (DType.F16, DType.BF16):
        mixed = (DType.F32, kv, kv)
        cases.append(Case("attention", mixed, (q, k, v), {"causal": True}))
        cases.append(Case("attention", mixed, tiled, {"causal": True}))
        cases.append(Case("attention", mixed, long, {"causal": True}))
    cases.append(Case("attention", (DType.F16, DType.F32, DType.F32), (q, k, v)))
    return cases


def _concat_cases() -> list[Case]:
    opdef = registry.get("concat")
    assert opdef is not None
    cases = []
    for dtype in _dtype_order(opdef.inputs[0].dtypes):
        cases.append(Case("concat", (dtype,) * 3, ((2, 3, 5), (2, 1, 5), (2, 4, 5)), {"axis": 1}))
        # odd row lengths: packed outputs mix inputs inside one 32-bit word
        cases.append(Case("concat", (dtype,) * 2, ((3, 5), (3, 7)), {"axis": -1}))
    cases.append(Case("concat", (DType.F32,) * 3, ((0, 5), (2, 5), (1, 5)), {"axis": 0}))
    cases.append(Case("concat", (DType.U4,), ((3, 5),), {"axis": 0}))
    return cases


def _pad_value(dtype: DType) -> Any:
    if dtype.is_float:
        return 1.5
    if dtype is DType.BOOL:
        return 1
    if dtype is DType.T1:
        return -1
    return dtype.value_range()[0]


def _pad_cases() -> list[Case]:
    opdef = registry.get("pad")
    assert opdef is not None
    cases = []
    for dtype in _dtype_order(opdef.inputs[0].dtypes):
        cases.append(Case("pad", (dtype,), ((2, 3, 5),),
                          {"pads": (1, 0, 2, 0, 3, 1), "value": _pad_value(dtype)}))  # fmt: skip
        cases.append(Case("pad", (dtype,), ((3, 5),), {"pads": (2, 7, 1, 4), "mode": "reflect"}))
    for dtype in (DType.F32, DType.I8, DType.U4, DType.F64, DType.BOOL):
        for mode in ("edge", "wrap", "reflect"):
            # pads longer than the axis: reflect and wrap repeat periodically
            cases.append(Case("pad", (dtype,), ((2, 3, 4),),
                              {"pads": (4, 1, 9, 2), "mode": mode, "axes": (2, -2)}))  # fmt: skip
    cases.append(Case("pad", (DType.F32,), ((1, 1),), {"pads": (2, 3, 0, 1), "mode": "reflect"}))
    return cases


def _batch_norm_cases() -> list[Case]:
    cases = []
    for dtype in _floats("batch_norm"):
        cases.append(Case("batch_norm", (dtype,) * 5, ((2, 3, 4, 5), *[(3,)] * 4)))
        cases.append(Case("batch_norm", (dtype,) * 5, ((4, 6), *[(6,)] * 4), {"epsilon": 1e-2}))
    cases.append(Case("batch_norm", (DType.BF16,) * 5, ((2, 3, 7), *[(3,)] * 4), inplace=True))
    return cases


def _conv_cases() -> list[Case]:
    cases = []
    for dtype in _floats("conv2d"):
        cases.append(Case("conv1d", (dtype,) * 3, ((2, 4, 9), (6, 2, 3), (6,)),
                          {"groups": 2, "strides": (2,), "pads": (1, 2), "dilations": (2,)}))  # fmt: skip
        cases.append(Case("conv2d", (dtype,) * 2, ((2, 3, 6, 5), (4, 3, 3, 2))))
        cases.append(Case("conv2d", (dtype,) * 3, ((1, 4, 7, 6), (4, 1, 3, 3), (4,)),
                          {"groups": 4, "strides": (2, 1), "pads": (1, 0, 2, 1),
                           "dilations": (1, 2)}))  # fmt: skip
    cases.append(Case("conv1d", (DType.F32,) * 2, ((1, 3, 17), (5, 3, 1))))
    # the tiled f32 path (8+ output channels per group): tiles past the edges in channels
    # and positions, K past one BK step, groups, strides, dilations, asymmetric pads
    f32 = DType.F32
    cases.append(Case("conv2d", (f32,) * 3, ((2, 5, 9, 7), (20, 5, 3, 3), (20,)),
                      {"pads": (1, 1, 1, 1), "strides": (2, 1)}))  # fmt: skip
    cases.append(Case("conv2d", (f32,) * 2, ((1, 6, 8, 8), (16, 3, 3, 3)),
                      {"groups": 2, "dilations": (2, 2), "pads": (2, 1, 2, 1)}))  # fmt: skip
    cases.append(Case("conv2d", (f32,) * 3, ((1, 3, 12, 12), (70, 3, 3, 3), (70,)),
                      {"pads": (1, 1, 1, 1)}))  # fmt: skip
    cases.append(Case("conv1d", (f32,) * 3, ((2, 4, 30), (9, 4, 5), (9,)), {"strides": (3,)}))
    return cases


def _pool_cases() -> list[Case]:
    cases = []
    for op in ("max_pool", "avg_pool"):
        opdef = registry.get(op)
        assert opdef is not None
        for dtype in _dtype_order(opdef.inputs[0].dtypes):
            cases.append(Case(op, (dtype,), ((2, 3, 7, 6),),
                              {"kernel_shape": (3, 2), "strides": (2, 2), "pads": (1, 0, 1, 1)}))  # fmt: skip
        variants: list[tuple[tuple[int, ...], dict[str, Any]]] = [
            ((2, 2, 9), {"kernel_shape": (3,), "dilations": (2,), "pads": (2, 1)}),
            ((1, 2, 4, 5, 3), {"kernel_shape": (2, 2, 2), "strides": (1, 2, 1)}),
        ]
        if op == "avg_pool":
            variants.append(((2, 3, 7, 6), {"kernel_shape": (3, 3), "pads": (1, 1, 1, 1),
                                            "count_include_pad": True}))  # fmt: skip
        for shape, params in variants:
            for dtype in (DType.F32, DType.F16):
                cases.append(Case(op, (dtype,), (shape,), params))
    opdef = registry.get("global_average_pool")
    assert opdef is not None
    for dtype in _dtype_order(opdef.inputs[0].dtypes):
        cases.append(Case("global_average_pool", (dtype,), ((2, 3, 4, 5),)))
        cases.append(Case("global_average_pool", (dtype,), ((2, 3, 7),)))
    return cases


def nn_cases() -> list[Case]:
    """The parity cases of the model-building ops (attention, rope, conv, pools...)."""
    return (_linear_cases() + _rope_cases() + _attention_cases() + _concat_cases()
            + _pad_cases() + _batch_norm_cases() + _conv_cases() + _pool_cases())  # fmt: skip


def all_cases() -> list[Case]:
    """Every parity case, in a stable order."""
    return (_elementwise_cases() + _movement_cases() + _norm_cases() + _gather_cases()
            + _fill_cases() + _cast_cases() + _bitcast_cases()
            + _reduce_cases() + _matmul_cases() + nn_cases())  # fmt: skip


def make_inputs(case: Case) -> list[np.ndarray]:
    """The case's inputs (deterministic per case id)."""
    seed = sum(map(ord, case.id)) * 7919 + case.seed
    rng = np.random.default_rng(seed)
    arrays = []
    for dtype, shape in zip(case.dtypes, case.shapes):
        # No NaN/inf in float accumulations: the order of operations decides where they
        # turn up (normalization rows with non-finite values are NaN on both sides).
        no_edges = ("matmul", "prod_axis", "sum_axis", "mean_axis", "softmax", "log_softmax",
                    "layer_norm", "rms_norm", "linear", "attention", "conv1d", "conv2d",
                    "avg_pool", "global_average_pool", "rope")  # fmt: skip
        edges = not (case.op in no_edges and dtype.is_float)
        arrays.append(sample(dtype, shape, rng, edges=edges))
    if case.op in ("gather", "embedding"):
        # indices around the axis: in range, negative (from the end) and out of range
        size = case.shapes[0][case.params.get("axis", 0)]
        low = -size - 2 if case.dtypes[1].is_signed_int else 0
        picked = rng.integers(low, size + 3, case.shapes[1])
        arrays[1] = picked.astype(case.dtypes[1].numpy)
    if case.op == "attention":
        # unit-scale scores keep exp() well conditioned; float masks get -inf and -3e4 entries
        for i in range(3):
            arrays[i] = (as_float64(arrays[i]) / 4.0).astype(arrays[i].dtype)
        if len(arrays) > 3 and case.dtypes[3].is_float:
            flat = arrays[3].reshape(-1)
            flat[:2] = np.array([-np.inf, -3e4]).astype(flat.dtype)
        elif len(arrays) > 3:
            arrays[3].reshape(arrays[3].shape[0], -1)[0] = False  # a row that sees no key
    if case.op == "rope":
        # positions up to a few thousand (a long context), offsets small enough not to wrap
        low = -50 if case.dtypes[1].is_signed_int else 0
        high = min(case.dtypes[1].value_range()[1], 4000)
        arrays[1] = rng.integers(low, high, case.shapes[1]).astype(case.dtypes[1].numpy)
    if case.op == "batch_norm":
        arrays[4] = np.abs(as_float64(arrays[4])).astype(arrays[4].dtype)  # variances
    if case.op in ("div", "floor_div", "rem") and len(arrays) == 2:
        arrays[1].reshape(-1)[:2] = 0  # zero divisors always present
    return arrays


def as_float64(x: np.ndarray) -> np.ndarray:
    """Float arrays (bf16/f8 included) as float64 for comparison."""
    if x.dtype in (np.dtype(ml_dtypes.bfloat16), np.dtype(ml_dtypes.float8_e5m2)):
        return x.astype(np.float32).astype(np.float64)
    return x.astype(np.float64)
