/* OpenInfer-JAX emitted runtime: f32 scaled dot-product attention.
 *
 *     o[h, i, :] = softmax_j(q[h, i, :] . k[hk, j, :] * scale + mask[h, i, j]) @ v[hk, j, :]
 *
 * for one batch entry, hk = h / (Hq / Hk) (grouped-query attention). Every operand is read
 * through element strides (the last dim contiguous), so a transposed or cache-layout K/V
 * ([Sk, Hk, D] as well as [Hk, Sk, D]) is read in place. Hidden keys (bool mask false, or
 * after the causal diagonal) do not count; a row that sees no key gives zeros.
 *
 *  - Few queries (Sq < OI_ATTN_DECODE_ROWS, a decode step): one pass over the keys per K/V
 *    head with an online softmax: blocks of OI_ATTN_KEYS keys, all the query heads that share
 *    the K/V head at once (K and V are read once per step), the running maximum rescales the
 *    partial sums when it grows.
 *  - More queries (prefill, encoders): blocks of OI_ATTN_TILE_ROWS queries; the scores of a
 *    block are a GEMM (q . k^T), then a row softmax, then a GEMM with V, divided by the row
 *    sums.
 *
 * Threads split the K/V heads (decode) or the (head, query block) pairs; never the keys. */
#ifndef OI_ATTENTION_H
#define OI_ATTENTION_H

#include "oi_gemm.h"

#define OI_ATTN_TILE_ROWS (4 * OI_MR) /* queries per block of the tiled path */
#define OI_ATTN_DECODE_ROWS 8     /* fewer queries: the decode path */
#define OI_ATTN_KEYS 64
#define OI_ATTN_MAX_GROUP 64 /* query rows of one decode unit (heads per K/V head x queries) */

typedef struct {
    int64_t Hq, Hk, Sq, Sk, D, Dv;
    const float *q;
    int64_t q_h, q_i;  /* element strides of q's head and query dims */
    const float *k;
    int64_t k_h, k_j;
    const float *v;
    int64_t v_h, v_j;
    float *o;
    int64_t o_h, o_i;
    const float *mask_f;   /* added to the scaled scores, or NULL */
    const uint8_t *mask_b; /* 0 hides a key, or NULL */
    int64_t m_h, m_i, m_j; /* mask strides over (head, query, key); 0 broadcasts */
    float scale;
    int causal;
    float *scratch; /* OI_ATTN_SCRATCH_FLOATS(Sk) floats per thread */
} oi_attention_f32_args;

/* How an operand's tensor holds its logical [batch..., heads, seq, dim] (layouts of the
 * attention kernels): 0 as [batch..., H, S, D]; 1 as [batch..., S, H, D] (the transpose of
 * a [seq, heads, dim] tensor, or a cache of such entries, read in place); 2 as
 * [batch..., S, H * D] with H = `heads` (a projection's output before its reshape). */
typedef struct {
    int nb;                     /* batch dims */
    int64_t batch[OI_MAX_DIMS]; /* their sizes */
    int64_t H, S, D;
    int64_t s_b, s_h, s_i; /* element strides of one batch entry, one head, one position */
} oi_attn_view;

static inline int oi_attn_view_of(const oi_tensor *t, int layout, int64_t heads, oi_attn_view *v) {
    const int nd = t->ndim, core = layout == 2 ? 2 : 3;
    int d;
    if (nd < core) return OI_ERR_SHAPE;
    v->nb = nd - core;
    for (d = 0; d < v->nb; d++) v->batch[d] = t->dims[d];
    if (layout == 0) {
        v->H = t->dims[nd - 3]; v->S = t->dims[nd - 2]; v->D = t->dims[nd - 1];
        v->s_h = v->S * v->D; v->s_i = v->D;
    } else if (layout == 1) {
        v->S = t->dims[nd - 3]; v->H = t->dims[nd - 2]; v->D = t->dims[nd - 1];
        v->s_h = v->D; v->s_i = v->H * v->D;
    } else {
        if (heads <= 0 || t->dims[nd - 1] % heads) return OI_ERR_SHAPE;
        v->S = t->dims[nd - 2]; v->H = heads; v->D = t->dims[nd - 1] / heads;
        v->s_h = v->D; v->s_i = v->H * v->D;
    }
    v->s_b = v->H * v->S * v->D;
    return OI_OK;
}

/* The shape of an output of logical [batch..., H, S, D] in `layout` (see oi_attn_view). */
static inline int oi_attn_set_shape(oi_tensor *o, const oi_attn_view *like, int layout, int64_t H, int64_t S, int64_t D) {
    int64_t dims[OI_MAX_DIMS];
    int d, n = like->nb;
    for (d = 0; d < n; d++) dims[d] = like->batch[d];
    if (layout == 0) { dims[n] = H; dims[n + 1] = S; dims[n + 2] = D; n += 3; }
    else if (layout == 1) { dims[n] = S; dims[n + 1] = H; dims[n + 2] = D; n += 3; }
    else { dims[n] = S; dims[n + 1] = H * D; n += 2; }
    return oi_set_shape(o, n, dims);
}

