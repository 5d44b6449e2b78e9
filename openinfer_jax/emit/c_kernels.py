"""C kernels rendered from the op registry's declarations, one function per (op, dtypes, params).

An op with an expression tree in the registry (`OpDef.expr`) becomes one broadcasting loop
that evaluates the tree per element (printed by `openinfer_jax.emit.c_expr`, so the
semantics are the registry's: integers wrap, a zero divisor gives ``div_by_zero_mask``, NaN
propagates through min/max/clamp, `round` is half away from zero); `STRUCTURED` maps the
remaining ops to renderers that share helpers for loading and storing elements
(`openinfer_jax.emit.c_types`). Literal params are baked into the function,
so two calls with the same dtypes and params share one function; a param given as a variable
(`RuntimeParam`) becomes an ``oi_param`` argument converted by the kernel's prologue.

Every kernel has the signature ``static int NAME(oi_tensor *o, const oi_tensor *x0, ...)``
(then one ``oi_param`` per runtime param):
it computes the output shape at run time (a cache slice may be shorter than its bound),
checks it against the output's static bound, and returns an ``OI_ERR_*`` code.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import SynthesisError
from openinfer_jax.emit.analysis import OpInfo
from openinfer_jax.emit.c_dense import (
    AttentionLayout,
    EpilogueCode,
    dense_kernel,
    dense_pack_bytes,
    runtime_headers,
)
from openinfer_jax.emit.c_expr import CExpr, render_c
from openinfer_jax.emit.c_options import DenseOptions
from openinfer_jax.emit.c_types import NARROW_KIND, CType, ctype
from openinfer_jax.ops import registry

__all__ = [
    "ALIAS_SAFE",
    "ROW_THREADED",
    "STRUCTURED",
    "KernelRequest",
    "RuntimeParam",
    "c_literal",
    "elementwise_expression",
    "render_kernel",
    "runtime_params",
    "supported_ops",
]


@dataclass(frozen=True)
class KernelRequest:
    """What a kernel is generated for: the op info, the place (for error messages), the
    device's dense-kernel options (f32 linear/matmul/conv/attention run on the runtime's
    kernels) and an elementwise chain fused into the kernel (`c_epilogue`)."""

    name: str
    info: OpInfo
    where: str
    dense: DenseOptions = field(default_factory=DenseOptions)
    epilogue: EpilogueCode | None = None
    constant_inputs: frozenset[int] = frozenset()  # inputs that are read-only model tensors
    layout: AttentionLayout | None = None  # attention: how operands and output are held


@dataclass(frozen=True)
class RuntimeParam:
    """A param given as a variable (`value=alpha`), read each time the kernel runs.

    The kernel takes it as an ``oi_param p_<name>`` argument (after the tensors, params in
    sorted order) and its prologue converts it to the local ``P_<name>`` with the registry's
    rules for that param (integer range checks, clamp bounds rounded inward). The variable's
    name is not part of the kernel, so calls with different variables share one function.
    """

    name: str


def runtime_params(info: OpInfo) -> list[str]:
    """Names of the params of `info` given as variables, in the kernel's argument order."""
    return sorted(k for k, v in info.params.items() if isinstance(v, RuntimeParam))


def c_literal(value: Any, ct: CType | str) -> str:
    """A C literal of `value` in compute type `ct` (inf/nan through math.h macros)."""
    compute = ct if isinstance(ct, str) else ct.compute
    if isinstance(value, bool):
        value = int(value)
    if compute in ("float", "double"):
        v = float(value)
        if math.isnan(v):
            return f"(({compute})NAN)"
        if math.isinf(v):
            return f"(({compute})INFINITY)" if v > 0 else f"(-({compute})INFINITY)"
        text = repr(v)
        return f"{text}f" if compute == "float" else text
    if isinstance(value, float):
        if not value.is_integer():
            raise SynthesisError(f"param value {value!r} is not an integer for an integer op")
        value = int(value)
    if compute == "uint64_t":
        return f"UINT64_C({int(value) % (1 << 64)})"
    if compute == "int":
        return str(int(value))
    v = int(value)
    if v == -(1 << 63):
        return "INT64_MIN"
    return f"INT64_C({v})"


# ---- elementwise ops -------------------------------------------------------------------------
def elementwise_expression(
    req: KernelRequest, operands: Sequence[str] | None = None, prefix: str = "t"
) -> CExpr:
    """The C of an elementwise op's registry tree on `operands` (C text of each input in its
    compute type; default ``x0``, ``x1``, ...): the statements binding shared subtrees to
    locals named `prefix` + k, and the value in the output's compute type (params inlined;
    a param read at run time appears as ``P_<name>``). The element kernels and the fused
    epilogues (`openinfer_jax.emit.c_epilogue`) both print ops through it.

    Raises:
        SynthesisError: the op has no tree for these dtypes, or a param names a variable.
    """
    info = req.info
    opdef = info.opdef
    tree = opdef.expression(info.in_dtypes, info.params)
    if tree is None:
        raise SynthesisError(
            f"{req.where}: op {opdef.name} has no C kernel for dtype {info.in_dtypes[0].short}"
        )
    values = opdef.prepared_params(info.in_dtypes, info.params)

    def param(name: str, ct: str) -> str:
        value = values.get(name)
        if isinstance(value, RuntimeParam):
            return f"P_{name}"
        if type(value).__name__ == "VarName":
            raise SynthesisError(
                f"{req.where}: param {name}={value} names a variable; this target needs literals"
            )
        return c_literal(value, ct)

    names = (
        list(operands) if operands is not None else [f"x{k}" for k in range(len(info.in_dtypes))]
    )
    return render_c(tree, names, param, literal=c_literal, width=info.in_dtypes[0].bits,
                    prefix=prefix)  # fmt: skip


def _elementwise(req: KernelRequest) -> str:
    """The kernel of an op with an expression tree: its registry tree printed per element
    (`elementwise_expression`) inside one broadcasting loop nest."""
    info = req.info
    opdef = info.opdef
    in_cts = [ctype(d, req.where) for d in info.in_dtypes]
    out_ct = ctype(info.out_dtype, req.where)
    n = len(info.in_dtypes)
    printed = elementwise_expression(req)
    expr = printed.value
    local = "".join(f" {line}" for line in printed.statements)
    args = "".join(f", const oi_tensor *x{k}_t" for k in range(n))
    ptrs = "".join(
        f"    const {in_cts[k].storage} *X{k} = (const {in_cts[k].storage} *){f'x{k}_t'}->data;\n"
        for k in range(n)
    )
    flat_loads = " ".join(
        f"{in_cts[k].compute} x{k} = {in_cts[k].load.format(f'X{k}[i]')};" for k in range(n)
    )
    iter_loads = " ".join(
        f"{in_cts[k].compute} x{k} = {in_cts[k].load.format(f'X{k}[it.off[{k}]]')};"
        for k in range(n)
    )
    unused = " ".join(f"(void)x{k};" for k in range(n)) + local
    row_loads = " ".join(
        f"{in_cts[k].compute} x{k} = {in_cts[k].load.format(f'X{k}[r * it.rs[{k}] + j]')};"
        for k in range(n)
    )
    store = out_ct.store.format(f"({out_ct.compute})({expr})")
    inputs = ", ".join(f"x{k}_t" for k in range(n))
    return f"""static int {req.name}(oi_tensor *o{args}) {{
    const oi_tensor *in[{n}] = {{{inputs}}};
    oi_iter it;
    int64_t i;
    {out_ct.storage} *O = ({out_ct.storage} *)o->data;
{ptrs}    int rc = oi_iter_init(&it, o, {n}, in, {int(opdef.broadcast)});
    if (rc) return rc;
    if (it.flat) {{
        for (i = 0; i < it.numel; i++) {{ {flat_loads} {unused} O[i] = {store}; }}
    }} else if (it.row) {{
        int64_t r, j, rows = it.numel / it.row;
        for (r = 0; r < rows; r++)
            for (j = 0; j < it.row; j++) {{ {row_loads} {unused} O[r * it.row + j] = {store}; }}
    }} else {{
        for (i = 0; i < it.numel; i++) {{ {iter_loads} {unused} O[i] = {store}; oi_iter_next(&it); }}
    }}
    return OI_OK;
}}
"""


