/* OpenInfer-JAX emitted runtime: f32 convolution (conv1d as conv2d with one row), NCHW.
 *
 *     y[n, m, oy, ox] = bias[m] + sum_{c, ky, kx} w[m, c, ky, kx] * x[n, g*C/G + c, iy, ix]
 *
 * with iy = oy * SH - PH + ky * DH (likewise ix), zero outside the image, m in group g.
 *
 *  - Depthwise (one filter per input channel: groups = C = M): a direct kernel per channel.
 *    The channel's plane is first copied into scratch with its zero padding and, for
 *    stride S, split into S column phases, so every tap of a strip of outputs reads
 *    contiguous memory with no bounds test; a strip of two vectors of outputs accumulates
 *    all KH x KW taps in registers. (Without enough scratch: a row-by-row kernel.)
 *  - Otherwise, per image and group, a GEMM: the filters [M/G, C/G*KH*KW] times the im2col
 *    matrix of the image, which the GEMM's packing reads straight from the image (no im2col
 *    buffer); a 1x1 convolution with stride 1 and no padding reads the image as a plain
 *    [C, H*W] matrix. The bias is added per output channel as each tile is stored.
 *
 * `act` ({lo, hi} or NULL) clamps each final output after the bias, in registers (as in
 * oi_gemm.h), before the epilogue.
 *
 * Threads split output channels (depthwise) or the GEMM's output pixels; never a sum. */
#ifndef OI_CONV_H
#define OI_CONV_H

#include "oi_gemm.h"

typedef struct {
    int64_t N, G, M;    /* images, groups, output channels (all groups) */
    oi_conv_geom geom;  /* one group of one image: C is the group's input channels */
    const float *x;     /* [N, G * C, H, W] */
    const float *w;     /* [M, C, KH, KW] */
    const float *bias;  /* [M] or NULL */
    float *y;           /* [N, M, OH, OW] */
    float *pack;        /* scratch per thread: OI_GEMM_PACK_FLOATS, or for depthwise at least */
    int64_t pack_floats; /* oi_dw_scratch_floats(geom) to take the fast depthwise path */
    int64_t pad_h, pad_w; /* pads after (bottom, right) */
    oi_epilogue_f32 epilogue; /* on final outputs, as for oi_gemm_f32 (c: the output plane) */
    const void *epilogue_ctx;
    const float *act;   /* {lo, hi}: clamp the final outputs (before the epilogue), or NULL */
    int shared; /* set by oi_conv_f32: the direct kernel's copy of the one image group is
                   made once, in slot 0's scratch, and every thread reads it */
} oi_conv_f32_args;

/* Rows and per-phase width of a channel's padded, phase-split copy. */
static inline int64_t oi_dw_rows(const oi_conv_geom *g, int64_t pad_h) { return g->H + g->PH + pad_h; }
static inline int64_t oi_dw_width(const oi_conv_geom *g, int64_t pad_w) {
    return (g->W + g->PW + pad_w + g->SW - 1) / g->SW + 1;
}
/* Floats of one channel's copy (all its phases). */
static inline int64_t oi_dw_plane_floats(const oi_conv_geom *g, int64_t pad_h, int64_t pad_w) {
    return g->SW * oi_dw_rows(g, pad_h) * oi_dw_width(g, pad_w);
}
/* Scratch of the direct kernel: the copies of a group's C channels (+ 4 vectors: the last
   strip of a row may read past the copy's end; those lanes are dropped) */
static inline int64_t oi_dw_scratch_floats(const oi_conv_geom *g, int64_t pad_h, int64_t pad_w) {
    return g->C * oi_dw_plane_floats(g, pad_h, pad_w) + 4 * 16;
}

