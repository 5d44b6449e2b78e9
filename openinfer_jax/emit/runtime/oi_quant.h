/* oi_quant.h: kernels for block-quantized weights (q8_0, q4_0, q4_1; docs/oinf.md section 5.1).
 * Part of the OpenInfer-JAX C runtime; included by a program that reads quantized weights.
 * Plain C99, header-only (every function static): no extra file to compile.
 *
 * A weight is an oi_block_tensor (oi_runtime.h) in place in the loaded model: codes (q8_0: one
 * int8 per element; 4-bit: element 2i in the low nibble of byte i, 2i+1 in the high one; q4_0
 * nibbles are two's complement), one scale per block of B elements along the last axis (f16 or
 * f32), and for q4_1 one offset per block. Values: scale*q (q8_0, q4_0), scale*q + offset (q4_1).
 *
 * Matrix-vector products quantize the activation row per block first (as llama.cpp does, but to
 * 16 bits: x ~ dx * xq with dx = max|x|/32767) and take integer dot products per block, scaled
 * in f32: y[n] = sum_b d[n,b] dx[b] sum_j q xq (+ offset[n,b] * sum_j x, exact in f32 for q4_1).
 * The integer dots are written as plain loops over int16 lanes so that the compiler turns
 * them into widening multiply-adds (x86: vpmaddwd; aarch64: smlal); gcc -O2 vectorizes them,
 * -O3 -march=native makes them wide. The 4-bit activation row is stored per block as
 * [even elements | odd elements] so the low and high nibbles meet their activations without
 * a shuffle.
 */
#ifndef OI_QUANT_H
#define OI_QUANT_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "oi_parallel.h"
#include "oi_runtime.h"

/* The products below stay separate functions: inlined into a program's large step function
   (where a kernel called once would end up), gcc no longer vectorizes their loops. */
#if defined(__GNUC__)
#define OI_Q_KERNEL static __attribute__((noinline, unused))
#else
#define OI_Q_KERNEL static inline
#endif

/* Largest block the kernels take (the block's int16 codes live on the stack). */
#define OI_Q_MAX_BLOCK 256
/* Activations are quantized to 16-bit integers per block (x ~ dx * xq, |xq| <= 32767): the
   products with 4- and 8-bit codes still fit the 16x16->32-bit multiply-adds, and the error
   (1.5e-5 of the block's largest |x|) is near f32 rounding, unlike 8-bit activations. */
#define OI_Q_ACT_MAX 32767.0f

/* f16 bits -> f32 for finite values (R36 excludes inf/NaN): hardware conversion where the
   compiler has _Float16, else exponent rebias by one multiply (exact for normals and
   subnormals). */
static inline float oi_q_half(uint16_t h) {
#if defined(__FLT16_MANT_DIG__) && !defined(OI_Q_NO_FLOAT16)
    return oi_f16_to_f32_inline(h); /* oi_runtime.h */
#else
    uint32_t u = (uint32_t)(h & 0x7fffu) << 13, s;
    float f;
    memcpy(&f, &u, 4);
    f *= 5.192296858534828e+33f; /* 2^112 */
    memcpy(&s, &f, 4);
    s |= (uint32_t)(h & 0x8000u) << 16;
    memcpy(&f, &s, 4);
    return f;
#endif
}

/* Scale `b` of a row: f16 (value type 9) or f32 (10). */
static inline float oi_q_scale(const void *plane, int64_t b, int f32) {
    if (f32) return ((const float *)plane)[b];
    return oi_q_half(((const uint16_t *)plane)[b]);
}

/* The quantized activation row of one matrix-vector product. */
typedef struct {
    int16_t *xq; /* K values; 4-bit weights: per block [even | odd] */
    float *dx;   /* per block: max|x| / 32767 */
    float *sx;   /* per block: sum of x (f32), for q4_1 offsets */
    int32_t *qx; /* per block: sum of xq, for q4_0's -8 */
} oi_q_act;

/* Round half away from zero (a select: vectorizes). */
static inline int16_t oi_q_round(float v) { return (int16_t)(v >= 0.0f ? v + 0.5f : v - 0.5f); }

/* Quantize x[0..K) per block of B to int16 values in [-32767, 32767]. Loops over 8 lanes
   (blocks whose size is a multiple of 8) so that the float max and sum vectorize. */