# ---- structured ops ----------------------------------------------------------------------------
def _cast(req: KernelRequest) -> str:
    info = req.info
    src, dst = ctype(info.in_dtypes[0], req.where), ctype(info.out_dtype, req.where)
    params = info.params
    mode = str(params.get("rounding_mode", "trunc"))
    saturate = bool(params.get("saturate", True))
    sdt, ddt = info.in_dtypes[0], info.out_dtype
    if ddt is DType.BOOL:
        body = "(uint8_t)(x != 0)"
    elif ddt in NARROW_KIND:
        rounding = {"trunc": 0, "floor": 0, "ceil": 1, "nearest": 2}[mode]  # f8e8m0 only
        body = f"oi_narrow_from_f64((double)x, {NARROW_KIND[ddt]}, {int(saturate)}, {rounding})"
    elif ddt.is_float:
        body = dst.store.format(f"({dst.compute})x")
    elif sdt.is_float:
        fn = {"trunc": "trunc", "floor": "floor", "ceil": "ceil", "nearest": "nearbyint"}.get(mode)
        if fn is None:
            raise SynthesisError(
                f"{req.where}: cast rounding_mode={mode!r} is not supported by the C target"
            )
        lo, hi = _int_range(ddt)
        if saturate:
            body = (
                f"(x != x) ? 0 : (((double)x <= {lo!r}.0) ? ({dst.storage}){_int_lit(lo, ddt)} : "
                f"(((double)x >= {hi!r}.0) ? ({dst.storage}){_int_lit(hi, ddt)} : ({dst.storage}){fn}((double)x)))"
            )
        else:
            # Wrap modulo 2**64 like the reference; NaN and infinities give 0.
            body = f"({dst.storage})oi_f64_wrap_u64({fn}((double)x))"
        body = dst.store.format(body) if ddt.is_packed else body
    else:
        value = "x"
        if saturate:
            # Only bounds inside the source range are applied (each exact there), like the reference.
            s_lo, s_hi = _int_range(sdt) if sdt is not DType.BOOL else (0, 1)
            d_lo, d_hi = _int_range(ddt)
            if d_hi < s_hi:
                value = f"(x > {_int_lit(d_hi, sdt)} ? {_int_lit(d_hi, sdt)} : {value})"
            if d_lo > s_lo:
                value = f"(x < {_int_lit(d_lo, sdt)} ? {_int_lit(d_lo, sdt)} : {value})"
        body = dst.store.format(f"({dst.compute})({value})")
    return f"""static int {req.name}(oi_tensor *o, const oi_tensor *x0) {{
    const {src.storage} *X = (const {src.storage} *)x0->data;
    {dst.storage} *O = ({dst.storage} *)o->data;
    int64_t i, n;
    int rc = oi_set_shape(o, x0->ndim, x0->dims);
    if (rc) return rc;
    n = oi_numel(o);
    for (i = 0; i < n; i++) {{ {src.compute} x = {src.load.format("X[i]")}; O[i] = {body}; }}
    return OI_OK;
}}
"""


def _bitcast(req: KernelRequest) -> str:
    """The bytes unchanged (memmove: the output may alias x); a bool result is 0/1."""
    info = req.info
    src, dst = ctype(info.in_dtypes[0], req.where), ctype(info.out_dtype, req.where)
    if info.out_dtype is DType.BOOL:
        copy = "for (i = 0; i < n; i++) O[i] = (uint8_t)(((const uint8_t *)x0->data)[i] != 0);"
    else:
        copy = f"memmove(O, x0->data, (size_t)n * sizeof({src.storage}));"
    return f"""static int {req.name}(oi_tensor *o, const oi_tensor *x0) {{
    {dst.storage} *O = ({dst.storage} *)o->data;
    int64_t i, n;
    int rc = oi_set_shape(o, x0->ndim, x0->dims);
    if (rc) return rc;
    n = oi_numel(o);
    (void)i;
    {copy}
    return OI_OK;
}}
"""


def _int_range(dtype: DType) -> tuple[int, int]:
    if dtype in (DType.T2, DType.T1):
        return dtype.value_range()  # the value set -1..1, not the 2-/1-bit two's complement range
    if dtype.is_signed_int:
        return -(1 << (dtype.bits - 1)), (1 << (dtype.bits - 1)) - 1
    return 0, (1 << dtype.bits) - 1


def _int_lit(value: int, dtype: DType) -> str:
    if dtype is DType.BOOL:
        return str(value)
    if dtype.is_signed_int:
        return "INT64_MIN" if value == -(1 << 63) else f"INT64_C({value})"
    return f"UINT64_C({value})"


def matmul_pack_bytes(info: OpInfo, dense: DenseOptions | None = None) -> int:
    """Bytes of the arena's pack buffer a matmul/linear call needs (0 unless it takes a
    packed path: the runtime GEMM for f32, the tiled loop for f64)."""
    if runtime_headers(info):
        return dense_pack_bytes(info, dense or DenseOptions())
    if info.opdef.name != "matmul" or info.params.get("acc") is not None:
        return 0
    storages = {ctype(d).storage for d in (*info.in_dtypes, info.out_dtype)}
    if len(storages) != 1 or not storages <= {"float", "double"}:
        return 0
    width = 32 if storages == {"float"} else 16
    k = info.in_shapes[0][-1] if info.in_shapes and info.in_shapes[0] else 1
    return int(k) * width * (4 if storages == {"float"} else 8)


def _matmul(req: KernelRequest) -> str:
    info = req.info
    a, b = (ctype(d, req.where) for d in info.in_dtypes)
    out = ctype(info.out_dtype, req.where)
    acc = info.params.get("acc")
    a_shape, b_shape = info.in_shapes
    if not a_shape or not b_shape:
        raise SynthesisError(f"{req.where}: the C target's matmul needs inputs of rank >= 1")
    fast = (
        a.storage == b.storage == out.storage and a.storage in ("float", "double") and acc is None
    )
    if acc is not None:
        acc_ct = ctype(acc[0], req.where)
        accum = (
            "double" if acc_ct.family == "real" and acc_ct.compute == "double" else acc_ct.compute
        )
        if acc_ct.family != "real":
            accum = "uint64_t"
        finish = out.store.format(f"({out.compute})({acc_ct.storage})s")
    else:
        accum = a.compute if a.family == "real" else "uint64_t"
        finish = out.store.format(f"({out.compute})s")
    if fast:
        # Register tiling: an 8 x W block of O is accumulated in local arrays across the whole
        # K loop, so each step loads one W-wide segment of B and eight A values and does 8*W
        # multiply-adds the compiler vectorizes. Column panels are the outer loop; each panel
        # of B is first packed contiguously (K x W, in the arena's pack buffer) so the K loop
        # streams it sequentially from cache for every row block.
        w = 32 if a.storage == "float" else 16
        rows = 8
        decl = ", ".join(f"c{r}[{w}] = {{0}}" for r in range(rows))
        loads = " ".join(f"const {a.storage} a{r} = A0[{r} * K + k];" for r in range(rows))
        fused = "OI_FMAF" if a.storage == "float" else "OI_FMA"
        fma = " ".join(f"c{r}[jj] = {fused}(a{r}, Bk[jj], c{r}[jj]);" for r in range(rows))
        store = " ".join(f"Or[{r} * N + jj] = c{r}[jj];" for r in range(rows))
        inner = f"""            int64_t j0, jj;
            for (j0 = 0; j0 + {w} <= N; j0 += {w}) {{
                {b.storage} *Pk = ({b.storage} *)oi_pack;
                for (k = 0; k < K; k++)
                    for (jj = 0; jj < {w}; jj++) Pk[k * {w} + jj] = B[bb + k * N + j0 + jj];
                for (i = 0; i + {rows} <= M; i += {rows}) {{
                    {out.storage} {decl};
                    const {a.storage} *A0 = A + ab + i * K;
                    {out.storage} *Or = O + ob + i * N + j0;
                    for (k = 0; k < K; k++) {{
                        const {b.storage} *Bk = Pk + k * {w};
                        {loads}
                        for (jj = 0; jj < {w}; jj++) {{ {fma} }}
                    }}
                    for (jj = 0; jj < {w}; jj++) {{ {store} }}
                }}
                for (; i < M; i++) {{
                    {out.storage} c0[{w}] = {{0}};
                    for (k = 0; k < K; k++) {{
                        const {a.storage} av = A[ab + i * K + k];
                        const {b.storage} *Bk = B + bb + k * N + j0;
                        for (jj = 0; jj < {w}; jj++) c0[jj] += av * Bk[jj];
                    }}
                    for (jj = 0; jj < {w}; jj++) O[ob + i * N + j0 + jj] = c0[jj];
                }}
            }}
            if (j0 < N)
                for (i = 0; i < M; i++) {{
                    {out.storage} *Or = O + ob + i * N;
                    for (j = j0; j < N; j++) Or[j] = 0;
                    for (k = 0; k < K; k++) {{
                        const {a.storage} av = A[ab + i * K + k];
                        const {b.storage} *Br = B + bb + k * N;
                        for (j = j0; j < N; j++) Or[j] += av * Br[j];
                    }}
                }}"""
    else:
        mul = (
            "(uint64_t)(av) * (uint64_t)(bv)"
            if accum == "uint64_t"
            else f"({accum})av * ({accum})bv"
        )
        inner = f"""            for (i = 0; i < M; i++)
                for (j = 0; j < N; j++) {{
                    {accum} s = 0;
                    for (k = 0; k < K; k++) {{
                        {a.compute} av = {a.load.format("A[ab + i * K + k]")};
                        {b.compute} bv = {b.load.format("B[bb + k * N + j]")};
                        s += {mul};
                    }}
                    O[ob + i * N + j] = {finish};
                }}"""
    wide = "OI_WIDE_SIMD " if fast else ""
    return f"""static {wide}int {req.name}(oi_tensor *o, const oi_tensor *x0, const oi_tensor *x1) {{
    const {a.storage} *A = (const {a.storage} *)x0->data;
    const {b.storage} *B = (const {b.storage} *)x1->data;
    {out.storage} *O = ({out.storage} *)o->data;
    oi_tensor ba, bb_, bo;
    const oi_tensor *bin[2];
    oi_iter it;
    int64_t M, K, N, i, j, k, n, t;
    int rc, d;
    /* NumPy rules: a 1-D left operand is a row [1, K], a 1-D right operand a column [K, 1];
       the added axis is dropped from the result */
    const int av = x0->ndim == 1, bv = x1->ndim == 1;
    if (x0->ndim < 1 || x1->ndim < 1) {{ oi_set_error("matmul: inputs must have rank >= 1"); return OI_ERR_SHAPE; }}
    M = av ? 1 : x0->dims[x0->ndim - 2]; K = x0->dims[x0->ndim - 1]; N = bv ? 1 : x1->dims[x1->ndim - 1];
    if (x1->dims[bv ? 0 : x1->ndim - 2] != K) {{ oi_set_error("matmul: inner dims %lld and %lld differ", (long long)K, (long long)x1->dims[bv ? 0 : x1->ndim - 2]); return OI_ERR_SHAPE; }}
    ba.ndim = av ? 0 : x0->ndim - 2; bb_.ndim = bv ? 0 : x1->ndim - 2;
    for (d = 0; d < ba.ndim; d++) ba.dims[d] = x0->dims[d];
    for (d = 0; d < bb_.ndim; d++) bb_.dims[d] = x1->dims[d];
    bo.cap = INT64_MAX; bo.data = 0;
    bin[0] = &ba; bin[1] = &bb_;
    rc = oi_iter_init(&it, &bo, 2, bin, 1);
    if (rc) return rc;
    {{
        int64_t dims[OI_MAX_DIMS];
        int nd = bo.ndim;
        for (d = 0; d < bo.ndim; d++) dims[d] = bo.dims[d];
        if (!av) dims[nd++] = M;
        if (!bv) dims[nd++] = N;
        rc = oi_set_shape(o, nd, dims);
        if (rc) return rc;
    }}
    n = it.numel;
    for (t = 0; t < n; t++) {{
        {{
            const int64_t ab = it.off[0] * M * K, bb = it.off[1] * K * N, ob = t * M * N;
{inner}
        }}
        oi_iter_next(&it);
    }}
    return OI_OK;
}}
"""


