"""The conformance matrix: every core op × every dtype it accepts × its variants.

A case fixes an op, the input dtypes, the params and a layout (plain or broadcast). Tests build
input arrays for a case from explicit edge values and from hypothesis draws, run the JAX
lowering and the NumPy reference, and compare with `assert_conforms`.

Float tolerances (also written in docs/ops.md):
* f64: 1e-12 relative; f32: 1e-5 relative; f16/bf16/f8: one unit of the storage type's
  precision (``eps * max(|want|, smallest_normal)``);
* accumulating ops (sum/mean/prod/matmul) add ``n * eps(accumulator) * sum(|terms|)`` because
  XLA and NumPy sum in different orders;
* NaN must match NaN, ±inf must match exactly; ints, bool and packed types must match exactly;
* XLA on CPU flushes subnormal floats to zero, so results below the smallest normal number
  match any value of that size, and generated inputs contain no subnormals.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from openinfer_jax.core.dtypes import NARROW_FLOATS, DType
from openinfer_jax.ops import registry
from openinfer_jax.ops.registry import acc_accepts, compute_dtype

# The original's 47 ops (reference §2a), the scope of this matrix.
CORE_OPS = (
    "add", "mul", "sub", "div", "floor_div", "rem", "fma", "abs", "neg", "recip",
    "and", "or", "xor", "not", "shl", "shr", "popcount", "cast",
    "eq", "ne", "lt", "le", "gt", "ge", "filter", "is_finite", "is_nan", "is_inf", "is_neg",
    "fill", "matmul", "relu", "argmax_axis", "argmin_axis", "max_axis", "min_axis",
    "sum_axis", "prod_axis", "mean_axis", "floor", "ceil", "round", "trunc", "clamp",
    "min", "max", "sign",
)  # fmt: skip

REDUCTIONS = {
    "argmax_axis",
    "argmin_axis",
    "max_axis",
    "min_axis",
    "sum_axis",
    "prod_axis",
    "mean_axis",
}
ACCUMULATING = {"sum_axis", "mean_axis", "prod_axis", "matmul"}


@dataclass(frozen=True)
class Case:
    """One op × dtype × variant cell of the matrix."""

    op: str
    dtypes: tuple[DType, ...]
    params: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    variant: str = "plain"

    @property
    def id(self) -> str:
        """A readable pytest id: ``add-i4-broadcast``."""
        text = ",".join(f"{k}={_fmt(v)}" for k, v in sorted(self.params.items()))
        kinds = "/".join(d.short for d in dict.fromkeys(self.dtypes))
        return f"{self.op}-{kinds}-{self.variant}" + (f"-{text}" if text else "")


def _fmt(value: Any) -> str:
    if isinstance(value, DType):
        return value.short
    if isinstance(value, tuple):
        return "[" + ",".join(_fmt(v) for v in value) + "]"
    return str(value)


# ---- values -----------------------------------------------------------------------------------------
def edge_values(dtype: DType) -> list[Any]:
    """Values every case sees: NaN, ±inf, -0.0, extremes, zero, ±1, ties for rounding."""
    if dtype is DType.BOOL:
        return [False, True]
    if dtype.is_int:
        low, high = dtype.value_range()
        if dtype is DType.T1:
            return [-1, 1]
        picks = {low, high, 0, 1, -1, low + 1, high - 1, 2, -2, 3}
        return sorted(v for v in picks if low <= v <= high)
    info = ml_dtypes.finfo(dtype.numpy)
    big = float(info.max)
    # f8e8m0's smallest value, 2^-127, is an f32 subnormal, which XLA flushes (module doc).
    tiny = max(float(info.smallest_normal), 2.0**-126)
    return [
        math.nan,
        math.inf,
        -math.inf,
        -0.0,
        0.0,
        1.0,
        -1.0,
        0.5,
        -2.5,
        1.5,
        3.0,
        -7.0,
        big,
        -big,
        tiny,
        1e3,
        -0.3,
    ]


def as_array(values: list[Any], dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    """Values in the in-memory representation of `dtype`, reshaped."""
    if dtype.is_float:
        with np.errstate(all="ignore"):
            arr = np.asarray(values, np.float64).astype(dtype.numpy)
    else:
        arr = np.asarray(values, dtype=dtype.numpy)
    return arr.reshape(shape)


EDGE_LEN = 17  # every dtype's edge list is tiled to this length, so all cases share shapes


def edge_inputs(case: Case) -> list[np.ndarray]:
    """Deterministic inputs covering edge values (all pairs for binary elementwise ops).

    Shapes depend only on the op's layout, not on the dtype, so JAX compiles each primitive
    once per dtype and every op of that layout reuses it.
    """
    edges = [_tiled(edge_values(d), EDGE_LEN) for d in case.dtypes]
    if case.op == "matmul":
        shape_a, shape_b = ((3, 4), (4, 3)) if case.variant != "broadcast" else ((2, 3, 4), (4,))
        return [as_array(_tiled(edges[0], math.prod(shape_a)), case.dtypes[0], shape_a),
                as_array(_tiled(edges[1][5:] + edges[1][:5], math.prod(shape_b)), case.dtypes[1], shape_b)]  # fmt: skip
    if case.op in REDUCTIONS:
        return [
            as_array(
                _tiled(edges[0][3:] + edges[0][:3], 4 * EDGE_LEN), case.dtypes[0], (EDGE_LEN, 4)
            )
        ]
    if len(edges) == 1:
        return [as_array(edges[0], case.dtypes[0], (EDGE_LEN,))]
    if case.variant == "broadcast":
        return [as_array(edges[0], case.dtypes[0], (EDGE_LEN, 1)),
                as_array(edges[1], case.dtypes[1], (EDGE_LEN,))]  # fmt: skip
    size = EDGE_LEN
    left = [v for v in edges[0] for _ in range(size)]
    right = edges[1] * size
    out = [
        as_array(left, case.dtypes[0], (size * size,)),
        as_array(right, case.dtypes[1], (size * size,)),
    ]
    if len(edges) == 3:
        third = _tiled(edges[2], size * size)
        out.append(as_array(third[3:] + third[:3], case.dtypes[2], (size * size,)))
    return out


def _tiled(values: list[Any], size: int) -> list[Any]:
    return (values * (size // len(values) + 1))[:size]


# ---- params per op ------------------------------------------------------------------------------------
def _param_variants(op: str, dtype: DType) -> list[dict[str, Any]]:
    if op in ("div", "floor_div", "recip"):
        return [{}, {"div_by_zero_mask": 3 if dtype.is_int else -1.5}]
    if op in ("shl", "shr"):
        return [{"bits": b} for b in sorted({0, 1, dtype.bits - 1, dtype.bits, dtype.bits + 5})]
    if op in ("argmax_axis", "argmin_axis"):
        return [{}, {"axis": -1, "keepdims": True, "select_first": False}, {"axis": 1}]
    if op in ("max_axis", "min_axis", "sum_axis", "prod_axis", "mean_axis"):
        return [{}, {"axes": (0,)}, {"axes": (-1,), "keepdims": True}]
    if op == "relu":
        slope = {"alpha": 0.5} if dtype.is_int else {"alpha": 0.1}
        return [{}, {**slope, "clamp_max": 6.0}, {"negative_slope": 0.25, "clamp_min": -1.5}]
    if op == "clamp":
        return [{}, {"min": -2.5, "max": 3.5}, {"min": 1}]
    if op == "fill":
        if dtype is DType.BOOL:
            return [{"value": True}]
        if dtype.is_float:
            return [{"value": 1.5}, {"value": -math.inf}]
        low, high = dtype.value_range()
        return [{"value": high}, {"value": low if dtype is not DType.T1 else -1}]
    return [{}]


# Float → int targets that run every rounding mode × saturate; other targets run two of them.
_CAST_FULL_TARGETS = (DType.I8, DType.U64, DType.I64, DType.I4, DType.U4)


# A narrow float (f8e4m3fn...) is cast to and from these only (and the other narrow floats).
_NARROW_PARTNERS = (DType.F32, DType.F16, DType.F8, DType.I8, DType.U64, DType.I4, DType.BOOL)


def _cast_variants(src: DType) -> Iterator[dict[str, Any]]:
    targets = registry.get("cast").params["to"].allowed  # type: ignore[union-attr]
    for dst in sorted(targets, key=lambda d: d.value):
        narrow = (src in NARROW_FLOATS, dst in NARROW_FLOATS)
        if any(narrow) and not all(narrow) and (dst if narrow[0] else src) not in _NARROW_PARTNERS:
            continue
        if dst is DType.F8E8M0:
            for mode, saturate in (
                ("ceil", True),
                ("ceil", False),
                ("trunc", True),
                ("nearest", True),
            ):
                yield {"to": dst, "rounding_mode": mode, "saturate": saturate}
        elif dst in NARROW_FLOATS:
            yield {"to": dst, "saturate": True}
            yield {"to": dst, "saturate": False}
        elif src.is_float and dst.is_int:
            modes = ("trunc", "floor", "ceil", "nearest")
            combos = [(m, s) for m in modes for s in (True, False)]
            if dst not in _CAST_FULL_TARGETS or src in NARROW_FLOATS:
                combos = [("trunc", True), ("nearest", False)]
            for mode, saturate in combos:
                yield {"to": dst, "rounding_mode": mode, "saturate": saturate}
        elif dst.is_int and not src.is_float:
            yield {"to": dst, "saturate": True}
            src_low, src_high = src.value_range()
            dst_low, dst_high = dst.value_range()
            if src_low < dst_low or src_high > dst_high:  # wrapping differs from clamping
                yield {"to": dst, "saturate": False}
        else:
            yield {"to": dst}


def _sorted_dtypes(dtypes: frozenset[DType]) -> list[DType]:
    return sorted(dtypes, key=lambda d: d.value)


def build_cases() -> list[Case]:
    """Every case of the matrix, in a stable order."""
    cases: list[Case] = []
    for name in CORE_OPS:
        op = registry.get(name)
        assert op is not None, f"core op {name} is not registered"
        for dtype in _sorted_dtypes(op.input_spec(len(op.inputs) - 1).dtypes):
            arity = len(op.inputs)
            if name == "filter":
                for cond in sorted({DType.BOOL, dtype}, key=lambda d: d.value):
                    cases.append(Case(name, (cond, dtype, dtype), {}, f"cond_{cond.short}"))
                continue
            dtypes = (dtype,) * arity
            # Layouts: "plain" (equal shapes) and "broadcast"; `edge_inputs` builds the arrays.
            layouts = ["plain", "broadcast"] if op.broadcast else ["plain"]
            variants = (
                list(_cast_variants(dtype)) if name == "cast" else _param_variants(name, dtype)
            )
            for layout in layouts:
                for params in variants:
                    cases.append(Case(name, dtypes, params, layout))
            for acc in op.acc_rules:
                if acc_accepts(dtype, acc[0]):
                    form = acc if acc[0] is not acc[1] else acc[:1]  # single form acc=i32 too
                    extra = {"axes": (1,)} if name in REDUCTIONS else {}
                    for shown in [acc] if form == acc else [acc, form]:
                        variant = "acc_list" if len(shown) == 2 else "acc_single"
                        cases.append(Case(name, dtypes, {**extra, "acc": shown}, variant))
    return cases


# ---- comparison --------------------------------------------------------------------------------------
_EPS = {
    DType.F64: 2.0**-52, DType.F32: 2.0**-23, DType.F16: 2.0**-10,
    DType.BF16: 2.0**-7, DType.F8: 2.0**-2,
    **{d: float(ml_dtypes.finfo(d.numpy).eps) for d in NARROW_FLOATS},
}  # fmt: skip
_RTOL = {DType.F64: 1e-12, DType.F32: 1e-5}


def assert_conforms(case: Case, inputs: list[np.ndarray], got: Any, want: np.ndarray) -> None:
    """JAX result `got` equals reference `want`: exactly, or within the documented tolerance."""
    got = np.asarray(got)
    assert got.dtype == want.dtype, f"{case.id}: dtype {got.dtype} != reference {want.dtype}"
    assert got.shape == want.shape, f"{case.id}: shape {got.shape} != reference {want.shape}"
    op = registry.get(case.op)
    assert op is not None
    out_dtype = op.output_dtype(case.dtypes, op.resolve_params(case.params))
    if not out_dtype.is_float:
        if out_dtype.is_packed:
            low, high = out_dtype.value_range()
            assert np.all((want >= low) & (want <= high)), f"{case.id}: reference out of range"
        got, want = np.atleast_1d(got), np.atleast_1d(want)
        mismatch = np.nonzero(got != want)
        assert not mismatch[0].size, (
            f"{case.id}: first mismatch at {tuple(int(m[0]) for m in mismatch)}: "
            f"jax {got[mismatch][0]!r} vs reference {want[mismatch][0]!r}; inputs "
            f"{[x[mismatch] if x.shape == got.shape else x for x in inputs]}"
        )
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert np.array_equal(np.isnan(g), np.isnan(w)), f"{case.id}: NaN positions differ: {g} vs {w}"
    finite = np.isfinite(w)
    assert np.array_equal(g[~finite & ~np.isnan(w)], w[~finite & ~np.isnan(w)]), (
        f"{case.id}: infinities differ: {g} vs {w}"
    )
    tol = _RTOL.get(out_dtype, _EPS[out_dtype]) * np.abs(w)
    # XLA on CPU flushes subnormal results to zero: below the smallest normal, any value of
    # that magnitude (zero included) is accepted.
    tol = np.maximum(tol, float(ml_dtypes.finfo(out_dtype.numpy).smallest_normal))
    tol = tol + _accumulation_slack(case, inputs, out_dtype)
    with np.errstate(invalid="ignore"):
        bad = finite & ~(np.abs(g - w) <= tol)
    assert not np.any(bad), (
        f"{case.id}: {int(bad.sum())} values outside tolerance, e.g. jax {g[bad][:3]} vs "
        f"reference {w[bad][:3]} (tol {np.broadcast_to(tol, w.shape)[bad][:3]})"
    )


def _accumulation_slack(case: Case, inputs: list[np.ndarray], out_dtype: DType) -> Any:
    """Extra absolute tolerance for ops whose summation order differs between XLA and NumPy."""
    if case.op not in ACCUMULATING:
        return 0.0
    acc = case.params.get("acc")
    src = case.dtypes[0]
    if not src.is_float:
        return 0.0
    work = acc[0] if acc else compute_dtype(src)
    eps = _EPS[work] if work in _EPS else _EPS[DType.F32]
    with np.errstate(all="ignore"):
        mags = [np.abs(x.astype(np.float64)) for x in inputs]
        if case.op == "matmul":
            terms, n = np.matmul(mags[0], mags[1]), mags[0].shape[-1] if mags[0].ndim else 1
        elif case.op == "prod_axis":
            op = registry.get(case.op)
            assert op is not None
            params = op.resolve_params(case.params)
            terms = np.abs(
                op.reference(*inputs, dtypes=case.dtypes, **case.params).astype(np.float64)
            )
            n = inputs[0].size
            del params
        else:
            op = registry.get("sum_axis")
            assert op is not None
            params = {k: v for k, v in case.params.items() if k != "acc"}
            terms = np.abs(op.reference(mags[0].astype(np.float64), **params).astype(np.float64))
            n = inputs[0].size
            if case.op == "mean_axis":
                terms = terms / max(1, n // max(1, terms.size))
    slack = 2 * n * eps * np.nan_to_num(terms, nan=0.0, posinf=0.0)
    # The result is rounded to the output type after accumulation: one more unit there.
    return slack + _EPS[out_dtype] * np.nan_to_num(terms, nan=0.0, posinf=0.0)
