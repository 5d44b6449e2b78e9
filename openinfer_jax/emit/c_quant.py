"""C kernels for ops with a block-quantized weight (q8_0, q4_0, q4_1): linear, matmul, embedding, gather.

A quantized input arrives as an ``oi_tensor`` whose ``data`` is an ``oi_block_tensor`` (codes,
scales, offsets in place in the loaded model, docs/oinf.md §5.1); its ``dims`` are the logical
shape. The kernels call the routines of ``runtime/oi_quant.h`` (copied next to the program and
included by it when a kernel here is used): matrix-vector products quantize each activation
row to 8 bits per block and take integer dot products (`oi_q_gemv`); embedding/gather and the
matmul forms dequantize only the rows they touch (`oi_q_dequant_row`). Shapes, the block size
and the scale type are baked in at synthesis; `oi_model_get_block` checks at load time that the
model still has them.
"""

from __future__ import annotations

import math

from openinfer_jax.core.blocks import BlockLayout
from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import SynthesisError
from openinfer_jax.emit.analysis import OpInfo
from openinfer_jax.emit.c_types import ctype

__all__ = ["QUANT_HEADER", "QUANT_OPS", "render_quant_kernel"]

QUANT_HEADER = "oi_quant.h"
QUANT_OPS = ("linear", "matmul", "embedding", "gather")
MAX_BLOCK = 256  # OI_Q_MAX_BLOCK of oi_quant.h


def _facts(layout: BlockLayout, where: str) -> tuple[int, int, int]:
    """(dtype code of the codes, block size, 1 for f32 scales) baked into a kernel."""
    if layout.block_size > MAX_BLOCK:
        raise SynthesisError(
            f"{where}: block size {layout.block_size} is above the C target's {MAX_BLOCK}; "
            "re-quantize with a smaller --block"
        )
    return layout.data_dtype.code, layout.block_size, int(layout.scale_dtype is DType.F32)


def render_quant_kernel(name: str, info: OpInfo, where: str) -> str:
    """The C function `name` running `info`, one of whose inputs is block-quantized.

    Raises:
        SynthesisError: an op or operand form the C kernels do not take, naming the node.
    """
    op = info.opdef.name
    index = next(i for i, layout in enumerate(info.in_layouts) if layout is not None)
    layout = info.in_layouts[index]
    assert layout is not None
    if any(d is not DType.F32 for d in (info.out_dtype, *info.in_dtypes[:1])) and op != "embedding":
        raise SynthesisError(f"{where}: a block-quantized weight works with f32 activations here")
    if op == "linear":
        return _linear(name, info, layout, where)
    if op == "matmul":
        return (
            _matmul_right(name, info, layout, where)
            if index == 1
            else _matmul_left(name, info, layout, where)
        )
    if op in ("embedding", "gather"):
        return _rows(name, info, layout, where)
    raise SynthesisError(f"{where}: op {op} has no C kernel for a block-quantized input")