def _axes(params: dict[str, Any], ndim: int, key: str = "axes") -> list[int]:
    raw: Any = params.get(key)
    if isinstance(raw, int) and not isinstance(raw, bool):
        return [raw % ndim] if ndim else []
    listed: tuple[int, ...] = tuple(raw or ())
    axes = sorted({a % ndim for a in listed}) if ndim else []
    return axes if listed else list(range(ndim))


def _reduce(req: KernelRequest) -> str:
    info = req.info
    op = info.opdef.name
    src = ctype(info.in_dtypes[0], req.where)
    out = ctype(info.out_dtype, req.where)
    (shape,) = info.in_shapes
    ndim = len(shape)
    axes = _axes(info.params, ndim, "axis" if op.startswith("arg") else "axes")
    keep = bool(info.params.get("keepdims", False))
    acc = info.params.get("acc")
    mask = " | ".join(f"(1u << {a})" for a in axes) or "0u"
    fam = src.family
    if op in ("sum_axis", "prod_axis", "mean_axis"):
        if acc is not None:
            acc_ct = ctype(acc[0], req.where)
            accum = acc_ct.compute if acc_ct.family == "real" else "uint64_t"
            conv = f"({accum})x" if acc_ct.family == "real" else f"(uint64_t)({acc_ct.storage})x"
            fin = f"({out.compute})({acc_ct.storage})s"
            mean_div = f"({out.compute})({fin}) / ({out.compute})cnt"
        else:
            accum = src.compute if fam == "real" else "uint64_t"
            conv = f"({accum})x"
            fin = (
                f"({out.compute})s"
                if fam == "real"
                else f"({out.compute})({src.storage if not info.in_dtypes[0].is_packed else 'int64_t'})s"
            )
            if fam == "real":
                mean_div = f"({out.compute})s / ({out.compute})cnt"
            elif fam == "sint":
                mean_div = f"({out.compute})((int64_t)s / (int64_t)cnt)"
            else:
                mean_div = f"({out.compute})(s / (uint64_t)cnt)"
        init = "1" if op == "prod_axis" else "0"
        step = "s *= v;" if op == "prod_axis" else "s += v;"
        if accum == "uint64_t":
            step = (
                "s = (uint64_t)s * (uint64_t)v;"
                if op == "prod_axis"
                else "s = (uint64_t)s + (uint64_t)v;"
            )
        result = mean_div if op == "mean_axis" else fin
        body = f"""        {accum} s = {init};
        for (r = 0; r < rn; r++) {{ {src.compute} x = {src.load.format("X[base + oi_red_offset(&rp, r)]")}; {accum} v = {conv}; {step} }}
        O[q] = {out.store.format(f"({out.compute})({result})")};"""
    elif op in ("max_axis", "min_axis"):
        cmp = ">" if op == "max_axis" else "<"
        nan = "if (x != x) { best = x; break; }" if fam == "real" else ""
        body = f"""        {src.compute} best = {src.load.format("X[base]")};
        for (r = 0; r < rn; r++) {{ {src.compute} x = {src.load.format("X[base + oi_red_offset(&rp, r)]")}; {nan} if (r == 0 || x {cmp} best) best = x; }}
        O[q] = {out.store.format(f"({out.compute})best")};"""
    else:  # argmax_axis / argmin_axis
        cmp = ">" if op == "argmax_axis" else "<"
        first = bool(info.params.get("select_first", True))
        tie = "" if first else "="
        nan = (
            "if (x != x) { if (!seen_nan || !"
            + str(int(first))
            + ") { bi = r; seen_nan = 1; } continue; } if (seen_nan) continue;"
            if fam == "real"
            else ""
        )
        body = f"""        {src.compute} best = 0; int64_t bi = 0; int seen_nan = 0;
        for (r = 0; r < rn; r++) {{ {src.compute} x = {src.load.format("X[base + oi_red_offset(&rp, r)]")}; {nan} if (r == 0 || x {cmp}{tie} best) {{ best = x; bi = r; }} }}
        (void)seen_nan; O[q] = (int64_t)bi;"""
    return f"""static int {req.name}(oi_tensor *o, const oi_tensor *x0) {{
    const {src.storage} *X = (const {src.storage} *)x0->data;
    {out.storage} *O = ({out.storage} *)o->data;
    oi_red_plan rp;
    int64_t q, r, rn, cnt, base;
    int rc = oi_red_init(&rp, o, x0, {mask}, {int(keep)});
    if (rc) return rc;
    rn = rp.red_n; cnt = rn;
    (void)cnt;
    if (rn == 0 && {int(op not in ("sum_axis", "prod_axis"))}) {{ oi_set_error("reduction over an empty axis"); return OI_ERR_SHAPE; }}
    for (q = 0; q < rp.out_n; q++) {{
        base = oi_keep_offset(&rp, q);
{body}
    }}
    return OI_OK;
}}
"""


def _copy_like(req: KernelRequest) -> str:
    """reshape: the same elements under a new shape (0 copies a dim, -1 is inferred)."""
    info = req.info
    ct = ctype(info.in_dtypes[0], req.where)
    shape = [int(d) for d in info.params["shape"]]
    dims = ", ".join(f"INT64_C({d})" for d in shape) or "0"
    return f"""static int {req.name}(oi_tensor *o, const oi_tensor *x0) {{
    static const int64_t want[{max(len(shape), 1)}] = {{{dims}}};
    int64_t dims[OI_MAX_DIMS], n = oi_numel(x0), known = 1;
    int d, infer = -1, rc;
    for (d = 0; d < {len(shape)}; d++) {{
        dims[d] = want[d] == 0 ? x0->dims[d] : want[d];
        if (want[d] == -1) infer = d; else known *= dims[d];
    }}
    if (infer >= 0) dims[infer] = known ? n / known : 0;
    for (d = 0, known = 1; d < {len(shape)}; d++) known *= dims[d];
    if (known != n) {{ oi_set_error("reshape: %lld elements cannot take the requested shape", (long long)n); return OI_ERR_SHAPE; }}
    if (o != x0) memmove(o->data, x0->data, (size_t)n * sizeof({ct.storage}));
    rc = oi_set_shape(o, {len(shape)}, dims);
    return rc;
}}
"""


def _permute(req: KernelRequest) -> str:
    info = req.info
    ct = ctype(info.in_dtypes[0], req.where)
    (shape,) = info.in_shapes
    perm = list(info.params.get("perm") or ())
    if not perm:
        perm = list(range(len(shape)))[::-1]
    perm = [p % len(shape) for p in perm] if shape else []
    lits = ", ".join(str(p) for p in perm) or "0"
    return f"""static int {req.name}(oi_tensor *o, const oi_tensor *x0) {{
    static const int perm[{max(len(perm), 1)}] = {{{lits}}};
    const {ct.storage} *X = (const {ct.storage} *)x0->data;
    {ct.storage} *O = ({ct.storage} *)o->data;
    int64_t dims[OI_MAX_DIMS], stride[OI_MAX_DIMS], pstride[OI_MAX_DIMS], idx[OI_MAX_DIMS], n, i, off = 0, s = 1;
    int d, nd = {len(perm)}, rc;
    for (d = nd - 1; d >= 0; d--) {{ stride[d] = s; s *= x0->dims[d]; }}
    for (d = 0; d < nd; d++) {{ dims[d] = x0->dims[perm[d]]; pstride[d] = stride[perm[d]]; idx[d] = 0; }}
    rc = oi_set_shape(o, nd, dims);
    if (rc) return rc;
    n = oi_numel(o);
    for (i = 0; i < n; i++) {{
        O[i] = X[off];
        for (d = nd - 1; d >= 0; d--) {{
            idx[d]++; off += pstride[d];
            if (idx[d] < dims[d]) break;
            off -= pstride[d] * dims[d]; idx[d] = 0;
        }}
    }}
    return OI_OK;
}}
"""


