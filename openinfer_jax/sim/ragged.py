"""How ops treat a `Ragged` input (a padded cache slice) inside a traced jit region.

A ragged value is padded along one axis up to a power-of-two bucket; its valid length is a
traced scalar, so one compiled region serves every length in the bucket (O(log n) compiles
over n decode steps instead of n). Each rule below says where the raggedness goes through
an op, and masks padded positions with the reduction's identity before any op that reduces
over the ragged axis (0 for sums and contractions, -inf for softmax and max). An op with
no rule raises `NeedExact`: the region is then traced again with exact shapes (correct, but
compiled per length). Rules are keyed by op name or category, one table.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops.registry import OpDef

__all__ = ["NeedExact", "Rag", "apply_op", "mask_axis"]


class NeedExact(Exception):
    """An op cannot run on a padded input; the region must use exact shapes."""


@dataclass(frozen=True)
class Rag:
    """Raggedness of a traced value: `axis` is padded, valid up to length slot `slot`."""

    axis: int
    slot: int


def mask_axis(x: Any, axis: int, length: Any, fill: Any) -> Any:
    """`x` with positions >= `length` along `axis` replaced by `fill`."""
    idx = jax.lax.broadcasted_iota(jnp.int32, x.shape, axis)
    return jnp.where(idx < length, x, jnp.asarray(fill, x.dtype))


def _lowest(dtype: Any) -> Any:
    dt = np.dtype(dtype)
    return -np.inf if dt.kind == "f" or "float" in dt.name else np.iinfo(dt).min


def _highest(dtype: Any) -> Any:
    dt = np.dtype(dtype)
    return np.inf if dt.kind == "f" or "float" in dt.name else np.iinfo(dt).max


Lower = Callable[[Sequence[Any], dict[str, Any]], Any]
RuleResult = tuple[Any, Rag | None]
Rule = Callable[
    [OpDef, Lower, list[Any], list[Rag | None], Sequence[Any], dict[str, Any]], RuleResult
]


def _norm(axis: int, ndim: int) -> int:
    return axis + ndim if axis < 0 else axis


def _elementwise(
    op: OpDef,
    lower: Lower,
    xs: list[Any],
    rags: list[Rag | None],
    lengths: Sequence[Any],
    params: dict[str, Any],
) -> RuleResult:
    out_ndim = max(x.ndim for x in xs)
    target: Rag | None = None
    for x, rag in zip(xs, rags):
        if rag is None:
            continue
        mapped = Rag(rag.axis + out_ndim - x.ndim, rag.slot)
        if target is not None and mapped != target:
            raise NeedExact(f"{op.name}: inputs ragged along different axes or lengths")
        target = mapped
    assert target is not None
    for x, rag in zip(xs, rags):
        if rag is None:
            local = target.axis - (out_ndim - x.ndim)
            if local >= 0 and x.shape[local] != 1:
                raise NeedExact(f"{op.name}: an exact input meets a padded axis")
    return lower(xs, params), target


def _transpose(
    op: OpDef,
    lower: Lower,
    xs: list[Any],
    rags: list[Rag | None],
    lengths: Sequence[Any],
    params: dict[str, Any],
) -> RuleResult:
    rag = rags[0]
    assert rag is not None
    perm = params.get("perm") or tuple(reversed(range(xs[0].ndim)))
    perm = tuple(_norm(p, xs[0].ndim) for p in perm)
    return lower(xs, params), Rag(perm.index(rag.axis), rag.slot)


def _matmul(
    op: OpDef,
    lower: Lower,
    xs: list[Any],
    rags: list[Rag | None],
    lengths: Sequence[Any],
    params: dict[str, Any],
) -> RuleResult:
    a, b = xs[0], xs[1]
    ra, rb = rags[0], rags[1]
    if a.ndim < 2 or b.ndim < 2:
        raise NeedExact("matmul of vectors with a padded input")
    out_ndim = max(a.ndim, b.ndim)
    if ra is not None and ra.axis == a.ndim - 1:
        # Contraction over the padded axis: zero padding on both sides adds nothing.
        if rb is None or rb.axis != b.ndim - 2 or rb.slot != ra.slot:
            raise NeedExact("matmul contracts a padded axis against an exact one")
        length = lengths[ra.slot]
        xs = [mask_axis(a, ra.axis, length, 0), mask_axis(b, rb.axis, length, 0), *xs[2:]]
        return lower(xs, params), None
    if rb is not None and rb.axis == b.ndim - 2:
        raise NeedExact("matmul contracts a padded axis against an exact one")
    if ra is not None and rb is not None:
        raise NeedExact("matmul with two independently padded axes")
    if ra is not None:
        if ra.axis != a.ndim - 2:
            raise NeedExact("matmul with a padded batch axis")
        return lower(xs, params), Rag(out_ndim - 2, ra.slot)
    assert rb is not None
    if rb.axis != b.ndim - 1:
        raise NeedExact("matmul with a padded batch axis")
    return lower(xs, params), Rag(out_ndim - 1, rb.slot)


def _softmax(
    op: OpDef,
    lower: Lower,
    xs: list[Any],
    rags: list[Rag | None],
    lengths: Sequence[Any],
    params: dict[str, Any],
) -> RuleResult:
    rag = rags[0]
    assert rag is not None and all(r is None for r in rags[1:])
    axis = _norm(int(params.get("axis", -1)), xs[0].ndim)
    if axis == rag.axis:
        xs = [mask_axis(xs[0], axis, lengths[rag.slot], -np.inf)]
    return lower(xs, params), rag


def _attention(
    op: OpDef,
    lower: Lower,
    xs: list[Any],
    rags: list[Rag | None],
    lengths: Sequence[Any],
    params: dict[str, Any],
) -> RuleResult:
    q, k, v = xs[0], xs[1], xs[2]
    rq, rk, rv = rags[0], rags[1], rags[2]
    if rq is not None or len(xs) > 3 or rk is None or rv is None:
        raise NeedExact("attention with a padded query or an explicit mask")
    if rk.axis != k.ndim - 2 or rv.axis != v.ndim - 2 or rk.slot != rv.slot:
        raise NeedExact("attention with keys/values padded along another axis")
    length = lengths[rk.slot]
    sq, padded = q.shape[-2], k.shape[-2]
    cols = jnp.arange(padded)[None, :]
    allowed = cols < length
    if params.get("causal"):
        # Causal alignment is to the END of the valid keys, not of the padded buffer.
        rows = jnp.arange(sq)[:, None] + (length - sq)
        allowed = jnp.logical_and(allowed, cols <= rows)
    allowed = jnp.broadcast_to(allowed, (sq, padded))
    v = mask_axis(v, rv.axis, length, 0)
    return lower([q, k, v, allowed], {**params, "causal": False}), None


def _norm_over_tail(
    op: OpDef,
    lower: Lower,
    xs: list[Any],
    rags: list[Rag | None],
    lengths: Sequence[Any],
    params: dict[str, Any],
) -> RuleResult:
    rag = rags[0]
    if rag is None or any(r is not None for r in rags[1:]):
        raise NeedExact(f"{op.name}: padded scale or bias")
    start = _norm(int(params.get("axis", -1)), xs[0].ndim)
    if rag.axis >= start:
        raise NeedExact(f"{op.name} normalizes over the padded axis")
    return lower(xs, params), rag


def _reduce(fill: Callable[[Any], Any], rescale: bool) -> Rule:
    def rule(
        op: OpDef,
        lower: Lower,
        xs: list[Any],
        rags: list[Rag | None],
        lengths: Sequence[Any],
        params: dict[str, Any],
    ) -> RuleResult:
        rag = rags[0]
        assert rag is not None
        x = xs[0]
        axes = params.get("axes", params.get("axis"))
        if axes is None or axes == ():
            axes = tuple(range(x.ndim))  # no axes: reduce over all of them
        axes_t = tuple(_norm(a, x.ndim) for a in (axes if isinstance(axes, tuple) else (axes,)))
        keep = bool(params.get("keepdims", False))
        if rag.axis not in axes_t:
            shift = 0 if keep else sum(1 for a in axes_t if a < rag.axis)
            return lower(xs, params), Rag(rag.axis - shift, rag.slot)
        length = lengths[rag.slot]
        masked = mask_axis(x, rag.axis, length, fill(x.dtype))
        out = lower([masked, *xs[1:]], params)
        if rescale:
            # mean over the bucket counted padded zeros: scale to the valid count.
            padded = x.shape[rag.axis]
            out = (out * (padded / length.astype(jnp.float32))).astype(out.dtype)
        return out, None

    return rule


_BY_NAME: dict[str, Rule] = {
    "transpose": _transpose,
    "permute": _transpose,
    "where": _elementwise,
    "matmul": _matmul,
    "softmax": _softmax,
    "log_softmax": _softmax,
    "attention": _attention,
    "layer_norm": _norm_over_tail,
    "rms_norm": _norm_over_tail,
    "sum_axis": _reduce(lambda dt: 0, rescale=False),
    "mean_axis": _reduce(lambda dt: 0, rescale=True),
    "max_axis": _reduce(_lowest, rescale=False),
    "min_axis": _reduce(_highest, rescale=False),
    "prod_axis": _reduce(lambda dt: 1, rescale=False),
}


def apply_op(
    op: OpDef,
    xs: list[Any],
    rags: list[Rag | None],
    lengths: Sequence[Any],
    dtypes: Sequence[DType],
    params: dict[str, Any],
) -> RuleResult:
    """Run `op` on traced arrays, some padded; returns (output, its raggedness).

    Raises:
        NeedExact: no rule covers this use; the caller retraces with exact shapes.
    """

    def lower(arrays: Sequence[Any], p: dict[str, Any]) -> Any:
        ds = list(dtypes) + [DType.BOOL] * (len(arrays) - len(dtypes))
        return op.lower_jax(*arrays, dtypes=ds[: len(arrays)], **p)

    if all(r is None for r in rags):
        return lower(xs, params), None
    rule = _BY_NAME.get(op.name)
    if rule is None and (op.shape_rule is None or op.category == "math"):
        rule = _elementwise  # the "math" category holds unary elementwise ops with shape rules
    if rule is None:
        raise NeedExact(f"op {op.name} has no rule for padded inputs")
    return rule(op, lower, xs, rags, lengths, params)
