"""The C target's dense f32 kernels: linear and matmul on the runtime's GEMM/GEMV, attention,
convolution.

The arithmetic lives in fixed runtime headers (``emit/runtime/oi_gemm.h``,
``oi_attention.h``, ``oi_conv.h``, ``oi_vec.h``, ``oi_parallel.h``, and ``oi_pool.h`` for threaded builds),
included by ``<name>.c``; the kernels rendered here only check shapes and fill an argument
block (``oi_gemm_f32_args``, ``oi_attention_f32_args``, ``oi_conv_f32_args``). Which
headers a program includes, how many threads it may use and its cache blocking come from
`DenseOptions` (the device JSON's ``preferences``).
"""

from __future__ import annotations

from dataclasses import dataclass

from openinfer_jax.core.dtypes import DType
from openinfer_jax.emit.analysis import OpInfo
from openinfer_jax.emit.c_options import DenseOptions
from openinfer_jax.emit.c_types import ctype

__all__ = [
    "DEFAULT_LAYOUT",
    "AttentionLayout",
    "EpilogueCode",
    "dense_kernel",
    "dense_pack_bytes",
    "dense_preamble",
    "fusion_anchor",
    "runtime_headers",
]


@dataclass(frozen=True)
class EpilogueCode:
    """An elementwise chain fused into a kernel (`openinfer_jax.emit.c_epilogue`): C
    statements updating ``float v`` per output element, reading ``E0[i]`` .. ``E<extras-1>[i]``
    (operands of the output's shape); the final value goes to one more output tensor.
    `clamp` (lo, hi): the chain starts with a clamp the kernel applies itself, in registers,
    before `lines` (the kernel's ``act``; the output tensor is then the kernel's own)."""

    extras: int
    lines: tuple[str, ...]
    clamp: tuple[float, float] | None = None


def _epilogue_context(name: str, epi: EpilogueCode | None) -> str:
    """The kernel's declaration of its epilogue's context (none without statements)."""
    return f"    {name}_ectx ectx;\n" if epi is not None and epi.lines else ""


def _epilogue_parts(name: str, epi: EpilogueCode | None, hook: str) -> tuple[str, str, str]:
    """(code before the kernel, extra parameters, statements after the output's shape is
    set) wiring `epi` into a kernel whose argument block is `hook` (``g`` or ``a``)."""
    if epi is None:
        return "", "", ""
    params = "".join(f", const oi_tensor *e{k}" for k in range(epi.extras)) + ", oi_tensor *oz"
    act = ""
    if epi.clamp is not None:
        from openinfer_jax.emit.c_kernels import c_literal  # (c_kernels imports this module)

        lo, hi = (c_literal(v, "float") for v in epi.clamp)
        act = f"    static const float act[2] = {{{lo}, {hi}}};\n    {hook}.act = act;\n"
    if not epi.lines:  # the clamp alone: the kernel's output is the chain's
        setup = f"""    if (oz != o) {{ oi_set_error("fused clamp: the output must be the kernel's"); return OI_ERR_ARGUMENT; }}
{act}"""
        return "", params, setup
    loads = "".join(f"    const float *E{k} = x->e[{k}];\n" for k in range(epi.extras))
    body = "".join(f"            {line}\n" for line in epi.lines)
    pre = f"""typedef struct {{ const float *y; float *z; const float *e[{max(epi.extras, 1)}]; }} {name}_ectx;

/* the fused elementwise chain, on each final output of the block */
static void {name}_epi(const void *p, float *c, int64_t ldc, int64_t row0, int64_t rows, int64_t col0, int64_t cols) {{
    const {name}_ectx *x = (const {name}_ectx *)p;
{loads}    int64_t r, j;
    for (r = row0; r < row0 + rows; r++) {{
        const int64_t base = (int64_t)(c - x->y) + r * ldc + col0;
        for (j = 0; j < cols; j++) {{
            const int64_t i = base + j;
            float v = x->y[i];
{body}            x->z[i] = v;
        }}
    }}
}}

"""
    checks = "".join(
        f"""    if (oi_numel(e{k}) != oi_numel(o)) {{ oi_set_error("fused epilogue: operand {k} has %lld elements, the output %lld", (long long)oi_numel(e{k}), (long long)oi_numel(o)); return OI_ERR_SHAPE; }}
    ectx.e[{k}] = (const float *)e{k}->data;
"""
        for k in range(epi.extras)
    )
    setup = f"""    rc = oi_set_shape(oz, o->ndim, o->dims);
    if (rc) return rc;
{checks}    ectx.y = (const float *)o->data;
    ectx.z = (float *)oz->data;
    {hook}.epilogue = {name}_epi;
    {hook}.epilogue_ctx = &ectx;
{act}"""
    return pre, params, setup