def _slice(req: KernelRequest) -> str:
    info = req.info
    ct = ctype(info.in_dtypes[0], req.where)
    (shape,) = info.in_shapes
    nd = len(shape)
    p = info.params
    starts = list(p["starts"])
    ends = list(p["ends"])
    axes = list(p.get("axes") or range(len(starts)))
    steps = list(p.get("steps") or [1] * len(starts))
    rows = []
    for a, s, e, st in zip(axes, starts, ends, steps):
        rows.append(
            f"{{{a % nd}, INT64_C({max(min(s, 2**62), -(2**62))}), INT64_C({max(min(e, 2**62), -(2**62))}), INT64_C({st})}}"
        )
    return f"""static int {req.name}(oi_tensor *o, const oi_tensor *x0) {{
    static const int64_t spec[{max(len(rows), 1)}][4] = {{{", ".join(rows) or "{0, 0, 0, 1}"}}};
    const {ct.storage} *X = (const {ct.storage} *)x0->data;
    {ct.storage} *O = ({ct.storage} *)o->data;
    int64_t lo[OI_MAX_DIMS], st[OI_MAX_DIMS], dims[OI_MAX_DIMS], stride[OI_MAX_DIMS], idx[OI_MAX_DIMS], n, i, s = 1;
    int d, k, rc;
    for (d = {nd} - 1; d >= 0; d--) {{ stride[d] = s; s *= x0->dims[d]; lo[d] = 0; st[d] = 1; dims[d] = x0->dims[d]; idx[d] = 0; }}
    for (k = 0; k < {len(rows)}; k++) {{
        int64_t a = spec[k][0], dim = x0->dims[a], b = spec[k][1], e = spec[k][2], step = spec[k][3];
        if (b < 0) b += dim;
        if (e < 0) e += dim;
        if (step > 0) {{ b = b < 0 ? 0 : (b > dim ? dim : b); e = e < 0 ? 0 : (e > dim ? dim : e); dims[a] = e > b ? (e - b + step - 1) / step : 0; }}
        else {{ b = b < 0 ? 0 : (b > dim - 1 ? dim - 1 : b); e = e < -1 ? -1 : (e > dim - 1 ? dim - 1 : e); dims[a] = b > e ? (b - e - step - 1) / (-step) : 0; }}
        lo[a] = b; st[a] = step;
    }}
    rc = oi_set_shape(o, {nd}, dims);
    if (rc) return rc;
    n = oi_numel(o);
    for (i = 0; i < n; i++) {{
        int64_t off = 0;
        for (d = 0; d < {nd}; d++) off += (lo[d] + idx[d] * st[d]) * stride[d];
        O[i] = X[off];
        for (d = {nd} - 1; d >= 0; d--) {{ if (++idx[d] < dims[d]) break; idx[d] = 0; }}
    }}
    return OI_OK;
}}
"""


def _row_param_index(
    req: KernelRequest, block: tuple[int, ...], param_shape: tuple[int, ...], k: int
) -> str:
    """C index expression of a norm's scale/bias element for element `j` of a normalized row.

    The param broadcasts against the row (right-aligned). A param of the row's full shape
    is read at `j`; one that covers only trailing dims (leading dims 1 or absent) repeats
    every `n` elements, read at `j % n`. One that broadcasts over inner dims (a size-1 dim
    inside the block) is read at the sum over its non-1 dims of the row coordinate times its
    stride.
    """
    dims = tuple(int(d) for d in param_shape)
    while dims and dims[0] == 1:
        dims = dims[1:]
    if not dims:
        return "0"
    if dims == block:
        return "j"
    if len(dims) <= len(block) and dims == block[len(block) - len(dims) :]:
        return f"(j % {math.prod(dims)})"
    full = (1,) * (len(block) - len(dims)) + dims
    if len(dims) <= len(block) and all(p in (1, b) for p, b in zip(full, block)):
        terms = []
        for d, (p, b) in enumerate(zip(full, block)):
            if p == 1:
                continue
            row_stride = math.prod(block[d + 1 :])
            param_stride = math.prod(full[d + 1 :])
            terms.append(f"((j / {row_stride}) % {b}) * {param_stride}")
        return "(" + " + ".join(terms) + ")"
    raise SynthesisError(
        f"{req.where}: input {k} of shape {tuple(param_shape)} broadcasts over inner dims of the "
        f"normalized block {block}; the C target needs it to cover the trailing dims exactly "
        "(reshape it to the block's trailing shape)"
    )


def _norm(req: KernelRequest) -> str:
    """layer_norm / rms_norm / softmax / log_softmax over rows, computed in double."""
    info = req.info
    op = info.opdef.name
    cts = [ctype(d, req.where) for d in info.in_dtypes]
    x = cts[0]
    (shape, *_rest) = info.in_shapes
    nd = len(shape)
    axis = int(info.params.get("axis", -1)) % max(nd, 1)
    eps = _real_param(info.params, "epsilon", 0.0)
    n_in = len(info.in_dtypes)
    load = x.load.format("X0[b + j * inner]")
    if op in ("layer_norm", "rms_norm"):
        # Normalized over axes axis..rank-1: a contiguous row of `len` elements.
        block = tuple(shape[axis:])
        indices = [_row_param_index(req, block, info.in_shapes[k], k) for k in (1, 2) if k < n_in]
        scale = f" * (double){cts[1].load.format(f'X1[{indices[0]}]')}" if n_in > 1 else ""
        bias = f" + (double){cts[2].load.format(f'X2[{indices[1]}]')}" if n_in > 2 else ""
        if op == "layer_norm":
            stats = f"""        double mean = 0, var = 0;
        for (j = 0; j < len; j++) mean += (double){x.load.format("X0[r * len + j]")};
        mean /= (double)len;
        for (j = 0; j < len; j++) {{ double t = (double){x.load.format("X0[r * len + j]")} - mean; var += t * t; }}
        var /= (double)len;
        inv = 1.0 / sqrt(var + {eps});"""
            value = f"((double){x.load.format('X0[r * len + j]')} - mean) * inv"
        else:
            stats = f"""        double ms = 0;
        for (j = 0; j < len; j++) {{ double t = (double){x.load.format("X0[r * len + j]")}; ms += t * t; }}
        inv = 1.0 / sqrt(ms / (double)len + {eps});"""
            value = f"(double){x.load.format('X0[r * len + j]')} * inv"
        loop = f"""    for (r = r0; r < r1; r++) {{
        double inv;
{stats}
        for (j = 0; j < len; j++) O[r * len + j] = {x.store.format(f"({x.compute})(({value}){scale}{bias})")};
    }}
"""
        shape_code = f"""    int64_t rows = 1, len = 1;
    int d, rc = oi_set_shape(o, x0->ndim, x0->dims);
    if (rc) return rc;
    for (d = 0; d < x0->ndim; d++) {{ if (d < {axis}) rows *= x0->dims[d]; else len *= x0->dims[d]; }}
"""
        return _rows_kernel(req, cts, x.storage, shape_code, "rows", "len", loop, "r, j")
    log = op == "log_softmax"
    final = "(v - m) - log(s)" if log else "exp(v - m) / s"
    loop = f"""    for (p = r0; p < r1; p++)
        for (q = 0; q < inner; q++) {{
            const int64_t b = p * len * inner + q;
            double m = -INFINITY, s = 0;
            for (j = 0; j < len; j++) {{ double v = (double){load}; if (v > m || v != v) m = v; }}
            for (j = 0; j < len; j++) s += exp((double){load} - m);
            for (j = 0; j < len; j++) {{ double v = (double){load}; O[b + j * inner] = {x.store.format(f"({x.compute})({final})")}; }}
        }}
"""
    shape_code = f"""    int64_t outer = 1, len, inner = 1;
    int d, rc = oi_set_shape(o, x0->ndim, x0->dims);
    if (rc) return rc;
    len = x0->ndim ? x0->dims[{axis}] : 1;
    for (d = 0; d < x0->ndim; d++) {{ if (d < {axis}) outer *= x0->dims[d]; else if (d > {axis}) inner *= x0->dims[d]; }}
"""
    return _rows_kernel(
        req, cts, x.storage, shape_code, "outer", "len * inner", loop, "p, q, j", "inner"
    )


# Work units (about one multiply-add) per element of a normalized row: the threaded build
# splits the rows only when rows * len * this reaches OI_PARALLEL_MIN_WORK.
_NORM_WORK_PER_ELEMENT = 8
# Ops whose kernel splits its rows over the kernel threads (_rows_kernel).
ROW_THREADED = frozenset(
    {"layer_norm", "rms_norm", "softmax", "log_softmax", "global_average_pool"}
)


