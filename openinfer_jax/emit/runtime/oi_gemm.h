/* OpenInfer-JAX emitted runtime: f32 matrix products (GEMM and GEMV).
 *
 *     C[i, j] = sum_k A[i, k] * B(k, j)  (+ bias[j]), then an optional epilogue,
 *
 * with B given either as W [N, K] (a linear layer's weight: B(k, j) = W[j, k], `b_nk` = 1),
 * as B [K, N] (`b_nk` = 0), or as the im2col matrix of an image (`conv`: B(k, j) is input
 * pixel k = (channel, ky, kx) under output pixel j, 0 in the padding; nothing is
 * materialized, the packing reads the image). `bias_m` adds a bias per row instead (a
 * convolution's output channels). oi_gemm_f32 picks the kernel by shape:
 *
 *  - GEMV for W [N, K] and M < OI_GEMV_MAX_ROWS (a decode step): each output is one dot
 *    product of an A row with a W row; four W rows at a time, two vectors of partial sums
 *    each, so the weights stream through once at memory speed. Sum order: lanes, then
 *    oi_vsum, then the tail of K.
 *  - GEMM otherwise (BLIS-style): a KC x NC block of B is packed into NR-wide column panels
 *    (per thread, in `pack`), and an OI_MR x OI_NR register tile of C is accumulated by
 *    the micro-kernel over the block's K, A read in place. Each C element is one fused
 *    multiply-add chain over k = 0..K-1 in order (a block continues from the stored partial
 *    sum), so the result does not depend on the blocking or on how the work is split (a
 *    last single column sums each K block as a dot product in lanes, oi_gemm_col1_f32: the
 *    same whatever the split).
 *    M = 1 with B [K, N] takes the same chain without packing (GEMV by rows of B).
 *
 * `act` ({lo, hi} or NULL) clamps each final output after the biases, in registers as the
 * tile is stored (a fused ReLU6): the same value oi_nan_clamp_float gives (NaN passes), so
 * the clamp costs no second pass over C; the epilogue, if any, runs after it.
 *
 * Threads (oi_parallel.h) split the output columns or the rows, whichever leaves the busiest
 * thread less to do (oi_gemm_split_rows); never K. Split by rows, a B packed per call is
 * packed once for all threads (full-K panels, read as if prepacked). Cache blocking: OI_KC x OI_NC
 * floats of B per thread (the device JSON's preferences can set them); the caller provides
 * OI_GEMM_PACK_FLOATS floats per thread. */
#ifndef OI_GEMM_H
#define OI_GEMM_H

#include <stdlib.h>

#include "oi_parallel.h"
#include "oi_vec.h"

#define OI_MR 6
#define OI_NR (2 * OI_VL)
#ifndef OI_KC
#define OI_KC 256
#endif
#ifndef OI_NC
#define OI_NC 256
#endif
#ifndef OI_GEMV_MAX_ROWS
#define OI_GEMV_MAX_ROWS 4
#endif
/* Per-thread scratch: a packed KC x NC block of B (NC rounded up to whole panels) and one
 * zero-padded MR x KC block of A for the last rows. */
#define OI_GEMM_PACK_FLOATS (OI_KC * (OI_NC + 32) + OI_MR * OI_KC)

/* Applied to C[row0 .. row0+rows, col0 .. col0+cols] once those outputs are final
 * (c points at C[0, 0]); used for fused elementwise epilogues. */
typedef void (*oi_epilogue_f32)(const void *ctx, float *c, int64_t ldc, int64_t row0, int64_t rows,
                                int64_t col0, int64_t cols);

/* The geometry of a convolution seen as a GEMM over its im2col matrix (one image, one
 * group): input channels C of H x W pixels `x_c` floats apart, kernel KH x KW, strides,
 * pads before (PH, PW), dilations, output OH x OW. */
typedef struct {
    int64_t C, H, W, x_c;
    int64_t KH, KW, SH, SW, PH, PW, DH, DW;
    int64_t OH, OW;
} oi_conv_geom;

typedef struct {
    int64_t M, N, K;
    const float *a;
    int64_t lda;
    const float *b;
    int64_t ldb;
    int b_nk;           /* 1: b is W [N, K] (row j is column j of B); 0: b is B [K, N] */
    const float *bias;  /* [N] or NULL */
    const float *bias_m; /* [M] or NULL: added per row */
    const oi_conv_geom *conv; /* B is the im2col matrix of the image at b (then b_nk, ldb unused) */
    float *c;
    int64_t ldc;
    float *pack;        /* OI_GEMM_PACK_FLOATS floats per thread (GEMM path only) */
    const float *b_panels; /* B already in panels (oi_gemm_prepacked), or NULL: pack per call */
    oi_epilogue_f32 epilogue;
    const void *epilogue_ctx;
    const float *act;   /* {lo, hi}: clamp the final outputs (before the epilogue), or NULL */
} oi_gemm_f32_args;

static inline int64_t oi_min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The clamp of `act` on one vector: y < lo ? lo : y, then > hi ? hi : that, so a NaN lane
 * passes through, as oi_nan_clamp_float. */
#if defined(OI_GNU_VECTORS)
static inline oi_vf oi_vclamp(oi_vf v, oi_vf lo, oi_vf hi) {
    v = oi_vselect(v < lo, lo, v);
    return oi_vselect(v > hi, hi, v);
}
#else
static inline oi_vf oi_vclamp(oi_vf v, oi_vf lo, oi_vf hi) {
    int u;
    for (u = 0; u < OI_VL; u++) {
        v.v[u] = v.v[u] < lo.v[u] ? lo.v[u] : v.v[u];
        v.v[u] = v.v[u] > hi.v[u] ? hi.v[u] : v.v[u];
    }
    return v;
}
#endif
/* The same on n floats at p (the outputs of a kernel without an in-register clamp). */
static inline void oi_clamp_span(float *p, int64_t n, const float *act) {
    int64_t i;
    for (i = 0; i < n; i++) {
        const float t = p[i] < act[0] ? act[0] : p[i];
        p[i] = t > act[1] ? act[1] : t;
    }
}