/* One output row of a depthwise channel: acc[ox] for ox in [0, OW). */
static OI_VEC_FN void oi_dw_row(const oi_conv_geom *g, const float *restrict plane, const float *restrict wc,
                                int64_t oy, float *restrict acc) {
    int64_t ky, kx, ox;
    for (ox = 0; ox < g->OW; ox++) acc[ox] = 0.0f;
    for (ky = 0; ky < g->KH; ky++) {
        const int64_t iy = oy * g->SH - g->PH + ky * g->DH;
        const float *row;
        if (iy < 0 || iy >= g->H) continue;
        row = plane + iy * g->W;
        for (kx = 0; kx < g->KW; kx++) {
            const float wv = wc[ky * g->KW + kx];
            const int64_t off = kx * g->DW - g->PW; /* ix = ox * SW + off */
            /* outputs whose input column lies inside the row: lo <= ox < hi */
            int64_t lo = off < 0 ? (-off + g->SW - 1) / g->SW : 0;
            int64_t hi = g->W - off > 0 ? (g->W - off + g->SW - 1) / g->SW : 0;
            if (hi > g->OW) hi = g->OW;
            if (g->SW == 1) {
                const float *src = row + off;
                for (ox = lo; ox < hi; ox++) acc[ox] = OI_FMAF(wv, src[ox], acc[ox]);
            } else {
                for (ox = lo; ox < hi; ox++) acc[ox] = OI_FMAF(wv, row[ox * g->SW + off], acc[ox]);
            }
        }
    }
}

#define OI_DW_MAX_TAPS 64

/* Copy input rows [y0, y1) of one channel into its zero-padded, phase-split copy `pp` (phase
 * q holds padded columns q, q + SW, ...: `rows` x `width` floats each); the zero borders are
 * left alone. */
static void oi_dc_copy_rows(const oi_conv_geom *g, const float *restrict plane, float *restrict pp, int64_t rows,
                            int64_t width, int64_t y0, int64_t y1) {
    int64_t y, q, i;
    if (g->SW == 1) {
        for (y = y0; y < y1; y++)
            memcpy(pp + (y + g->PH) * width + g->PW, plane + y * g->W, sizeof(float) * (size_t)g->W);
        return;
    }
    for (q = 0; q < g->SW; q++) { /* input columns x with (x + PW) % SW == q */
        const int64_t x0 = ((q - g->PW) % g->SW + g->SW) % g->SW;
        const int64_t n = x0 < g->W ? (g->W - x0 + g->SW - 1) / g->SW : 0;
        float *d = pp + (q * rows + g->PH + y0) * width + (x0 + g->PW) / g->SW;
        for (y = y0; y < y1; y++, d += width) {
            const float *s = plane + y * g->W + x0;
            if (g->SW == 2)
                for (i = 0; i < n; i++) d[i] = s[2 * i];
            else
                for (i = 0; i < n; i++) d[i] = s[i * g->SW];
        }
    }
}

/* The whole channel (every input row). */
static void oi_dc_copy(const oi_conv_geom *g, const float *restrict plane, float *restrict pp, int64_t rows,
                       int64_t width) {
    oi_dc_copy_rows(g, plane, pp, rows, width, 0, g->H);
}

/* Zero what oi_dc_copy leaves alone in one channel's copy `pp` (the padding of every phase),
 * so a copy made over stale scratch equals one made over zeros; about the perimeter's worth
 * of stores instead of clearing the whole plane on every call. */
static void oi_dc_zero_borders(const oi_conv_geom *g, float *restrict pp, int64_t rows, int64_t width) {
    int64_t q, y;
    for (q = 0; q < g->SW; q++) { /* the columns oi_dc_copy writes in phase q: [c0, c0 + n) */
        const int64_t x0 = ((q - g->PW) % g->SW + g->SW) % g->SW;
        const int64_t n = x0 < g->W ? (g->W - x0 + g->SW - 1) / g->SW : 0, c0 = (x0 + g->PW) / g->SW;
        float *phase = pp + q * rows * width;
        memset(phase, 0, sizeof(float) * (size_t)(g->PH * width));
        for (y = g->PH; y < g->PH + g->H; y++) {
            memset(phase + y * width, 0, sizeof(float) * (size_t)c0);
            memset(phase + y * width + c0 + n, 0, sizeof(float) * (size_t)(width - c0 - n));
        }
        memset(phase + (g->PH + g->H) * width, 0, sizeof(float) * (size_t)((rows - g->PH - g->H) * width));
    }
}

/* Store the first n (<= OI_VL) lanes of v at p. */
static inline void oi_dc_store(float *p, oi_vf v, int64_t n) {
    if (n >= OI_VL) {
        oi_vstore(p, v);
    } else if (n > 0) {
        float lane[OI_VL];
        oi_vstore(lane, v);
        oi_copy_short(p, lane, n);
    }
}

