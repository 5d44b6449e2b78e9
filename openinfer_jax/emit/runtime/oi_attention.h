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
 *    head with an online softmax, all the query heads that share the K/V head at once (K and
 *    V are read once per step): blocks of OI_ATTN_KEYS keys whose scores are vectorized dot
 *    products (several keys at a time), the running maximum rescaling the partial sums when
 *    it grows, then p . V with the output rows held in registers. The keys of a head are cut
 *    into ranges of OI_ATTN_SPLIT (a fixed size: the same cut for any thread count), whose
 *    partial results are merged in order at the end.
 *  - More queries (prefill, encoders): blocks of OI_ATTN_TILE_ROWS queries; the scores of a
 *    block are a GEMM (q . k^T), then a row softmax, then a GEMM with V, divided by the row
 *    sums.
 *
 * Threads split the (K/V head, key range) units (decode) or the (head, query block) pairs;
 * results are the same for any thread count. */
#ifndef OI_ATTENTION_H
#define OI_ATTENTION_H

#include "oi_gemm.h"

#define OI_ATTN_TILE_ROWS (4 * OI_MR) /* queries per block of the tiled path */
#define OI_ATTN_DECODE_ROWS 8     /* fewer queries: the decode path */
#define OI_ATTN_KEYS 32      /* keys per online-softmax block of the decode path */

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

/* p[0..n] = exp(s[0..n] - m), 0 where s is -inf (p may be s); returns the sum (lanes, then
 * the tail). */