/* ---- weights packed once -------------------------------------------------------------------
 * A constant B (a model weight) is packed on its first use into full-K panels, the GEMM's
 * own layout (panel p holds B(k, p*NR + jj) at [p][k][jj], zero past N), and kept until
 * oi_kernels_release(): later calls skip packing. Costs one more copy of each such weight. */
typedef struct {
    const float *src;
    int64_t n, k, ld;
    int nk;
    float *panels;
} oi_prepack_entry;

static struct {
    oi_prepack_entry *items;
    int64_t count, cap;
} oi_prepack_table;

/* The panels of B (W [N, K] with `nk`, else B [K, N]); NULL when out of memory (the caller
 * then packs per call). */
static inline const float *oi_gemm_prepacked(const float *b, int64_t n, int64_t k, int64_t ld, int nk) {
    int64_t i, p, kk, jj;
    const int64_t panels = (n + OI_NR - 1) / OI_NR;
    float *out;
    for (i = 0; i < oi_prepack_table.count; i++) {
        const oi_prepack_entry *e = &oi_prepack_table.items[i];
        if (e->src == b && e->n == n && e->k == k && e->ld == ld && e->nk == nk) return e->panels;
    }
    if (oi_prepack_table.count == oi_prepack_table.cap) {
        const int64_t cap = oi_prepack_table.cap ? 2 * oi_prepack_table.cap : 64;
        oi_prepack_entry *items = (oi_prepack_entry *)realloc(oi_prepack_table.items, sizeof(oi_prepack_entry) * (size_t)cap);
        if (!items) return NULL;
        oi_prepack_table.items = items;
        oi_prepack_table.cap = cap;
    }
    out = (float *)malloc(sizeof(float) * (size_t)(panels * OI_NR * (k ? k : 1)));
    if (!out) return NULL;
    for (p = 0; p < panels; p++)
        for (jj = 0; jj < OI_NR; jj++) {
            const int64_t j = p * OI_NR + jj;
            float *dst = out + p * k * OI_NR + jj;
            for (kk = 0; kk < k; kk++) dst[kk * OI_NR] = j < n ? (nk ? b[j * ld + kk] : b[kk * ld + j]) : 0.0f;
        }
    oi_prepack_table.items[oi_prepack_table.count].src = b;
    oi_prepack_table.items[oi_prepack_table.count].n = n;
    oi_prepack_table.items[oi_prepack_table.count].k = k;
    oi_prepack_table.items[oi_prepack_table.count].ld = ld;
    oi_prepack_table.items[oi_prepack_table.count].nk = nk;
    oi_prepack_table.items[oi_prepack_table.count].panels = out;
    oi_prepack_table.count++;
    return out;
}

/* The threads' shared copy of a B split by rows (oi_gemm_f32), grown as needed. */
static struct {
    float *data;
    int64_t floats;
} oi_gemm_shared;

/* Free the packed weights and the shared panels, join the kernel threads (oi_free calls it). */
static inline void oi_kernels_release(void) {
    int64_t i;
    for (i = 0; i < oi_prepack_table.count; i++) free(oi_prepack_table.items[i].panels);
    free(oi_prepack_table.items);
    oi_prepack_table.items = NULL;
    oi_prepack_table.count = oi_prepack_table.cap = 0;
    free(oi_gemm_shared.data);
    oi_gemm_shared.data = NULL;
    oi_gemm_shared.floats = 0;
    oi_parallel_shutdown();
}

/* ---- GEMV: y[j] = dot(x, W[j, :]) for j in [j0, j1) ---------------------------------- */
static OI_VEC_FN void oi_gemv_rows_f32(int64_t K, const float *restrict x, const float *restrict w,
                                       int64_t ldw, const float *restrict bias, float *restrict y,
                                       int64_t j0, int64_t j1) {
    int64_t j = j0, k;
    for (; j + 4 <= j1; j += 4) {
        const float *w0 = w + j * ldw, *w1 = w0 + ldw, *w2 = w1 + ldw, *w3 = w2 + ldw;
        oi_vf a0 = oi_vzero(), a1 = oi_vzero(), a2 = oi_vzero(), a3 = oi_vzero();
        oi_vf b0 = oi_vzero(), b1 = oi_vzero(), b2 = oi_vzero(), b3 = oi_vzero();
        float t0, t1, t2, t3;
        for (k = 0; k + 2 * OI_VL <= K; k += 2 * OI_VL) {
            const oi_vf xa = oi_vload(x + k), xb = oi_vload(x + k + OI_VL);
            a0 = OI_VFMA(xa, oi_vload(w0 + k), a0);
            b0 = OI_VFMA(xb, oi_vload(w0 + k + OI_VL), b0);
            a1 = OI_VFMA(xa, oi_vload(w1 + k), a1);
            b1 = OI_VFMA(xb, oi_vload(w1 + k + OI_VL), b1);
            a2 = OI_VFMA(xa, oi_vload(w2 + k), a2);
            b2 = OI_VFMA(xb, oi_vload(w2 + k + OI_VL), b2);
            a3 = OI_VFMA(xa, oi_vload(w3 + k), a3);
            b3 = OI_VFMA(xb, oi_vload(w3 + k + OI_VL), b3);
        }
        t0 = oi_vsum(OI_VADD(a0, b0));
        t1 = oi_vsum(OI_VADD(a1, b1));
        t2 = oi_vsum(OI_VADD(a2, b2));
        t3 = oi_vsum(OI_VADD(a3, b3));
        for (; k < K; k++) {
            t0 = OI_FMAF(x[k], w0[k], t0);
            t1 = OI_FMAF(x[k], w1[k], t1);
            t2 = OI_FMAF(x[k], w2[k], t2);
            t3 = OI_FMAF(x[k], w3[k], t3);
        }
        if (bias) {
            t0 += bias[j];
            t1 += bias[j + 1];
            t2 += bias[j + 2];
            t3 += bias[j + 3];
        }
        y[j] = t0;
        y[j + 1] = t1;
        y[j + 2] = t2;
        y[j + 3] = t3;
    }
    for (; j < j1; j++) { /* the same operations for one row */
        const float *w0 = w + j * ldw;
        oi_vf a0 = oi_vzero(), b0 = oi_vzero();
        float t0;
        for (k = 0; k + 2 * OI_VL <= K; k += 2 * OI_VL) {
            a0 = OI_VFMA(oi_vload(x + k), oi_vload(w0 + k), a0);
            b0 = OI_VFMA(oi_vload(x + k + OI_VL), oi_vload(w0 + k + OI_VL), b0);
        }
        t0 = oi_vsum(OI_VADD(a0, b0));
        for (; k < K; k++) t0 = OI_FMAF(x[k], w0[k], t0);
        if (bias) t0 += bias[j];
        y[j] = t0;
    }
}