/* Per-thread scratch: a GEMM pack buffer and the scores of a query block, or the decode
 * path's running sums (it needs less). */
#define OI_ATTN_SCRATCH_FLOATS(sk) (OI_GEMM_PACK_FLOATS + OI_ATTN_TILE_ROWS * (sk) + OI_ATTN_TILE_ROWS)

/* Scaled, masked score of query row (h, i) against key j; -INFINITY when hidden. */
static inline float oi_attn_mask(const oi_attention_f32_args *a, float s, int64_t h, int64_t i, int64_t j) {
    const int64_t m = h * a->m_h + i * a->m_i + j * a->m_j;
    if (a->causal && j > i + (a->Sk - a->Sq)) return -INFINITY;
    if (a->mask_b && !a->mask_b[m]) return -INFINITY;
    s *= a->scale;
    return a->mask_f ? s + a->mask_f[m] : s;
}

static OI_VEC_FN float oi_attn_dot(const float *restrict x, const float *restrict y, int64_t n) {
    oi_vf a = oi_vzero(), b = oi_vzero();
    float t;
    int64_t e = 0;
    for (; e + 2 * OI_VL <= n; e += 2 * OI_VL) {
        a = OI_VFMA(oi_vload(x + e), oi_vload(y + e), a);
        b = OI_VFMA(oi_vload(x + e + OI_VL), oi_vload(y + e + OI_VL), b);
    }
    t = oi_vsum(OI_VADD(a, b));
    for (; e < n; e++) t = OI_FMAF(x[e], y[e], t);
    return t;
}

/* p[0..n] = exp(s[0..n] - m), 0 where s is -inf (p may be s); returns the sum (lanes, then
 * the tail). */
static OI_VEC_FN float oi_attn_exp(float *p, const float *s, int64_t n, float m) {
    oi_vf acc = oi_vzero();
    float total, x;
    int64_t j = 0;
    for (; j + OI_VL <= n; j += OI_VL) {
        float lane[OI_VL];
        int u;
        oi_vf e = oi_vexp(OI_VADD(oi_vload(s + j), oi_vsplat(-m)));
        oi_vstore(lane, e);
        for (u = 0; u < OI_VL; u++)
            if (s[j + u] == -INFINITY) lane[u] = 0.0f;
        e = oi_vload(lane);
        oi_vstore(p + j, e);
        acc = OI_VADD(acc, e);
    }
    total = oi_vsum(acc);
    for (; j < n; j++) {
        x = s[j] == -INFINITY ? 0.0f : oi_exp1(s[j] - m);
        p[j] = x;
        total += x;
    }
    return total;
}

/* y[0..n] = y * c + p * x for the decode path's running output (c rescales, p weighs). */
static OI_VEC_FN void oi_attn_axpy(float *restrict y, const float *restrict x, float p, int64_t n) {
    const oi_vf pv = oi_vsplat(p);
    int64_t e = 0;
    for (; e + OI_VL <= n; e += OI_VL) oi_vstore(y + e, OI_VFMA(pv, oi_vload(x + e), oi_vload(y + e)));
    for (; e < n; e++) y[e] = OI_FMAF(p, x[e], y[e]);
}

/* Decode: K/V heads [begin, end), each with all the query rows that read it. */
static void oi_attn_decode_run(void *ctx, int64_t begin, int64_t end, int slot) {
    const oi_attention_f32_args *a = (const oi_attention_f32_args *)ctx;
    const int64_t group = a->Hq / a->Hk, rows = group * a->Sq;
    float *acc = a->scratch + (int64_t)slot * OI_ATTN_SCRATCH_FLOATS(a->Sk);
    float s[OI_ATTN_KEYS], p[OI_ATTN_KEYS], m[OI_ATTN_MAX_GROUP], l[OI_ATTN_MAX_GROUP];
    int64_t hk, r, j0, j, e;
    for (hk = begin; hk < end; hk++) {
        const float *K = a->k + hk * a->k_h, *V = a->v + hk * a->v_h;
        for (r = 0; r < rows; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
            for (e = 0; e < a->Dv; e++) acc[r * a->Dv + e] = 0.0f;
        }
        for (j0 = 0; j0 < a->Sk; j0 += OI_ATTN_KEYS) {
            const int64_t nk = oi_min64(OI_ATTN_KEYS, a->Sk - j0);
            for (r = 0; r < rows; r++) {
                const int64_t h = hk * group + r / a->Sq, i = r % a->Sq;
                const float *qr = a->q + h * a->q_h + i * a->q_i;
                float *out = acc + r * a->Dv, top = -INFINITY;
                for (j = 0; j < nk; j++) {
                    s[j] = oi_attn_mask(a, oi_attn_dot(qr, K + (j0 + j) * a->k_j, a->D), h, i, j0 + j);
                    if (s[j] > top || s[j] != s[j]) top = s[j];
                }
                if (top == -INFINITY) continue; /* every key of the block hidden */
                if (top > m[r] || top != top) {  /* rescale what was summed so far */
                    const float c = m[r] == -INFINITY ? 0.0f : expf(m[r] - top);
                    for (e = 0; e < a->Dv; e++) out[e] *= c;
                    l[r] *= c;
                    m[r] = top;
                }
                l[r] += oi_attn_exp(p, s, nk, m[r]);
                for (j = 0; j < nk; j++)
                    if (p[j] != 0.0f) oi_attn_axpy(out, V + (j0 + j) * a->v_j, p[j], a->Dv);
            }
        }
        for (r = 0; r < rows; r++) {
            const int64_t h = hk * group + r / a->Sq, i = r % a->Sq;
            float *o = a->o + h * a->o_h + i * a->o_i;
            const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
            for (e = 0; e < a->Dv; e++) o[e] = l[r] > 0.0f ? acc[r * a->Dv + e] * inv : 0.0f;
        }
    }
}

