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

/* Sum of the lanes, pairwise (lane u + lane u + OI_VL/2, ...): a fixed order. */
static inline float oi_vsum(oi_vf v) {
    float t[OI_VL];
    int w, u;
    memcpy(t, &v, sizeof t);
    for (w = OI_VL / 2; w > 0; w /= 2)
        for (u = 0; u < w; u++) t[u] += t[u + w];
    return t[0];
}

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
