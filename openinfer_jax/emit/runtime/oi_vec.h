/* OpenInfer-JAX emitted runtime: a small f32 vector type for the dense kernels.
 *
 * oi_vf holds OI_VL floats. With GCC or Clang it is a GNU vector (vector_size), which the
 * compiler maps onto the target's SIMD registers (AVX-512: 16 lanes, AVX/AVX2: 8, SSE and
 * NEON: 4) and keeps in registers, something plain arrays of accumulators do not reliably
 * get. Other compilers (or -DOI_PORTABLE_VECTORS) get a struct of OI_VL floats and loops:
 * the same arithmetic in the same order, only slower.
 *
 * Kernels marked OI_VEC_FN contract a * b + c into one fused multiply-add where the target
 * has one (GCC in ISO C mode does not do it on its own; Clang does by default). Within one
 * build every kernel computes each output with the same operations in the same order,
 * whatever the thread count. */
#ifndef OI_VEC_H
#define OI_VEC_H

#include <string.h>
#include "oi_runtime.h"

#if (defined(__GNUC__) || defined(__clang__)) && !defined(OI_PORTABLE_VECTORS)
#define OI_GNU_VECTORS 1
#if defined(__AVX512F__)
#define OI_VL 16
#elif defined(__AVX__)
#define OI_VL 8
#else
#define OI_VL 4
#endif
typedef float oi_vf __attribute__((vector_size(OI_VL * 4)));
#if defined(__clang__)
#define OI_VEC_FN
#else
#define OI_VEC_FN __attribute__((optimize("fp-contract=fast")))
#endif
static inline oi_vf oi_vzero(void) {
    oi_vf v = {0};
    return v;
}
/* a broadcast written out: `zero + s` would be an add (-0 + 0 = +0), a lane loop is not
   recognized as a broadcast by GCC 12 */
