/* OpenInfer-JAX emitted runtime: f32 convolution (conv1d as conv2d with one row), NCHW.
 *
 *     y[n, m, oy, ox] = bias[m] + sum_{c, ky, kx} w[m, c, ky, kx] * x[n, g*C/G + c, iy, ix]
 *
 * with iy = oy * SH - PH + ky * DH (likewise ix), zero outside the image, m in group g.
 *
 *  - Depthwise (one filter per input channel: groups = C = M), with 8 or 16 lanes and a
 *    column stride above 1 or output rows shorter than two vectors: a channel-blocked
 *    kernel. Each vector holds one pixel of OI_VL channels: a band of input rows at a time
 *    is transposed into a ring of zero-padded rows, the filters into one vector per tap,
 *    and every output pixel of the band is a vector of all the block's channels (3x3 and
 *    5x5 kernels load each input vector once per input row and multiply it into every
 *    output it reaches, the filter rows in registers), transposed back into the output
 *    planes. Stride and dilation are only offsets there, and no lane idles on narrow
 *    planes.
 *  - Other depthwise convolutions, and 2-D convolutions with few taps per output (an RGB
 *    stem): a direct kernel per channel. The channel's plane is first copied into scratch
 *    with its zero padding and, for stride S, split into S column phases, so every tap of a
 *    strip of outputs reads contiguous memory with no bounds test; a strip of two vectors
 *    of outputs accumulates all KH x KW taps in registers. (Without enough scratch: a
 *    row-by-row kernel.)
 *  - Otherwise, per image and group, a GEMM: the filters [M/G, C/G*KH*KW] times the im2col
 *    matrix of the image, which the GEMM's packing reads straight from the image (no im2col
 *    buffer); a 1x1 convolution with stride 1 and no padding reads the image as a plain
 *    [C, H*W] matrix. The bias is added per output channel as each tile is stored.
 *
 * `act` ({lo, hi} or NULL) clamps each final output after the bias, in registers (as in
 * oi_gemm.h), before the epilogue.
 *
 * Threads split output channels (depthwise; blocks of OI_VL of them on the channel-blocked
 * kernel) or the GEMM's output pixels; never a sum. */
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
#define OI_DC_UNROLL _Pragma("GCC unroll 32")
#define OI_DC_ROLLED _Pragma("GCC unroll 1")
#elif defined(__clang__)
#define OI_DC_UNROLL _Pragma("unroll")
#define OI_DC_ROLLED _Pragma("nounroll")
#else
#define OI_DC_UNROLL
#define OI_DC_ROLLED
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

/* ---- channel-blocked depthwise ------------------------------------------------------------
 * A block of OI_VL channels at a time, each vector holding one pixel of every channel of the
 * block: input rows are transposed into a ring of zero-padded rows [WP][OI_VL] (a band of
 * output rows at a time, each input row transposed once), the filters into [tap][OI_VL], and
 * the outputs of a band, computed a vector per pixel, transposed back into the NCHW planes.
 * Stride and dilation are only offsets here (no phase split) and every lane is used however
 * narrow the plane. The band's rows are sized for 16 lanes whatever OI_VL, so the program
 * can size the scratch without knowing the build (c_dense.py _blocked_floats). */
#ifndef OI_DWB_RING_FLOATS
#define OI_DWB_RING_FLOATS 4096 /* the ring at 16 lanes: 16 KB (measured: larger rings are slower) */
#endif
static inline int64_t oi_max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t oi_dwb_width(const oi_conv_geom *g, int64_t pad_w) { return g->W + g->PW + pad_w; }
/* Output rows per band: as many as the ring holds input rows for, rounded down to an even
 * count (the kernels take rows in pairs) when more than two fit; at least one. */