static OI_VEC_FN float oi_attn_exp(float *p, const float *s, int64_t n, float m) {
    oi_vf acc = oi_vzero();
    float total, x;
    int64_t j = 0;
    for (; j + OI_VL <= n; j += OI_VL) {
        const oi_vf x = oi_vload(s + j);
        oi_vf e = oi_vexp(OI_VADD(x, oi_vsplat(-m)));
#if defined(OI_GNU_VECTORS)
        e = oi_vselect(x == -INFINITY, oi_vzero(), e);
#else
        {
            int u;
            for (u = 0; u < OI_VL; u++)
                if (x.v[u] == -INFINITY) e.v[u] = 0.0f;
        }
#endif
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

/* t[u] = the sum of the lanes of acc[u], u < 8: with 8- or 16-lane GNU vectors a
 * transposing tree (adjacent lanes, then pairs, then fours; 16 lanes end by adding their
 * halves: 21 resp. 24 vector operations for the 8 sums), else oi_vsum. */
#if defined(OI_GNU_VECTORS) && (OI_VL == 8 || OI_VL == 16)
#define OI_ATTN_SHUF OI_VSHUF /* oi_vec.h */
#if OI_VL == 8
#define OI_ATTN_PAIRS(a, b) (OI_ATTN_SHUF(a, b, 0, 8, 2, 10, 4, 12, 6, 14) + OI_ATTN_SHUF(a, b, 1, 9, 3, 11, 5, 13, 7, 15))
#define OI_ATTN_QUADS(a, b) (OI_ATTN_SHUF(a, b, 0, 1, 8, 9, 4, 5, 12, 13) + OI_ATTN_SHUF(a, b, 2, 3, 10, 11, 6, 7, 14, 15))
#define OI_ATTN_EIGHTS(a, b) (OI_ATTN_SHUF(a, b, 0, 1, 2, 3, 8, 9, 10, 11) + OI_ATTN_SHUF(a, b, 4, 5, 6, 7, 12, 13, 14, 15))
#else
/* lane 2i of PAIRS(a, b) holds a[2i] + a[2i+1], lane 2i+1 the same of b; QUADS and EIGHTS
 * go on the same way, so EIGHTS leaves each accumulator's sum in two lanes, 8 apart */
#define OI_ATTN_PAIRS(a, b)                                                                   \
    (OI_ATTN_SHUF(a, b, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30) +         \
     OI_ATTN_SHUF(a, b, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31))
#define OI_ATTN_QUADS(a, b)                                                                   \
    (OI_ATTN_SHUF(a, b, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29) +          \
     OI_ATTN_SHUF(a, b, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31))
#define OI_ATTN_EIGHTS(a, b)                                                                  \
    (OI_ATTN_SHUF(a, b, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27) +          \
     OI_ATTN_SHUF(a, b, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31))
#endif
static inline void oi_attn_lane_sums8(const oi_vf *acc, float *t) {
    const oi_vf lo = OI_ATTN_QUADS(OI_ATTN_PAIRS(acc[0], acc[1]), OI_ATTN_PAIRS(acc[2], acc[3]));
    const oi_vf hi = OI_ATTN_QUADS(OI_ATTN_PAIRS(acc[4], acc[5]), OI_ATTN_PAIRS(acc[6], acc[7]));
    oi_vf w = OI_ATTN_EIGHTS(lo, hi);
#if OI_VL == 16
    w = w + OI_ATTN_SHUF(w, w, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
#endif
    memcpy(t, &w, 8 * sizeof(float));
}
#else
static inline void oi_attn_lane_sums8(const oi_vf *acc, float *t) {
    int u;
    for (u = 0; u < 8; u++) t[u] = oi_vsum(acc[u]);
}
#endif

/* s[j] = q . K_j for nk keys (K_j = K + j * kj), 8 keys at a time (a last partial group
 * repeats its last key): one vector of partial sums per key over the whole vectors of D
 * (q read once per vector for the 8 keys), their lanes summed (oi_attn_lane_sums8), then
 * the tail of D. Every score takes the same operations in the same order. */
static OI_VEC_FN void oi_attn_scores(const float *restrict q, const float *restrict K, int64_t kj, int64_t D,
                                     int64_t nk, float *restrict s) {
    int64_t j, e;
    int u;
    for (j = 0; j < nk; j += 8) {
        const float *k[8];
        oi_vf acc[8];
        float t[8];
        k[0] = K + j * kj;
        for (u = 1; u < 8; u++) k[u] = j + u < nk ? k[u - 1] + kj : k[u - 1];
        for (u = 0; u < 8; u++) acc[u] = oi_vzero();
        for (e = 0; e + 2 * OI_VL <= D; e += 2 * OI_VL) { /* two vectors per pass: less loop work */
            const oi_vf q0 = oi_vload(q + e), q1 = oi_vload(q + e + OI_VL);
            for (u = 0; u < 8; u++) acc[u] = OI_VFMA(q0, oi_vload(k[u] + e), acc[u]);
            for (u = 0; u < 8; u++) acc[u] = OI_VFMA(q1, oi_vload(k[u] + e + OI_VL), acc[u]);
        }
        for (; e + OI_VL <= D; e += OI_VL) {
            const oi_vf qv = oi_vload(q + e);
            for (u = 0; u < 8; u++) acc[u] = OI_VFMA(qv, oi_vload(k[u] + e), acc[u]);
        }
        oi_attn_lane_sums8(acc, t);
        for (; e < D; e++)
            for (u = 0; u < 8; u++) t[u] = OI_FMAF(q[e], k[u][e], t[u]);
        if (j + 8 <= nk)
            memcpy(s + j, t, sizeof t);
        else
            for (u = 0; j + u < nk; u++) s[j + u] = t[u];
    }
}

/* The largest of s[0..n] (a NaN wins). */
static inline float oi_attn_max(const float *s, int64_t n) {
    float top = -INFINITY;
    int64_t j = 0;
    if (n >= OI_VL) {
        float lane[OI_VL];
        oi_vf m = oi_vload(s);
        int u;
        for (j = OI_VL; j + OI_VL <= n; j += OI_VL) m = oi_vmax(oi_vload(s + j), m);
        oi_vstore(lane, m);
        for (u = 0; u < OI_VL; u++)
            if (lane[u] > top || lane[u] != lane[u]) top = lane[u];
    }
    for (; j < n; j++)
        if (s[j] > top || s[j] != s[j]) top = s[j];
    return top;
}

/* out[e] += sum_j p[j] * V_j[e] for e in [e0, n), nk keys (V_j = V + j * vj): eight, four,
 * then one vector of out held in registers across the keys. Each element of out is one
 * fused multiply-add chain over j in order, however it is blocked (oi_attn_pv3 too). */
static OI_VEC_FN void oi_attn_pv(float *restrict out, const float *restrict p, const float *restrict V, int64_t vj,
                                 int64_t nk, int64_t e0, int64_t n) {
    int64_t e = e0, j;
    int u;
    for (; e + 8 * OI_VL <= n; e += 8 * OI_VL) {
        oi_vf acc[8];
        for (u = 0; u < 8; u++) acc[u] = oi_vload(out + e + u * OI_VL);
        for (j = 0; j < nk; j++) {
            const oi_vf pj = oi_vsplat(p[j]);
            const float *v = V + j * vj + e;
            for (u = 0; u < 8; u++) acc[u] = OI_VFMA(pj, oi_vload(v + u * OI_VL), acc[u]);
        }
        for (u = 0; u < 8; u++) oi_vstore(out + e + u * OI_VL, acc[u]);
    }
    for (; e + OI_VL <= n; e += OI_VL) {
        oi_vf acc = oi_vload(out + e);
        for (j = 0; j < nk; j++) acc = OI_VFMA(oi_vsplat(p[j]), oi_vload(V + j * vj + e), acc);
        oi_vstore(out + e, acc);
    }
    for (; e < n; e++) {
        float acc = out[e];
        for (j = 0; j < nk; j++) acc = OI_FMAF(p[j], V[j * vj + e], acc);
        out[e] = acc;
    }
}

/* oi_attn_pv for three rows at once (out rows `ldo` apart, p rows OI_ATTN_KEYS apart): each
 * V vector loaded once for the three; four vectors of each row in registers. */
static OI_VEC_FN void oi_attn_pv3(float *restrict out, int64_t ldo, const float *restrict p, const float *restrict V,
                                  int64_t vj, int64_t nk, int64_t n) {
    int64_t e = 0, j;
    int u, r;
    for (; e + 4 * OI_VL <= n; e += 4 * OI_VL) {
        oi_vf acc[3][4];
        for (r = 0; r < 3; r++)
            for (u = 0; u < 4; u++) acc[r][u] = oi_vload(out + r * ldo + e + u * OI_VL);
        for (j = 0; j < nk; j++) {
            const oi_vf p0 = oi_vsplat(p[j]), p1 = oi_vsplat(p[OI_ATTN_KEYS + j]), p2 = oi_vsplat(p[2 * OI_ATTN_KEYS + j]);
            const float *v = V + j * vj + e;
            for (u = 0; u < 4; u++) {
                const oi_vf x = oi_vload(v + u * OI_VL);
                acc[0][u] = OI_VFMA(p0, x, acc[0][u]);
                acc[1][u] = OI_VFMA(p1, x, acc[1][u]);
                acc[2][u] = OI_VFMA(p2, x, acc[2][u]);
            }
        }
        for (r = 0; r < 3; r++)
            for (u = 0; u < 4; u++) oi_vstore(out + r * ldo + e + u * OI_VL, acc[r][u]);
    }
    for (r = 0; r < 3; r++) oi_attn_pv(out + r * ldo, p + r * OI_ATTN_KEYS, V, vj, nk, e, n);
}

/* The decode path's units: ranges of OI_ATTN_SPLIT keys, each with every K/V head and all
 * the query rows that read it (K and V are read once per step, in storage order when the
 * heads of a position are adjacent, as in a cache of [positions, heads, dim] entries). A
 * unit leaves, per query row, its running maximum m, sum l and unnormalized output (see
 * oi_attn_partial). */
#define OI_ATTN_SPLIT 256
#define OI_ATTN_MAX_GROUP 32 /* query rows of one K/V head taken together in a key block */

typedef struct {
    const oi_attention_f32_args *a;
    int64_t splits; /* key ranges */
    float *part;    /* per unit: Hq * Sq rows x (2 + Dv) floats */
} oi_attn_decode_ctx;

static inline float *oi_attn_partial(const oi_attn_decode_ctx *c, int64_t unit) {
    const oi_attention_f32_args *a = c->a;
    return c->part + unit * a->Hq * a->Sq * (2 + a->Dv);
}

/* Keys [b, b + nk) of K/V head hk for its query rows [r0, r1) (row r: head r / Sq, query
 * r % Sq): scores, the online softmax update of m, l and acc, then p . V. */
static void oi_attn_decode_block(const oi_attention_f32_args *a, int64_t hk, int64_t r0, int64_t r1, int64_t b,
                                 int64_t nk, float *m, float *l, float *acc) {
    float p[OI_ATTN_MAX_GROUP * OI_ATTN_KEYS];
    const float *V = a->v + hk * a->v_h + b * a->v_j, scale = a->scale;
    int64_t r, j, e;
    for (r = r0; r < r1; r++) {
        const int64_t h = r / a->Sq, i = r % a->Sq;
        float *s = p + (r - r0) * OI_ATTN_KEYS, top;
        oi_attn_scores(a->q + h * a->q_h + i * a->q_i, a->k + hk * a->k_h + b * a->k_j, a->k_j, a->D, nk, s);
        if (!a->mask_f && !a->mask_b && (!a->causal || b + nk - 1 <= i + (a->Sk - a->Sq)))
            for (j = 0; j < nk; j++) s[j] *= scale; /* every key of the block seen */
        else
            for (j = 0; j < nk; j++) s[j] = oi_attn_mask(a, s[j], h, i, b + j);
        top = oi_attn_max(s, nk);
        if (top == -INFINITY) { /* every key of the block hidden: nothing to add */
            for (j = 0; j < nk; j++) s[j] = 0.0f;
            continue;
        }
        if (top > m[r] || top != top) { /* rescale what was summed so far */
            const float c = m[r] == -INFINITY ? 0.0f : expf(m[r] - top);
            for (e = 0; e < a->Dv; e++) acc[r * a->Dv + e] *= c;
            l[r] *= c;
            m[r] = top;
        }
        l[r] += oi_attn_exp(s, s, nk, m[r]);
    }
    for (r = r0; r + 3 <= r1; r += 3)
        oi_attn_pv3(acc + r * a->Dv, a->Dv, p + (r - r0) * OI_ATTN_KEYS, V, a->v_j, nk, a->Dv);
    for (; r < r1; r++) oi_attn_pv(acc + r * a->Dv, p + (r - r0) * OI_ATTN_KEYS, V, a->v_j, nk, 0, a->Dv);
}

/* Keys ahead of the one being read, whose K and V rows the decode path asks the cache for
 * (a long cache is read once per step from memory: the loads of a block then find it on
 * chip). Two blocks measured best on AVX2 and AVX-512 hosts. */
#define OI_ATTN_PREFETCH_KEYS (2 * OI_ATTN_KEYS)

/* A hint that the K and V rows of keys [b, e) of every K/V head are about to be read (GCC
 * and Clang; nothing elsewhere). A macro: GCC takes a function holding nothing but
 * prefetches for one without effects and drops its calls. */
#if defined(__GNUC__) || defined(__clang__)
#define OI_ATTN_PREFETCH(a, b, e)                                                           \
    do {                                                                                    \
        int64_t pj_, ph_, po_;                                                              \
        for (pj_ = (b); pj_ < (e); pj_++)                                                   \
            for (ph_ = 0; ph_ < (a)->Hk; ph_++) {                                           \
                const float *pk_ = (a)->k + ph_ * (a)->k_h + pj_ * (a)->k_j;                \
                const float *pv_ = (a)->v + ph_ * (a)->v_h + pj_ * (a)->v_j;                \
                for (po_ = 0; po_ < (a)->D; po_ += 16) __builtin_prefetch(pk_ + po_, 0, 2); \
                for (po_ = 0; po_ < (a)->Dv; po_ += 16) __builtin_prefetch(pv_ + po_, 0, 2); \
            }                                                                               \
    } while (0)
#else
#define OI_ATTN_PREFETCH(a, b, e) ((void)0)
#endif

static void oi_attn_decode_run(void *ctx, int64_t begin, int64_t end, int slot) {
    const oi_attn_decode_ctx *c = (const oi_attn_decode_ctx *)ctx;
    const oi_attention_f32_args *a = c->a;
    const int64_t per_head = (a->Hq / a->Hk) * a->Sq, rows = a->Hq * a->Sq;
    int64_t unit, r, b, e, hk;
    (void)slot;
    for (unit = begin; unit < end; unit++) {
        const int64_t j0 = unit * OI_ATTN_SPLIT, j1 = oi_min64(a->Sk, j0 + OI_ATTN_SPLIT);
        float *m = oi_attn_partial(c, unit), *l = m + rows, *acc = l + rows;
        for (r = 0; r < rows; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
        for (e = 0; e < rows * a->Dv; e++) acc[e] = 0.0f;
        for (b = j0; b < j1; b += OI_ATTN_KEYS) {
            const int64_t ahead = b + OI_ATTN_PREFETCH_KEYS;
            OI_ATTN_PREFETCH(a, ahead, oi_min64(a->Sk, ahead + OI_ATTN_KEYS));
            for (hk = 0; hk < a->Hk; hk++)
                for (r = hk * per_head; r < (hk + 1) * per_head; r += OI_ATTN_MAX_GROUP)
                    oi_attn_decode_block(a, hk, r, oi_min64(r + OI_ATTN_MAX_GROUP, (hk + 1) * per_head), b,
                                         oi_min64(OI_ATTN_KEYS, j1 - b), m, l, acc);
        }
    }
}

/* The outputs from the units' partial results: per row, the key ranges in order, each
 * weighed by exp(its maximum - the overall maximum); zeros for a row that sees no key. */
static void oi_attn_decode_merge(const oi_attn_decode_ctx *c) {
    const oi_attention_f32_args *a = c->a;
    const int64_t rows = a->Hq * a->Sq;
    int64_t r, sp, e;
    for (r = 0; r < rows; r++) {
        float *o = a->o + (r / a->Sq) * a->o_h + (r % a->Sq) * a->o_i, top = -INFINITY, total = 0.0f, inv;
        for (sp = 0; sp < c->splits; sp++) {
            const float mr = oi_attn_partial(c, sp)[r];
            if (mr > top || mr != mr) top = mr;
        }
        for (e = 0; e < a->Dv; e++) o[e] = 0.0f;
        if (top == -INFINITY) continue;
        for (sp = 0; sp < c->splits; sp++) {
            const float *part = oi_attn_partial(c, sp);
            const float w = part[r] == -INFINITY ? 0.0f : expf(part[r] - top);
            const float *acc = part + 2 * rows + r * a->Dv;
            total += part[rows + r] * w;
            for (e = 0; e < a->Dv; e++) o[e] = OI_FMAF(acc[e], w, o[e]);
        }
        inv = total > 0.0f ? 1.0f / total : 0.0f;
        for (e = 0; e < a->Dv; e++) o[e] = total > 0.0f ? o[e] * inv : 0.0f;
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

/* The decode path's key ranges: OI_ATTN_SPLIT keys each when their partial
 * results fit in the scratch (one thread's share), else the whole range; 0 when even that
 * does not fit (the tiled path then). Depends on the shapes alone, never on the threads. */
static inline int64_t oi_attn_decode_splits(const oi_attention_f32_args *a) {
    const int64_t per = a->Hq * a->Sq * (2 + a->Dv);
    const int64_t split = a->Sk > OI_ATTN_SPLIT ? (a->Sk + OI_ATTN_SPLIT - 1) / OI_ATTN_SPLIT : 1;
    if (a->Sq >= OI_ATTN_DECODE_ROWS) return 0;
    if (per * split <= OI_ATTN_SCRATCH_FLOATS(a->Sk)) return split;
    return per <= OI_ATTN_SCRATCH_FLOATS(a->Sk) ? 1 : 0;
}

/* Attention for one batch entry (see the top of this file), split over the threads. */
static inline void oi_attention_f32(const oi_attention_f32_args *a) {
    const double work = (double)a->Hq * (double)a->Sq * (double)a->Sk * (double)(a->D + a->Dv);
    oi_attn_decode_ctx c;
    if (a->Hq <= 0 || a->Sq <= 0) return;
    c.a = a;
    c.splits = oi_attn_decode_splits(a);
    c.part = a->scratch;
    if (c.splits > 0) {
        oi_parallel_work(c.splits, work, oi_attn_decode_run, (void *)&c);
        oi_attn_decode_merge(&c);
    } else {
        oi_parallel_work(a->Hq * ((a->Sq + OI_ATTN_TILE_ROWS - 1) / OI_ATTN_TILE_ROWS), work,
                         oi_attn_tiled_run, (void *)a);
    }
}

#endif /* OI_ATTENTION_H */
