/* OpenInfer-JAX emitted runtime: the POSIX thread pool behind oi_parallel_for (see
 * oi_parallel.h). Included only by programs synthesized with more than one thread; build
 * them with -pthread.
 *
 * Workers are started on first use and live until oi_parallel_shutdown(). A call stores
 * (fn, ctx, n, active) and then a new generation number; worker t runs range t of the
 * split and counts itself done; the caller runs range 0 and waits for the count. While
 * work keeps coming (a CNN or decode step issues hundreds of small parallel regions, and
 * waking a sleeping thread costs tens of microseconds) everything goes through atomics:
 * workers spin on the generation and the caller on the count, with a pause instruction so
 * a spinning thread leaves the core's resources to a hyper-thread sibling. A thread that
 * spun OI_POOL_SPIN_FOR (about 30-50 microseconds) without news sleeps on a condition
 * variable, so an idle program uses no CPU and a loaded machine's other programs get the
 * core back soon (spinning 200 microseconds made 2 threads on 2 busy cores half as fast).
 * Only then does the other side take the mutex, to wake it: a sleeper registers itself
 * (`sleepers`, `caller_sleeps`) under the mutex before its last look at the counter, and
 * the waker publishes before it looks for sleepers, both sequentially consistent, so no
 * wake-up is lost. Without GCC/Clang atomics every wait sleeps under the mutex. */
#ifndef OI_POOL_H
#define OI_POOL_H

#include <pthread.h>
#include <stdlib.h>

#if defined(__GNUC__)
#define OI_POOL_ATOMICS 1
#define OI_POOL_LOAD(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define OI_POOL_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define OI_POOL_ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_SEQ_CST)
#define OI_POOL_FENCE() __atomic_thread_fence(__ATOMIC_ACQUIRE)
#if defined(__x86_64__) || defined(__i386__)
#define OI_POOL_PAUSE() __builtin_ia32_pause()
#define OI_POOL_NOW(spin) ((void)(spin), (unsigned long long)__builtin_ia32_rdtsc())
#ifndef OI_POOL_SPIN_FOR
#define OI_POOL_SPIN_FOR 100000ULL /* time-stamp counter ticks: about 30-50 microseconds */
#endif
#else
#if defined(__aarch64__)
#define OI_POOL_PAUSE() __asm__ __volatile__("yield")
#else
#define OI_POOL_PAUSE() ((void)0)
#endif
#define OI_POOL_NOW(spin) ((unsigned long long)(spin))
#ifndef OI_POOL_SPIN_FOR
#define OI_POOL_SPIN_FOR 20000ULL /* iterations */
#endif
#endif
#else
#define OI_POOL_ATOMICS 0
#define OI_POOL_LOAD(p) (*(p))
#define OI_POOL_STORE(p, v) (*(p) = (v))
#define OI_POOL_ADD(p, v) (*(p) += (v))
#define OI_POOL_FENCE() ((void)0)
#define OI_POOL_NOW(spin) ((unsigned long long)(spin))
#define OI_POOL_SPIN_FOR 1ULL /* no spinning: the loops end at once */
#define OI_POOL_PAUSE() ((void)0)
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
    int sleepers;         /* workers asleep on `wake` (or about to be) */
    int caller_sleeps;    /* the caller is asleep on `idle` (or about to be) */
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

/* Wait in a worker until the generation differs from `seen` (or stop); returns it. */
static long oi_pool_next(long seen) {
    long gen;
    const unsigned long long t0 = OI_POOL_NOW(0);
    unsigned long long spin;
    for (spin = 1; OI_POOL_NOW(spin) - t0 < OI_POOL_SPIN_FOR; spin++) {
        gen = OI_POOL_LOAD(&oi_pool.generation);
        if (gen != seen) return gen;
        OI_POOL_PAUSE();
    }
    pthread_mutex_lock(&oi_pool.mu);
    OI_POOL_ADD(&oi_pool.sleepers, 1);
    while ((gen = OI_POOL_LOAD(&oi_pool.generation)) == seen && !oi_pool.stop)
        pthread_cond_wait(&oi_pool.wake, &oi_pool.mu);
    OI_POOL_ADD(&oi_pool.sleepers, -1);
    pthread_mutex_unlock(&oi_pool.mu);
    return gen;
}

