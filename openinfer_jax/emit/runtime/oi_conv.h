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
} oi_conv_f32_args;

/* Rows and per-phase width of a depthwise channel's padded, phase-split copy. */
static inline int64_t oi_dw_rows(const oi_conv_geom *g, int64_t pad_h) { return g->H + g->PH + pad_h; }
static inline int64_t oi_dw_width(const oi_conv_geom *g, int64_t pad_w) {
    return (g->W + g->PW + pad_w + g->SW - 1) / g->SW + 1;
}
/* (+ 2 vectors: the last strip of a row may read past the copy's end; those lanes are
   dropped) */
static inline int64_t oi_dw_scratch_floats(const oi_conv_geom *g, int64_t pad_h, int64_t pad_w) {
    return g->SW * oi_dw_rows(g, pad_h) * oi_dw_width(g, pad_w) + 2 * 16;
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

/* Output row oy of a channel from its phase-split padded copy `pp` (phase q holds padded
 * columns q, q + SW, ...; `width` floats per row): tap t reads pp + oy * SH * width +
 * off[t] + ox. */
static OI_VEC_FN void oi_dw_row_padded(const oi_conv_geom *g, const float *restrict pp, int64_t width,
                                       const int64_t *restrict off, const float *restrict wc, int64_t oy,
                                       float bias, int has_bias, float *restrict out) {
    const int64_t taps = g->KH * g->KW;
    const float *base = pp + oy * g->SH * width;
    int64_t ox = 0, t;
    for (; ox + 2 * OI_VL <= g->OW; ox += 2 * OI_VL) {
        oi_vf a0 = oi_vzero(), a1 = oi_vzero();
        for (t = 0; t < taps; t++) {
            const float *src = base + off[t] + ox;
            const oi_vf wv = oi_vsplat(wc[t]);
            a0 = OI_VFMA(wv, oi_vload(src), a0);
            a1 = OI_VFMA(wv, oi_vload(src + OI_VL), a1);
        }
        if (has_bias) {
            a0 = OI_VADD(a0, oi_vsplat(bias));
            a1 = OI_VADD(a1, oi_vsplat(bias));
        }
        oi_vstore(out + ox, a0);
        oi_vstore(out + ox + OI_VL, a1);
    }
    for (; ox < g->OW; ox += OI_VL) { /* the rest a vector at a time, the last one partial */
        oi_vf a0 = oi_vzero();
        float lane[OI_VL];
        int64_t u;
        for (t = 0; t < taps; t++) a0 = OI_VFMA(oi_vsplat(wc[t]), oi_vload(base + off[t] + ox), a0);
        if (has_bias) a0 = OI_VADD(a0, oi_vsplat(bias));
        oi_vstore(lane, a0);
        for (u = 0; u < OI_VL && ox + u < g->OW; u++) out[ox + u] = lane[u];
    }
}

static void oi_dwconv_run(void *ctx, int64_t begin, int64_t end, int slot) {
    const oi_conv_f32_args *a = (const oi_conv_f32_args *)ctx;
    const oi_conv_geom *g = &a->geom;
    const int64_t taps = g->KH * g->KW, plane_in = g->H * g->W, plane_out = g->OH * g->OW;
    const int64_t rows = oi_dw_rows(g, a->pad_h), width = oi_dw_width(g, a->pad_w);
    const int padded = a->pack && a->pack_floats >= oi_dw_scratch_floats(g, a->pad_h, a->pad_w) &&
                       taps <= OI_DW_MAX_TAPS;
    float *pp = padded ? a->pack + (int64_t)slot * a->pack_floats : NULL;
    int64_t unit, oy, ox, y, x, off[OI_DW_MAX_TAPS];
    if (padded) {
        memset(pp, 0, sizeof(float) * (size_t)oi_dw_scratch_floats(g, a->pad_h, a->pad_w));
        for (y = 0; y < taps; y++) {
            const int64_t col = (y % g->KW) * g->DW;
            off[y] = ((col % g->SW) * rows + (y / g->KW) * g->DH) * width + col / g->SW;
        }
    }
    for (unit = begin; unit < end; unit++) { /* unit = image * M + channel */
        if (padded) { /* the borders stay zero: only the image part is rewritten */
            const float *plane = a->x + unit * plane_in;
            const float *wc = a->w + (unit % a->M) * taps;
            for (y = 0; y < g->H && g->SW == 1; y++)
                memcpy(pp + (y + g->PH) * width + g->PW, plane + y * g->W, sizeof(float) * (size_t)g->W);
            for (y = 0; y < g->H && g->SW > 1; y++) {
                const float *src = plane + y * g->W;
                int64_t phase = g->PW % g->SW, col = g->PW / g->SW;
                for (x = 0; x < g->W; x++) { /* padded column x + PW = col * SW + phase */
                    pp[(phase * rows + y + g->PH) * width + col] = src[x];
                    if (++phase == g->SW) {
                        phase = 0;
                        col++;
                    }
                }
            }
            for (oy = 0; oy < g->OH; oy++)
                oi_dw_row_padded(g, pp, width, off, wc, oy, a->bias ? a->bias[unit % a->M] : 0.0f,
                                 a->bias != NULL, a->y + unit * plane_out + oy * g->OW);
            if (a->epilogue) a->epilogue(a->epilogue_ctx, a->y + unit * plane_out, g->OW, 0, g->OH, 0, g->OW);
            continue;
        }
        const int64_t m = unit % a->M;
        const float *plane = a->x + unit * plane_in, *wc = a->w + m * taps;
        float *out = a->y + unit * plane_out;
        const float b = a->bias ? a->bias[m] : 0.0f;
        for (oy = 0; oy < g->OH; oy++) {
            float *acc = out + oy * g->OW;
            oi_dw_row(g, plane, wc, oy, acc);
            if (a->bias)
                for (ox = 0; ox < g->OW; ox++) acc[ox] += b;
        }
        if (a->epilogue) a->epilogue(a->epilogue_ctx, out, g->OW, 0, g->OH, 0, g->OW);
    }
}

/* The convolution described by `a` (see the top of this file), split over the threads. */
static inline void oi_conv_f32(const oi_conv_f32_args *a) {
    const oi_conv_geom *g = &a->geom;
    const int64_t mg = a->M / a->G, ck = g->C * g->KH * g->KW, pixels = g->OH * g->OW;
    int64_t n, grp;
    if (a->G == a->M && g->C == 1) {
        const double work = (double)a->N * (double)a->M * (double)pixels * (double)(g->KH * g->KW);
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
            oi_gemm_f32(&m);
        }
}

#endif /* OI_CONV_H */
