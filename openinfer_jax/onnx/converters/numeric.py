"""Math ONNX ops written as a few program lines: Mod, CumSum, Hardmax, LpNormalization,
Einsum, and the small activations (Celu, Shrink, ThresholdedRelu)."""

from __future__ import annotations

import math
import string

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.onnx.context import NodeContext
from openinfer_jax.onnx.converters import converter
from openinfer_jax.onnx.converters.common import norm_axis, scalar
from openinfer_jax.onnx.converters.elementwise import binary
from openinfer_jax.onnx.converters.movement import reshape
from openinfer_jax.onnx.values import Tensor, Value

__all__: list[str] = []


@converter(
    "Mod",
    attrs=("fmod",),
    becomes="rem (fmod=1 or floats: a - b*trunc(a/b)); floor mod: rem + fix-up",
)
def _mod(ctx: NodeContext) -> None:
    a, b = ctx.value(0), ctx.value(1)
    dtype = ctx.dtype(0)
    if dtype.is_float:
        q = binary(ctx, "div", a, b, hint=ctx.hint(0, "q"))
        q = ctx.emit("trunc", [q], hint=ctx.hint(0, "trunc"))
        prod = binary(ctx, "mul", q, b, hint=ctx.hint(0, "bq"))
        ctx.set_output(0, binary(ctx, "sub", a, prod))
        return
    fmod = int(ctx.attr("fmod", 0))
    r = binary(ctx, "rem", a, b, hint=None if fmod else ctx.hint(0, "rem"))
    if fmod:
        ctx.set_output(0, r)
        return
    # Floor modulo: a non-zero remainder whose sign differs from the divisor's gets b added.
    if dtype.is_unsigned_int:
        ctx.set_output(0, r)
        return
    zero = scalar(ctx, 0, dtype)
    nonzero = binary(ctx, "ne", r, zero, hint=ctx.hint(0, "nonzero"))
    r_neg = ctx.emit("is_neg", [r], hint=ctx.hint(0, "r_neg"))
    b_neg = ctx.emit("is_neg", [ctx.as_tensor(b)], hint=ctx.hint(0, "b_neg"))
    differ = binary(ctx, "xor", r_neg, b_neg, hint=ctx.hint(0, "signs_differ"))
    fix = binary(ctx, "and", nonzero, differ, hint=ctx.hint(0, "fix"))
    shifted = binary(ctx, "add", r, b, hint=ctx.hint(0, "shifted"))
    ctx.set_output(0, ctx.emit("where", [fix, shifted, r]))


def _move_last(
    ctx: NodeContext, x: Value, axis: int, rank: int, hint: str
) -> tuple[Tensor, list[int] | None]:
    """`x` with `axis` moved last, and the permutation that moves it back (None: no move)."""
    if axis == rank - 1:
        return ctx.as_tensor(x), None
    perm = [a for a in range(rank) if a != axis] + [axis]
    back = [perm.index(a) for a in range(rank)]
    return ctx.emit("transpose", [x], hint=hint, perm=perm), back