def fusion_anchor(info: OpInfo) -> bool:
    """Whether the kernel of `info` can run a fused elementwise epilogue."""
    return _gemm_kind(info) in ("linear", "matmul", "conv")


def _is_f32(info: OpInfo) -> bool:
    return all(d is DType.F32 for d in (*info.in_dtypes, info.out_dtype))


# Runtime constants mirrored from oi_attention.h (the tiled path's query block).
_ATTN_TILE_ROWS = 24


def _attention_fits(info: OpInfo) -> bool:
    """f32 q/k/v/out, an f32 or bool mask (or none), a literal scale."""
    dtypes = info.in_dtypes
    if not all(d is DType.F32 for d in (*dtypes[:3], info.out_dtype)):
        return False
    if len(dtypes) > 3 and dtypes[3] not in (DType.F32, DType.BOOL):
        return False
    scale = info.params.get("scale")
    return scale is None or (isinstance(scale, (int, float)) and not isinstance(scale, bool))


def _gemm_kind(info: OpInfo) -> str | None:
    """``linear`` / ``matmul`` / ``attention`` when the op runs on the runtime's f32
    kernels, else None (a block-quantized operand has its own kernels, emit/c_quant.py,
    which take no epilogue)."""
    name = info.opdef.name
    if any(layout is not None for layout in info.in_layouts):
        return None
    if name == "attention" and _attention_fits(info):
        return "attention"
    if not _is_f32(info):
        return None
    if name in ("conv1d", "conv2d"):
        return "conv"
    if name == "linear":
        return "linear"
    if name == "matmul" and info.params.get("acc") is None and all(info.in_shapes):
        return "matmul"
    return None


def runtime_headers(info: OpInfo) -> tuple[str, ...]:
    """The runtime headers the kernel of `info` needs (empty for the other kernels)."""
    kind = _gemm_kind(info)
    if kind is None:
        return ()
    return {"attention": ("oi_attention.h",), "conv": ("oi_conv.h",)}.get(kind, ("oi_gemm.h",))


def _rows(info: OpInfo) -> int:
    """The largest row count (M) the op's product can have."""
    shape = info.in_shapes[0]
    if info.opdef.name == "linear" or len(shape) < 2:
        rows = 1
        for dim in shape[:-1]:
            rows *= dim
        return rows
    return shape[-2]


def _takes_gemm(info: OpInfo, options: DenseOptions) -> bool:
    """Whether the kernel may run the packed GEMM (and so needs the pack buffer)."""
    kind = _gemm_kind(info)
    if kind is None:
        return False
    if kind == "attention":
        return True
    if kind == "conv":  # the GEMM's panels, or the depthwise kernel's padded plane
        return True
    rows = _rows(info)
    if kind == "linear":
        return rows >= options.gemv_max_rows
    return rows > 1


def _depthwise(info: OpInfo) -> bool:
    """One filter per input channel (groups = C = M)."""
    groups = int(info.params.get("groups", 1) or 1)
    x, w = info.in_shapes[0], info.in_shapes[1]
    return groups == x[1] == w[0] and w[1] == 1