static inline int64_t oi_dwb_band(const oi_conv_geom *g, int64_t pad_w) {
    const int64_t rows = OI_DWB_RING_FLOATS / (16 * oi_dwb_width(g, pad_w)), reach = (g->KH - 1) * g->DH + 1;
    const int64_t fit = rows > reach ? (rows - reach) / g->SH + 1 : 1, band = fit > 2 ? fit / 2 * 2 : fit;
    return band < g->OH ? band : (g->OH > 1 ? g->OH : 1);
}
/* Input rows the ring holds: those of one band. */
static inline int64_t oi_dwb_ring(const oi_conv_geom *g, int64_t pad_w) {
    return (oi_dwb_band(g, pad_w) - 1) * g->SH + (g->KH - 1) * g->DH + 1;
}
/* Scratch: the ring, the filters, the band's outputs (whole vectors of pixels), the bias. */
static inline int64_t oi_dwb_scratch_floats(const oi_conv_geom *g, int64_t pad_w) {
    const int64_t outputs = oi_dwb_band(g, pad_w) * g->OW;
    return OI_VL * (oi_dwb_ring(g, pad_w) * oi_dwb_width(g, pad_w) + g->KH * g->KW +
                    (outputs + OI_VL - 1) / OI_VL * OI_VL + 1);
}

/* v[j] = pixel f + j of the OI_VL planes at src[0 .. OI_VL) (each vector one pixel of
 * every plane). Whole vectors are loaded, which may read past the pixels wanted into the
 * next pixels or the next plane (those lanes are dropped), except past the end of the
 * last plane (`last`: it ends its tensor; n = the pixels left in it): copied out first. */
static inline void oi_dwb_gather(const float *const *src, int64_t f, int last, int64_t n, oi_vf *v) {
    int c;
    if (last && n < OI_VL) {
        float lane[OI_VL][OI_VL];
        memset(lane, 0, sizeof lane);
        for (c = 0; c < OI_VL; c++) oi_copy_short(lane[c], src[c] + f, n & (OI_VL - 1));
        for (c = 0; c < OI_VL; c++) v[c] = oi_vload(lane[c]);
    } else {
        for (c = 0; c < OI_VL; c++) v[c] = oi_vload(src[c] + f);
    }
    oi_vtranspose(v);
}

/* Padded input rows [p0, p1) of the block's planes src[0 .. OI_VL) (`plane` floats each)
 * into their ring slots (padded row p in slot p % ring, `WP` pixels of OI_VL floats; the
 * columns left and right of the image are zero and stay so): rows of padding are zeroed,
 * image rows gathered OI_VL pixels at a time, the pixels running on across rows. */
static OI_VEC_FN void oi_dwb_fill(const oi_conv_geom *g, const float *const *src, int64_t plane, int last,
                                  float *restrict ring_buf, int64_t ring, int64_t WP, int64_t p0, int64_t p1) {
    const int64_t row = WP * OI_VL;
    int64_t p, f, f1, ix = 0, iy;
    float *dst;
    int j;
    for (p = p0; p < p1 && p < g->PH; p++) memset(ring_buf + (p % ring) * row, 0, sizeof(float) * (size_t)row);
    iy = p - g->PH;
    f = iy * g->W;
    f1 = (oi_min64(p1, g->PH + g->H) - g->PH) * g->W;
    dst = ring_buf + ((iy + g->PH) % ring) * row + g->PW * OI_VL;
    for (; f < f1; f += OI_VL) {
        const int n = (int)oi_min64(OI_VL, f1 - f);
        oi_vf v[OI_VL];
        oi_dwb_gather(src, f, last, plane - f, v);
        if (n == OI_VL && g->W - ix > OI_VL) { /* within one row */
            for (j = 0; j < OI_VL; j++) oi_vstore(dst + j * OI_VL, v[j]);
            dst += OI_VL * OI_VL;
            ix += OI_VL;
            continue;
        }
        for (j = 0; j < n; j++) {
            oi_vstore(dst, v[j]);
            dst += OI_VL;
            if (++ix == g->W) {
                ix = 0;
                iy++;
                dst = ring_buf + ((iy + g->PH) % ring) * row + g->PW * OI_VL;
            }
        }
    }
    for (p = oi_max64(p0, g->PH + g->H); p < p1; p++)
        memset(ring_buf + (p % ring) * row, 0, sizeof(float) * (size_t)row);
}

