/* OpenInfer-JAX emitted runtime: splitting a kernel's work over threads.
 *
 * One entry point for every kernel (GEMM, GEMV, attention, convolution, and any kernel a
 * later runtime file adds):
 *
 *     oi_parallel_for(n, fn, ctx);   calls fn(ctx, begin, end, slot) on disjoint ranges
 *                                    covering [0, n) and returns when all are done; a thread
 *                                    may get several ranges, of any size, and which thread
 *                                    gets which varies from call to call (oi_pool.h balances
 *                                    the threads that way). `slot` (0 <= slot <
 *                                    OI_MAX_THREADS) is distinct per concurrent call: index
 *                                    per-thread scratch with it (packing buffers).
 *     oi_parallel_work(n, work, fn, ctx)   the same, but in the caller alone when `work`
 *                                    (multiply-adds or bytes moved) is too small to repay
 *                                    waking the workers.
 *
 * Kernels split OUTPUT elements (rows, columns, heads, channels), never a reduction, and
 * compute each unit the same way whatever range it comes in, so each output is computed by
 * the same instructions in the same order whatever the thread count and the ranges:
 * results are bit-identical for 1 and N threads.
 *
 * The program decides the build (<name>.c defines OI_MAX_THREADS before including this):
 *   OI_MAX_THREADS 1 (default): no threads, fn(ctx, 0, n) in the caller; no pthread code.
 *   OI_MAX_THREADS > 1: oi_pool.h is included too (POSIX threads, link with -pthread); the
 *   pool starts on first use with OI_THREADS (environment) threads, default OI_MAX_THREADS,
 *   clamped to [1, OI_MAX_THREADS]. oi_parallel_shutdown() joins the workers (oi_free). */
#ifndef OI_PARALLEL_H
#define OI_PARALLEL_H

#include <stdint.h>

#ifndef OI_MAX_THREADS
#define OI_MAX_THREADS 1
#endif

/* Work on [begin, end) of a kernel's n units; ctx is the kernel's argument block. */
typedef void (*oi_task_fn)(void *ctx, int64_t begin, int64_t end, int slot);

/* Below this much work (about 10 microseconds on one core) a region runs in the caller: a
   thread that takes part spins on the pool while regions keep coming, so handing it half
   of a region costs about a microsecond, and a sleeping one delays nothing (the caller
   takes over its share, oi_pool.h), it only costs the caller the wake-up call. */
#ifndef OI_PARALLEL_MIN_WORK
#define OI_PARALLEL_MIN_WORK 32768
#endif

#if OI_MAX_THREADS > 1
#include "oi_pool.h"
#else
/* Single-threaded build: the whole range in the caller. */
static inline void oi_parallel_for(int64_t n, oi_task_fn fn, void *ctx) {
    if (n > 0) fn(ctx, 0, n, 0);
}
static inline int oi_parallel_threads(void) { return 1; }
static inline void oi_parallel_shutdown(void) {}
#endif

static inline void oi_parallel_work(int64_t n, double work, oi_task_fn fn, void *ctx) {
    if (n <= 0) return;
    if (OI_MAX_THREADS == 1 || work < OI_PARALLEL_MIN_WORK) fn(ctx, 0, n, 0);
    else oi_parallel_for(n, fn, ctx);
}

#endif /* OI_PARALLEL_H */