# Runtime constants mirrored from oi_conv.h: the direct kernel's most taps per output, and
# (here only) the most scratch floats per thread a non-depthwise convolution may take for it.
_DIRECT_MAX_TAPS = 64
_DIRECT_MAX_FLOATS = 1 << 20


def _direct(info: OpInfo, options: DenseOptions) -> bool:
    """Whether oi_conv.h runs the convolution on its direct kernel (oi_conv_direct): depthwise,
    or a 2-D convolution with a few taps per output (C/groups * KH * KW <= 64, not 1x1)
    whose scratch stays small."""
    if _depthwise(info):
        return True
    w = info.in_shapes[1]
    if len(w) != 4 or w[2] * w[3] == 1 or w[1] * w[2] * w[3] > _DIRECT_MAX_TAPS:
        return False
    return _depthwise_floats(info) <= max(options.pack_floats, _DIRECT_MAX_FLOATS)


def _conv_geometry(info: OpInfo) -> tuple[list[int], list[int], list[int], int]:
    """Strides, pads (top, left, bottom, right), dilations as 2-D, and groups."""
    spatial = len(info.in_shapes[0]) - 2
    p = info.params
    strides = list(p.get("strides") or [1] * spatial)
    pads = list(p.get("pads") or [0] * (2 * spatial))
    dil = list(p.get("dilations") or [1] * spatial)
    if spatial == 1:  # one row: the 2-D kernel with H = KH = 1
        strides, dil, pads = [1, *strides], [1, *dil], [0, pads[0], 0, pads[1]]
    return strides, pads, dil, int(p.get("groups", 1) or 1)


def _depthwise_floats(info: OpInfo) -> int:
    """Scratch floats per thread of the direct kernel (oi_dw_scratch_floats): the padded,
    phase-split copies of one group's input channels; for a depthwise convolution at least
    what the channel-blocked kernel takes (oi_conv.h picks one of the two when it runs)."""
    strides, pads, _dil, groups = _conv_geometry(info)
    x = info.in_shapes[0]
    h, w = (x[2], x[3]) if len(x) == 4 else (1, x[2])
    rows = h + pads[0] + pads[2]
    width = (w + pads[1] + pads[3] + strides[1] - 1) // strides[1] + 1
    planar = x[1] // groups * strides[1] * rows * width + 4 * 16
    return max(planar, _blocked_floats(info)) if _depthwise(info) else planar


# oi_conv.h's channel-blocked depthwise kernel sizes its bands for 16 lanes whatever the
# build (OI_DWB_RING_FLOATS: its ring of input rows), so 16 lanes bound every build's need.
_BLOCKED_RING_FLOATS = 4096
_BLOCKED_LANES = 16