#define OI_S4(s) s, s, s, s
#if OI_VL == 16
#define OI_SPLAT(s) {OI_S4(s), OI_S4(s), OI_S4(s), OI_S4(s)}
#elif OI_VL == 8
#define OI_SPLAT(s) {OI_S4(s), OI_S4(s)}
#else
#define OI_SPLAT(s) {OI_S4(s)}
#endif
static inline oi_vf oi_vsplat(float s) {
    oi_vf v = OI_SPLAT(s);
    return v;
}
static inline oi_vf oi_vload(const float *p) {
    oi_vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void oi_vstore(float *p, oi_vf v) { memcpy(p, &v, sizeof v); }
#define OI_VFMA(a, b, c) ((a) * (b) + (c))
#define OI_VADD(a, b) ((a) + (b))
#define OI_VMUL(a, b) ((a) * (b))
#else
#define OI_VL 4
#define OI_VEC_FN
typedef struct {
    float v[OI_VL];
} oi_vf;
static inline oi_vf oi_vzero(void) {
    oi_vf r;
    int u;
    for (u = 0; u < OI_VL; u++) r.v[u] = 0.0f;
    return r;
}
static inline oi_vf oi_vsplat(float s) {
    oi_vf r;
    int u;
    for (u = 0; u < OI_VL; u++) r.v[u] = s;
    return r;
}
static inline oi_vf oi_vload(const float *p) {
    oi_vf r;
    memcpy(r.v, p, sizeof r.v);
    return r;
}
static inline void oi_vstore(float *p, oi_vf v) { memcpy(p, v.v, sizeof v.v); }
static inline oi_vf oi_vfma(oi_vf a, oi_vf b, oi_vf c) {
    int u;
    for (u = 0; u < OI_VL; u++) c.v[u] = OI_FMAF(a.v[u], b.v[u], c.v[u]);
    return c;
}
static inline oi_vf oi_vadd(oi_vf a, oi_vf b) {
    int u;
    for (u = 0; u < OI_VL; u++) a.v[u] += b.v[u];
    return a;
}
static inline oi_vf oi_vmul(oi_vf a, oi_vf b) {
    int u;
    for (u = 0; u < OI_VL; u++) a.v[u] *= b.v[u];
    return a;
}
#define OI_VFMA(a, b, c) oi_vfma((a), (b), (c))
#define OI_VADD(a, b) oi_vadd((a), (b))
#define OI_VMUL(a, b) oi_vmul((a), (b))
#endif

/* exp(x) for the softmax kernels, lane by lane, without libm (so the loop vectorizes):
 * x clamped to [-87.3, 88], 2^(x log2 e) = 2^n * exp(r) with n = round(x log2 e) and
 * r = x - n ln 2 (two-part ln 2), exp(r) by its degree-6 Taylor polynomial on |r| <= ln2/2
 * (relative error below 2e-7, about two float ulps). NaN stays NaN; callers zero the lanes
 * of hidden (-inf) scores themselves. */
#define OI_EXP_HI 88.0f
#define OI_EXP_LO -87.33654f
#define OI_EXP_MAGIC 12582912.0f /* 1.5 * 2^23: adding it rounds to an integer */
#define OI_EXP_POLY(r, one)                                                                   \
    OI_VFMA(OI_VFMA(OI_VFMA(OI_VFMA(OI_VFMA(OI_VFMA(oi_vsplat(1.0f / 720), r,                 \
    oi_vsplat(1.0f / 120)), r, oi_vsplat(1.0f / 24)), r, oi_vsplat(1.0f / 6)), r,              \
    oi_vsplat(0.5f)), r, one), r, one)
/* The same computation on one float (tails of vector loops, the portable vectors). */
static inline float oi_exp1(float x) {
    const float magic = OI_EXP_MAGIC;
    float t, n, r, p, scale;
    uint32_t tb, mb, bits;
    if (x != x) return x;
    if (x > OI_EXP_HI) x = OI_EXP_HI;
    if (x < OI_EXP_LO) x = OI_EXP_LO;
    t = OI_FMAF(x, 1.44269504f, magic);
    n = t - magic;
    r = OI_FMAF(n, -0.693145752f, x);
    r = OI_FMAF(n, -1.42860677e-06f, r);
    p = OI_FMAF(OI_FMAF(OI_FMAF(OI_FMAF(OI_FMAF(OI_FMAF(1.0f / 720, r, 1.0f / 120), r, 1.0f / 24), r,
                1.0f / 6), r, 0.5f), r, 1.0f), r, 1.0f);
    memcpy(&tb, &t, 4);
    memcpy(&mb, &magic, 4);
    bits = (tb - mb + 127u) << 23;
    memcpy(&scale, &bits, 4);
    return p * scale;
}
#if defined(OI_GNU_VECTORS)
typedef int32_t oi_vi __attribute__((vector_size(OI_VL * 4)));
static inline oi_vf oi_vselect(oi_vi mask, oi_vf yes, oi_vf no) {
    return (oi_vf)(((oi_vi)yes & mask) | ((oi_vi)no & ~mask));
}
static inline OI_VEC_FN oi_vf oi_vexp(oi_vf x) {
    const oi_vf one = oi_vsplat(1.0f), magic = oi_vsplat(OI_EXP_MAGIC);
    oi_vf t, n, r, p;
    oi_vi bits;
    x = oi_vselect(x > OI_EXP_HI, oi_vsplat(OI_EXP_HI), x);
    x = oi_vselect(x < OI_EXP_LO, oi_vsplat(OI_EXP_LO), x);
    t = OI_VFMA(x, oi_vsplat(1.44269504f), magic);
    n = t - magic;
    r = OI_VFMA(n, oi_vsplat(-0.693145752f), x);
    r = OI_VFMA(n, oi_vsplat(-1.42860677e-06f), r);
    p = OI_EXP_POLY(r, one);
    bits = ((oi_vi)t - (oi_vi)magic + 127) << 23;
    return p * (oi_vf)bits;
}
#else
static inline oi_vf oi_vexp(oi_vf x) {
    int u;
    for (u = 0; u < OI_VL; u++) x.v[u] = oi_exp1(x.v[u]);
    return x;
}
#endif

/* Copy n < 64 floats with fixed-size moves: GCC turns a plain loop into a memcpy library
 * call, costly for the few floats at the edge of a tile. */
static inline void oi_copy_short(float *p, const float *s, int64_t n) {
    if (n & 32) { memcpy(p, s, 128); p += 32; s += 32; }
    if (n & 16) { memcpy(p, s, 64); p += 16; s += 16; }
    if (n & 8) { memcpy(p, s, 32); p += 8; s += 8; }
    if (n & 4) { memcpy(p, s, 16); p += 4; s += 4; }
    if (n & 2) { memcpy(p, s, 8); p += 2; s += 2; }
    if (n & 1) *p = *s;
}

/* Sum of the lanes, pairwise (lane u + lane u + OI_VL/2, ...): a fixed order. */
static inline float oi_vsum(oi_vf v) {
    float t[OI_VL];
    int w, u;
    memcpy(t, &v, sizeof t);
    for (w = OI_VL / 2; w > 0; w /= 2)
        for (u = 0; u < w; u++) t[u] += t[u + w];
    return t[0];
}

/* Transpose the OI_VL x OI_VL matrix held in v[0 .. OI_VL): afterwards lane u of v[r] is
 * what lane r of v[u] was. log2(OI_VL) stages; stage b swaps, for each pair of vectors r and
 * r + b (bit b of r clear), the lanes of r with bit b set with the lanes of r + b with bit b
 * clear, so each stage exchanges bit b between the vector and the lane index. With GNU
 * vectors every swap is two two-source shuffles (OI_VSHUF); else the same moves by lanes. */
#if defined(OI_GNU_VECTORS)
#if defined(__clang__)
#define OI_VSHUF(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define OI_VSHUF(a, b, ...) __builtin_shuffle(a, b, (oi_vi){__VA_ARGS__})
#endif
/* the lane indices of the swap's two results: lane u of the first takes a[u] where bit b
   of u is clear, else b[u - b]; the second a[u + b], else b[u] */
#define OI_TLO(u, b) (((u) & (b)) ? OI_VL + (u) - (b) : (u))
#define OI_THI(u, b) (((u) & (b)) ? OI_VL + (u) : (u) + (b))
#define OI_LANES4(F, b) F(0, b), F(1, b), F(2, b), F(3, b)
#if OI_VL == 16
#define OI_LANES(F, b) OI_LANES4(F, b), F(4, b), F(5, b), F(6, b), F(7, b), F(8, b), F(9, b), \
    F(10, b), F(11, b), F(12, b), F(13, b), F(14, b), F(15, b)
#elif OI_VL == 8
#define OI_LANES(F, b) OI_LANES4(F, b), F(4, b), F(5, b), F(6, b), F(7, b)
#else
#define OI_LANES(F, b) OI_LANES4(F, b)
#endif
#define OI_TSTAGE(v, b)                                                      \
    for (r = 0; r < OI_VL; r++)                                              \
        if (!(r & (b))) {                                                    \
            const oi_vf lo = OI_VSHUF(v[r], v[r + (b)], OI_LANES(OI_TLO, b)); \
            v[r + (b)] = OI_VSHUF(v[r], v[r + (b)], OI_LANES(OI_THI, b));    \
            v[r] = lo;                                                       \
        }
static inline void oi_vtranspose(oi_vf *v) {
    int r;
    OI_TSTAGE(v, 1)
    OI_TSTAGE(v, 2)
#if OI_VL >= 8
    OI_TSTAGE(v, 4)
#endif
#if OI_VL == 16
    OI_TSTAGE(v, 8)
#endif
}
#else
static inline void oi_vtranspose(oi_vf *v) {
    int r, u;
    for (r = 0; r < OI_VL; r++)
        for (u = r + 1; u < OI_VL; u++) {
            const float t = v[r].v[u];
            v[r].v[u] = v[u].v[r];
            v[u].v[r] = t;
        }
}
#endif

/* Lane-wise maximum; a NaN lane in `a` is kept (NaN propagates like the registry's max). */
static inline oi_vf oi_vmax(oi_vf a, oi_vf b) {
    float x[OI_VL], y[OI_VL];
    int u;
    memcpy(x, &a, sizeof x);
    memcpy(y, &b, sizeof y);
    for (u = 0; u < OI_VL; u++) x[u] = (x[u] != x[u] || x[u] >= y[u]) ? x[u] : y[u];
    return oi_vload(x);
}

#endif /* OI_VEC_H */