OI_Q_KERNEL void oi_q_quantize_act(const float *x, int64_t K, int64_t B, int split, oi_q_act *a) {
    int64_t b, j, l, nb = K / B, h = B / 2;
    for (b = 0; b < nb; b++) {
        const float *xb = x + b * B;
        int16_t *qb = a->xq + b * B;
        float amax = 0.0f, sum = 0.0f, inv, lane_max[8] = {0}, lane_sum[8] = {0};
        int32_t qs = 0;
        j = 0;
        if (B % 8 == 0)
            for (; j < B; j += 8)
                for (l = 0; l < 8; l++) {
                    float v = xb[j + l], m = fabsf(v);
                    lane_max[l] = m > lane_max[l] ? m : lane_max[l];
                    lane_sum[l] += v;
                }
        for (l = 0; l < 8; l++) {
            amax = lane_max[l] > amax ? lane_max[l] : amax;
            sum += lane_sum[l];
        }
        for (; j < B; j++) {
            float m = fabsf(xb[j]);
            amax = m > amax ? m : amax;
            sum += xb[j];
        }
        a->dx[b] = amax / OI_Q_ACT_MAX;
        a->sx[b] = sum;
        inv = amax > 0.0f ? OI_Q_ACT_MAX / amax : 0.0f;
        if (split) { /* 4-bit weights: [even elements | odd elements] */
            for (j = 0; j < h; j++) {
                qb[j] = oi_q_round(xb[2 * j] * inv);
                qb[h + j] = oi_q_round(xb[2 * j + 1] * inv);
            }
        } else {
            for (j = 0; j < B; j++) qb[j] = oi_q_round(xb[j] * inv);
        }
        for (j = 0; j < B; j++) qs += qb[j];
        a->qx[b] = qs;
    }
}

/* One row of a 4-bit weight times the activation: sum over blocks (B even, B <= OI_Q_MAX_BLOCK). */
static inline float oi_q4_row(const uint8_t *q, const void *d, const void *m, int f32, int sym, int64_t nb,
                              const int64_t B, const oi_q_act *a) {
    const int64_t h = B / 2;
    float acc = 0.0f, macc = 0.0f;
    int64_t b, j;
    for (b = 0; b < nb; b++) {
        const uint8_t *qb = q + b * h;
        const int16_t *xb = a->xq + b * B;
        int16_t c[OI_Q_MAX_BLOCK];
        int32_t s = 0;
        for (j = 0; j < h; j++) {
            uint8_t v = sym ? (uint8_t)(qb[j] ^ 0x88u) : qb[j]; /* q4_0: two's complement -> q + 8 */
            c[j] = (int16_t)(v & 15);
            c[h + j] = (int16_t)(v >> 4);
        }
        for (j = 0; j < B; j++) s += c[j] * xb[j];
        if (sym) s -= 8 * a->qx[b];
        acc += (float)s * (oi_q_scale(d, b, f32) * a->dx[b]);
        if (m) macc += oi_q_scale(m, b, f32) * a->sx[b];
    }
    return acc + macc;
}

/* One row of a q8_0 weight times the activation. */
static inline float oi_q8_row(const int8_t *q, const void *d, int f32, int64_t nb, const int64_t B,
                              const oi_q_act *a) {
    float acc = 0.0f;
    int64_t b, j;
    for (b = 0; b < nb; b++) {
        const int8_t *qb = q + b * B;
        const int16_t *xb = a->xq + b * B;
        int16_t c[OI_Q_MAX_BLOCK];
        int32_t s = 0;
        /* widen first: int16 x int16 dot products are what the vectorizer turns into multiply-adds */
        for (j = 0; j < B; j++) c[j] = qb[j];
        for (j = 0; j < B; j++) s += c[j] * xb[j];
        acc += (float)s * (oi_q_scale(d, b, f32) * a->dx[b]);
    }
    return acc;
}

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__) && !defined(OI_Q_PORTABLE)
/* x86-64 with AVX2, FMA and F16C (-march=haswell or newer, e.g. -march=native): blocks of 32
   with f16 scales, the layout of every GGUF-derived weight, take these hand-vectorized rows.
   The portable loops above leave a horizontal sum and scalar float work per block, because a
   compiler cannot keep per-block integer sums in vector lanes without reassociating floats;
   here each block's eight int32 lanes are converted and multiply-added into float lanes, and
   the lanes are summed once per row (1.7x faster on Zen 3). The arithmetic is the same: the
   same integer block sums, scaled by the same f32 factors, summed in another order.
   -DOI_Q_PORTABLE keeps the portable loops. */
#include <immintrin.h>
#define OI_Q_AVX2 1

/* Per-row factors d[b] * dx[b] (f16 d) into sc, and the f32 sum of the per-block terms that
   do not depend on the codes: offset * sum(x) (q4_1), -8 * d * dx * sum(xq) (q4_0). */