/* Eight vectors of outputs of one output channel, each accumulating its taps in registers:
 * vector k reads pp + src[k] + off[t] (+ lanes) for tap t and its first cnt[k] lanes go to
 * dst[k]. Each output is the sum over the taps in order, then the bias. */
#define OI_DC_ACC(k) acc##k = OI_VFMA(w, oi_vload(s##k + o), acc##k);
#define OI_DC_PUT(k)                                                       \
    if (has_bias) acc##k = OI_VADD(acc##k, oi_vsplat(bias));               \
    if (act) acc##k = oi_vclamp(acc##k, lo, hi);                           \
    oi_dc_store(dst[k], acc##k, cnt[k]);
static OI_VEC_FN void oi_dc_group(const float *restrict pp, const int64_t *restrict src,
                                  const int64_t *restrict off, const float *restrict wc, int64_t taps,
                                  float bias, int has_bias, const float *act, float *const *dst,
                                  const int64_t *cnt) {
    const float *s0 = pp + src[0], *s1 = pp + src[1], *s2 = pp + src[2], *s3 = pp + src[3];
    const float *s4 = pp + src[4], *s5 = pp + src[5], *s6 = pp + src[6], *s7 = pp + src[7];
    oi_vf acc0 = oi_vzero(), acc1 = oi_vzero(), acc2 = oi_vzero(), acc3 = oi_vzero();
    oi_vf acc4 = oi_vzero(), acc5 = oi_vzero(), acc6 = oi_vzero(), acc7 = oi_vzero();
    int64_t t;
    for (t = 0; t < taps; t++) {
        const int64_t o = off[t];
        const oi_vf w = oi_vsplat(wc[t]);
        OI_DC_ACC(0) OI_DC_ACC(1) OI_DC_ACC(2) OI_DC_ACC(3) OI_DC_ACC(4) OI_DC_ACC(5) OI_DC_ACC(6) OI_DC_ACC(7)
    }
    {
        const oi_vf lo = oi_vsplat(act ? act[0] : 0.0f), hi = oi_vsplat(act ? act[1] : 0.0f);
        OI_DC_PUT(0) OI_DC_PUT(1) OI_DC_PUT(2) OI_DC_PUT(3) OI_DC_PUT(4) OI_DC_PUT(5) OI_DC_PUT(6) OI_DC_PUT(7)
    }
}

/* Four output rows (`nrows` <= 4 for the last block) x two vectors of outputs for KH x KW
 * kernels with KH = 3 or 5, row stride SH = 1 or 2 and no row dilation: each input vector is
 * loaded once per column tap and multiplied into every output row it reaches (up to KH), the
 * column's KH weights held in registers. Column tap q (input channel q / KW, kernel column
 * q % KW) of output row r reads row r * SH + ky of pp + coff[q] + oy0 * SH * width + ox, its
 * weights from wc + woff[q] (every KW). Sum order per output: column taps in order, kernel
 * rows within each, then the bias. */
#if defined(__GNUC__) || defined(__clang__)
#define OI_DC_INLINE static inline __attribute__((always_inline))
#else
#define OI_DC_INLINE static inline
#endif
/* the row loops unrolled whole, so every weight and accumulator index is a constant */
#if defined(__GNUC__) && !defined(__clang__)
#define OI_DC_UNROLL _Pragma("GCC unroll 16")
#elif defined(__clang__)
#define OI_DC_UNROLL _Pragma("unroll")
#else
#define OI_DC_UNROLL
#endif
OI_DC_INLINE void oi_dc_rows4(const int KH, const int SH, const int nrows, const float *restrict pp, int64_t width,
                              const int64_t *restrict coff, const int64_t *restrict woff, int64_t cols, int64_t KW,
                              const float *restrict wc, int64_t oy0, int64_t ox, float bias, int has_bias,
                              const float *restrict act, float *restrict out, int64_t ow) {
    oi_vf a00 = oi_vzero(), a01 = oi_vzero(), a10 = oi_vzero(), a11 = oi_vzero();
    oi_vf a20 = oi_vzero(), a21 = oi_vzero(), a30 = oi_vzero(), a31 = oi_vzero();
    int64_t q;
    int i;
    for (q = 0; q < cols; q++) {
        const float *base = pp + coff[q] + oy0 * SH * width + ox;
        const float *wq = wc + woff[q];
        oi_vf w[5];
        OI_DC_UNROLL
        for (i = 0; i < KH; i++) w[i] = oi_vsplat(wq[i * KW]);
        OI_DC_UNROLL
        for (i = 0; i < 3 * SH + KH; i++) {
            oi_vf d0, d1;
            if (i >= (nrows - 1) * SH + KH) break; /* the input rows of nrows output rows */
            d0 = oi_vload(base + i * width);
            d1 = oi_vload(base + i * width + OI_VL);
            if (i < KH) { a00 = OI_VFMA(w[i], d0, a00); a01 = OI_VFMA(w[i], d1, a01); }
            if (nrows > 1 && i >= SH && i - SH < KH) { a10 = OI_VFMA(w[i - SH], d0, a10); a11 = OI_VFMA(w[i - SH], d1, a11); }
            if (nrows > 2 && i >= 2 * SH && i - 2 * SH < KH) { a20 = OI_VFMA(w[i - 2 * SH], d0, a20); a21 = OI_VFMA(w[i - 2 * SH], d1, a21); }
            if (nrows > 3 && i >= 3 * SH && i - 3 * SH < KH) { a30 = OI_VFMA(w[i - 3 * SH], d0, a30); a31 = OI_VFMA(w[i - 3 * SH], d1, a31); }
        }
    }
    if (has_bias) {
        const oi_vf b = oi_vsplat(bias);
        a00 = OI_VADD(a00, b); a01 = OI_VADD(a01, b); a10 = OI_VADD(a10, b); a11 = OI_VADD(a11, b);
        a20 = OI_VADD(a20, b); a21 = OI_VADD(a21, b); a30 = OI_VADD(a30, b); a31 = OI_VADD(a31, b);
    }
    if (act) {
        const oi_vf lo = oi_vsplat(act[0]), hi = oi_vsplat(act[1]);
        a00 = oi_vclamp(a00, lo, hi); a01 = oi_vclamp(a01, lo, hi); a10 = oi_vclamp(a10, lo, hi);
        a11 = oi_vclamp(a11, lo, hi); a20 = oi_vclamp(a20, lo, hi); a21 = oi_vclamp(a21, lo, hi);
        a30 = oi_vclamp(a30, lo, hi); a31 = oi_vclamp(a31, lo, hi);
    }
    out += oy0 * ow + ox;
    oi_dc_store(out, a00, ow - ox);
    oi_dc_store(out + OI_VL, a01, ow - ox - OI_VL);
    if (nrows < 2) return;
    oi_dc_store(out + ow, a10, ow - ox);
    oi_dc_store(out + ow + OI_VL, a11, ow - ox - OI_VL);
    if (nrows < 3) return;
    oi_dc_store(out + 2 * ow, a20, ow - ox);
    oi_dc_store(out + 2 * ow + OI_VL, a21, ow - ox - OI_VL);
    if (nrows < 4) return;
    oi_dc_store(out + 3 * ow, a30, ow - ox);
    oi_dc_store(out + 3 * ow + OI_VL, a31, ow - ox - OI_VL);
}
/* The same for rows of at most one vector (OW <= OI_VL, a 7 x 7 image; row stride 1): up to
 * eight rows (`nrows`) of one vector each, at column 0. */
#define OI_DC_R8(r)                                                                    \
    if ((r) < nrows && i >= (r) * SH && i - (r) * SH < KH) acc##r = OI_VFMA(w[i - (r) * SH], d, acc##r);
#define OI_DC_P8(r)                                                                    \
    if ((r) < nrows) {                                                                 \
        oi_vf v = has_bias ? OI_VADD(acc##r, oi_vsplat(bias)) : acc##r;                \
        if (act) v = oi_vclamp(v, lo, hi);                                             \
        oi_dc_store(out + (oy0 + (r)) * ow, v, ow);                                    \
    }
OI_DC_INLINE void oi_dc_rows8(const int KH, const int SH, const float *restrict pp, int64_t width,
                              const int64_t *restrict coff, const int64_t *restrict woff, int64_t cols, int64_t KW,
                              const float *restrict wc, int64_t oy0, int64_t nrows, float bias, int has_bias,
                              const float *restrict act, float *restrict out, int64_t ow) {
    oi_vf acc0 = oi_vzero(), acc1 = oi_vzero(), acc2 = oi_vzero(), acc3 = oi_vzero();
    oi_vf acc4 = oi_vzero(), acc5 = oi_vzero(), acc6 = oi_vzero(), acc7 = oi_vzero();
    const int64_t need = (nrows - 1) * SH + KH; /* input rows the nrows output rows read */
    int64_t q;
    int i;
    for (q = 0; q < cols; q++) {
        const float *base = pp + coff[q] + oy0 * SH * width;
        const float *wq = wc + woff[q];
        oi_vf w[5];
        OI_DC_UNROLL
        for (i = 0; i < KH; i++) w[i] = oi_vsplat(wq[i * KW]);
        OI_DC_UNROLL
        for (i = 0; i < 7 * SH + KH; i++) {
            oi_vf d;
            if (i >= need) break;
            d = oi_vload(base + i * width);
            OI_DC_R8(0) OI_DC_R8(1) OI_DC_R8(2) OI_DC_R8(3) OI_DC_R8(4) OI_DC_R8(5) OI_DC_R8(6) OI_DC_R8(7)
        }
    }
    {
        const oi_vf lo = oi_vsplat(act ? act[0] : 0.0f), hi = oi_vsplat(act ? act[1] : 0.0f);
        OI_DC_P8(0) OI_DC_P8(1) OI_DC_P8(2) OI_DC_P8(3) OI_DC_P8(4) OI_DC_P8(5) OI_DC_P8(6) OI_DC_P8(7)
    }
}

/* Blocks of rows for one output channel: four rows x two vectors starting at column ox, or
 * (rows of at most one vector) up to eight rows of one vector, `ox` ignored. */
typedef void (*oi_dc_rows_fn)(const float *, int64_t, const int64_t *, const int64_t *, int64_t, int64_t, const float *, int64_t,
                              int64_t, int64_t, float, int, const float *, float *, int64_t);
#define OI_DC_ROWS4(KH, SH)                                                                                   \
    static OI_VEC_FN void oi_dc_rows4_##KH##_##SH(const float *pp, int64_t width, const int64_t *coff,       \
                                                   const int64_t *woff, int64_t cols, int64_t KW, const float *wc, int64_t oy0,      \
                                                   int64_t oh, int64_t ox, float bias, int has_bias,            \
                                                   const float *act, float *out, int64_t ow) {                  \
        if (oh - oy0 >= 4) /* (a whole block: the row tests fold away) */                                        \
            oi_dc_rows4(KH, SH, 4, pp, width, coff, woff, cols, KW, wc, oy0, ox, bias, has_bias, act, out, ow);   \
        else                                                                                                    \
            oi_dc_rows4(KH, SH, (int)(oh - oy0), pp, width, coff, woff, cols, KW, wc, oy0, ox, bias, has_bias,  \
                        act, out, ow);                                                                          \
    }
#define OI_DC_ROWS8(KH, SH)                                                                                   \
    static OI_VEC_FN void oi_dc_rows8_##KH##_##SH(const float *pp, int64_t width, const int64_t *coff,       \
                                                   const int64_t *woff, int64_t cols, int64_t KW, const float *wc, int64_t oy0,      \
                                                   int64_t oh, int64_t ox, float bias, int has_bias,            \
                                                   const float *act, float *out, int64_t ow) {                  \
        (void)ox;                                                                                               \
        oi_dc_rows8(KH, SH, pp, width, coff, woff, cols, KW, wc, oy0, oi_min64(8, oh - oy0), bias, has_bias, act, out, \
                    ow);                                                                                        \
    }