def _linear(name: str, info: OpInfo, layout: BlockLayout, where: str) -> str:
    """x [..., K] @ W^T (+ bias): per row of x, quantize it, then one integer GEMV over W [N, K]."""
    code, block, f32 = _facts(layout, where)
    n, k = info.in_shapes[1]
    nb = k // block
    bias = len(info.in_dtypes) > 2
    split = int(code != 1)
    args = ", const oi_tensor *x2" if bias else ""
    add_bias = (
        "        { const float *Bv = (const float *)x2->data; int64_t j; for (j = 0; j < N; j++) Y[j] += Bv[j]; }\n"
        if bias
        else ""
    )
    return f"""static int {name}(oi_tensor *o, const oi_tensor *x0, const oi_tensor *x1{args}) {{
    /* linear with a {layout.describe()} weight [{n}, {k}]: q8 activations, integer dots */
    static int16_t XQ[{k}];
    static float DX[{nb}], SX[{nb}];
    static int32_t QX[{nb}];
    const int64_t K = {k}, N = {n};
    const float *X = (const float *)x0->data;
    const oi_block_tensor *W = (const oi_block_tensor *)x1->data;
    float *O = (float *)o->data;
    oi_q_act act;
    int64_t dims[OI_MAX_DIMS], rows, r;
    int d, rc;
    act.xq = XQ; act.dx = DX; act.sx = SX; act.qx = QX;
    if (x0->ndim < 1 || x0->dims[x0->ndim - 1] != K || x1->ndim != 2 || x1->dims[0] != N || x1->dims[1] != K) {{
        oi_set_error("linear: x [..., %lld] and the quantized w [%lld, %lld] do not fit", (long long)K, (long long)N, (long long)K);
        return OI_ERR_SHAPE;
    }}
    if (o == x0) {{ oi_set_error("linear: the output must not alias the input"); return OI_ERR_ARGUMENT; }}
    for (d = 0; d < x0->ndim; d++) dims[d] = x0->dims[d];
    dims[x0->ndim - 1] = N;
    rc = oi_set_shape(o, x0->ndim, dims);
    if (rc) return rc;
    rows = oi_numel(x0) / K;
    for (r = 0; r < rows; r++) {{
        float *Y = O + r * N;
        oi_q_quantize_act(X + r * K, K, {block}, {split}, &act);
        oi_q_gemv_rows(W, {code}u, {f32}, K, {block}, N, &act, Y);
{add_bias}    }}
    return OI_OK;
}}
"""


def _matmul_right(name: str, info: OpInfo, layout: BlockLayout, where: str) -> str:
    """a [..., K] @ W [K, N] with W blocked along N: each dequantized row of W is added into
    every output row (axpy), so W is read once per call."""
    code, block, f32 = _facts(layout, where)
    k, n = info.in_shapes[1]
    a_shape = info.in_shapes[0]
    if len(a_shape) < 1 or a_shape[-1] != k:
        raise SynthesisError(f"{where}: matmul with a quantized right operand needs a [..., {k}]")
    return f"""static int {name}(oi_tensor *o, const oi_tensor *x0, const oi_tensor *x1) {{
    /* matmul a @ W, W a {layout.describe()} matrix [{k}, {n}] */
    static float WR[{n}];
    const int64_t K = {k}, N = {n};
    const float *A = (const float *)x0->data;
    const oi_block_tensor *W = (const oi_block_tensor *)x1->data;
    float *O = (float *)o->data;
    int64_t dims[OI_MAX_DIMS], rows, r, kk, j;
    int d, nd, rc;
    if (x0->ndim < 1 || x0->dims[x0->ndim - 1] != K) {{ oi_set_error("matmul: a [..., %lld] does not fit W", (long long)K); return OI_ERR_SHAPE; }}
    if (o == x0) {{ oi_set_error("matmul: the output must not alias the input"); return OI_ERR_ARGUMENT; }}
    nd = x0->ndim;
    for (d = 0; d < nd; d++) dims[d] = x0->dims[d];
    dims[nd - 1] = N;
    rc = oi_set_shape(o, nd, dims);
    if (rc) return rc;
    rows = oi_numel(x0) / K;
    memset(O, 0, (size_t)(rows * N) * sizeof(float));
    for (kk = 0; kk < K; kk++) {{
        oi_q_dequant_row(W, {code}u, {f32}, N, {block}, kk, WR);
        for (r = 0; r < rows; r++) {{
            const float s = A[r * K + kk];
            float *Y = O + r * N;
            for (j = 0; j < N; j++) Y[j] += s * WR[j];
        }}
    }}
    return OI_OK;
}}
"""