static inline float oi_q_avx2_scales(const uint16_t *d, const uint16_t *m, int sym, int64_t nb, const oi_q_act *a,
                                     float *sc) {
    __m256 extra = _mm256_setzero_ps();
    __m128 h;
    float tail = 0.0f;
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
        __m256 s = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(d + b))), _mm256_loadu_ps(a->dx + b));
        _mm256_storeu_ps(sc + b, s);
        if (m)
            extra = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(m + b))), _mm256_loadu_ps(a->sx + b), extra);
        else if (sym)
            extra = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(-8.0f), _mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(a->qx + b)))), s, extra);
    }
    for (; b < nb; b++) {
        sc[b] = _cvtsh_ss(d[b]) * a->dx[b];
        if (m) tail += _cvtsh_ss(m[b]) * a->sx[b];
        else if (sym) tail += -8.0f * (float)a->qx[b] * sc[b];
    }
    h = _mm_add_ps(_mm256_castps256_ps128(extra), _mm256_extractf128_ps(extra, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h) + tail;
}

static inline float oi_q_avx2_hsum(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* The int32 lanes of one 32-element 4-bit block times its 16-bit activations. */
static inline __m256i oi_q4_avx2_block(const uint8_t *q, const int16_t *x, __m128i flip) {
    const __m128i mask = _mm_set1_epi8(15);
    __m128i raw = _mm_xor_si128(_mm_loadu_si128((const __m128i *)q), flip);
    __m256i lo = _mm256_cvtepu8_epi16(_mm_and_si128(raw, mask));
    __m256i hi = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), mask));
    return _mm256_add_epi32(_mm256_madd_epi16(lo, _mm256_loadu_si256((const __m256i *)x)),
                            _mm256_madd_epi16(hi, _mm256_loadu_si256((const __m256i *)(x + 16))));
}

static inline float oi_q4_row_avx2(const uint8_t *q, const uint16_t *d, const uint16_t *m, int sym, int64_t nb,
                                   const oi_q_act *a) {
    float sc[64];
    const __m128i flip = _mm_set1_epi8(sym ? (char)0x88 : 0); /* q4_0: two's complement -> q + 8 */
    float total = 0.0f;
    int64_t c0;
    for (c0 = 0; c0 < nb; c0 += 64) { /* rows of up to 64 blocks per pass (K = 2048) */
        int64_t n = nb - c0 < 64 ? nb - c0 : 64, b;
        const oi_q_act part = {a->xq + c0 * 32, a->dx + c0, a->sx + c0, a->qx + c0};
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
        total += oi_q_avx2_scales(d + c0, m ? m + c0 : NULL, sym, n, &part, sc);
        for (b = 0; b + 2 <= n; b += 2) {
            __m256i p0 = oi_q4_avx2_block(q + (c0 + b) * 16, part.xq + b * 32, flip);
            __m256i p1 = oi_q4_avx2_block(q + (c0 + b) * 16 + 16, part.xq + b * 32 + 32, flip);
            acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_broadcast_ss(sc + b), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_broadcast_ss(sc + b + 1), acc1);
        }
        if (b < n) {
            __m256i p = oi_q4_avx2_block(q + (c0 + b) * 16, part.xq + b * 32, flip);
            acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(sc + b), acc0);
        }
        total += oi_q_avx2_hsum(_mm256_add_ps(acc0, acc1));
    }
    return total;
}

static inline __m256i oi_q8_avx2_block(const int8_t *q, const int16_t *x) {
    __m256i lo = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)q));
    __m256i hi = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(q + 16)));
    return _mm256_add_epi32(_mm256_madd_epi16(lo, _mm256_loadu_si256((const __m256i *)x)),
                            _mm256_madd_epi16(hi, _mm256_loadu_si256((const __m256i *)(x + 16))));
}

static inline float oi_q8_row_avx2(const int8_t *q, const uint16_t *d, int64_t nb, const oi_q_act *a) {
    float sc[64];
    float total = 0.0f;
    int64_t c0;
    for (c0 = 0; c0 < nb; c0 += 64) {
        int64_t n = nb - c0 < 64 ? nb - c0 : 64, b;
        const oi_q_act part = {a->xq + c0 * 32, a->dx + c0, a->sx + c0, a->qx + c0};
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
        total += oi_q_avx2_scales(d + c0, NULL, 0, n, &part, sc);
        for (b = 0; b + 2 <= n; b += 2) {
            __m256i p0 = oi_q8_avx2_block(q + (c0 + b) * 32, part.xq + b * 32);
            __m256i p1 = oi_q8_avx2_block(q + (c0 + b) * 32 + 32, part.xq + b * 32 + 32);
            acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_broadcast_ss(sc + b), acc0);
            acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_broadcast_ss(sc + b + 1), acc1);
        }
        if (b < n) {
            __m256i p = oi_q8_avx2_block(q + (c0 + b) * 32, part.xq + b * 32);
            acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(sc + b), acc0);
        }
        total += oi_q_avx2_hsum(_mm256_add_ps(acc0, acc1));
    }
    return total;
}
#endif