OI_DC_ROWS4(3, 1)
OI_DC_ROWS4(3, 2)
OI_DC_ROWS4(5, 1)
OI_DC_ROWS4(5, 2)
OI_DC_ROWS8(3, 1)
OI_DC_ROWS8(5, 1)

/* The row-block kernel for this geometry, or NULL (then every row takes oi_dc_group). */
static oi_dc_rows_fn oi_dc_rows_for(const oi_conv_geom *g) {
    const int narrow = g->OW <= OI_VL;
    /* (narrow rows with row stride 2: nineteen input rows per block, not unrolled; slower) */
    if (g->DH != 1 || (!narrow && g->OH < 4) || (narrow && g->SH != 1)) return NULL;
    if (g->KH == 3 && g->SH == 1) return narrow ? oi_dc_rows8_3_1 : oi_dc_rows4_3_1;
    if (g->KH == 3 && g->SH == 2) return oi_dc_rows4_3_2;
    if (g->KH == 5 && g->SH == 1) return narrow ? oi_dc_rows8_5_1 : oi_dc_rows4_5_1;
    if (g->KH == 5 && g->SH == 2) return oi_dc_rows4_5_2;
    return NULL;
}

/* Output rows per block of the row-block kernels (rows of at most one vector: eight). */
static inline int64_t oi_dc_step(const oi_conv_geom *g) { return g->OW <= OI_VL ? 8 : 4; }