@converter("CumSum", attrs=("exclusive", "reverse"), becomes="matmul with a triangular 0/1 matrix")
def _cumsum(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    rank = len(shape)
    axis = norm_axis(ctx, int(np.asarray(ctx.const(1, "the axis")).item()), rank)
    n = shape[axis]
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    exclusive, reverse = int(ctx.attr("exclusive", 0)), int(ctx.attr("reverse", 0))
    # out[..., j] = sum_i x[..., i] * T[i, j]
    if reverse:
        tri = (i > j) if exclusive else (i >= j)
    else:
        tri = (i < j) if exclusive else (i <= j)
    dtype = ctx.dtype(0)
    matrix = ctx.constant(tri.astype(dtype.numpy), dtype, ctx.hint(0, "triangle"))
    moved, back = _move_last(ctx, ctx.value(0), axis, rank, ctx.hint(0, "moved"))
    total = ctx.emit("matmul", [moved, matrix], hint=ctx.hint(0, "sums") if back else None)
    ctx.set_output(0, total if back is None else ctx.emit("transpose", [total], perm=back))


@converter("Hardmax", attrs=("axis",), becomes="argmax_axis, eq with the positions, cast")
def _hardmax(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    rank = len(shape)
    dtype = ctx.dtype(0)
    x: Value = ctx.value(0)
    if ctx.opset < 13:  # coerced to 2-D around axis (default 1)
        axis = norm_axis(ctx, int(ctx.attr("axis", 1)), rank)
        x = reshape(
            ctx, x, (math.prod(shape[:axis]), math.prod(shape[axis:])), hint=ctx.hint(0, "2d")
        )
        work_axis, work_rank = 1, 2
    else:
        work_axis = norm_axis(ctx, int(ctx.attr("axis", -1)), rank)
        work_rank = rank
    work_shape = ctx.as_tensor(x).shape
    arg = ctx.emit("argmax_axis", [x], hint=ctx.hint(0, "argmax"), axis=work_axis, keepdims=True)
    positions = np.arange(work_shape[work_axis], dtype=np.int64).reshape(
        [work_shape[work_axis] if a == work_axis else 1 for a in range(work_rank)]
    )
    hit = binary(
        ctx,
        "eq",
        arg,
        ctx.constant(positions, DType.I64, ctx.hint(0, "positions")),
        hint=ctx.hint(0, "hit"),
    )
    out = ctx.emit("cast", [hit], hint=ctx.hint(0, "flat") if ctx.opset < 13 else None, to=dtype)
    ctx.set_output(0, reshape(ctx, out, shape) if ctx.opset < 13 else out)


@converter("LpNormalization", attrs=("axis", "p"), becomes="x / sum|x| or x / sqrt(sum x^2)")
def _lp_normalization(ctx: NodeContext) -> None:
    rank = len(ctx.shape(0))
    axis = norm_axis(ctx, int(ctx.attr("axis", -1)), rank)
    p = int(ctx.attr("p", 2))
    x = ctx.value(0)
    if p == 1:
        mag = ctx.emit("abs", [x], hint=ctx.hint(0, "abs"))
        norm = ctx.emit("sum_axis", [mag], hint=ctx.hint(0, "norm"), axes=[axis], keepdims=True)
    elif p == 2:
        sq = ctx.emit("mul", [x, x], hint=ctx.hint(0, "square"))
        total = ctx.emit("sum_axis", [sq], hint=ctx.hint(0, "sum"), axes=[axis], keepdims=True)
        norm = ctx.emit("sqrt", [total], hint=ctx.hint(0, "norm"))
    else:
        raise ctx.error(f"p={p} is not supported (1 and 2 are)")
    # A zero vector stays zero (ONNX's reference), not 0/0.
    ctx.set_output(0, ctx.emit("div", [x, norm], div_by_zero_mask=0.0))


@converter("Celu", attrs=("alpha",), becomes="relu + alpha * (exp(min(x, 0) / alpha) - 1)")
def _celu(ctx: NodeContext) -> None:
    alpha = float(ctx.attr("alpha", 1.0))
    dtype = ctx.dtype(0)
    x = ctx.value(0)
    pos = ctx.emit("relu", [x], hint=ctx.hint(0, "pos"))
    neg = ctx.emit("clamp", [x], hint=ctx.hint(0, "neg"), max=0.0)
    scaled = ctx.emit("div", [neg, scalar(ctx, alpha, dtype)], hint=ctx.hint(0, "scaled"))
    e = ctx.emit("exp", [scaled], hint=ctx.hint(0, "exp"))
    em1 = ctx.emit("sub", [e, scalar(ctx, 1.0, dtype)], hint=ctx.hint(0, "expm1"))
    tail = ctx.emit("mul", [em1, scalar(ctx, alpha, dtype)], hint=ctx.hint(0, "tail"))
    ctx.set_output(0, ctx.emit("add", [pos, tail]))


@converter("ThresholdedRelu", attrs=("alpha",), becomes="where(x > alpha, x, 0)")
def _thresholded_relu(ctx: NodeContext) -> None:
    alpha = float(ctx.attr("alpha", 1.0))
    dtype = ctx.dtype(0)
    x = ctx.value(0)
    above = binary(ctx, "gt", x, scalar(ctx, alpha, dtype), hint=ctx.hint(0, "above"))
    ctx.set_output(0, ctx.emit("where", [above, x, scalar(ctx, 0, dtype)]))


@converter(
    "Shrink",
    attrs=("bias", "lambd"),
    becomes="where(x < -lambd, x + bias, where(x > lambd, x - bias, 0))",
)
def _shrink(ctx: NodeContext) -> None:
    bias, lambd = float(ctx.attr("bias", 0.0)), float(ctx.attr("lambd", 0.5))
    dtype = ctx.dtype(0)
    x = ctx.value(0)
    as_dtype = float if dtype.is_float else int
    low = binary(ctx, "lt", x, scalar(ctx, as_dtype(-lambd), dtype), hint=ctx.hint(0, "low"))
    high = binary(ctx, "gt", x, scalar(ctx, as_dtype(lambd), dtype), hint=ctx.hint(0, "high"))
    b = scalar(ctx, as_dtype(bias), dtype)
    up = ctx.emit("add", [x, b], hint=ctx.hint(0, "plus"))
    down = ctx.emit("sub", [x, b], hint=ctx.hint(0, "minus"))
    inner = ctx.emit("where", [high, down, scalar(ctx, 0, dtype)], hint=ctx.hint(0, "inner"))
    ctx.set_output(0, ctx.emit("where", [low, up, inner]))


# ---- Einsum ---------------------------------------------------------------------------------
def _parse_einsum(ctx: NodeContext, equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """Operand subscripts and output subscript, with `...` spelled out as capital letters."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ctx.error(f"equation {equation!r} names {len(terms)} operands, got {len(ranks)}")
    spare = [c for c in string.ascii_uppercase if c not in eq]
    ell_rank = max(
        (r - len(t.replace("...", "")) for t, r in zip(terms, ranks, strict=True) if "..." in t),
        default=0,
    )
    ell = "".join(spare[:ell_rank])
    full = []
    for term, rank in zip(terms, ranks, strict=True):
        if "..." in term:
            n = rank - len(term.replace("...", ""))
            term = term.replace("...", ell[ell_rank - n :] if n else "")
        if len(term) != rank:
            raise ctx.error(f"operand subscripts {term!r} do not match its rank {rank}")
        full.append(term)
    if arrow:
        out = out.replace("...", ell)
    else:
        counts = {c: "".join(full).count(c) for c in "".join(full)}
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    return full, out


@converter("Einsum", attrs=("equation",), becomes="transpose, reshape, matmul, sum_axis")
def _einsum(ctx: NodeContext) -> None:
    values = [ctx.value(i) for i in range(ctx.input_count)]
    shapes = [ctx.shape(i) for i in range(ctx.input_count)]
    terms, out = _parse_einsum(ctx, str(ctx.attr("equation")), [len(s) for s in shapes])
    sizes: dict[str, int] = {}
    for term, shape in zip(terms, shapes, strict=True):
        if len(set(term)) != len(term):
            raise ctx.error(f"repeated subscript in {term!r} (a diagonal) is not supported")
        for c, d in zip(term, shape, strict=True):
            if sizes.get(c, d) != d and d != 1 and sizes.get(c) != 1:
                raise ctx.error(f"subscript {c} has sizes {sizes[c]} and {d}")
            sizes[c] = max(sizes.get(c, 1), d)
    operands = list(zip(values, terms, strict=True))
    step = 0
    while len(operands) > 1:
        (a, ta), (b, tb) = operands[0], operands[1]
        later = "".join(t for _, t in operands[2:]) + out
        keep = [c for c in dict.fromkeys(ta + tb) if c in later]
        a_t, ta = _sum_out(ctx, a, ta, tb + later, f"a{step}")
        b_t, tb = _sum_out(ctx, b, tb, ta + later, f"b{step}")
        product, term = _contract(ctx, a_t, ta, b_t, tb, keep, step)
        operands = [(product, term), *operands[2:]]
        step += 1
    ((x, term),) = operands
    x, term = _sum_out(ctx, x, term, out, "sum")
    if term != out:
        x = ctx.emit("transpose", [x], perm=[term.index(c) for c in out])
    ctx.set_output(0, x)


def _sum_out(ctx: NodeContext, x: Value, term: str, needed: str, tag: str) -> tuple[Tensor, str]:
    """Sum away the subscripts of `term` that `needed` does not mention."""
    drop = [i for i, c in enumerate(term) if c not in needed]
    if not drop:
        return ctx.as_tensor(x), term
    kept = "".join(c for c in term if c in needed)
    return ctx.emit("sum_axis", [x], hint=ctx.hint(0, tag), axes=drop, keepdims=False), kept


def _contract(ctx: NodeContext, a: Tensor, ta: str, b: Tensor, tb: str, keep: list[str],
              step: int) -> tuple[Tensor, str]:  # fmt: skip
    """a * b summed over their shared subscripts that `keep` does not list, as one matmul:
    a as [batch..., left, contracted], b as [batch..., contracted, right]."""
    batch = [c for c in ta if c in tb and c in keep]
    contracted = [c for c in ta if c in tb and c not in keep]
    left = [c for c in ta if c not in tb]
    right = [c for c in tb if c not in ta]

    def arrange(x: Tensor, term: str, order: list[str], tag: str) -> Tensor:
        if list(term) == order:
            return x
        return ctx.emit(
            "transpose", [x], hint=ctx.hint(0, tag), perm=[term.index(c) for c in order]
        )

    def size(x: Tensor, term: str, letters: list[str]) -> list[int]:
        return [x.shape[term.index(c)] for c in letters]

    a_t = arrange(a, ta, batch + left + contracted, f"a{step}_t")
    b_t = arrange(b, tb, batch + contracted + right, f"b{step}_t")
    m, k, n = (
        math.prod(size(a, ta, left)),
        math.prod(size(a, ta, contracted)),
        math.prod(size(b, tb, right)),
    )
    a_m = reshape(ctx, a_t, (*size(a, ta, batch), m, k), hint=ctx.hint(0, f"a{step}_mk"))
    b_m = reshape(ctx, b_t, (*size(b, tb, batch), k, n), hint=ctx.hint(0, f"b{step}_kn"))
    product = ctx.emit("matmul", [a_m, b_m], hint=ctx.hint(0, f"ab{step}"))
    dims = (*product.shape[: len(batch)], *size(a, ta, left), *size(b, tb, right))
    return reshape(ctx, product, dims, hint=ctx.hint(0, f"prod{step}")), "".join(
        batch + left + right
    )


def _negative_part(ctx: NodeContext, x: Value) -> Tensor:
    return ctx.emit("clamp", [x], hint=ctx.hint(0, "neg"), max=0.0)


@converter("Elu", attrs=("alpha",), becomes="elu")
def _elu(ctx: NodeContext) -> None:
    ctx.set_output(0, ctx.emit("elu", [ctx.value(0)], alpha=float(ctx.attr("alpha", 1.0))))


@converter("Selu", attrs=("alpha", "gamma"), becomes="selu")
def _selu(ctx: NodeContext) -> None:
    alpha = float(ctx.attr("alpha", 1.67326319217681884765625))
    gamma = float(ctx.attr("gamma", 1.05070102214813232421875))
    ctx.set_output(0, ctx.emit("selu", [ctx.value(0)], alpha=alpha, gamma=gamma))


@converter("HardSigmoid", attrs=("alpha", "beta"), becomes="hardsigmoid")
def _hardsigmoid(ctx: NodeContext) -> None:
    alpha, beta = float(ctx.attr("alpha", 0.2)), float(ctx.attr("beta", 0.5))
    ctx.set_output(0, ctx.emit("hardsigmoid", [ctx.value(0)], alpha=alpha, beta=beta))


@converter("HardSwish", becomes="hardswish")
def _hardswish(ctx: NodeContext) -> None:
    ctx.set_output(0, ctx.emit("hardswish", [ctx.value(0)]))


@converter("Softplus", becomes="softplus")
def _softplus(ctx: NodeContext) -> None:
    ctx.set_output(0, ctx.emit("softplus", [ctx.value(0)]))


@converter("Mish", becomes="x * tanh(softplus(x))")
def _mish(ctx: NodeContext) -> None:
    x = ctx.value(0)
    soft = ctx.emit("softplus", [x], hint=ctx.hint(0, "softplus"))
    t = ctx.emit("tanh", [soft], hint=ctx.hint(0, "tanh"))
    ctx.set_output(0, ctx.emit("mul", [x, t]))


@converter("Softsign", becomes="softsign")
def _softsign(ctx: NodeContext) -> None:
    ctx.set_output(0, ctx.emit("softsign", [ctx.value(0)]))


@converter("PRelu", becomes="prelu (integer x: relu(x) + slope * min(x, 0))")
def _prelu(ctx: NodeContext) -> None:
    x = ctx.value(0)
    if ctx.dtype(0).is_float:
        # slope broadcasts to x's shape (ONNX: one-directional), as the registry op does.
        ctx.set_output(0, ctx.emit("prelu", [x, ctx.value(1)]))
        return
    # The registry's prelu is for floats; ONNX PRelu-16 also takes integers.
    pos = ctx.emit("relu", [x], hint=ctx.hint(0, "pos"))
    tail = binary(ctx, "mul", _negative_part(ctx, x), ctx.value(1), hint=ctx.hint(0, "tail"))
    ctx.set_output(0, binary(ctx, "add", pos, tail))


@converter(
    "CumProd",
    attrs=("exclusive", "reverse"),
    becomes="log2(n) rounds of mul with a shifted copy (pad with ones)",
)
def _cumprod(ctx: NodeContext) -> None:
    from openinfer_jax.onnx.converters.movement import slice_axis

    shape = ctx.shape(0)
    rank = len(shape)
    axis = norm_axis(ctx, int(np.asarray(ctx.const(1, "the axis")).item()), rank)
    n = shape[axis]
    reverse, exclusive = int(ctx.attr("reverse", 0)), int(ctx.attr("exclusive", 0))
    one = 1.0 if ctx.dtype(0).is_float else 1

    def shifted(t: Value, by: int, tag: str) -> Tensor:
        """t moved `by` places along the scan, ones coming in."""
        if reverse:
            cut = slice_axis(ctx, t, axis, by, n, hint=ctx.hint(0, f"{tag}_cut"))
            return ctx.emit(
                "pad", [cut], hint=ctx.hint(0, tag), pads=[0, by], axes=[axis], value=one
            )
        cut = slice_axis(ctx, t, axis, 0, n - by, hint=ctx.hint(0, f"{tag}_cut"))
        return ctx.emit("pad", [cut], hint=ctx.hint(0, tag), pads=[by, 0], axes=[axis], value=one)

    y: Value = ctx.value(0)
    if exclusive:
        y = shifted(y, 1, "exclusive")
    by, round_ = 1, 0
    while by < n:  # Hillis-Steele scan: after the round with shift `by`, 2*by terms are in
        y = ctx.emit(
            "mul", [y, shifted(y, by, f"shift{round_}")], hint=ctx.hint(0, f"scan{round_}")
        )
        by, round_ = by * 2, round_ + 1
    ctx.set_output(0, ctx.as_tensor(y))


@converter(
    "BitShift",
    attrs=("direction",),
    becomes="shl/shr for one shift amount; mul or floor_div by 2^y for constant per-element amounts",
)
def _bitshift(ctx: NodeContext) -> None:
    left = ctx.attr("direction") == "LEFT"
    dtype = ctx.dtype(0)
    amounts = np.asarray(ctx.const(1, "the shift amounts"))
    values = np.unique(amounts)
    x = ctx.value(0)
    grows = tuple(np.broadcast_shapes(ctx.shape(0), amounts.shape)) != tuple(ctx.shape(0))
    if values.size == 1 and not grows:
        ctx.set_output(0, ctx.emit("shl" if left else "shr", [x], bits=int(values[0])))
        return
    bits = dtype.bits
    factor = np.where(
        amounts >= bits, 0, np.left_shift(np.ones_like(amounts), np.minimum(amounts, bits - 1))
    )
    power = ctx.constant(factor.astype(dtype.numpy), dtype, ctx.hint(0, "power"))
    if left:
        ctx.set_output(0, binary(ctx, "mul", x, power))
        return
    # Shifting right by >= the width gives 0: the divisor 0 gives div_by_zero_mask 0.
    ctx.set_output(0, binary(ctx, "floor_div", x, power))


@converter("Det", becomes="slice, mul, sub, add: cofactor expansion for matrices up to 3x3")
def _det(ctx: NodeContext) -> None:
    shape = ctx.shape(0)
    n = shape[-1]
    if len(shape) < 2 or shape[-2] != n or not 1 <= n <= 3:
        raise ctx.error(
            f"Det of shape {shape} is not supported (square matrices of size 1 to 3 are: "
            "larger ones need a pivoting factorization)"
        )
    x, rank, batch = ctx.value(0), len(shape), tuple(shape[:-2])
    from openinfer_jax.onnx.converters.movement import slice_axis

    def entry(i: int, j: int) -> Tensor:
        row = slice_axis(ctx, x, rank - 2, i, i + 1, hint=ctx.hint(0, f"r{i}"))
        cell = slice_axis(ctx, row, rank - 1, j, j + 1, hint=ctx.hint(0, f"e{i}{j}"))
        return reshape(ctx, cell, batch, hint=ctx.hint(0, f"a{i}{j}"))

    def minor(rows: tuple[int, ...], cols: tuple[int, ...], last: bool) -> Tensor:
        """The determinant of the submatrix (cofactor expansion along its first row)."""
        tag = "".join(map(str, rows)) + "_" + "".join(map(str, cols))
        if len(rows) == 1:
            return entry(rows[0], cols[0])
        total: Tensor | None = None
        for k, col in enumerate(cols):
            rest = minor(rows[1:], cols[:k] + cols[k + 1 :], last=False)
            term = ctx.emit("mul", [entry(rows[0], col), rest], hint=ctx.hint(0, f"t{tag}{k}"))
            if total is None:
                total = term
                continue
            op = "sub" if k % 2 else "add"
            final = last and k == len(cols) - 1
            total = ctx.emit(op, [total, term], hint=None if final else ctx.hint(0, f"s{tag}{k}"))
        assert total is not None
        return total

    ctx.set_output(0, minor(tuple(range(n)), tuple(range(n)), last=True))