def _rows_kernel(
    req: KernelRequest,
    cts: list[CType],
    out_storage: str,
    shape_code: str,
    rows: str,
    row_elems: str,
    loop: str,
    loop_vars: str,
    extra: str = "",
    work: int = _NORM_WORK_PER_ELEMENT,
) -> str:
    """A kernel whose `loop` computes rows [r0, r1) independently (each row the same
    instructions whatever the split). With one thread the loop runs inline over all rows;
    a threaded build (`req.dense.threads` > 1) runs it as an oi_parallel_work task over
    the rows, its locals (X<k>, O, len and `extra`) passed in a context block. `work`:
    units of work per element for oi_parallel_work's threshold (about multiply-adds).

    The kernels built here are listed in ROW_THREADED (a threaded program includes
    oi_parallel.h for them)."""
    n_in = len(cts)
    args = "".join(f", const oi_tensor *x{k}" for k in range(n_in))
    ptrs = "".join(
        f"    const {cts[k].storage} *X{k} = (const {cts[k].storage} *)x{k}->data;\n"
        for k in range(n_in)
    )
    head = f"static int {req.name}(oi_tensor *o{args}) {{\n{ptrs}    {out_storage} *O = ({out_storage} *)o->data;\n"
    if req.dense.threads <= 1:
        return f"""{head}{shape_code}    {{
        const int64_t r0 = 0, r1 = {rows};
        int64_t {loop_vars};
{loop}    }}
    return OI_OK;
}}
"""
    scalars = ["len", *([extra] if extra else [])]
    fields = "".join(f"    const {cts[k].storage} *X{k};\n" for k in range(n_in))
    fields += f"    {out_storage} *O;\n" + "".join(f"    int64_t {v};\n" for v in scalars)
    unpack = (
        "".join(f"    const {cts[k].storage} *X{k} = c->X{k};\n" for k in range(n_in))
        + f"    {out_storage} *O = c->O;\n"
        + "".join(f"    const int64_t {v} = c->{v};\n" for v in scalars)
    )
    fill = "".join(f"    c.X{k} = X{k};\n" for k in range(n_in)) + "    c.O = O;\n"
    fill += "".join(f"    c.{v} = {v};\n" for v in scalars)
    return f"""typedef struct {{
{fields}}} {req.name}_ctx;

static void {req.name}_rows(void *ctx, int64_t r0, int64_t r1, int slot) {{
    const {req.name}_ctx *c = (const {req.name}_ctx *)ctx;
{unpack}    int64_t {loop_vars};
    (void)slot;
{loop}}}

{head}    {req.name}_ctx c;
{shape_code}{fill}    oi_parallel_work({rows}, (double){rows} * (double)({row_elems}) * {work}, {req.name}_rows, &c);
    return OI_OK;
}}
"""


def _attention(req: KernelRequest) -> str:
    info = req.info
    q, k, v = (ctype(d, req.where) for d in info.in_dtypes[:3])
    masked = len(info.in_dtypes) > 3
    mask_ct = ctype(info.in_dtypes[3], req.where) if masked else None
    causal = bool(info.params.get("causal", False))
    scale = info.params.get("scale")
    scale_expr = (
        _real_param(info.params, "scale", 0.0) if scale is not None else "1.0 / sqrt((double)D)"
    )
    if any(len(s) < 3 for s in info.in_shapes[:3]):
        raise SynthesisError(f"{req.where}: the C target's attention needs q, k, v of rank >= 3")
    # f32 computes in float (as XLA does), other dtypes in double; the dot products keep 8
    # partial sums so the compiler can vectorize them without reassociating a single sum.
    acct = "float" if q.storage == "float" else "double"
    ex = "expf" if acct == "float" else "exp"
    # f16 keys and values (a narrow cache under f32 queries) widen inline: one conversion
    # per element read, which the call of the other kernels would dominate
    kload, vload = ("oi_f16_to_f32_inline({})" if t.dtype is DType.F16 else t.load for t in (k, v))
    qe = q.load.format("Q[qo + e + u]")
    ke = kload.format("K[ko + e + u]")
    qt = q.load.format("Q[qo + e]")
    kt = kload.format("K[ko + e]")
    # A mask broadcasts (NumPy rules) against the scores [..., Hq, Sq, Sk]: bool hides
    # positions, a float mask is added to the scores.
    add = ""
    if mask_ct is None:
        mask_args = mask_setup = mask_apply = ""
    else:
        mask_args = ", const oi_tensor *x3"
        mval = mask_ct.load.format("MK[moff]")
        hide = (
            f"if (!({mval})) {{ w[j] = -INFINITY; continue; }}" if mask_ct.family == "bool" else ""
        )
        add = "" if mask_ct.family == "bool" else f"w[j] += ({acct})({mval});"
        mask_setup = f"""    const {mask_ct.storage} *MK = (const {mask_ct.storage} *)x3->data;
    int64_t mstride[OI_MAX_DIMS], ms = 1;
    if (x3->ndim > nd) {{ oi_set_error("attention: mask rank exceeds the scores' rank"); return OI_ERR_SHAPE; }}
    for (d = nd - 1; d >= 0; d--) {{
        int ad = d - (nd - x3->ndim);
        int64_t dim = ad >= 0 ? x3->dims[ad] : 1;
        int64_t want = d == nd - 1 ? Sk : (d == nd - 2 ? Sq : x0->dims[d]);
        if (dim != 1 && dim != want) {{ oi_set_error("attention: the mask does not broadcast to the scores"); return OI_ERR_SHAPE; }}
        mstride[d] = dim == 1 ? 0 : ms;
        ms *= dim;
    }}
"""
        mask_apply = f"""int64_t moff = h * mstride[nd - 3] + i * mstride[nd - 2] + j * mstride[nd - 1], rem = bb;
                    for (d = nd - 4; d >= 0; d--) {{ moff += (rem % x0->dims[d]) * mstride[d]; rem /= x0->dims[d]; }}
                    {hide}"""
    return f"""static int {req.name}(oi_tensor *o, const oi_tensor *x0, const oi_tensor *x1, const oi_tensor *x2{mask_args}) {{
    const {q.storage} *Q = (const {q.storage} *)x0->data;
    const {k.storage} *K = (const {k.storage} *)x1->data;
    const {v.storage} *V = (const {v.storage} *)x2->data;
    {q.storage} *O = ({q.storage} *)o->data;
    int nd = x0->ndim, d;
    int64_t B = 1, Hq = x0->dims[nd - 3], Sq = x0->dims[nd - 2], D = x0->dims[nd - 1];
    int64_t Hk = x1->dims[nd - 3], Sk = x1->dims[nd - 2], Dv = x2->dims[nd - 1];
    int64_t dims[OI_MAX_DIMS], bb, h, i, j, e, u;
    int rc;
    {acct} scale;
    for (d = 0; d < nd - 3; d++) B *= x0->dims[d];
    if (x1->ndim != nd || x2->ndim != nd || x1->dims[nd - 1] != D || x2->dims[nd - 2] != Sk || Hk == 0 || Hq % Hk) {{
        oi_set_error("attention: q, k, v shapes do not fit"); return OI_ERR_SHAPE;
    }}
    for (d = 0; d < nd; d++) dims[d] = x0->dims[d];
    dims[nd - 1] = Dv;
{mask_setup}    rc = oi_set_shape(o, nd, dims);
    if (rc) return rc;
    scale = ({acct})({scale_expr});
    {{
    {acct} w[Sk > 0 ? Sk : 1], acc[Dv > 0 ? Dv : 1];
    for (bb = 0; bb < B; bb++)
        for (h = 0; h < Hq; h++) {{
            const int64_t hk = h / (Hq / Hk);
            for (i = 0; i < Sq; i++) {{
                {acct} m = -INFINITY, total = 0;
                const int64_t qo = ((bb * Hq + h) * Sq + i) * D, oo = ((bb * Hq + h) * Sq + i) * Dv;
                for (j = 0; j < Sk; j++) {{
                    {acct} s = 0, p[8] = {{0}};
                    const int64_t ko = ((bb * Hk + hk) * Sk + j) * D;
                    if ({int(causal)} && j > i + (Sk - Sq)) {{ w[j] = -INFINITY; continue; }}
                    {mask_apply}
                    for (e = 0; e + 8 <= D; e += 8)
                        for (u = 0; u < 8; u++) p[u] += ({acct}){qe} * ({acct}){ke};
                    for (u = 0; u < 8; u++) s += p[u];
                    for (; e < D; e++) s += ({acct}){qt} * ({acct}){kt};
                    w[j] = s * scale;
                    {add}
                    if (w[j] > m) m = w[j];
                }}
                for (j = 0; j < Sk; j++) {{ w[j] = w[j] == -INFINITY ? 0 : {ex}(w[j] - m); total += w[j]; }}
                for (e = 0; e < Dv; e++) acc[e] = 0;
                for (j = 0; j < Sk; j++) {{
                    const int64_t vo = ((bb * Hk + hk) * Sk + j) * Dv;
                    const {acct} wj = w[j];
                    for (e = 0; e < Dv; e++) acc[e] += wj * ({acct}){vload.format("V[vo + e]")};
                }}
                for (e = 0; e < Dv; e++) O[oo + e] = {q.store.format(f"({q.compute})(total > 0 ? acc[e] / total : 0)")};
            }}
        }}
    }}
    return OI_OK;
}}
"""