/* ---- M = 1 with B [K, N]: y[j] = sum_k x[k] * B[k, j], one chain per j ----------------- */
static OI_VEC_FN void oi_gemv_cols_f32(int64_t K, const float *restrict x, const float *restrict b,
                                       int64_t ldb, const float *restrict bias, float *restrict y,
                                       int64_t j0, int64_t j1) {
    int64_t j = j0, k;
    for (; j + 4 * OI_VL <= j1; j += 4 * OI_VL) {
        oi_vf c0 = oi_vzero(), c1 = oi_vzero(), c2 = oi_vzero(), c3 = oi_vzero();
        for (k = 0; k < K; k++) {
            const float *bk = b + k * ldb + j;
            const oi_vf xv = oi_vsplat(x[k]);
            c0 = OI_VFMA(xv, oi_vload(bk), c0);
            c1 = OI_VFMA(xv, oi_vload(bk + OI_VL), c1);
            c2 = OI_VFMA(xv, oi_vload(bk + 2 * OI_VL), c2);
            c3 = OI_VFMA(xv, oi_vload(bk + 3 * OI_VL), c3);
        }
        if (bias) {
            c0 = OI_VADD(c0, oi_vload(bias + j));
            c1 = OI_VADD(c1, oi_vload(bias + j + OI_VL));
            c2 = OI_VADD(c2, oi_vload(bias + j + 2 * OI_VL));
            c3 = OI_VADD(c3, oi_vload(bias + j + 3 * OI_VL));
        }
        oi_vstore(y + j, c0);
        oi_vstore(y + j + OI_VL, c1);
        oi_vstore(y + j + 2 * OI_VL, c2);
        oi_vstore(y + j + 3 * OI_VL, c3);
    }
    for (; j < j1; j++) {
        float s = 0.0f;
        for (k = 0; k < K; k++) s = OI_FMAF(x[k], b[k * ldb + j], s);
        y[j] = bias ? s + bias[j] : s;
    }
}

/* ---- GEMM ------------------------------------------------------------------------------ */

/* Pack B(pc .. pc+kc, jc .. jc+nc) as NR-wide panels: panel p holds B(pc+k, jc+p*NR+jj) at
 * bp[p*kc*NR + k*NR + jj], zero beyond nc. */
static void oi_gemm_pack_conv_f32(const oi_conv_geom *cv, const float *x, int64_t pc, int64_t kc,
                                  int64_t j, int64_t nr, float *restrict dst) {
    int64_t iy0[OI_NR], ix0[OI_NR], jj, k;
    const int64_t taps = cv->KH * cv->KW;
    for (jj = 0; jj < nr; jj++) {
        iy0[jj] = ((j + jj) / cv->OW) * cv->SH - cv->PH;
        ix0[jj] = ((j + jj) % cv->OW) * cv->SW - cv->PW;
    }
    for (k = 0; k < kc; k++) {
        const int64_t c = (pc + k) / taps, tap = (pc + k) % taps;
        const int64_t dy = (tap / cv->KW) * cv->DH, dx = (tap % cv->KW) * cv->DW;
        const float *plane = x + c * cv->x_c;
        for (jj = 0; jj < nr; jj++) {
            const int64_t iy = iy0[jj] + dy, ix = ix0[jj] + dx;
            dst[k * OI_NR + jj] = (iy >= 0 && iy < cv->H && ix >= 0 && ix < cv->W) ? plane[iy * cv->W + ix] : 0.0f;
        }
    }
}

static void oi_gemm_pack_b_f32(const oi_gemm_f32_args *g, int64_t pc, int64_t kc, int64_t jc,
                               int64_t nc, float *restrict bp) {
    int64_t p, k, jj;
    for (p = 0; p * OI_NR < nc; p++) {
        float *dst = bp + p * kc * OI_NR;
        const int64_t j = jc + p * OI_NR, nr = oi_min64(OI_NR, nc - p * OI_NR);
        if (g->conv) {
            oi_gemm_pack_conv_f32(g->conv, g->b, pc, kc, j, nr, dst);
        } else if (g->b_nk) {
            for (jj = 0; jj < nr; jj++) {
                const float *src = g->b + (j + jj) * g->ldb + pc;
                for (k = 0; k < kc; k++) dst[k * OI_NR + jj] = src[k];
            }
        } else if (nr == OI_NR) { /* two vector moves a row (a loop would be a memcpy call) */
            for (k = 0; k < kc; k++) {
                const float *src = g->b + (pc + k) * g->ldb + j;
                oi_vstore(dst + k * OI_NR, oi_vload(src));
                oi_vstore(dst + k * OI_NR + OI_VL, oi_vload(src + OI_VL));
            }
        } else { /* the last, narrower panel: each row of it whole, zeros past nr */
            for (k = 0; k < kc; k++) {
                float *d = dst + k * OI_NR;
                oi_vstore(d, oi_vzero());
                oi_vstore(d + OI_VL, oi_vzero());
                oi_copy_short(d, g->b + (pc + k) * g->ldb + j, nr);
            }
            continue;
        }
        for (jj = nr; jj < OI_NR; jj++)
            for (k = 0; k < kc; k++) dst[k * OI_NR + jj] = 0.0f;
    }
}