/* y[n] = sum_k W[n, k] x[k] for rows n0 <= n < n1 of W [N, K] (dtype 1 q8_0, 18 q4_0, 21 q4_1). */
OI_Q_KERNEL void oi_q_gemv(const oi_block_tensor *w, uint32_t dtype, int f32, int64_t K, int64_t B, int64_t n0,
                      int64_t n1, const oi_q_act *a, float *y) {
    const int64_t nb = K / B;
    const size_t sw = f32 ? 4 : 2;
    int64_t n;
    if (dtype == 1) {
        for (n = n0; n < n1; n++) {
            const int8_t *q = (const int8_t *)w->codes + n * K;
            const unsigned char *d = (const unsigned char *)w->scales + (size_t)(n * nb) * sw;
            /* the common block and scale type get their own (constant-folded or AVX2) copy */
#ifdef OI_Q_AVX2
            if (B == 32 && !f32) { y[n] = oi_q8_row_avx2(q, (const uint16_t *)d, nb, a); continue; }
#endif
            y[n] = (B == 32 && !f32) ? oi_q8_row(q, d, 0, nb, 32, a) : oi_q8_row(q, d, f32, nb, B, a);
        }
        return;
    }
    for (n = n0; n < n1; n++) {
        const uint8_t *q = w->codes + n * (K / 2);
        const unsigned char *d = (const unsigned char *)w->scales + (size_t)(n * nb) * sw;
        const unsigned char *m = w->offsets ? (const unsigned char *)w->offsets + (size_t)(n * nb) * sw : NULL;
        int sym = dtype == 18;
#ifdef OI_Q_AVX2
        if (B == 32 && !f32) {
            y[n] = oi_q4_row_avx2(q, (const uint16_t *)d, (const uint16_t *)m, sym, nb, a);
            continue;
        }
#endif
        if (B == 32 && !f32)
            y[n] = sym ? oi_q4_row(q, d, NULL, 0, 1, nb, 32, a) : oi_q4_row(q, d, m, 0, 0, nb, 32, a);
        else
            y[n] = oi_q4_row(q, d, m, f32, sym, nb, B, a);
    }
}

/* The rows of one product, split over the kernel threads (oi_parallel.h): each thread
   computes whole output rows, so results do not depend on the thread count. */
typedef struct {
    const oi_block_tensor *w;
    uint32_t dtype;
    int f32;
    int64_t K, B;
    const oi_q_act *a;
    float *y;
} oi_q_gemv_job;

OI_Q_KERNEL void oi_q_gemv_task(void *ctx, int64_t begin, int64_t end, int slot) {
    const oi_q_gemv_job *j = (const oi_q_gemv_job *)ctx;
    (void)slot;
    oi_q_gemv(j->w, j->dtype, j->f32, j->K, j->B, begin, end, j->a, j->y);
}

/* y[0..N) = W x for W [N, K], on the kernel threads when the product is large enough. */
OI_Q_KERNEL void oi_q_gemv_rows(const oi_block_tensor *w, uint32_t dtype, int f32, int64_t K, int64_t B,
                                int64_t N, const oi_q_act *a, float *y) {
    oi_q_gemv_job job;
    job.w = w; job.dtype = dtype; job.f32 = f32; job.K = K; job.B = B; job.a = a; job.y = y;
    oi_parallel_work(N, (double)N * (double)K, oi_q_gemv_task, &job);
}

/* The f32 values of row `r` of W [rows, K] into out[0..K). */
OI_Q_KERNEL void oi_q_dequant_row(const oi_block_tensor *w, uint32_t dtype, int f32, int64_t K, int64_t B, int64_t r,
                             float *out) {
    const int64_t nb = K / B;
    int64_t b, j;
    for (b = 0; b < nb; b++) {
        float d = oi_q_scale(w->scales, r * nb + b, f32);
        float m = w->offsets ? oi_q_scale(w->offsets, r * nb + b, f32) : 0.0f;
        float *o = out + b * B;
        if (dtype == 1) {
            const int8_t *q = (const int8_t *)w->codes + r * K + b * B;
            for (j = 0; j < B; j++) o[j] = d * (float)q[j];
        } else {
            const uint8_t *q = w->codes + (r * K + b * B) / 2;
            for (j = 0; j < B / 2; j++) {
                int lo = q[j] & 15, hi = q[j] >> 4;
                if (dtype == 18) { lo = (lo ^ 8) - 8; hi = (hi ^ 8) - 8; }
                o[2 * j] = d * (float)lo + m;
                o[2 * j + 1] = d * (float)hi + m;
            }
        }
    }
}

#endif