static void *oi_pool_worker(void *arg) {
    const int t = (int)(intptr_t)arg;
    long seen = 0;
    for (;;) {
        const long gen = oi_pool_next(seen);
        oi_task_fn fn;
        void *ctx;
        int64_t n, begin, end;
        int active;
        if (OI_POOL_LOAD(&oi_pool.stop)) return NULL;
        /* The caller rewrites these only after every worker of the previous generation
           counted itself done; a worker that takes no part (t >= active) may still be
           reading them then, so it checks the generation again (a torn read is redone). */
        fn = oi_pool.fn;
        ctx = oi_pool.ctx;
        n = oi_pool.n;
        active = oi_pool.active;
        OI_POOL_FENCE();
        if (OI_POOL_LOAD(&oi_pool.generation) != gen) continue; /* seen stays: read the next one */
        seen = gen;
        if (t < active) {
            oi_pool_range(n, active, t, &begin, &end);
            if (begin < end) fn(ctx, begin, end, t);
#if OI_POOL_ATOMICS
            if (OI_POOL_ADD(&oi_pool.done, -1) == 0 && OI_POOL_LOAD(&oi_pool.caller_sleeps)) {
                pthread_mutex_lock(&oi_pool.mu);
                pthread_cond_signal(&oi_pool.idle);
                pthread_mutex_unlock(&oi_pool.mu);
            }
#else
            pthread_mutex_lock(&oi_pool.mu);
            if (--oi_pool.done == 0) pthread_cond_signal(&oi_pool.idle);
            pthread_mutex_unlock(&oi_pool.mu);
#endif
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
    int active;
    int64_t begin, end;
    unsigned long long t0, spin;
    if (n <= 0) return;
    if (!oi_pool.threads) oi_pool_start();
    active = n < oi_pool.threads ? (int)n : oi_pool.threads;
    if (active == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    if (!OI_POOL_ATOMICS) pthread_mutex_lock(&oi_pool.mu);
    oi_pool.fn = fn;
    oi_pool.ctx = ctx;
    oi_pool.n = n;
    oi_pool.active = active;
    OI_POOL_STORE(&oi_pool.done, (long)(active - 1));
    /* workers t >= active see the generation and go back to waiting */
    OI_POOL_STORE(&oi_pool.generation, oi_pool.generation + 1);
    if (!OI_POOL_ATOMICS) {
        pthread_cond_broadcast(&oi_pool.wake);
        pthread_mutex_unlock(&oi_pool.mu);
    } else if (OI_POOL_LOAD(&oi_pool.sleepers)) {
        pthread_mutex_lock(&oi_pool.mu);
        pthread_cond_broadcast(&oi_pool.wake);
        pthread_mutex_unlock(&oi_pool.mu);
    }
    oi_pool_range(n, active, 0, &begin, &end);
    if (begin < end) fn(ctx, begin, end, 0);
    t0 = OI_POOL_NOW(0);
    for (spin = 1; OI_POOL_NOW(spin) - t0 < OI_POOL_SPIN_FOR && OI_POOL_LOAD(&oi_pool.done) != 0; spin++)
        OI_POOL_PAUSE();
    if (OI_POOL_LOAD(&oi_pool.done) != 0) {
        pthread_mutex_lock(&oi_pool.mu);
        OI_POOL_STORE(&oi_pool.caller_sleeps, 1);
        while (OI_POOL_LOAD(&oi_pool.done) != 0) pthread_cond_wait(&oi_pool.idle, &oi_pool.mu);
        OI_POOL_STORE(&oi_pool.caller_sleeps, 0);
        pthread_mutex_unlock(&oi_pool.mu);
    }
}

/* Join the workers (the next oi_parallel_for starts them again, reading OI_THREADS anew). */
static inline void oi_parallel_shutdown(void) {
    int t;
    if (!oi_pool.threads) return;
    pthread_mutex_lock(&oi_pool.mu);
    OI_POOL_STORE(&oi_pool.stop, 1);
    OI_POOL_STORE(&oi_pool.generation, oi_pool.generation + 1); /* spinning workers see it too */
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