/* Output rows [oy0, oy1) of one output channel (oy0 a multiple of oi_dc_step, oy1 one too
 * or OH) from its group's copies `pp` (row oy, column ox of the output reads
 * pp + oy * SH * width + ox + off[t]): blocks of rows on `rows` when there is one (column
 * offsets `coff`; the last block may be short), else eight vectors of outputs at a time (the
 * last group padded with vectors that store nothing). */
static void oi_dc_channel(const oi_conv_f32_args *a, const float *pp, int64_t width, const int64_t *off,
                          const int64_t *coff, const int64_t *woff, oi_dc_rows_fn rows, const float *wc,
                          int64_t taps, float bias, int has_bias, float *out, int64_t oy0, int64_t oy1) {
    const oi_conv_geom *g = &a->geom;
    int64_t src[8], cnt[8], oy = oy0, ox;
    const int64_t step = oi_dc_step(g);
    float *dst[8];
    int n = 0;
    /* the fused epilogue on each block of rows as soon as it is final (still in cache) */
    if (rows)
        for (; oy < oy1; oy += step) { /* (the last block may have fewer rows) */
            const int64_t r = oi_min64(step, oy1 - oy);
            for (ox = 0; ox < g->OW; ox += 2 * OI_VL)
                rows(pp, width, coff, woff, taps / g->KH, g->KW, wc, oy, oy1, ox, bias, has_bias, a->act, out, g->OW);
            if (a->epilogue) a->epilogue(a->epilogue_ctx, out, g->OW, oy, r, 0, g->OW);
        }
    if (oy >= oy1) return;
    {
        const int64_t first = oy;
        for (; oy < oy1; oy++)
            for (ox = 0; ox < g->OW; ox += OI_VL) {
                src[n] = oy * g->SH * width + ox;
                dst[n] = out + oy * g->OW + ox;
                cnt[n] = oi_min64(OI_VL, g->OW - ox);
                if (++n == 8) {
                    oi_dc_group(pp, src, off, wc, taps, bias, has_bias, a->act, dst, cnt);
                    n = 0;
                }
            }
        if (n > 0) {
            for (; n < 8; n++) {
                src[n] = src[n - 1];
                dst[n] = dst[n - 1];
                cnt[n] = 0;
            }
            oi_dc_group(pp, src, off, wc, taps, bias, has_bias, a->act, dst, cnt);
        }
        if (a->epilogue) a->epilogue(a->epilogue_ctx, out, g->OW, first, oy1 - first, 0, g->OW);
    }
}

