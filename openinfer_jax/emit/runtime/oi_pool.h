/* OpenInfer-JAX emitted runtime: the POSIX thread pool behind oi_parallel_for (see
 * oi_parallel.h). Included only by programs synthesized with more than one thread; build
 * them with -pthread.
 *
 * Workers are started on first use and live until oi_parallel_shutdown(). A call publishes
 * (fn, ctx, n) under a new generation number; worker t runs range t of the split and counts
 * itself done; the caller runs range 0 and waits for the count. Waiting spins for a short
 * while first (a decode step issues hundreds of small parallel regions, and waking a
 * sleeping thread costs tens of microseconds), then sleeps on a condition variable, so
 * idle programs use no CPU. Without GCC/Clang atomics every wait sleeps. */
#ifndef OI_POOL_H
#define OI_POOL_H

#include <pthread.h>
#include <stdlib.h>

#if defined(__GNUC__)
#define OI_POOL_LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define OI_POOL_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define OI_POOL_SPINS 200000
#else
#define OI_POOL_LOAD(p) (*(p))
#define OI_POOL_STORE(p, v) (*(p) = (v))
#define OI_POOL_SPINS 0
#endif

static struct {
    pthread_mutex_t mu;
    pthread_cond_t wake;  /* a new generation was published, or stop */
    pthread_cond_t idle;  /* the last worker of a generation finished */
    pthread_t workers[OI_MAX_THREADS];
    int threads;          /* 0: not started */
    long generation;
    long done;            /* ranges of the current generation still running in workers */
    int stop;
    int active;           /* ranges of the current generation (<= threads) */
    oi_task_fn fn;
    void *ctx;
    int64_t n;
} oi_pool; /* mu, wake and idle are initialized when the pool starts */

/* Range t of `active` near-equal ranges of [0, n). */
static inline void oi_pool_range(int64_t n, int active, int t, int64_t *begin, int64_t *end) {
    *begin = n * t / active;
    *end = n * (t + 1) / active;
}

static void *oi_pool_worker(void *arg) {
    const int t = (int)(intptr_t)arg;
    long seen = 0;
    for (;;) {
        long gen;
        int spin;
        oi_task_fn fn;
        void *ctx;
        int64_t n, begin, end;
        int active;
        for (spin = 0; spin < OI_POOL_SPINS && OI_POOL_LOAD(&oi_pool.generation) == seen; spin++) {
        }
        pthread_mutex_lock(&oi_pool.mu);
        while (oi_pool.generation == seen && !oi_pool.stop) pthread_cond_wait(&oi_pool.wake, &oi_pool.mu);
        if (oi_pool.stop) {
            pthread_mutex_unlock(&oi_pool.mu);
            return NULL;
        }
        gen = oi_pool.generation;
        fn = oi_pool.fn;
        ctx = oi_pool.ctx;
        n = oi_pool.n;
        active = oi_pool.active;
        pthread_mutex_unlock(&oi_pool.mu);
        seen = gen;
        if (t < active) {
            oi_pool_range(n, active, t, &begin, &end);
            if (begin < end) fn(ctx, begin, end, t);
            pthread_mutex_lock(&oi_pool.mu);
            OI_POOL_STORE(&oi_pool.done, oi_pool.done - 1);
            if (oi_pool.done == 0) pthread_cond_signal(&oi_pool.idle);
            pthread_mutex_unlock(&oi_pool.mu);
        }
    }
}

/* Threads the pool runs with: OI_THREADS from the environment, else OI_MAX_THREADS. */
static inline int oi_parallel_threads(void) {
    const char *env;
    long want;
    if (oi_pool.threads) return oi_pool.threads;
    env = getenv("OI_THREADS");
    want = env && *env ? strtol(env, NULL, 10) : OI_MAX_THREADS;
    if (want < 1) want = 1;
    if (want > OI_MAX_THREADS) want = OI_MAX_THREADS;
    return (int)want;
}

static inline void oi_pool_start(void) {
    int t, want = oi_parallel_threads();
    pthread_mutex_init(&oi_pool.mu, NULL);
    pthread_cond_init(&oi_pool.wake, NULL);
    pthread_cond_init(&oi_pool.idle, NULL);
    oi_pool.stop = 0;
    oi_pool.threads = 1;
    for (t = 1; t < want; t++) {
        if (pthread_create(&oi_pool.workers[t], NULL, oi_pool_worker, (void *)(intptr_t)t)) break;
        oi_pool.threads = t + 1;  /* fewer threads if the system refuses more: same results */
    }
}

static inline void oi_parallel_for(int64_t n, oi_task_fn fn, void *ctx) {
    int active, spin;
    int64_t begin, end;
    if (n <= 0) return;
    if (!oi_pool.threads) oi_pool_start();
    active = n < oi_pool.threads ? (int)n : oi_pool.threads;
    if (active == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&oi_pool.mu);
    oi_pool.fn = fn;
    oi_pool.ctx = ctx;
    oi_pool.n = n;
    oi_pool.active = active;
    oi_pool.done = active - 1;
    /* workers t >= active see the generation and go back to waiting */
    OI_POOL_STORE(&oi_pool.generation, oi_pool.generation + 1);
    pthread_cond_broadcast(&oi_pool.wake);
    pthread_mutex_unlock(&oi_pool.mu);
    oi_pool_range(n, active, 0, &begin, &end);
    if (begin < end) fn(ctx, begin, end, 0);
    for (spin = 0; spin < OI_POOL_SPINS && OI_POOL_LOAD(&oi_pool.done) != 0; spin++) {
    }
    pthread_mutex_lock(&oi_pool.mu);
    while (oi_pool.done != 0) pthread_cond_wait(&oi_pool.idle, &oi_pool.mu);
    pthread_mutex_unlock(&oi_pool.mu);
}

/* Join the workers (the next oi_parallel_for starts them again, reading OI_THREADS anew). */
static inline void oi_parallel_shutdown(void) {
    int t;
    if (!oi_pool.threads) return;
    pthread_mutex_lock(&oi_pool.mu);
    oi_pool.stop = 1;
    pthread_cond_broadcast(&oi_pool.wake);
    pthread_mutex_unlock(&oi_pool.mu);
    for (t = 1; t < oi_pool.threads; t++) pthread_join(oi_pool.workers[t], NULL);
    pthread_cond_destroy(&oi_pool.idle);
    pthread_cond_destroy(&oi_pool.wake);
    pthread_mutex_destroy(&oi_pool.mu);
    oi_pool.threads = 0;
    oi_pool.stop = 0;
    oi_pool.generation = 0;
}

#endif /* OI_POOL_H */