def _gather(req: KernelRequest) -> str:
    """gather(data, indices, axis) / embedding(table, ids): np.take with clamped indices."""
    info = req.info
    data, idx = ctype(info.in_dtypes[0], req.where), ctype(info.in_dtypes[1], req.where)
    (shape, _ishape) = info.in_shapes
    axis = (
        int(info.params.get("axis", 0)) % max(len(shape), 1) if info.opdef.name == "gather" else 0
    )
    # Negative indices count from the end (signed types); anything outside is clamped.
    neg = "t += t < 0 ? size : 0;\n            " if idx.family == "sint" else ""
    return f"""static int {req.name}(oi_tensor *o, const oi_tensor *x0, const oi_tensor *x1) {{
    const unsigned char *X = (const unsigned char *)x0->data;
    const {idx.storage} *I = (const {idx.storage} *)x1->data;
    unsigned char *O = (unsigned char *)o->data;
    int64_t dims[OI_MAX_DIMS], outer = 1, inner = 1, size, ni, q, r;
    int d, nd = 0, rc;
    const size_t elem = sizeof({data.storage});
    if (x0->ndim + x1->ndim - 1 > OI_MAX_DIMS) {{ oi_set_error("gather: result rank too large"); return OI_ERR_SHAPE; }}
    size = x0->dims[{axis}];
    for (d = 0; d < {axis}; d++) {{ dims[nd++] = x0->dims[d]; outer *= x0->dims[d]; }}
    for (d = 0; d < x1->ndim; d++) dims[nd++] = x1->dims[d];
    for (d = {axis} + 1; d < x0->ndim; d++) {{ dims[nd++] = x0->dims[d]; inner *= x0->dims[d]; }}
    if (o == x0 || o == x1) {{ oi_set_error("gather: the output must not alias an input"); return OI_ERR_ARGUMENT; }}
    rc = oi_set_shape(o, nd, dims);
    if (rc) return rc;
    ni = oi_numel(x1);
    if (size == 0 && ni) {{ oi_set_error("gather: indexing an empty axis"); return OI_ERR_SHAPE; }}
    for (q = 0; q < outer; q++)
        for (r = 0; r < ni; r++) {{
            int64_t t = (int64_t){idx.load.format("I[r]")};
            {neg}if (t < 0) t = 0;
            if (t > size - 1) t = size - 1;
            memcpy(O + (size_t)((q * ni + r) * inner) * elem, X + (size_t)((q * size + t) * inner) * elem, (size_t)inner * elem);
        }}
    return OI_OK;
}}
"""


def _concat(req: KernelRequest) -> str:
    """concat(x0, x1, ..., axis): inputs joined along `axis`."""
    info = req.info
    ct = ctype(info.in_dtypes[0], req.where)
    n = len(info.in_dtypes)
    nd = len(info.in_shapes[0])
    axis = int(info.params.get("axis", 0)) % max(nd, 1)
    args = "".join(f", const oi_tensor *x{k}" for k in range(n))
    ins = ", ".join(f"x{k}" for k in range(n))
    return f"""static int {req.name}(oi_tensor *o{args}) {{
    const oi_tensor *in[{n}] = {{{ins}}};
    unsigned char *O = (unsigned char *)o->data;
    int64_t dims[OI_MAX_DIMS], outer = 1, inner = 1, q, pos = 0;
    int d, k, rc;
    const size_t elem = sizeof({ct.storage});
    for (d = 0; d < {nd}; d++) dims[d] = x0->dims[d];
    dims[{axis}] = 0;
    for (k = 0; k < {n}; k++) {{
        if (in[k] == o) {{ oi_set_error("concat: the output must not alias an input"); return OI_ERR_ARGUMENT; }}
        for (d = 0; d < {nd}; d++)
            if (d != {axis} && (in[k]->ndim != {nd} || in[k]->dims[d] != x0->dims[d])) {{
                oi_set_error("concat: input %d's shape differs off the concat axis", k); return OI_ERR_SHAPE;
            }}
        dims[{axis}] += in[k]->dims[{axis}];
    }}
    rc = oi_set_shape(o, {nd}, dims);
    if (rc) return rc;
    for (d = 0; d < {axis}; d++) outer *= dims[d];
    for (d = {axis} + 1; d < {nd}; d++) inner *= dims[d];
    for (q = 0; q < outer; q++)
        for (k = 0; k < {n}; k++) {{
            size_t chunk = (size_t)(in[k]->dims[{axis}] * inner) * elem;
            memcpy(O + (size_t)pos * elem, (const unsigned char *)in[k]->data + (size_t)q * chunk, chunk);
            pos += in[k]->dims[{axis}] * inner;
        }}
    return OI_OK;
}}
"""


def _batch_norm(req: KernelRequest) -> str:
    """scale * (x - mean) / sqrt(var + eps) + bias per channel (axis 1), in double."""
    info = req.info
    cts = [ctype(d, req.where) for d in info.in_dtypes]
    x = cts[0]
    eps = _real_param(info.params, "epsilon", 1e-5)
    par = ["X1[c]", "X2[c]", "X3[c]", "X4[c]"]
    sc, bi, mu, va = (f"(double){cts[k + 1].load.format(par[k])}" for k in range(4))
    args = "".join(f", const oi_tensor *x{k}" for k in range(5))
    ptrs = "".join(
        f"    const {cts[k].storage} *X{k} = (const {cts[k].storage} *)x{k}->data;\n"
        for k in range(5)
    )
    value = f"{sc} * ((double){x.load.format('X0[(q * C + c) * inner + r]')} - {mu}) / sqrt({va} + {eps}) + {bi}"
    return f"""static int {req.name}(oi_tensor *o{args}) {{
{ptrs}    {x.storage} *O = ({x.storage} *)o->data;
    int64_t outer, C, inner = 1, q, c, r;
    int d, rc;
    if (x0->ndim < 2) {{ oi_set_error("batch_norm: x needs a channel axis"); return OI_ERR_SHAPE; }}
    rc = oi_set_shape(o, x0->ndim, x0->dims);
    if (rc) return rc;
    outer = x0->dims[0];
    C = x0->dims[1];
    for (d = 2; d < x0->ndim; d++) inner *= x0->dims[d];
    for (q = 0; q < outer; q++)
        for (c = 0; c < C; c++)
            for (r = 0; r < inner; r++) O[(q * C + c) * inner + r] = {x.store.format(f"({x.compute})({value})")};
    return OI_OK;
}}
"""


def _global_average_pool(req: KernelRequest) -> str:
    """Mean over every spatial axis (2..), keeping them with size 1, in double."""
    info = req.info
    x = ctype(info.in_dtypes[0], req.where)
    shape_code = """    int64_t dims[OI_MAX_DIMS], rows = 1, len = 1;
    int d, rc;
    for (d = 0; d < x0->ndim; d++) {
        dims[d] = d < 2 ? x0->dims[d] : 1;
        if (d < 2) rows *= x0->dims[d]; else len *= x0->dims[d];
    }
    if (o == x0) { oi_set_error("global_average_pool: the output must not alias the input"); return OI_ERR_ARGUMENT; }
    rc = oi_set_shape(o, x0->ndim, dims);
    if (rc) return rc;
"""
    loop = f"""    for (q = r0; q < r1; q++) {{
        double sum = 0;
        for (r = 0; r < len; r++) sum += (double){x.load.format("X0[q * len + r]")};
        O[q] = {x.store.format(f"({x.compute})(sum / (double)len)")};
    }}
"""
    return _rows_kernel(req, [x], x.storage, shape_code, "rows", "len", loop, "q, r", work=2)


def _pad(req: KernelRequest) -> str:
    """ONNX Pad (constant, edge, wrap, reflect) through per-axis source indices."""
    info = req.info
    x = ctype(info.in_dtypes[0], req.where)
    (shape,) = info.in_shapes
    nd = len(shape)
    p = info.params
    axes = [a % nd for a in (p.get("axes") or range(nd))]
    pads = list(p["pads"])
    begin = [0] * nd
    end = [0] * nd
    for i, a in enumerate(axes):
        begin[a], end[a] = pads[i], pads[i + len(axes)]
    mode = str(p.get("mode", "constant"))
    modes = {"constant": 0, "edge": 1, "wrap": 2, "reflect": 3}
    if mode not in modes:
        raise SynthesisError(f"{req.where}: pad mode {mode!r} is not supported by the C target")
    value = p.get("value", 0)
    fill = x.store.format("P_value" if isinstance(value, RuntimeParam) else c_literal(value, x))
    lits = ", ".join(f"INT64_C({v})" for v in begin) or "0"
    lite = ", ".join(f"INT64_C({v})" for v in end) or "0"
    return f"""static int {req.name}(oi_tensor *o, const oi_tensor *x0) {{
    static const int64_t pb[{max(nd, 1)}] = {{{lits}}}, pe[{max(nd, 1)}] = {{{lite}}};
    const {x.storage} *X = (const {x.storage} *)x0->data;
    {x.storage} *O = ({x.storage} *)o->data;
    int64_t dims[OI_MAX_DIMS], idx[OI_MAX_DIMS], n, i;
    int d, rc;
    for (d = 0; d < {nd}; d++) {{ dims[d] = x0->dims[d] + pb[d] + pe[d]; idx[d] = 0; }}
    if (o == x0) {{ oi_set_error("pad: the output must not alias the input"); return OI_ERR_ARGUMENT; }}
    rc = oi_set_shape(o, {nd}, dims);
    if (rc) return rc;
    n = oi_numel(o);
    for (i = 0; i < n; i++) {{
        int64_t off = 0;
        int outside = 0;
        for (d = 0; d < {nd}; d++) {{
            int64_t size = x0->dims[d], pos = idx[d] - pb[d], src = pos;
            if (pos < 0 || pos >= size) {{
                if ({modes[mode]} == 0 || size == 0) outside = 1;
                else if ({modes[mode]} == 1) src = pos < 0 ? 0 : size - 1;
                else if ({modes[mode]} == 2) src = ((pos % size) + size) % size;
                else {{
                    int64_t period = size > 1 ? 2 * (size - 1) : 1, f = (pos < 0 ? -pos : pos) % period;
                    src = f >= size ? period - f : f;
                }}
            }}
            off = off * size + src;
        }}
        O[i] = outside ? {fill} : X[off];
        for (d = {nd} - 1; d >= 0; d--) {{ if (++idx[d] < dims[d]) break; idx[d] = 0; }}
    }}
    return OI_OK;
}}
"""