/* The (image, group) input of unit `unit` (image * M + output channel). */
static inline int64_t oi_dc_group_of(const oi_conv_f32_args *a, int64_t unit) {
    return (unit / a->M) * a->G + (unit % a->M) / (a->M / a->G);
}

/* Direct convolution (depthwise, or few taps per output: C * KH * KW <= OI_DW_MAX_TAPS):
 * units are (image, output channel); a thread copies the group's input channels into its
 * scratch when the group changes. */
static void oi_dwconv_run(void *ctx, int64_t begin, int64_t end, int slot) {
    const oi_conv_f32_args *a = (const oi_conv_f32_args *)ctx;
    const oi_conv_geom *g = &a->geom;
    const int64_t taps = g->C * g->KH * g->KW, plane_in = g->H * g->W, plane_out = g->OH * g->OW;
    const int64_t rows = oi_dw_rows(g, a->pad_h), width = oi_dw_width(g, a->pad_w);
    const int64_t chan = oi_dw_plane_floats(g, a->pad_h, a->pad_w);
    const int padded = a->pack && a->pack_floats >= oi_dw_scratch_floats(g, a->pad_h, a->pad_w) &&
                       taps <= OI_DW_MAX_TAPS;
    float *pp = padded ? a->pack + (a->shared ? 0 : (int64_t)slot * a->pack_floats) : NULL;
    int64_t unit, oy, ox, c, t, off[OI_DW_MAX_TAPS], coff[OI_DW_MAX_TAPS], woff[OI_DW_MAX_TAPS], held = a->shared ? 0 : -1;
    const oi_dc_rows_fn blocks = padded ? oi_dc_rows_for(g) : NULL;
    if (padded) {
        if (!a->shared) { /* (one call per chunk of units: the borders and the tail only) */
            for (c = 0; c < g->C; c++) oi_dc_zero_borders(g, pp + c * chan, rows, width);
            memset(pp + g->C * chan, 0, sizeof(float) * (size_t)(oi_dw_scratch_floats(g, a->pad_h, a->pad_w) - g->C * chan));
        }
        for (t = 0; t < taps; t++) {
            const int64_t tap = t % (g->KH * g->KW), col = (tap % g->KW) * g->DW;
            off[t] = (((t / (g->KH * g->KW)) * g->SW + col % g->SW) * rows + (tap / g->KW) * g->DH) * width +
                     col / g->SW;
        }
        for (t = 0; t < taps / g->KH; t++) { /* column tap t: channel t / KW, kernel column t % KW */
            woff[t] = (t / g->KW) * g->KH * g->KW + t % g->KW; /* (no division per block) */
            coff[t] = off[woff[t]];
        }
    }
    if (padded && end - begin > 1 && oi_dc_group_of(a, begin) == oi_dc_group_of(a, end - 1)) {
        /* output channels of one input group (an RGB stem): block of rows by block of rows,
           every channel in turn, so the input rows of a block stay in cache for all of them */
        const int64_t group = oi_dc_group_of(a, begin), step = oi_dc_step(g);
        if (group != held)
            for (c = 0; c < g->C; c++)
                oi_dc_copy(g, a->x + (group * g->C + c) * plane_in, pp + c * chan, rows, width);
        for (oy = 0; oy < g->OH; oy += step)
            for (unit = begin; unit < end; unit++) {
                const int64_t m = unit % a->M;
                oi_dc_channel(a, pp, width, off, coff, woff, blocks, a->w + m * taps, taps,
                              a->bias ? a->bias[m] : 0.0f, a->bias != NULL, a->y + unit * plane_out, oy,
                              oi_min64(oy + step, g->OH));
            }
        return;
    }
    for (unit = begin; unit < end; unit++) { /* unit = image * M + output channel */
        const int64_t m = unit % a->M, image_group = oi_dc_group_of(a, unit);
        const float *wc = a->w + m * taps;
        float *out = a->y + unit * plane_out;
        if (padded) {
            if (image_group != held) { /* the borders stay zero: only the image part is rewritten */
                for (c = 0; c < g->C; c++)
                    oi_dc_copy(g, a->x + (image_group * g->C + c) * plane_in, pp + c * chan, rows, width);
                held = image_group;
            }
            oi_dc_channel(a, pp, width, off, coff, woff, blocks, wc, taps, a->bias ? a->bias[m] : 0.0f,
                          a->bias != NULL, out, 0, g->OH);
            continue;
        } else { /* depthwise without scratch */
            const float b = a->bias ? a->bias[m] : 0.0f;
            for (oy = 0; oy < g->OH; oy++) {
                float *acc = out + oy * g->OW;
                oi_dw_row(g, a->x + unit * plane_in, wc, oy, acc);
                if (a->bias)
                    for (ox = 0; ox < g->OW; ox++) acc[ox] += b;
                if (a->act) oi_clamp_span(acc, g->OW, a->act);
            }
        }
        if (a->epilogue) a->epilogue(a->epilogue_ctx, out, g->OW, 0, g->OH, 0, g->OW);
    }
}