/* Prefill: units are (head, query block) pairs. */
static void oi_attn_tiled_run(void *ctx, int64_t begin, int64_t end, int slot) {
    const oi_attention_f32_args *a = (const oi_attention_f32_args *)ctx;
    const int64_t blocks = (a->Sq + OI_ATTN_TILE_ROWS - 1) / OI_ATTN_TILE_ROWS;
    float *pack = a->scratch + (int64_t)slot * OI_ATTN_SCRATCH_FLOATS(a->Sk);
    float *scores = pack + OI_GEMM_PACK_FLOATS, *sums = scores + OI_ATTN_TILE_ROWS * a->Sk;
    int64_t unit, r, j, e;
    for (unit = begin; unit < end; unit++) {
        const int64_t h = unit / blocks, i0 = (unit % blocks) * OI_ATTN_TILE_ROWS;
        const int64_t hk = h / (a->Hq / a->Hk), rows = oi_min64(OI_ATTN_TILE_ROWS, a->Sq - i0);
        oi_gemm_f32_args g;
        memset(&g, 0, sizeof g);
        /* scores = q_block . k^T (K [Sk, D] is a weight-layout operand) */
        g.M = rows;
        g.N = a->Sk;
        g.K = a->D;
        g.a = a->q + h * a->q_h + i0 * a->q_i;
        g.lda = a->q_i;
        g.b = a->k + hk * a->k_h;
        g.ldb = a->k_j;
        g.b_nk = 1;
        g.c = scores;
        g.ldc = a->Sk;
        oi_gemm_block_f32(&g, 0, rows, 0, a->Sk, pack);
        for (r = 0; r < rows; r++) {
            float *sr = scores + r * a->Sk, top = -INFINITY;
            for (j = 0; j < a->Sk; j++) {
                sr[j] = oi_attn_mask(a, sr[j], h, i0 + r, j);
                if (sr[j] > top || sr[j] != sr[j]) top = sr[j];
            }
            sums[r] = top == -INFINITY ? 0.0f : oi_attn_exp(sr, sr, a->Sk, top);
            if (top == -INFINITY)
                for (j = 0; j < a->Sk; j++) sr[j] = 0.0f;
        }
        /* o_block = p . v, then each row divided by its sum */
        g.N = a->Dv;
        g.K = a->Sk;
        g.a = scores;
        g.lda = a->Sk;
        g.b = a->v + hk * a->v_h;
        g.ldb = a->v_j;
        g.b_nk = 0;
        g.c = a->o + h * a->o_h + i0 * a->o_i;
        g.ldc = a->o_i;
        oi_gemm_block_f32(&g, 0, rows, 0, a->Dv, pack);
        for (r = 0; r < rows; r++) {
            float *o = g.c + r * a->o_i;
            const float inv = sums[r] > 0.0f ? 1.0f / sums[r] : 0.0f;
            for (e = 0; e < a->Dv; e++) o[e] = sums[r] > 0.0f ? o[e] * inv : 0.0f;
        }
    }
}

/* Attention for one batch entry (see the top of this file), split over the threads. */
static inline void oi_attention_f32(const oi_attention_f32_args *a) {
    const double work = (double)a->Hq * (double)a->Sq * (double)a->Sk * (double)(a->D + a->Dv);
    if (a->Hq <= 0 || a->Sq <= 0) return;
    if (a->Sq < OI_ATTN_DECODE_ROWS && (a->Hq / a->Hk) * a->Sq <= OI_ATTN_MAX_GROUP &&
        (a->Hq / a->Hk) * a->Sq * a->Dv <= OI_ATTN_SCRATCH_FLOATS(a->Sk))
        oi_parallel_work(a->Hk, work, oi_attn_decode_run, (void *)a);
    else
        oi_parallel_work(a->Hq * ((a->Sq + OI_ATTN_TILE_ROWS - 1) / OI_ATTN_TILE_ROWS), work,
                         oi_attn_tiled_run, (void *)a);
}

#endif /* OI_ATTENTION_H */