def _blocked_floats(info: OpInfo) -> int:
    """Scratch floats per thread of the channel-blocked depthwise kernel with 16 lanes
    (oi_dwb_scratch_floats): its ring of padded input rows, the filters, a band's outputs
    in whole vectors of pixels, the bias."""
    strides, pads, dil, _groups = _conv_geometry(info)
    x, w = info.in_shapes[0], info.in_shapes[1]
    h, wd = (x[2], x[3]) if len(x) == 4 else (1, x[2])
    kh, kw = (w[2], w[3]) if len(w) == 4 else (1, w[2])
    lanes = _BLOCKED_LANES
    width = wd + pads[1] + pads[3]
    oh = max((h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1, 0)
    ow = max((width - dil[1] * (kw - 1) - 1) // strides[1] + 1, 0)
    fits, reach = _BLOCKED_RING_FLOATS // (lanes * width), (kh - 1) * dil[0] + 1
    fit = (fits - reach) // strides[0] + 1 if fits > reach else 1
    band = fit // 2 * 2 if fit > 2 else fit  # (an even count: the kernels take rows in pairs)
    band = band if band < oh else max(oh, 1)
    ring = (band - 1) * strides[0] + reach
    outputs = -(-band * ow // lanes) * lanes
    return lanes * (ring * width + kh * kw + outputs + 1)


def dense_pack_bytes(info: OpInfo, options: DenseOptions) -> int:
    """Bytes of the arena's pack buffer the kernel of `info` needs (0: none)."""
    if not _takes_gemm(info, options):
        return 0
    per_thread = options.pack_floats
    if _gemm_kind(info) == "conv" and _depthwise(info):
        per_thread = _depthwise_floats(info)
    elif _gemm_kind(info) == "conv" and _direct(info, options):  # the GEMM's if it falls back
        per_thread = max(per_thread, _depthwise_floats(info))
    if _gemm_kind(info) == "attention":  # + the scores of a query block and their sums
        keys = info.in_shapes[1][-2]
        per_thread += _ATTN_TILE_ROWS * keys + _ATTN_TILE_ROWS
    return 4 * per_thread * options.threads


def dense_preamble(headers: set[str], options: DenseOptions) -> list[str]:
    """The lines of ``<name>.c`` that configure and include the runtime headers."""
    if not headers:
        return []
    lines = [f"#define OI_MAX_THREADS {options.threads}"]
    if options.kc != 256:
        lines.append(f"#define OI_KC {options.kc}")
    if options.nc != 256:
        lines.append(f"#define OI_NC {options.nc}")
    if options.gemv_max_rows != 4:
        lines.append(f"#define OI_GEMV_MAX_ROWS {options.gemv_max_rows}")
    lines += [f'#include "{h}"' for h in sorted(headers)]
    return [*lines, ""]


def _prepack(when: str, nk: int, indent: str = "    ") -> str:
    """Statements giving the GEMM the once-packed panels of a constant B."""
    return f"{indent}g.b_panels = {when} ? oi_gemm_prepacked(g.b, g.N, g.K, g.ldb, {nk}) : NULL;\n"


def _gemm_call(pack: str, indent: str) -> str:
    return f"{indent}g.pack = {pack};\n{indent}oi_gemm_f32(&g);"


def _linear(name: str, info: OpInfo, pack: str, epi: EpilogueCode | None, prepack: bool) -> str:
    bias = len(info.in_dtypes) > 2
    args = "".join(f", const oi_tensor *x{k}" for k in range(len(info.in_dtypes)))
    pre, extra, setup = _epilogue_parts(name, epi, "g")
    ectx = _epilogue_context(name, epi)
    return f"""{pre}static int {name}(oi_tensor *o{args}{extra}) {{
{ectx}    oi_gemm_f32_args g;
    int64_t dims[OI_MAX_DIMS];
    int d, rc;
    memset(&g, 0, sizeof g);
    if (x0->ndim < 1 || x1->ndim != 2 || x1->dims[1] != x0->dims[x0->ndim - 1]) {{
        oi_set_error("linear: x [..., in] and w [out, in] do not fit"); return OI_ERR_SHAPE;
    }}
    if (o == x0) {{ oi_set_error("linear: the output must not alias the input"); return OI_ERR_ARGUMENT; }}
    for (d = 0; d < x0->ndim; d++) dims[d] = x0->dims[d];
    dims[x0->ndim - 1] = x1->dims[0];
    rc = oi_set_shape(o, x0->ndim, dims);
    if (rc) return rc;
{setup}    g.K = x1->dims[1];
    g.N = x1->dims[0];
    g.M = g.K ? oi_numel(x0) / g.K : oi_numel(o) / (g.N ? g.N : 1);
    g.a = (const float *)x0->data;
    g.lda = g.K;
    g.b = (const float *)x1->data;
    g.ldb = g.K;
    g.b_nk = 1;
    g.bias = {"(const float *)x2->data" if bias else "NULL"};
    g.c = (float *)o->data;
    g.ldc = g.N;
{_prepack("g.M >= OI_GEMV_MAX_ROWS", 1) if prepack else ""}{_gemm_call(pack, "    ")}
    return OI_OK;
}}
"""


def _matmul(name: str, pack: str, epi: EpilogueCode | None, prepack: bool) -> str:
    pre, extra, setup = _epilogue_parts(name, epi, "g")
    ectx = _epilogue_context(name, epi)
    return f"""{pre}static int {name}(oi_tensor *o, const oi_tensor *x0, const oi_tensor *x1{extra}) {{
{ectx}    const float *A = (const float *)x0->data;
    const float *B = (const float *)x1->data;
    float *O = (float *)o->data;
    oi_gemm_f32_args g;
    oi_tensor ba, bb_, bo;
    const oi_tensor *bin[2];
    oi_iter it;
    int64_t M, K, N, n, t;
    int rc, d;
    memset(&g, 0, sizeof g);
    /* NumPy rules: a 1-D left operand is a row [1, K], a 1-D right operand a column [K, 1];
       the added axis is dropped from the result */
    const int av = x0->ndim == 1, bv = x1->ndim == 1;
    if (x0->ndim < 1 || x1->ndim < 1) {{ oi_set_error("matmul: inputs must have rank >= 1"); return OI_ERR_SHAPE; }}
    if (o == x0 || o == x1) {{ oi_set_error("matmul: the output must not alias an input"); return OI_ERR_ARGUMENT; }}
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
{setup}    g.M = M; g.N = N; g.K = K;
    g.lda = K; g.ldb = N; g.b_nk = 0; g.bias = NULL; g.ldc = N;
    n = it.numel;
    for (t = 0; t < n; t++) {{
        g.a = A + it.off[0] * M * K;
        g.b = B + it.off[1] * K * N;
        g.c = O + t * M * N;
{_prepack("M > 1", 0, "        ") if prepack else ""}{_gemm_call(pack, "        ")}
        oi_iter_next(&it);
    }}
    return OI_OK;
}}
"""


def _conv(
    name: str, info: OpInfo, pack: str, epi: EpilogueCode | None, options: DenseOptions
) -> str:
    spatial = len(info.in_shapes[0]) - 2
    strides, pads, dil, groups = _conv_geometry(info)
    pack_floats = _depthwise_floats(info) if _direct(info, options) else 0
    bias = len(info.in_dtypes) > 2
    args = "".join(f", const oi_tensor *x{k}" for k in range(len(info.in_dtypes)))
    op = info.opdef.name
    h = "x0->dims[2]" if spatial == 2 else "1"
    kh = "x1->dims[2]" if spatial == 2 else "1"
    out_dims = "a.geom.OH, a.geom.OW" if spatial == 2 else "a.geom.OW"
    pre, extra, setup = _epilogue_parts(name, epi, "a")
    ectx = _epilogue_context(name, epi)
    return f"""{pre}static int {name}(oi_tensor *o{args}{extra}) {{
{ectx}    oi_conv_f32_args a;
    int64_t dims[4];
    int rc;
    memset(&a, 0, sizeof a);
    if (x0->ndim != {spatial + 2} || x1->ndim != {spatial + 2}) {{ oi_set_error("{op}: input rank %d, expected {spatial + 2}", x0->ndim); return OI_ERR_SHAPE; }}
    if (o == x0) {{ oi_set_error("{op}: the output must not alias the input"); return OI_ERR_ARGUMENT; }}
    a.N = x0->dims[0]; a.G = {groups}; a.M = x1->dims[0];
    if (x0->dims[1] % a.G || a.M % a.G || x1->dims[1] != x0->dims[1] / a.G) {{
        oi_set_error("{op}: %lld input channels, %lld filters of %lld channels and {groups} groups do not fit",
                     (long long)x0->dims[1], (long long)a.M, (long long)x1->dims[1]); return OI_ERR_SHAPE;
    }}
    a.geom.C = x0->dims[1] / a.G; a.geom.H = {h}; a.geom.W = x0->dims[x0->ndim - 1];
    a.geom.x_c = a.geom.H * a.geom.W;
    a.geom.KH = {kh}; a.geom.KW = x1->dims[x1->ndim - 1];
    a.geom.SH = {strides[0]}; a.geom.SW = {strides[1]}; a.geom.DH = {dil[0]}; a.geom.DW = {dil[1]};
    a.geom.PH = {pads[0]}; a.geom.PW = {pads[1]};
    a.geom.OH = (a.geom.H + {pads[0] + pads[2]} - a.geom.DH * (a.geom.KH - 1) - 1) / a.geom.SH + 1;
    a.geom.OW = (a.geom.W + {pads[1] + pads[3]} - a.geom.DW * (a.geom.KW - 1) - 1) / a.geom.SW + 1;
    if (a.geom.OH < 0) a.geom.OH = 0;
    if (a.geom.OW < 0) a.geom.OW = 0;
    {{
        const int64_t shape[4] = {{a.N, a.M, {out_dims}}};
        for (rc = 0; rc < {spatial + 2}; rc++) dims[rc] = shape[rc];
    }}
    rc = oi_set_shape(o, {spatial + 2}, dims);
    if (rc) return rc;
{setup}    a.x = (const float *)x0->data;
    a.w = (const float *)x1->data;
    a.bias = {"(const float *)x2->data" if bias else "NULL"};
    a.y = (float *)o->data;
    a.pack = {pack};
    a.pack_floats = {pack_floats};
    a.pad_h = {pads[2]}; a.pad_w = {pads[3]};
    oi_conv_f32(&a);
    return OI_OK;
}}
"""


#: Operand layouts of the attention kernel (oi_attn_view in oi_attention.h): per q, k, v and
#: the output, (0, 0) for [.., H, S, D], (1, 0) for [.., S, H, D], (2, H) for [.., S, H * D].
AttentionLayout = tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int]]
DEFAULT_LAYOUT: AttentionLayout = ((0, 0), (0, 0), (0, 0), (0, 0))


def _attention(name: str, info: OpInfo, layout: AttentionLayout) -> str:
    masked = len(info.in_dtypes) > 3
    scale = info.params.get("scale")
    scale_c = "1.0f / sqrtf((float)a.D)" if scale is None else f"(float){float(scale)!r}"
    mask_arg = ", const oi_tensor *x3" if masked else ""
    (lq, hq), (lk, hk), (lv, hv), (lo, ho) = layout
    if masked:
        field = "mask_b" if info.in_dtypes[3] is DType.BOOL else "mask_f"
        storage = "uint8_t" if info.in_dtypes[3] is DType.BOOL else "float"
        mask_setup = """    int64_t mstride[OI_MAX_DIMS], ms = 1;
    if (x3->ndim > nd) { oi_set_error("attention: mask rank exceeds the scores' rank"); return OI_ERR_SHAPE; }
    for (d = nd - 1; d >= 0; d--) {
        const int ad = d - (nd - x3->ndim);
        const int64_t dim = ad >= 0 ? x3->dims[ad] : 1;
        const int64_t want = d == nd - 1 ? a.Sk : (d == nd - 2 ? a.Sq : (d == nd - 3 ? a.Hq : vq.batch[d]));
        if (dim != 1 && dim != want) { oi_set_error("attention: the mask does not broadcast to the scores"); return OI_ERR_SHAPE; }
        mstride[d] = dim == 1 ? 0 : ms;
        ms *= dim;
    }
    a.m_h = mstride[nd - 3]; a.m_i = mstride[nd - 2]; a.m_j = mstride[nd - 1];
"""
        mask_batch = f"""        {{
            int64_t moff = 0, rem = bb;
            for (d = nd - 4; d >= 0; d--) {{ moff += (rem % vq.batch[d]) * mstride[d]; rem /= vq.batch[d]; }}
            a.{field} = (const {storage} *)x3->data + moff;
        }}
"""
    else:
        mask_setup = "    a.m_h = a.m_i = a.m_j = 0;\n"
        mask_batch = ""
    return f"""static int {name}(oi_tensor *o, const oi_tensor *x0, const oi_tensor *x1, const oi_tensor *x2{mask_arg}) {{
    oi_attention_f32_args a;
    oi_attn_view vq, vk, vv, vo;
    int64_t B = 1, bb;
    int d, rc, nd;
    memset(&a, 0, sizeof a);
    if (oi_attn_view_of(x0, {lq}, {hq}, &vq) || oi_attn_view_of(x1, {lk}, {hk}, &vk) || oi_attn_view_of(x2, {lv}, {hv}, &vv)) {{
        oi_set_error("attention: q, k, v need rank >= 3 ([..., heads, seq, dim])"); return OI_ERR_SHAPE;
    }}
    if (vk.nb != vq.nb || vv.nb != vq.nb) {{ oi_set_error("attention: q, k, v have different batch ranks"); return OI_ERR_SHAPE; }}
    for (d = 0; d < vq.nb; d++) {{
        if (vk.batch[d] != vq.batch[d] || vv.batch[d] != vq.batch[d]) {{ oi_set_error("attention: batch dims differ"); return OI_ERR_SHAPE; }}
        B *= vq.batch[d];
    }}
    a.Hq = vq.H; a.Sq = vq.S; a.D = vq.D; a.Hk = vk.H; a.Sk = vk.S; a.Dv = vv.D;
    if (vk.D != a.D || vv.H != a.Hk || vv.S != a.Sk || a.Hk == 0 || a.Hq % a.Hk) {{
        oi_set_error("attention: q, k, v shapes do not fit"); return OI_ERR_SHAPE;
    }}
    if (o == x0 || o == x1 || o == x2) {{ oi_set_error("attention: the output must not alias an input"); return OI_ERR_ARGUMENT; }}
    nd = vq.nb + 3;
    (void)nd;
{mask_setup}    rc = oi_attn_set_shape(o, &vq, {lo}, a.Hq, a.Sq, a.Dv);
    if (!rc) rc = oi_attn_view_of(o, {lo}, {ho}, &vo);
    if (rc) return rc;
    a.q_h = vq.s_h; a.q_i = vq.s_i;
    a.k_h = vk.s_h; a.k_j = vk.s_i;
    a.v_h = vv.s_h; a.v_j = vv.s_i;
    a.o_h = vo.s_h; a.o_i = vo.s_i;
    a.scale = {scale_c};
    a.causal = {int(bool(info.params.get("causal", False)))};
    a.scratch = (float *)oi_pack;
    for (bb = 0; bb < B; bb++) {{
        a.q = (const float *)x0->data + bb * vq.s_b;
        a.k = (const float *)x1->data + bb * vk.s_b;
        a.v = (const float *)x2->data + bb * vv.s_b;
        a.o = (float *)o->data + bb * vo.s_b;
{mask_batch}        oi_attention_f32(&a);
    }}
    return OI_OK;
}}
"""


def dense_kernel(
    name: str,
    info: OpInfo,
    options: DenseOptions,
    epilogue: EpilogueCode | None = None,
    constant_inputs: frozenset[int] = frozenset(),
    layout: AttentionLayout | None = None,
) -> str | None:
    """The C function `name` for `info` on the runtime's kernels, or None when the op is
    not an f32 linear/matmul/attention/conv (the generic renderers handle it). With
    `epilogue` (linear/matmul/conv only) the function takes the chain's operands and its
    output tensor after its own arguments; `layout` (attention) says how its operands and
    output hold their [.., heads, seq, dim] (`AttentionLayout`)."""
    kind = _gemm_kind(info)
    if kind is None:
        return None
    for dtype in info.in_dtypes:
        ctype(dtype)
    if kind == "attention":
        return _attention(name, info, layout or DEFAULT_LAYOUT)
    pack = "(float *)oi_pack" if _takes_gemm(info, options) else "NULL"
    if kind == "conv":
        return _conv(name, info, pack, epilogue, options)
    prepack = options.prepack and 1 in constant_inputs and pack != "NULL"
    if kind == "linear":
        return _linear(name, info, pack, epilogue, prepack)
    return _matmul(name, pack, epilogue, prepack)