/* The shared copy (`shared`) of the one image group's channels into slot 0's scratch, for
 * units [begin, end) of (channel, input row): threads split the rows (an RGB stem has only
 * three channels) before they split the outputs. A channel's first row also zeroes its
 * borders (disjoint from what the rows write), the last unit the tail. */
static void oi_dc_copy_run(void *ctx, int64_t begin, int64_t end, int slot) {
    const oi_conv_f32_args *a = (const oi_conv_f32_args *)ctx;
    const oi_conv_geom *g = &a->geom;
    const int64_t rows = oi_dw_rows(g, a->pad_h), width = oi_dw_width(g, a->pad_w);
    const int64_t chan = oi_dw_plane_floats(g, a->pad_h, a->pad_w);
    const int64_t tail = oi_dw_scratch_floats(g, a->pad_h, a->pad_w) - g->C * chan;
    int64_t u = begin;
    (void)slot;
    while (u < end) { /* the units of one channel at a time */
        const int64_t c = u / g->H, y0 = u % g->H, y1 = oi_min64(g->H, y0 + (end - u));
        if (y0 == 0) oi_dc_zero_borders(g, a->pack + c * chan, rows, width);
        oi_dc_copy_rows(g, a->x + c * g->H * g->W, a->pack + c * chan, rows, width, y0, y1);
        u += y1 - y0;
    }
    if (end == g->C * g->H) memset(a->pack + g->C * chan, 0, sizeof(float) * (size_t)tail);
}