#define OI_MK_LOAD(r)                                          \
    if (load) {                                                \
        r##0 = oi_vload(c + (r##_ROW) * ldc);                  \
        r##1 = oi_vload(c + (r##_ROW) * ldc + OI_VL);          \
    } else {                                                   \
        r##0 = oi_vzero();                                     \
        r##1 = oi_vzero();                                     \
    }
#define OI_MK_STEP(r)                                          \
    {                                                          \
        const oi_vf av = oi_vsplat(a[(r##_ROW) * lda + k]);    \
        r##0 = OI_VFMA(av, b0, r##0);                          \
        r##1 = OI_VFMA(av, b1, r##1);                          \
    }
#define OI_MK_STORE(r)                                         \
    if (bias) {                                                \
        r##0 = OI_VADD(r##0, bias0);                           \
        r##1 = OI_VADD(r##1, bias1);                           \
    }                                                          \
    if (rbias) {                                               \
        r##0 = OI_VADD(r##0, oi_vsplat(rbias[r##_ROW]));        \
        r##1 = OI_VADD(r##1, oi_vsplat(rbias[r##_ROW]));        \
    }                                                          \
    if (act) {                                                 \
        r##0 = oi_vclamp(r##0, lo, hi);                        \
        r##1 = oi_vclamp(r##1, lo, hi);                        \
    }                                                          \
    oi_vstore(c + (r##_ROW) * ldc, r##0);                      \
    oi_vstore(c + (r##_ROW) * ldc + OI_VL, r##1);
#define ra_ROW 0
#define rb_ROW 1
#define rc_ROW 2
#define rd_ROW 3
#define re_ROW 4
#define rf_ROW 5
#define rg_ROW 6
#define rh_ROW 7
#define ri_ROW 8
#define rj_ROW 9
#define rk_ROW 10
#define rl_ROW 11
#define OI_MK_DECL(r) oi_vf r##0, r##1;
#define OI_MK_ROWS6(X) X(ra) X(rb) X(rc) X(rd) X(re) X(rf)
#define OI_MK_ROWS12(X) OI_MK_ROWS6(X) X(rg) X(rh) X(ri) X(rj) X(rk) X(rl)

/* C tile [rows x OI_NR] (+)= A[0..rows, 0..kc] * panel; `load` continues from C's values,
 * `bias` (OI_NR floats, per column) and `rbias` (per row) are added at the end, then the
 * clamp `act` (when not NULL). ROWS lists the tile's rows (OI_MK_ROWS6 or 12). */
#define OI_GEMM_MICRO(name, ROWS)                                                                   \
    static OI_VEC_FN void name(int64_t kc, const float *restrict a, int64_t lda, const float *restrict bp, \
                               float *restrict c, int64_t ldc, int load, const float *restrict bias,  \
                               const float *restrict rbias, const float *restrict act) {              \
        ROWS(OI_MK_DECL)                                                                            \
        int64_t k;                                                                                  \
        ROWS(OI_MK_LOAD)                                                                            \
        for (k = 0; k < kc; k++) {                                                                  \
            const oi_vf b0 = oi_vload(bp + k * OI_NR), b1 = oi_vload(bp + k * OI_NR + OI_VL);       \
            ROWS(OI_MK_STEP)                                                                        \
        }                                                                                           \
        {                                                                                           \
            const oi_vf bias0 = bias ? oi_vload(bias) : oi_vzero();                                 \
            const oi_vf bias1 = bias ? oi_vload(bias + OI_VL) : oi_vzero();                         \
            const oi_vf lo = oi_vsplat(act ? act[0] : 0.0f), hi = oi_vsplat(act ? act[1] : 0.0f);   \
            ROWS(OI_MK_STORE)                                                                       \
        }                                                                                           \
    }

/* The OI_MR x OI_NR tile. */
OI_GEMM_MICRO(oi_gemm_micro_f32, OI_MK_ROWS6)
#if OI_VL >= 16
/* With 32 vector registers (AVX-512) a tile of twice the rows, OI_MR2, loads each vector of
 * B once for twelve rows (about a fifth faster). Its elements get the same operations in
 * the same order as in the OI_MR-row tile, so results do not depend on which computed them. */
#define OI_MR2 (2 * OI_MR)
OI_GEMM_MICRO(oi_gemm_micro2_f32, OI_MK_ROWS12)
#endif

/* A tile at the edge of C (mr < MR rows or nr < NR columns): through a full local tile. */
static void oi_gemm_edge_f32(int64_t kc, const float *a, int64_t lda, const float *bp, float *c,
                             int64_t ldc, int64_t mr, int64_t nr, int load, const float *bias,
                             const float *rbias, const float *act) {
    float tile[OI_MR * OI_NR], pad[OI_NR], rpad[OI_MR];
    int64_t r, jj;
    if (rbias)
        for (r = 0; r < OI_MR; r++) rpad[r] = r < mr ? rbias[r] : 0.0f;
    for (r = 0; r < OI_MR; r++)
        for (jj = 0; jj < OI_NR; jj++) tile[r * OI_NR + jj] = (load && r < mr && jj < nr) ? c[r * ldc + jj] : 0.0f;
    if (bias)
        for (jj = 0; jj < OI_NR; jj++) pad[jj] = jj < nr ? bias[jj] : 0.0f;
    oi_gemm_micro_f32(kc, a, lda, bp, tile, OI_NR, load, bias ? pad : NULL, rbias ? rpad : NULL, act);
    for (r = 0; r < mr; r++) oi_copy_short(c + r * ldc, tile + r * OI_NR, nr);
}

/* The same for a panel of at most OI_VL columns (the last panel of a narrow C, such as the
 * 49 pixels of a 7 x 7 image): one vector per row, half the work of the full tile. Each
 * element gets the same operations as in oi_gemm_micro_f32. ROWS: OI_MR (or OI_MR2). */
#define OI_MH_ROW(r)                                                                          \
    {                                                                                         \
        oi_vf v = acc[r];                                                                     \
        if (bias) v = OI_VADD(v, bias0);                                                      \
        if (rbias) v = OI_VADD(v, oi_vsplat(rbias[r]));                                       \
        if (act) v = oi_vclamp(v, lo, hi);                                                    \
        oi_vstore(c + (r) * ldc, v);                                                          \
    }
#define OI_GEMM_MICRO_HALF(name, ROWS)                                                                \
    static OI_VEC_FN void name(int64_t kc, const float *restrict a, int64_t lda, const float *restrict bp, \
                               float *restrict c, int64_t ldc, int load, const float *restrict bias,  \
                               const float *restrict rbias, const float *restrict act) {              \
        oi_vf acc[ROWS];                                                                            \
        int64_t k;                                                                                  \
        int r;                                                                                      \
        for (r = 0; r < ROWS; r++) acc[r] = load ? oi_vload(c + r * ldc) : oi_vzero();              \
        for (k = 0; k < kc; k++) {                                                                  \
            const oi_vf b0 = oi_vload(bp + k * OI_NR);                                              \
            for (r = 0; r < ROWS; r++) acc[r] = OI_VFMA(oi_vsplat(a[r * lda + k]), b0, acc[r]);     \
        }                                                                                           \
        {                                                                                           \
            const oi_vf bias0 = bias ? oi_vload(bias) : oi_vzero();                                 \
            const oi_vf lo = oi_vsplat(act ? act[0] : 0.0f), hi = oi_vsplat(act ? act[1] : 0.0f);   \
            for (r = 0; r < ROWS; r++) OI_MH_ROW(r)                                                 \
        }                                                                                           \
    }
OI_GEMM_MICRO_HALF(oi_gemm_micro_half_f32, OI_MR)
#ifdef OI_MR2
OI_GEMM_MICRO_HALF(oi_gemm_micro_half2_f32, OI_MR2)
#endif

/* An edge tile of at most OI_VL columns, through a local MR x OI_VL tile. */
static void oi_gemm_edge_half_f32(int64_t kc, const float *a, int64_t lda, const float *bp, float *c,
                                  int64_t ldc, int64_t mr, int64_t nr, int load, const float *bias,
                                  const float *rbias, const float *act) {
    float tile[OI_MR * OI_VL], pad[OI_VL], rpad[OI_MR];
    int64_t r, jj;
    if (rbias)
        for (r = 0; r < OI_MR; r++) rpad[r] = r < mr ? rbias[r] : 0.0f;
    for (r = 0; r < OI_MR; r++)
        for (jj = 0; jj < OI_VL; jj++) tile[r * OI_VL + jj] = (load && r < mr && jj < nr) ? c[r * ldc + jj] : 0.0f;
    if (bias)
        for (jj = 0; jj < OI_VL; jj++) pad[jj] = jj < nr ? bias[jj] : 0.0f;
    oi_gemm_micro_half_f32(kc, a, lda, bp, tile, OI_VL, load, bias ? pad : NULL, rbias ? rpad : NULL, act);
    /* (1 <= nr <= OI_VL and mr <= OI_MR always: said so for GCC, which warns of overreads
       of `tile` at -O3 otherwise) */
    nr = nr < 1 ? 1 : nr > OI_VL ? OI_VL : nr;
    mr = mr > OI_MR ? OI_MR : mr;
    for (r = 0; r < mr; r++) oi_copy_short(c + r * ldc, tile + r * OI_VL, nr);
}

/* A last panel of a single column (the 49 pixels of a 7 x 7 image leave one): per row, the
 * block's dot product of the A row with the column in vector lanes (two partial sums: even
 * and odd vectors of k), oi_vsum, the tail of kc, then added to the partial sum in C (later
 * blocks), the biases and the clamp. A fixed order whatever the split, like every other
 * element; one vector of work per OI_VL products instead of one per product. `col` holds
 * the column's kc values contiguously (gathered once per block); rows go three at a time,
 * sharing each load of the column. */
static inline void oi_gemm_col1_put(float t, float *c, int load, const float *bias, const float *rbias,
                                    const float *act) {
    if (load) t += *c;
    if (bias) t += bias[0];
    if (rbias) t += *rbias;
    if (act) oi_clamp_span(&t, 1, act);
    *c = t;
}
static OI_VEC_FN void oi_gemm_col1_f32(int64_t kc, const float *restrict a, int64_t lda,
                                       const float *restrict col, float *restrict c, int64_t ldc, int64_t mr,
                                       int load, const float *restrict bias, const float *restrict rbias,
                                       const float *restrict act) {
    int64_t k, r = 0;
    for (; r + 3 <= mr; r += 3) {
        const float *a0 = a + r * lda, *a1 = a0 + lda, *a2 = a1 + lda;
        oi_vf s0 = oi_vzero(), s1 = oi_vzero(), u0 = oi_vzero(), u1 = oi_vzero();
        oi_vf v0 = oi_vzero(), v1 = oi_vzero();
        float t0, t1, t2;
        for (k = 0; k + 2 * OI_VL <= kc; k += 2 * OI_VL) {
            const oi_vf c0 = oi_vload(col + k), c1 = oi_vload(col + k + OI_VL);
            s0 = OI_VFMA(oi_vload(a0 + k), c0, s0);
            s1 = OI_VFMA(oi_vload(a0 + k + OI_VL), c1, s1);
            u0 = OI_VFMA(oi_vload(a1 + k), c0, u0);
            u1 = OI_VFMA(oi_vload(a1 + k + OI_VL), c1, u1);
            v0 = OI_VFMA(oi_vload(a2 + k), c0, v0);
            v1 = OI_VFMA(oi_vload(a2 + k + OI_VL), c1, v1);
        }
        t0 = oi_vsum(OI_VADD(s0, s1));
        t1 = oi_vsum(OI_VADD(u0, u1));
        t2 = oi_vsum(OI_VADD(v0, v1));
        for (; k < kc; k++) {
            t0 = OI_FMAF(a0[k], col[k], t0);
            t1 = OI_FMAF(a1[k], col[k], t1);
            t2 = OI_FMAF(a2[k], col[k], t2);
        }
        oi_gemm_col1_put(t0, c + r * ldc, load, bias, rbias ? rbias + r : NULL, act);
        oi_gemm_col1_put(t1, c + (r + 1) * ldc, load, bias, rbias ? rbias + r + 1 : NULL, act);
        oi_gemm_col1_put(t2, c + (r + 2) * ldc, load, bias, rbias ? rbias + r + 2 : NULL, act);
    }
    for (; r < mr; r++) { /* the same operations, one row */
        const float *ar = a + r * lda;
        oi_vf s0 = oi_vzero(), s1 = oi_vzero();
        float t;
        for (k = 0; k + 2 * OI_VL <= kc; k += 2 * OI_VL) {
            s0 = OI_VFMA(oi_vload(ar + k), oi_vload(col + k), s0);
            s1 = OI_VFMA(oi_vload(ar + k + OI_VL), oi_vload(col + k + OI_VL), s1);
        }
        t = oi_vsum(OI_VADD(s0, s1));
        for (; k < kc; k++) t = OI_FMAF(ar[k], col[k], t);
        oi_gemm_col1_put(t, c + r * ldc, load, bias, rbias ? rbias + r : NULL, act);
    }
}

/* One tile: mr rows of A times the nr columns of `panel`, into c. Which kernel computes a
 * column depends only on how many columns its panel has, never on the split over threads:
 * a full panel the micro-kernel (or a local tile for the last rows); a panel of one column
 * oi_gemm_col1_f32 on `col` (the column gathered); of at most one vector the one-vector
 * kernel; of more (a 7 x 7 image's 49 pixels leave 17 with AVX-512) a one-vector half and
 * then the rest the same way, never the full tile for what is mostly padding. */
static void oi_gemm_tile_f32(int64_t kc, const float *a, int64_t lda, const float *panel, const float *col,
                             float *c, int64_t ldc, int64_t mr, int64_t nr, int load, const float *bias,
                             const float *rbias, const float *act) {
    if (nr == OI_NR) {
        if (mr == OI_MR)
            oi_gemm_micro_f32(kc, a, lda, panel, c, ldc, load, bias, rbias, act);
        else
            oi_gemm_edge_f32(kc, a, lda, panel, c, ldc, mr, nr, load, bias, rbias, act);
        return;
    }
    if (nr > OI_VL) {
        if (mr == OI_MR)
            oi_gemm_micro_half_f32(kc, a, lda, panel, c, ldc, load, bias, rbias, act);
        else
            oi_gemm_edge_half_f32(kc, a, lda, panel, c, ldc, mr, OI_VL, load, bias, rbias, act);
        panel += OI_VL;
        c += OI_VL;
        bias = bias ? bias + OI_VL : NULL;
        nr -= OI_VL;
    }
    if (nr == 1)
        oi_gemm_col1_f32(kc, a, lda, col, c, ldc, mr, load, bias, rbias, act);
    else
        oi_gemm_edge_half_f32(kc, a, lda, panel, c, ldc, mr, nr, load, bias, rbias, act);
}

#ifdef OI_MR2
/* Rows [ic, ic + OI_MR2) of the block of columns [jc, jc + nc) for the K block [pc, pc +
 * kc) (oi_gemm_block_f32): full panels and panels of more than one vector take the
 * twelve-row kernels, the rest two OI_MR-row tiles. */
static void oi_gemm_rows2_f32(const oi_gemm_f32_args *g, int64_t ic, int64_t jc, int64_t nc, int64_t pc,
                              int64_t kc, const float *panels, int64_t stride, const float *col) {
    const int last = pc + kc == g->K, load = pc > 0;
    const float *a = g->a + ic * g->lda + pc;
    const float *rbias = last && g->bias_m ? g->bias_m + ic : NULL;
    const float *act = last ? g->act : NULL;
    int64_t jr;
    for (jr = 0; jr < nc; jr += OI_NR) {
        int64_t nr = oi_min64(OI_NR, nc - jr);
        float *c = g->c + ic * g->ldc + jc + jr;
        const float *bias = last && g->bias ? g->bias + jc + jr : NULL;
        const float *panel = panels + (jr / OI_NR) * stride;
        if (nr == OI_NR) {
            oi_gemm_micro2_f32(kc, a, g->lda, panel, c, g->ldc, load, bias, rbias, act);
            continue;
        }
        if (nr > OI_VL) {
            oi_gemm_micro_half2_f32(kc, a, g->lda, panel, c, g->ldc, load, bias, rbias, act);
            panel += OI_VL;
            c += OI_VL;
            bias = bias ? bias + OI_VL : NULL;
            nr -= OI_VL;
        }
        oi_gemm_tile_f32(kc, a, g->lda, panel, col, c, g->ldc, OI_MR, nr, load, bias, rbias, act);
        oi_gemm_tile_f32(kc, a + OI_MR * g->lda, g->lda, panel, col, c + OI_MR * g->ldc, g->ldc, OI_MR, nr, load,
                         bias, rbias ? rbias + OI_MR : NULL, act);
    }
    if (last && g->epilogue) g->epilogue(g->epilogue_ctx, g->c, g->ldc, ic, OI_MR2, jc, nc);
}
#endif

/* C[i0 .. i1, j0 .. j1] of the product; `pack` is this thread's scratch. */
static void oi_gemm_block_f32(const oi_gemm_f32_args *g, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                              float *pack) {
    float *bp = pack, *ap = pack + OI_KC * (OI_NC + 32), *col = ap - OI_KC;
    int64_t jc, pc, ic, jr, r, k;
    for (jc = j0; jc < j1; jc += OI_NC) {
        const int64_t nc = oi_min64(OI_NC, j1 - jc);
        for (pc = 0; pc < g->K; pc += OI_KC) {
            const int64_t kc = oi_min64(OI_KC, g->K - pc);
            const int last = pc + kc == g->K, load = pc > 0;
            /* panel q of this block starts at panels + q * stride */
            const float *panels = g->b_panels ? g->b_panels + (jc / OI_NR) * g->K * OI_NR + pc * OI_NR : bp;
            const int64_t stride = g->b_panels ? g->K * OI_NR : kc * OI_NR;
            if (!g->b_panels) oi_gemm_pack_b_f32(g, pc, kc, jc, nc, bp);
            if (nc % OI_NR == 1 || nc % OI_NR == OI_VL + 1) {
                /* the last panel's lone column (oi_gemm_tile_f32), contiguous, at the end of
                   the B area (the panels take at most OI_KC * (OI_NC + 15) floats) */
                const float *last_panel = panels + (nc / OI_NR) * stride + nc % OI_NR - 1;
                for (k = 0; k < kc; k++) col[k] = last_panel[k * OI_NR];
            }
            for (ic = i0; ic < i1; ic += OI_MR) {
                const int64_t mr = oi_min64(OI_MR, i1 - ic);
#ifdef OI_MR2
                if (i1 - ic >= OI_MR2) { /* twelve rows at once (see OI_MR2) */
                    oi_gemm_rows2_f32(g, ic, jc, nc, pc, kc, panels, stride, col);
                    ic += OI_MR;
                    continue;
                }
#endif
                const float *a = g->a + ic * g->lda + pc;
                int64_t la = g->lda;
                if (mr < OI_MR) { /* zero rows below the last row of A */
                    for (r = 0; r < OI_MR; r++)
                        for (k = 0; k < kc; k++) ap[r * kc + k] = r < mr ? a[r * g->lda + k] : 0.0f;
                    a = ap;
                    la = kc;
                }
                for (jr = 0; jr < nc; jr += OI_NR) {
                    const int64_t nr = oi_min64(OI_NR, nc - jr);
                    float *c = g->c + ic * g->ldc + jc + jr;
                    const float *bias = last && g->bias ? g->bias + jc + jr : NULL;
                    const float *rbias = last && g->bias_m ? g->bias_m + ic : NULL;
                    const float *act = last ? g->act : NULL;
                    const float *panel = panels + (jr / OI_NR) * stride;
                    oi_gemm_tile_f32(kc, a, la, panel, col, c, g->ldc, mr, nr, load, bias, rbias, act);
                }
                if (last && g->epilogue) g->epilogue(g->epilogue_ctx, g->c, g->ldc, ic, mr, jc, nc);
            }
        }
    }
    if (g->K == 0) { /* an empty sum: bias (or zero), then the epilogue */
        for (ic = i0; ic < i1; ic++)
            for (jc = j0; jc < j1; jc++)
                g->c[ic * g->ldc + jc] = (g->bias ? g->bias[jc] : 0.0f) + (g->bias_m ? g->bias_m[ic] : 0.0f);
        if (g->act)
            for (ic = i0; ic < i1; ic++) oi_clamp_span(g->c + ic * g->ldc + j0, j1 - j0, g->act);
        if (g->epilogue && i1 > i0) g->epilogue(g->epilogue_ctx, g->c, g->ldc, i0, i1 - i0, j0, j1 - j0);
    }
}

/* Tasks: units are NR-wide column panels (split_rows 0) or MR-high row blocks (1). */
typedef struct {
    const oi_gemm_f32_args *g;
    int split_rows;
} oi_gemm_task_f32;

static void oi_gemm_run_f32(void *ctx, int64_t begin, int64_t end, int slot) {
    const oi_gemm_task_f32 *t = (const oi_gemm_task_f32 *)ctx;
    const oi_gemm_f32_args *g = t->g;
    float *pack = g->pack + (int64_t)slot * OI_GEMM_PACK_FLOATS;
    if (t->split_rows)
        oi_gemm_block_f32(g, begin * OI_MR, oi_min64(end * OI_MR, g->M), 0, g->N, pack);
    else
        oi_gemm_block_f32(g, 0, g->M, begin * OI_NR, oi_min64(end * OI_NR, g->N), pack);
}

/* GEMV tasks: units are groups of 4 outputs; every row of A in turn. */
static void oi_gemv_run_f32(void *ctx, int64_t begin, int64_t end, int slot) {
    const oi_gemm_f32_args *g = (const oi_gemm_f32_args *)ctx;
    const int64_t j0 = begin * 4, j1 = oi_min64(end * 4, g->N);
    int64_t i;
    (void)slot;
    for (i = 0; i < g->M; i++) {
        if (g->b_nk)
            oi_gemv_rows_f32(g->K, g->a + i * g->lda, g->b, g->ldb, g->bias, g->c + i * g->ldc, j0, j1);
        else
            oi_gemv_cols_f32(g->K, g->a + i * g->lda, g->b, g->ldb, g->bias, g->c + i * g->ldc, j0, j1);
        if (g->act) oi_clamp_span(g->c + i * g->ldc + j0, j1 - j0, g->act);
    }
    if (g->epilogue && g->M > 0) g->epilogue(g->epilogue_ctx, g->c, g->ldc, 0, g->M, j0, j1 - j0);
}

/* Packing tasks: units are NR-wide panels of B, packed over the full K into `dst` (the
 * layout of oi_gemm_prepacked, which the GEMM reads through b_panels). */
typedef struct {
    const oi_gemm_f32_args *g;
    float *dst;
} oi_gemm_pack_task_f32;

static void oi_gemm_pack_run_f32(void *ctx, int64_t begin, int64_t end, int slot) {
    const oi_gemm_pack_task_f32 *t = (const oi_gemm_pack_task_f32 *)ctx;
    const int64_t j = begin * OI_NR;
    (void)slot;
    oi_gemm_pack_b_f32(t->g, 0, t->g->K, j, oi_min64(end * OI_NR, t->g->N) - j, t->dst + begin * t->g->K * OI_NR);
}

/* Outputs of the busiest thread when threads claim `units` units of `size` outputs
 * (oi_pool.h): with fewer than two units per thread, whole units decide; with more, a
 * thread that runs out takes over units of the others, so the threads end within about one
 * unit of each other, half a unit on average. */
static inline double oi_gemm_busiest(int64_t units, int64_t threads, double size) {
    if (units < 2 * threads) return (double)((units + threads - 1) / threads) * size;
    return ((double)units / (double)threads + 0.5) * size;
}

/* What a call of the threaded GEMM re-reads: the operand every thread reads whole (A when
 * the threads split the columns, B when they split the rows). Re-reading one float of it
 * from beyond the L2 cache costs about OI_GEMM_STREAM_COST multiply-adds; one that fits in
 * OI_GEMM_L2_FLOATS is re-read from the L2 at little cost. */
#ifndef OI_GEMM_STREAM_COST
#define OI_GEMM_STREAM_COST 6
#endif
#ifndef OI_GEMM_L2_FLOATS
#define OI_GEMM_L2_FLOATS (64 * 1024)
#endif

/* Whether threads should split the M x N x K product by rows (units of MR rows) rather than
 * by columns (panels of NR): the split whose busiest thread computes fewer outputs, counting
 * as outputs (a K-long sum each) what else the split costs it: a split by rows packs B when
 * B is packed per call (`packs`; once over all threads when `shared`, else by every
 * thread: one element of B costs about OI_GEMM_PACK_COST multiply-adds), and each of a
 * thread's calls (about three, oi_pool.h) re-reads the shared operand when it exceeds the
 * L2 (B by rows, A by columns). */
#ifndef OI_GEMM_PACK_COST
#define OI_GEMM_PACK_COST 16
#endif
static inline int oi_gemm_split_rows(int64_t M, int64_t N, int64_t K, int64_t threads, int packs, int shared) {
    const int64_t panels = (N + OI_NR - 1) / OI_NR, blocks = (M + OI_MR - 1) / OI_MR;
    /* (a last panel or block may be narrower: then it counts whole, which favours neither) */
    double by_cols = oi_gemm_busiest(panels, threads, (double)oi_min64(OI_NR, N) * (double)M);
    double by_rows = oi_gemm_busiest(blocks, threads, (double)oi_min64(OI_MR, M) * (double)N);
    if (threads <= 1) return 0;
    if (packs) by_rows += (double)OI_GEMM_PACK_COST * (double)N / (shared ? (double)threads : 1.0);
    if (M * K > OI_GEMM_L2_FLOATS) by_cols += 3.0 * OI_GEMM_STREAM_COST * (double)M;
    if (K * N > OI_GEMM_L2_FLOATS) by_rows += 3.0 * OI_GEMM_STREAM_COST * (double)N;
    return by_rows < by_cols;
}

/* At most this many floats of B are packed once for all threads (else each packs its own). */
#ifndef OI_GEMM_SHARED_MAX_FLOATS
#define OI_GEMM_SHARED_MAX_FLOATS (4 << 20)
#endif

/* The product described by `g` (see the top of this file), split over the threads. */
static inline void oi_gemm_f32(const oi_gemm_f32_args *g) {
    const double work = (double)g->M * (double)g->N * (double)(g->K ? g->K : 1);
    if (g->M <= 0 || g->N <= 0) return;
    if (!g->conv && !g->bias_m && ((g->b_nk && g->M < OI_GEMV_MAX_ROWS) || (!g->b_nk && g->M == 1))) {
        oi_parallel_work((g->N + 3) / 4, work, oi_gemv_run_f32, (void *)g);
    } else {
        oi_gemm_task_f32 t;
        oi_gemm_f32_args shared;
        const int64_t panels = (g->N + OI_NR - 1) / OI_NR, blocks = (g->M + OI_MR - 1) / OI_MR;
        const int64_t threads = oi_parallel_threads(), floats = panels * OI_NR * g->K;
        const int shareable = !g->b_panels && threads > 1 && work >= OI_PARALLEL_MIN_WORK && g->K > 0 &&
                              floats <= OI_GEMM_SHARED_MAX_FLOATS;
        t.g = g;
        t.split_rows = oi_gemm_split_rows(g->M, g->N, g->K, threads, !g->b_panels, shareable);
        if (t.split_rows && shareable) {
            /* every range of rows would pack all of B again: the threads pack its panels
               once, over the full K, and read them as if prepacked (the same values, so the
               same results as packing per block) */
            if (oi_gemm_shared.floats < floats) {
                free(oi_gemm_shared.data);
                oi_gemm_shared.data = (float *)malloc(sizeof(float) * (size_t)floats);
                oi_gemm_shared.floats = oi_gemm_shared.data ? floats : 0;
            }
            if (oi_gemm_shared.data) {
                oi_gemm_pack_task_f32 pk;
                pk.g = g;
                pk.dst = oi_gemm_shared.data;
                oi_parallel_for(panels, oi_gemm_pack_run_f32, &pk);
                shared = *g;
                shared.b_panels = oi_gemm_shared.data;
                t.g = &shared;
            }
        }
        oi_parallel_work(t.split_rows ? blocks : panels, work, oi_gemm_run_f32, &t);
    }
}

#endif /* OI_GEMM_H */