def _rope(req: KernelRequest) -> str:
    """Rotary embedding of (a, b) pairs by pos * inv_freq (angles rounded through f32 unless f64)."""
    info = req.info
    x, pt = ctype(info.in_dtypes[0], req.where), ctype(info.in_dtypes[1], req.where)
    p = info.params
    theta = _real_param(p, "theta", 10000.0)
    rot_param = int(p.get("rotary_dim", 0) or 0)
    inter = bool(p.get("interleaved", False))
    at = "double" if info.in_dtypes[0] is DType.F64 else "float"
    return f"""static int {req.name}(oi_tensor *o, const oi_tensor *x0, const oi_tensor *x1) {{
    const {x.storage} *X = (const {x.storage} *)x0->data;
    const {pt.storage} *P = (const {pt.storage} *)x1->data;
    {x.storage} *O = ({x.storage} *)o->data;
    int64_t seq, hd, rot, half, rows, r, s, i;
    int rc;
    if (x0->ndim < 2) {{ oi_set_error("rope: x needs [..., seq, head_dim]"); return OI_ERR_SHAPE; }}
    seq = x0->dims[x0->ndim - 2];
    hd = x0->dims[x0->ndim - 1];
    rot = {rot_param} ? {rot_param} : hd;
    half = rot / 2;
    if (x1->ndim > 1 || (x1->ndim == 1 && x1->dims[0] != seq)) {{ oi_set_error("rope: positions must be a scalar or [seq]"); return OI_ERR_SHAPE; }}
    rc = oi_set_shape(o, x0->ndim, x0->dims);
    if (rc) return rc;
    rows = oi_numel(x0) / (hd ? hd : 1) / (seq ? seq : 1);
    for (r = 0; r < rows; r++)
        for (s = 0; s < seq; s++) {{
            const int64_t base = (r * seq + s) * hd;
            const int64_t pos = x1->ndim == 0 ? (int64_t){pt.load.format("P[0]")} + s : (int64_t){pt.load.format("P[s]")};
            if (o != x0) for (i = rot; i < hd; i++) O[base + i] = X[base + i];
            for (i = 0; i < half; i++) {{
                const double inv = 1.0 / pow({theta}, (double)i * 2.0 / (double)rot);
                const double ang = (double)(({at})pos * ({at})inv);
                const int64_t ia = {"base + 2 * i" if inter else "base + i"}, ib = {"base + 2 * i + 1" if inter else "base + i + half"};
                const double a = (double){x.load.format("X[ia]")}, b = (double){x.load.format("X[ib]")};
                O[ia] = {x.store.format(f"({x.compute})(a * cos(ang) - b * sin(ang))")};
                O[ib] = {x.store.format(f"({x.compute})(a * sin(ang) + b * cos(ang))")};
            }}
        }}
    return OI_OK;
}}
"""


def _window(req: KernelRequest) -> str:
    """conv1d/conv2d (groups, optional bias), max_pool, avg_pool: ONNX windows over the
    spatial axes with strides, pads (begins then ends), dilations; floats accumulate in double."""
    info = req.info
    op = info.opdef.name
    x = ctype(info.in_dtypes[0], req.where)
    xs = info.in_shapes[0]
    sp = len(xs) - 2
    p = info.params
    if op.startswith("conv"):
        kernel = list(info.in_shapes[1][2:])
    else:
        kernel = list(p["kernel_shape"])
    strides = list(p.get("strides") or [1] * sp)
    pads = list(p.get("pads") or [0] * (2 * sp))
    dil = list(p.get("dilations") or [1] * sp)

    def arr(name: str, values: list[int]) -> str:
        return f"static const int64_t {name}[{max(len(values), 1)}] = {{{', '.join(str(v) for v in values) or '0'}}};"

    n_in = len(info.in_dtypes)
    args = "".join(f", const oi_tensor *x{k}" for k in range(n_in))
    cts = [ctype(d, req.where) for d in info.in_dtypes]
    ptrs = "".join(
        f"    const {cts[k].storage} *X{k} = (const {cts[k].storage} *)x{k}->data;\n"
        for k in range(n_in)
    )
    xload = x.load.format("X0[xoff]")
    if op.startswith("conv"):
        groups = int(p.get("groups", 1))
        bias = f" + (double){cts[2].load.format('X2[oc]')}" if n_in > 2 else ""
        channels = "x1->dims[0]"
        init = "double acc = 0;"
        body = f"""for (c = 0; c < cg; c++) {{
                        const int64_t xoff = ((nb * C + g * cg + c) * inner) + ipos;
                        const int64_t woff = ((oc * cg + c) * ksz) + kflat;
                        acc += (double){xload} * (double){cts[1].load.format("X1[woff]")};
                    }}"""
        finish = f"acc{bias}"
        group_setup = f"""const int64_t G = {groups}, cg = C / G, mg = M / G, g = oc / (mg ? mg : 1);
            (void)G;"""
    elif op == "max_pool":
        groups = 1
        channels = "C"
        lowest = "-INFINITY" if x.family == "real" else ("INT64_MIN" if x.family == "sint" else "0")
        acc_t = "double" if x.family == "real" else x.compute
        init = f"{acc_t} acc = {lowest};"
        # NaN propagates: once acc is NaN it stays (floats only; ints cannot be NaN).
        nan = (
            "if (v != v || acc != acc) acc = acc != acc ? acc : v; else "
            if x.family == "real"
            else ""
        )
        body = f"""{{
                        const int64_t xoff = (nb * C + oc) * inner + ipos;
                        const {acc_t} v = ({acc_t}){xload};
                        {nan}if (v > acc) acc = v;
                    }}"""
        finish = "acc"
        group_setup = "const int64_t cg = 1, g = 0; (void)cg; (void)g;"
    else:  # avg_pool
        groups = 1
        channels = "C"
        include = bool(p.get("count_include_pad", False))
        init = "double acc = 0; int64_t real = 0;"
        body = f"""{{
                        const int64_t xoff = (nb * C + oc) * inner + ipos;
                        acc += (double){xload};
                        real++;
                    }}"""
        finish = f"acc / (double)({'ksz' if include else 'real'})"
        group_setup = "const int64_t cg = 1, g = 0; (void)cg; (void)g;"
    del groups
    return f"""static int {req.name}(oi_tensor *o{args}) {{
    {arr("ks", kernel)}
    {arr("st", strides)}
    {arr("pd", pads)}
    {arr("dl", dil)}
{ptrs}    {x.storage} *O = ({x.storage} *)o->data;
    int64_t dims[OI_MAX_DIMS], opos[OI_MAX_DIMS], kpos[OI_MAX_DIMS], N, C, M, inner = 1, onum = 1, ksz = 1;
    int64_t nb, oc, q, kflat, c;
    int d, rc;
    if (x0->ndim != {sp + 2}) {{ oi_set_error("{op}: input rank %d, expected {sp + 2}", x0->ndim); return OI_ERR_SHAPE; }}
    if (o == x0) {{ oi_set_error("{op}: the output must not alias the input"); return OI_ERR_ARGUMENT; }}
    N = x0->dims[0]; C = x0->dims[1]; M = {channels};
    dims[0] = N; dims[1] = M;
    for (d = 0; d < {sp}; d++) {{
        dims[d + 2] = (x0->dims[d + 2] + pd[d] + pd[d + {sp}] - dl[d] * (ks[d] - 1) - 1) / st[d] + 1;
        if (dims[d + 2] < 0) dims[d + 2] = 0;
        inner *= x0->dims[d + 2]; onum *= dims[d + 2]; ksz *= ks[d];
    }}
    rc = oi_set_shape(o, {sp + 2}, dims);
    if (rc) return rc;
    (void)c;
    for (nb = 0; nb < N; nb++)
        for (oc = 0; oc < M; oc++) {{
            {group_setup}
            for (q = 0; q < onum; q++) {{
                int64_t rest = q;
                {init}
                for (d = {sp} - 1; d >= 0; d--) {{ opos[d] = rest % dims[d + 2]; rest /= dims[d + 2]; }}
                for (kflat = 0; kflat < ksz; kflat++) {{
                    int64_t krest = kflat, ipos = 0;
                    int outside = 0;
                    for (d = {sp} - 1; d >= 0; d--) {{ kpos[d] = krest % ks[d]; krest /= ks[d]; }}
                    for (d = 0; d < {sp}; d++) {{
                        const int64_t ip = opos[d] * st[d] + kpos[d] * dl[d] - pd[d];
                        if (ip < 0 || ip >= x0->dims[d + 2]) outside = 1;
                        ipos = ipos * x0->dims[d + 2] + ip;
                    }}
                    if (outside) continue;
                    {body}
                }}
                O[(nb * M + oc) * onum + q] = {x.store.format(f"({x.compute})({finish})")};
            }}
        }}
    return OI_OK;
}}
"""