/* Whether the direct kernel takes the convolution: depthwise, or a few taps per output
 * channel (the GEMM packs K = C * KH * KW rows for every 16 pixels, too much overhead when
 * K is small) when the program gave it the scratch (`pack_floats`, c_dense.py decides). */
static inline int oi_conv_direct(const oi_conv_f32_args *a) {
    const oi_conv_geom *g = &a->geom;
    if (a->G == a->M && g->C == 1) return 1;
    return g->KH * g->KW > 1 && g->C * g->KH * g->KW <= OI_DW_MAX_TAPS && a->pack &&
           a->pack_floats >= oi_dw_scratch_floats(g, a->pad_h, a->pad_w);
}

/* The convolution described by `a` (see the top of this file), split over the threads. */
static inline void oi_conv_f32(const oi_conv_f32_args *a) {
    const oi_conv_geom *g = &a->geom;
    const int64_t mg = a->M / a->G, ck = g->C * g->KH * g->KW, pixels = g->OH * g->OW;
    int64_t n, grp;
    if (oi_conv_direct(a)) {
        const double work = (double)a->N * (double)a->M * (double)pixels * (double)ck;
        if (a->N * a->G == 1 && a->M > 1 && g->C > 1 && g->H > 0 && a->pack && ck <= OI_DW_MAX_TAPS &&
            a->pack_floats >= oi_dw_scratch_floats(g, a->pad_h, a->pad_w) && oi_parallel_threads() > 1 &&
            work >= OI_PARALLEL_MIN_WORK) {
            /* one image group (an RGB stem): every thread would copy the same channels; copy
               them once, split by channel, then split the outputs over the shared copy */
            oi_conv_f32_args b = *a;
            b.shared = 1;
            oi_parallel_for(g->C * g->H, oi_dc_copy_run, (void *)&b);
            oi_parallel_for(a->M, oi_dwconv_run, (void *)&b);
            return;
        }
        oi_parallel_work(a->N * a->M, work, oi_dwconv_run, (void *)a);
        return;
    }
    for (n = 0; n < a->N; n++)
        for (grp = 0; grp < a->G; grp++) {
            oi_gemm_f32_args m;
            const int plain = g->KH == 1 && g->KW == 1 && g->SH == 1 && g->SW == 1 && g->PH == 0 &&
                              g->PW == 0 && g->OH == g->H && g->OW == g->W;
            memset(&m, 0, sizeof m);
            m.M = mg;
            m.N = pixels;
            m.K = ck;
            m.a = a->w + grp * mg * ck;
            m.lda = ck;
            m.b = a->x + (n * a->G + grp) * g->C * g->x_c;
            m.ldb = pixels; /* plain 1x1: the image is B [C, H*W] */
            m.b_nk = 0;
            m.conv = plain ? NULL : g;
            m.bias_m = a->bias ? a->bias + grp * mg : NULL;
            m.c = a->y + (n * a->M + grp * mg) * pixels;
            m.ldc = pixels;
            m.pack = a->pack;
            m.epilogue = a->epilogue;
            m.epilogue_ctx = a->epilogue_ctx;
            m.act = a->act;
            oi_gemm_f32(&m);
        }
}

#endif /* OI_CONV_H */