def _matmul_left(name: str, info: OpInfo, layout: BlockLayout, where: str) -> str:
    """W [M, K] @ b [K, N] (b 2-D): each dequantized row of W times b."""
    code, block, f32 = _facts(layout, where)
    m, k = info.in_shapes[0]
    b_shape = info.in_shapes[1]
    if len(b_shape) != 2 or b_shape[0] != k:
        raise SynthesisError(
            f"{where}: matmul with a quantized left operand [{m}, {k}] needs a 2-D right operand [{k}, N]"
        )
    n = b_shape[1]
    return f"""static int {name}(oi_tensor *o, const oi_tensor *x0, const oi_tensor *x1) {{
    /* matmul W @ b, W a {layout.describe()} matrix [{m}, {k}] */
    static float WR[{k}];
    const int64_t M = {m}, K = {k}, N = {n};
    const oi_block_tensor *W = (const oi_block_tensor *)x0->data;
    const float *B = (const float *)x1->data;
    float *O = (float *)o->data;
    int64_t dims[2], i, kk, j;
    int rc;
    if (x1->ndim != 2 || x1->dims[0] != K || x1->dims[1] != N) {{ oi_set_error("matmul: b does not fit [%lld, %lld]", (long long)K, (long long)N); return OI_ERR_SHAPE; }}
    if (o == x1) {{ oi_set_error("matmul: the output must not alias the input"); return OI_ERR_ARGUMENT; }}
    dims[0] = M; dims[1] = N;
    rc = oi_set_shape(o, 2, dims);
    if (rc) return rc;
    for (i = 0; i < M; i++) {{
        float *Y = O + i * N;
        oi_q_dequant_row(W, {code}u, {f32}, K, {block}, i, WR);
        for (j = 0; j < N; j++) Y[j] = 0.0f;
        for (kk = 0; kk < K; kk++) {{
            const float s = WR[kk];
            const float *Br = B + kk * N;
            for (j = 0; j < N; j++) Y[j] += s * Br[j];
        }}
    }}
    return OI_OK;
}}
"""


def _rows(name: str, info: OpInfo, layout: BlockLayout, where: str) -> str:
    """embedding(table, ids) / gather(data, indices, axis=0): dequantize the picked rows only."""
    code, block, f32 = _facts(layout, where)
    shape = info.in_shapes[0]
    k = shape[-1]
    size = shape[0]
    per_row = math.prod(shape[1:]) // k  # rows of K elements in one selected slice
    idx = ctype(info.in_dtypes[1], where)
    # Negative indices count from the end (signed types), anything outside is clamped: as _gather.
    neg = "t += t < 0 ? SIZE : 0;\n        " if idx.family == "sint" else ""
    tail = ", ".join(str(d) for d in shape[1:])
    return f"""static int {name}(oi_tensor *o, const oi_tensor *x0, const oi_tensor *x1) {{
    /* {info.opdef.name} of a {layout.describe()} table [{size}, {tail}] */
    const int64_t SIZE = {size}, K = {k}, PER = {per_row};
    const oi_block_tensor *T = (const oi_block_tensor *)x0->data;
    const {idx.storage} *I = (const {idx.storage} *)x1->data;
    float *O = (float *)o->data;
    int64_t dims[OI_MAX_DIMS], ni, r, p;
    int d, nd = 0, rc;
    if (x1->ndim + x0->ndim - 1 > OI_MAX_DIMS) {{ oi_set_error("{info.opdef.name}: result rank too large"); return OI_ERR_SHAPE; }}
    for (d = 0; d < x1->ndim; d++) dims[nd++] = x1->dims[d];
    for (d = 1; d < x0->ndim; d++) dims[nd++] = x0->dims[d];
    rc = oi_set_shape(o, nd, dims);
    if (rc) return rc;
    ni = oi_numel(x1);
    for (r = 0; r < ni; r++) {{
        int64_t t = (int64_t){idx.load.format("I[r]")};
        {neg}if (t < 0) t = 0;
        if (t > SIZE - 1) t = SIZE - 1;
        for (p = 0; p < PER; p++) oi_q_dequant_row(T, {code}u, {f32}, K, {block}, t * PER + p, O + (r * PER + p) * K);
    }}
    return OI_OK;
}}
"""