def _linear(req: KernelRequest) -> str:
    """x @ w^T + bias with w [out, in]: contiguous dot products with 8 partial sums (vectorizable)."""
    info = req.info
    cts = [ctype(d, req.where) for d in info.in_dtypes]
    x, w = cts[0], cts[1]
    acct = "float" if x.storage == "float" else "double"
    n_in = len(info.in_dtypes)
    args = "".join(f", const oi_tensor *x{k}" for k in range(n_in))
    ptrs = "".join(
        f"    const {cts[k].storage} *X{k} = (const {cts[k].storage} *)x{k}->data;\n"
        for k in range(n_in)
    )
    bias = f" + ({acct}){cts[2].load.format('X2[j]')}" if n_in > 2 else ""
    xe, we = x.load.format("X0[xo + e + u]"), w.load.format("X1[wo + e + u]")
    xt, wt = x.load.format("X0[xo + e]"), w.load.format("X1[wo + e]")
    return f"""static int {req.name}(oi_tensor *o{args}) {{
{ptrs}    {x.storage} *O = ({x.storage} *)o->data;
    int64_t dims[OI_MAX_DIMS], rows, K, N, r, j, e, u;
    int d, rc;
    if (x0->ndim < 1 || x1->ndim != 2 || x1->dims[1] != x0->dims[x0->ndim - 1]) {{
        oi_set_error("linear: x [..., in] and w [out, in] do not fit"); return OI_ERR_SHAPE;
    }}
    if (o == x0) {{ oi_set_error("linear: the output must not alias the input"); return OI_ERR_ARGUMENT; }}
    K = x1->dims[1]; N = x1->dims[0];
    for (d = 0; d < x0->ndim; d++) dims[d] = x0->dims[d];
    dims[x0->ndim - 1] = N;
    rc = oi_set_shape(o, x0->ndim, dims);
    if (rc) return rc;
    rows = K ? oi_numel(x0) / K : 0;
    for (r = 0; r < rows; r++)
        for (j = 0; j < N; j++) {{
            const int64_t xo = r * K, wo = j * K;
            {acct} s = 0, p[8] = {{0}};
            for (e = 0; e + 8 <= K; e += 8)
                for (u = 0; u < 8; u++) p[u] += ({acct}){xe} * ({acct}){we};
            for (u = 0; u < 8; u++) s += p[u];
            for (; e < K; e++) s += ({acct}){xt} * ({acct}){wt};
            O[r * N + j] = {x.store.format(f"({x.compute})(s{bias})")};
        }}
    return OI_OK;
}}
"""


Renderer = Callable[[KernelRequest], str]

STRUCTURED: dict[str, Renderer] = {
    "cast": _cast,
    "bitcast": _bitcast,
    "matmul": _matmul,
    "sum_axis": _reduce,
    "prod_axis": _reduce,
    "mean_axis": _reduce,
    "max_axis": _reduce,
    "min_axis": _reduce,
    "argmax_axis": _reduce,
    "argmin_axis": _reduce,
    "reshape": _copy_like,
    "transpose": _permute,
    "permute": _permute,
    "slice": _slice,
    "layer_norm": _norm,
    "rms_norm": _norm,
    "softmax": _norm,
    "log_softmax": _norm,
    "attention": _attention,
    "gather": _gather,
    "embedding": _gather,
    "concat": _concat,
    "batch_norm": _batch_norm,
    "global_average_pool": _global_average_pool,
    "pad": _pad,
    "rope": _rope,
    "linear": _linear,
    "conv1d": _window,
    "conv2d": _window,
    "max_pool": _window,
    "avg_pool": _window,
}

#: Ops whose kernels may write the output over an input of the same shape (the registry's
#: `Traits.alias_safe`: each element is read before it is written).
ALIAS_SAFE: frozenset[str] = frozenset(op.name for op in registry.all_ops() if op.traits.alias_safe)


def _real_param(params: dict[str, Any], name: str, default: float) -> str:
    """A float param as C: a double literal, or ``P_<name>`` when it is read at run time."""
    value = params.get(name, default)
    if isinstance(value, RuntimeParam):
        return f"P_{name}"
    return repr(float(default if value is None else value))


_BOUNDS = {"min": 0, "clamp_min": 0, "max": 1, "clamp_max": 1}  # param -> rounds up (0) / down (1)


def _param_prologue(req: KernelRequest, name: str) -> list[str]:
    """C statements converting the argument ``p_<name>`` into the local ``P_<name>``.

    The conversion is the one the simulator applies to a bound value: float params (epsilon,
    scale, theta, slopes, bounds of float ops) as numbers; clamp bounds of integer ops
    rounded inward and limited to the dtype's range (`int_bounds`); fill/pad values and
    integer div_by_zero_mask exact integers inside the dtype's range (else OI_ERR_ARGUMENT).
    """
    info = req.info
    dtype = info.in_dtypes[0] if info.in_dtypes else info.out_dtype
    ct = ctype(dtype, req.where)
    arg, local = f"p_{name}", f"P_{name}"
    if name == "negative_slope" and ct.family != "real":
        return [
            f"if (!({arg}.f >= 0.0 && {arg}.f <= 1.0)) {{",
            f'    oi_set_error("param negative_slope is %.17g; integer relu needs 0 <= negative_slope <= 1", {arg}.f);',
            "    return OI_ERR_ARGUMENT;",
            "}",
            f"const double {local} = {arg}.f;",
        ]
    unused = info.opdef.name == "pad" and info.params.get("mode", "constant") != "constant"
    if name in ("epsilon", "scale", "theta") or unused:
        return [f"const double {local} = {arg}.f;"]
    if ct.family == "real":
        return [f"const {ct.compute} {local} = ({ct.compute}){arg}.f;"]
    if name in _BOUNDS:
        upper = _BOUNDS[name]
        lo, hi = _int_range(dtype)
        check = f'if (oi_param_number({arg}, "{name}")) return OI_ERR_ARGUMENT;'
        if ct.family == "uint":
            return [check, f"const uint64_t {local} = oi_ubound({arg}.f, {upper}, UINT64_C({hi}));"]
        lo_l = "INT64_MIN" if lo == -(1 << 63) else f"INT64_C({lo})"
        return [
            check,
            f"const int64_t {local} = oi_sbound({arg}.f, {upper}, {lo_l}, INT64_C({hi}));",
        ]
    lo, hi = dtype.value_range() if ct.family != "bool" else (0, 1)
    nonzero = int(dtype is DType.T1 and name == "value")
    lo_l = "INT64_MIN" if lo == -(1 << 63) else f"INT64_C({lo})"
    return [
        f"int64_t q_{name};",
        f'if (oi_param_int({arg}, {lo_l}, UINT64_C({hi}), {nonzero}, "{name}", &q_{name})) return OI_ERR_ARGUMENT;',
        f"const {ct.compute} {local} = ({ct.compute})q_{name};",
    ]


def _with_runtime_params(req: KernelRequest, code: str) -> str:
    """`code` with one ``oi_param`` argument per runtime param and the prologue converting them."""
    names = runtime_params(req.info)
    if not names:
        return code
    head, sep, rest = code.partition(") {\n")
    assert sep, "every kernel starts with its signature"
    args = "".join(f", oi_param p_{n}" for n in names)
    prologue = [line for n in names for line in (*_param_prologue(req, n), f"(void)P_{n};")]
    return head + args + sep + "".join(f"    {line}\n" for line in prologue) + rest


def supported_ops() -> list[str]:
    """Names of the ops the C target can express, sorted."""
    return sorted({op.name for op in registry.all_ops() if op.expr is not None} | set(STRUCTURED))


def render_kernel(req: KernelRequest) -> str:
    """The C function for one kernel request.

    Raises:
        SynthesisError: the op or one of its dtypes has no C kernel, naming the node.
    """
    op = req.info.opdef.name
    dense = dense_kernel(
        req.name, req.info, req.dense, req.epilogue, req.constant_inputs, req.layout
    )
    if dense is not None:
        return dense
    if op in STRUCTURED:
        return _with_runtime_params(req, STRUCTURED[op](req))
    if req.info.opdef.expr is not None:
        return _with_runtime_params(req, _elementwise(req))
    raise SynthesisError(
        f"{req.where}: op {op} is not supported by the C target (supported: {', '.join(supported_ops())})"
    )
