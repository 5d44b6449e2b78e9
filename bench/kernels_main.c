/* bench/bench_kernels.py's C side: times the runtime's f32 GEMM/GEMV (emit/runtime/oi_gemm.h)
 * on one shape in CPU time (clock(): this process).
 *
 *     kernels_main M N K b_nk prepack seconds
 *
 * C[M, N] = A[M, K] * B with B as W [N, K] (b_nk 1, a linear layer) or B [K, N] (b_nk 0);
 * prepack 1 gives the GEMM B's panels packed once (as the emitted code does for a model
 * weight). Prints one line: the best CPU seconds per call over 5 batches of about
 * `seconds` / 5 each, and a checksum of C. Buffers get MADV_HUGEPAGE on Linux like the
 * emitted program's model buffer (oi_runtime.c), so a GEMV streams W as it does there. */
#if defined(__linux__)
#define _DEFAULT_SOURCE
#include <sys/mman.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "oi_gemm.h"

static float *filled(int64_t n, unsigned seed) {
    float *p = (float *)malloc(sizeof(float) * (size_t)(n ? n : 1));
    int64_t i;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    {
        const uintptr_t lo = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
        const uintptr_t hi = ((uintptr_t)(p + n)) & ~(uintptr_t)4095;
        if (hi > lo) (void)madvise((void *)lo, (size_t)(hi - lo), MADV_HUGEPAGE);
    }
#endif
    for (i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
    return p;
}

int main(int argc, char **argv) {
    oi_gemm_f32_args g;
    double budget, best = 1e30, sum = 0.0;
    int64_t i, calls = 1, batch;
    clock_t t0;
    if (argc != 7) {
        fprintf(stderr, "usage: kernels_main M N K b_nk prepack seconds\n");
        return 2;
    }
    memset(&g, 0, sizeof g);
    g.M = atoll(argv[1]);
    g.N = atoll(argv[2]);
    g.K = atoll(argv[3]);
    g.b_nk = atoi(argv[4]);
    budget = atof(argv[6]);
    g.a = filled(g.M * g.K, 1u);
    g.lda = g.K;
    g.b = filled(g.N * g.K, 2u);
    g.ldb = g.b_nk ? g.K : g.N;
    g.c = filled(g.M * g.N, 3u);
    g.ldc = g.N;
    g.pack = (float *)malloc(sizeof(float) * OI_GEMM_PACK_FLOATS);
    if (atoi(argv[5])) g.b_panels = oi_gemm_prepacked(g.b, g.N, g.K, g.ldb, g.b_nk);
    /* calls per batch: about budget / 5 seconds */
    for (;;) {
        t0 = clock();
        for (i = 0; i < calls; i++) oi_gemm_f32(&g);
        if ((double)(clock() - t0) / CLOCKS_PER_SEC > budget / 50 || calls > (1 << 24)) break;
        calls *= 2;
    }
    {
        const double once = (double)(clock() - t0) / CLOCKS_PER_SEC / (double)calls;
        calls = (int64_t)(budget / 5 / (once > 0 ? once : 1e-9)) + 1;
    }
    for (batch = 0; batch < 5; batch++) {
        double s;
        t0 = clock();
        for (i = 0; i < calls; i++) oi_gemm_f32(&g);
        s = (double)(clock() - t0) / CLOCKS_PER_SEC / (double)calls;
        if (s < best) best = s;
    }
    for (i = 0; i < g.M * g.N; i++) sum += g.c[i];
    printf("%.9g %.6g\n", best, sum);
    oi_kernels_release();
    return 0;
}