/* Outputs [f0, f1) (flat pixel indices of the planes) of the `nc` channels at y from the
 * band's vectors `ob` (pixel f0 first), OI_VL pixels at a time. */
static OI_VEC_FN void oi_dwb_drain(const float *restrict ob, float *restrict y, int64_t plane, int nc, int64_t f0,
                                   int64_t f1) {
    int64_t f;
    int c, j;
    for (f = f0; f < f1; f += OI_VL) {
        const int64_t n = oi_min64(OI_VL, f1 - f);
        oi_vf v[OI_VL];
        for (j = 0; j < OI_VL; j++) v[j] = oi_vload(ob + (f - f0 + j) * OI_VL);
        oi_vtranspose(v);
        if (n == OI_VL && nc == OI_VL)
            for (c = 0; c < OI_VL; c++) oi_vstore(y + c * plane + f, v[c]);
        else
            for (c = 0; c < nc; c++) oi_dc_store(y + c * plane + f, v[c], n);
    }
}

/* P (<= 8) neighbouring outputs of R (1 or 2) output rows: output j of row q sums, kernel
 * row by kernel row and column by column, the filter vector of each tap times the ring's
 * pixel at ring_buf + slot(row0 + q * SH + ky * DH) * row + col + (j * SW + kx * DW) *
 * OI_VL, then adds the bias. With KW, SW and SH constants (`fixed`; DH = DW = 1) each input
 * row's (P - 1) * SW + KW vectors are loaded once and multiplied into every output of the
 * R rows they reach, the filter rows in registers; else (R = 1) each tap's filter vector is
 * loaded once and each output loads its input. Every output gets the same operations in the
 * same order either way. */
#define OI_DWB_ACC(j) if (P > (j)) a0##j = OI_VFMA(w, oi_vload(px + (j) * sv), a0##j);
#define OI_DWB_USE(q, j)                                                                      \
    if (P > (j) && i >= (j) * SW && i - (j) * SW < KW) a##q##j = OI_VFMA(w##q[i - (j) * SW], v, a##q##j);
#define OI_DWB_INTO(q) OI_DWB_USE(q, 0) OI_DWB_USE(q, 1) OI_DWB_USE(q, 2) OI_DWB_USE(q, 3) \
    OI_DWB_USE(q, 4) OI_DWB_USE(q, 5) OI_DWB_USE(q, 6) OI_DWB_USE(q, 7)
/* input row r (ring slot `slot`) into output row 0 (use0: kernel row r) and 1 (kernel row r - SH) */
#define OI_DWB_LINE(use0, use1)                                                                 \
    {                                                                                           \
        const float *px = ring_buf + slot * row + col;                                          \
        OI_DC_UNROLL                                                                            \
        for (i = 0; i < KW; i++) {                                                              \
            if (use0) w0[i] = oi_vload(wt + (r * KW + i) * OI_VL);                              \
            if (use1) w1[i] = oi_vload(wt + ((r - SH) * KW + i) * OI_VL);                       \
        }                                                                                       \
        OI_DC_UNROLL                                                                            \
        for (i = 0; i < 7 * SW + KW; i++) {                                                     \
            oi_vf v;                                                                            \
            if (i >= (P - 1) * SW + KW) break;                                                  \
            v = oi_vload(px + i * OI_VL);                                                       \
            if (use0) { OI_DWB_INTO(0) }                                                        \
            if (use1) { OI_DWB_INTO(1) }                                                        \
        }                                                                                       \
    }
#define OI_DWB_PUT(q, j)                                     \
    if (P > (j)) {                                           \
        if (has_bias) a##q##j = OI_VADD(a##q##j, bias);      \
        if (act) a##q##j = oi_vclamp(a##q##j, lo, hi);       \
        oi_vstore(out + (j) * OI_VL, a##q##j);               \
    }
#define OI_DWB_PUTS(q) OI_DWB_PUT(q, 0) OI_DWB_PUT(q, 1) OI_DWB_PUT(q, 2) OI_DWB_PUT(q, 3) \
    OI_DWB_PUT(q, 4) OI_DWB_PUT(q, 5) OI_DWB_PUT(q, 6) OI_DWB_PUT(q, 7)
OI_DC_INLINE void oi_dwb_pixels(const int P, const int R, const int fixed, const int KW, const int SW, const int SH,
                                const oi_conv_geom *g, const float *restrict ring_buf, int64_t ring, int64_t row,
                                int64_t slot0, int64_t col, const float *restrict wt, oi_vf bias, int has_bias,
                                const float *act, float *restrict out, int64_t out_row) {
    oi_vf a00 = oi_vzero(), a01 = oi_vzero(), a02 = oi_vzero(), a03 = oi_vzero();
    oi_vf a04 = oi_vzero(), a05 = oi_vzero(), a06 = oi_vzero(), a07 = oi_vzero();
    oi_vf a10 = oi_vzero(), a11 = oi_vzero(), a12 = oi_vzero(), a13 = oi_vzero();
    oi_vf a14 = oi_vzero(), a15 = oi_vzero(), a16 = oi_vzero(), a17 = oi_vzero();
    int64_t slot = slot0;
    int i;
    if (fixed) {
        const int64_t rows = (R - 1) * SH + g->KH;
        int64_t r;
        oi_vf w0[5], w1[5];
        OI_DC_ROLLED /* (the row bodies are large already) */
        for (r = 0; r < rows; r++) {
            const int use0 = r < g->KH, use1 = R > 1 && r >= SH && r - SH < g->KH;
            if (use0 && use1) OI_DWB_LINE(1, 1)
            else if (use0) OI_DWB_LINE(1, 0)
            else if (use1) OI_DWB_LINE(0, 1)
            if (++slot == ring) slot = 0;
        }
    } else {
        const int64_t sv = g->SW * OI_VL, dv = g->DW * OI_VL;
        int64_t ky, kx;
        for (ky = 0; ky < g->KH; ky++) {
            const float *px = ring_buf + slot * row + col;
            for (kx = 0; kx < g->KW; kx++, px += dv, wt += OI_VL) {
                const oi_vf w = oi_vload(wt);
                OI_DWB_ACC(0) OI_DWB_ACC(1) OI_DWB_ACC(2) OI_DWB_ACC(3)
                OI_DWB_ACC(4) OI_DWB_ACC(5) OI_DWB_ACC(6) OI_DWB_ACC(7)
            }
            slot += g->DH;
            if (slot >= ring) slot -= ring;
        }
    }
    {
        const oi_vf lo = oi_vsplat(act ? act[0] : 0.0f), hi = oi_vsplat(act ? act[1] : 0.0f);
        OI_DWB_PUTS(0)
        if (R > 1) {
            out += out_row;
            OI_DWB_PUTS(1)
        }
    }
}
typedef void (*oi_dwb_pixels_fn)(const oi_conv_geom *, const float *, int64_t, int64_t, int64_t, int64_t,
                                 const float *, oi_vf, int, const float *, float *, int64_t);
#define OI_DWB_PIXELS(name, P, R, fixed, KW, SW, SH)                                                          \
    static OI_VEC_FN void name(const oi_conv_geom *g, const float *ring_buf, int64_t ring, int64_t row,      \
                               int64_t slot0, int64_t col, const float *wt, oi_vf bias, int has_bias,        \
                               const float *act, float *out, int64_t out_row) {                              \
        oi_dwb_pixels(P, R, fixed, KW, SW, SH, g, ring_buf, ring, row, slot0, col, wt, bias, has_bias, act,   \
                      out, out_row);                                                                         \
    }
/* The kernels for 4 .. 8 outputs of R rows of one kind (`all`: 1 .. 3 as well), and their
 * table by output count (NULL where there is none). A row of at least four outputs splits
 * into calls of 4 to 8; narrower rows take the general kind. */
#define OI_DWB_KIND(kind, R, fixed, KW, SW, SH)                                                                   \
    OI_DWB_PIXELS(oi_dwb_##kind##4, 4, R, fixed, KW, SW, SH) OI_DWB_PIXELS(oi_dwb_##kind##5, 5, R, fixed, KW, SW, SH) \
    OI_DWB_PIXELS(oi_dwb_##kind##6, 6, R, fixed, KW, SW, SH) OI_DWB_PIXELS(oi_dwb_##kind##7, 7, R, fixed, KW, SW, SH) \
    OI_DWB_PIXELS(oi_dwb_##kind##8, 8, R, fixed, KW, SW, SH)
#define OI_DWB_KIND_ALL(kind, R, fixed, KW, SW, SH)                                                               \
    OI_DWB_PIXELS(oi_dwb_##kind##1, 1, R, fixed, KW, SW, SH) OI_DWB_PIXELS(oi_dwb_##kind##2, 2, R, fixed, KW, SW, SH) \
    OI_DWB_PIXELS(oi_dwb_##kind##3, 3, R, fixed, KW, SW, SH) OI_DWB_KIND(kind, R, fixed, KW, SW, SH)
#define OI_DWB_TABLE(kind) \
    {NULL, NULL, NULL, oi_dwb_##kind##4, oi_dwb_##kind##5, oi_dwb_##kind##6, oi_dwb_##kind##7, oi_dwb_##kind##8}
#define OI_DWB_TABLE_ALL(kind)                                                                                \
    {oi_dwb_##kind##1, oi_dwb_##kind##2, oi_dwb_##kind##3, oi_dwb_##kind##4, oi_dwb_##kind##5,               \
     oi_dwb_##kind##6, oi_dwb_##kind##7, oi_dwb_##kind##8}
/* Output rows per call of the fixed kernels: two where the registers hold both rows'
   accumulators and filter rows (32 vector registers), else one. */
#if OI_VL == 16 && defined(OI_GNU_VECTORS)
#define OI_DWB_ROWS 2
#else
#define OI_DWB_ROWS 1
#endif
OI_DWB_KIND_ALL(any, 1, 0, 1, 1, 1)
OI_DWB_KIND(k3s1, OI_DWB_ROWS, 1, 3, 1, 1)
OI_DWB_KIND(k3s2, OI_DWB_ROWS, 1, 3, 2, 2)
OI_DWB_KIND(k5s1, OI_DWB_ROWS, 1, 5, 1, 1)
OI_DWB_KIND(k5s2, OI_DWB_ROWS, 1, 5, 2, 2)
#if OI_DWB_ROWS > 1
OI_DWB_KIND(k3s1r1, 1, 1, 3, 1, 1)
OI_DWB_KIND(k3s2r1, 1, 1, 3, 2, 2)
OI_DWB_KIND(k5s1r1, 1, 1, 5, 1, 1)
OI_DWB_KIND(k5s2r1, 1, 1, 5, 2, 2)
#define OI_DWB_ONE(kind) OI_DWB_TABLE(kind##r1)
#else
#define OI_DWB_ONE(kind) OI_DWB_TABLE(kind)
#endif

/* [0][P - 1]: the kernel for P outputs of `rows` output rows, [1][P - 1] of one row (a
 * band's last when `rows` is 2). */
typedef oi_dwb_pixels_fn oi_dwb_kernel_set[2][8];

/* The kernels for this geometry and how many rows they take. */
static const oi_dwb_kernel_set *oi_dwb_kernels(const oi_conv_geom *g, int64_t *rows) {
    static const oi_dwb_kernel_set table[5] = {{OI_DWB_TABLE_ALL(any), OI_DWB_TABLE_ALL(any)},
                                               {OI_DWB_TABLE(k3s1), OI_DWB_ONE(k3s1)},
                                               {OI_DWB_TABLE(k3s2), OI_DWB_ONE(k3s2)},
                                               {OI_DWB_TABLE(k5s1), OI_DWB_ONE(k5s1)},
                                               {OI_DWB_TABLE(k5s2), OI_DWB_ONE(k5s2)}};
    if (g->DH == 1 && g->DW == 1 && (g->KW == 3 || g->KW == 5) && (g->SW == 1 || g->SW == 2) &&
        g->SH == g->SW && g->OW >= 4) {
        *rows = OI_DWB_ROWS;
        return &table[(g->KW == 5 ? 3 : 1) + (g->SW == 2)];
    }
    *rows = 1;
    return &table[0];
}

/* A hint that pixels [f0, f1) of the `nc` planes at p (`plane` floats apart) are about to
 * be written (GCC and Clang; nothing elsewhere): a band's outputs go to OI_VL planes at
 * once, whose lines the caches then fetch while the band is computed (measured: 5-10% off
 * the layers with 14 x 14 and 28 x 28 outputs; prefetching the input rows was slower). A
 * macro, as OI_ATTN_PREFETCH. */
#if defined(__GNUC__) || defined(__clang__)
#define OI_DWB_PREFETCH_W(p, plane, nc, f0, f1)                                                      \
    do {                                                                                             \
        int64_t pc_, pf_;                                                                            \
        for (pc_ = 0; pc_ < (nc); pc_++)                                                             \
            for (pf_ = (f0); pf_ < (f1); pf_ += 16) __builtin_prefetch((p) + pc_ * (plane) + pf_, 1, 3); \
    } while (0)
#else
#define OI_DWB_PREFETCH_W(p, plane, nc, f0, f1) ((void)0)
#endif

/* Units [begin, end) of (image, block of OI_VL channels). */
static void oi_dwb_run(void *ctx, int64_t begin, int64_t end, int slot) {
    const oi_conv_f32_args *a = (const oi_conv_f32_args *)ctx;
    const oi_conv_geom *g = &a->geom;
    const int64_t WP = oi_dwb_width(g, a->pad_w), band = oi_dwb_band(g, a->pad_w), ring = oi_dwb_ring(g, a->pad_w);
    const int64_t taps = g->KH * g->KW, blocks = (a->M + OI_VL - 1) / OI_VL, row = WP * OI_VL;
    const int64_t plane_in = g->H * g->W, plane_out = g->OH * g->OW;
    const int64_t calls = (g->OW + 7) / 8; /* per output row, of 8 outputs or fewer */
    int64_t R, k;
    int P;
    const oi_dwb_kernel_set *kernels = oi_dwb_kernels(g, &R);
    float *ring_buf = a->pack + (int64_t)slot * a->pack_floats, *wt = ring_buf + ring * row;
    float *ob = wt + taps * OI_VL, *bl = ob + (band * g->OW + OI_VL - 1) / OI_VL * OI_VL * OI_VL;
    int64_t unit, t, oy0, oy, ox;
    memset(ring_buf, 0, sizeof(float) * (size_t)(ring * row)); /* the ring's side columns */
    for (unit = begin; unit < end; unit++) {
        const int64_t image = unit / blocks, c0 = (unit % blocks) * OI_VL;
        const int nc = (int)oi_min64(OI_VL, a->M - c0);
        const float *x = a->x + (image * a->M + c0) * plane_in;
        float *y = a->y + (image * a->M + c0) * plane_out;
        const int last = unit == a->N * blocks - 1; /* its last plane ends the tensor */
        const float *src[OI_VL], *wsrc[OI_VL];
        int64_t loaded = 0; /* padded input rows [0, loaded) were put in the ring */
        oi_vf bias, v[OI_VL];
        int c, j;
        for (c = 0; c < OI_VL; c++) { /* (lanes past nc repeat the last channel) */
            src[c] = x + oi_min64(c, nc - 1) * plane_in;
            wsrc[c] = a->w + (c0 + oi_min64(c, nc - 1)) * taps;
            bl[c] = a->bias ? a->bias[c0 + oi_min64(c, nc - 1)] : 0.0f;
        }
        for (t = 0; t < taps; t += OI_VL) { /* the filters, [tap][OI_VL] */
            oi_dwb_gather(wsrc, t, c0 + nc == a->M, taps - t, v);
            for (j = 0; j < OI_VL && t + j < taps; j++) oi_vstore(wt + (t + j) * OI_VL, v[j]);
        }
        bias = oi_vload(bl);
        for (oy0 = 0; oy0 < g->OH; oy0 += band) {
            const int64_t oy1 = oi_min64(g->OH, oy0 + band), need = (oy1 - 1) * g->SH + (g->KH - 1) * g->DH + 1;
            oi_dwb_fill(g, src, plane_in, last, ring_buf, ring, WP, oi_max64(loaded, oy0 * g->SH), need);
            loaded = need;
            OI_DWB_PREFETCH_W(y, plane_out, nc, oy0 * g->OW, oy1 * g->OW);
            for (oy = oy0; oy < oy1; oy += R)
                for (ox = 0, k = 0; k < calls; ox += P, k++) { /* (calls as even as can be) */
                    P = (int)((g->OW - ox + calls - k - 1) / (calls - k));
                    (*kernels)[oy + R <= oy1 ? 0 : 1][P - 1](g, ring_buf, ring, row, (oy * g->SH) % ring,
                                                             ox * g->SW * OI_VL, wt, bias, a->bias != NULL,
                                                             a->act, ob + ((oy - oy0) * g->OW + ox) * OI_VL,
                                                             g->OW * OI_VL);
                }
            oi_dwb_drain(ob, y, plane_out, nc, oy0 * g->OW, oy1 * g->OW);
            if (a->epilogue)
                for (c = 0; c < nc; c++) a->epilogue(a->epilogue_ctx, y + c * plane_out, g->OW, oy0, oy1 - oy0, 0, g->OW);
        }
    }
}

/* Whether a depthwise convolution takes the channel-blocked kernel (given its scratch): with
 * 8 or 16 lanes, for a column stride above 1 or output rows shorter than two vectors. There
 * the planar kernel's phase split of the input, or its idle lanes, cost more than the
 * transposes (measured with AVX-512 and AVX2 on EfficientNet-Lite0's depthwise layers); on
 * wider rows with stride 1 the planar kernel is as fast or faster, and with 4 lanes it is
 * faster everywhere. OI_DW_BLOCKED defined as 0 or 1 overrides the choice (tests). */
static inline int oi_dwb_takes(const oi_conv_f32_args *a) {
    const oi_conv_geom *g = &a->geom;
    if (!(a->G == a->M && g->C == 1) || !a->pack || a->pack_floats < oi_dwb_scratch_floats(g, a->pad_w)) return 0;
#ifdef OI_DW_BLOCKED
    return OI_DW_BLOCKED;
#else
    return OI_VL >= 8 && (g->SW > 1 || g->OW < 2 * OI_VL);
#endif
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
    if (oi_dwb_takes(a)) {
        oi_parallel_work(a->N * ((a->M + OI_VL - 1) / OI_VL), (double)a->N * (double)a->M * (double)pixels * (double)ck,
                         oi_dwb_run, (void *)a);
        return;
    }
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
