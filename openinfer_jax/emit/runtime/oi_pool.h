/* OpenInfer-JAX emitted runtime: the POSIX thread pool behind oi_parallel_for (see
 * oi_parallel.h). Included only by programs synthesized with more than one thread; build
 * them with -pthread.
 *
 * Workers are started on first use and live until oi_parallel_shutdown(). A call stores
 * (fn, ctx, active) and each thread's share of [0, n) (near-equal ranges), then a new
 * generation number; the caller and the workers t < active then claim chunks
 * (oi_pool_claim) until none is left, and each worker counts itself done; the caller waits
 * for the count. A thread claims from its own share first, in a few large chunks, and then
 * takes half of what another thread has not claimed yet: when the cores run alike (the
 * usual case) every thread runs its own range in about three calls, and when one runs
 * slower (a core shared with another program or virtual machine, a worker that woke late,
 * a costlier share of the outputs) the others take over the rest of its share, so the
 * threads finish close together whatever the split would have been. Which thread computes
 * which unit varies from call to call; a kernel's output never depends on it (oi_parallel.h).
 * While work keeps coming (a CNN or decode step issues hundreds of small parallel regions,
 * and waking a sleeping thread costs tens of microseconds) everything goes through atomics:
 * workers spin on the generation and the caller on the count, with a pause instruction so
 * a spinning thread leaves the core's resources to a hyper-thread sibling. A thread that
 * spun OI_POOL_SPIN_FOR (about 30-50 microseconds) without news sleeps on a condition
 * variable, so an idle program uses no CPU and a loaded machine's other programs get the
 * core back soon (spinning 200 microseconds made 2 threads on 2 busy cores half as fast).
 * Only then does the other side take the mutex, to wake it: a sleeper registers itself
 * (`sleepers`, `caller_sleeps`) under the mutex before its last look at the counter, and
 * the waker publishes before it looks for sleepers, both sequentially consistent, so no
 * wake-up is lost. Without GCC/Clang atomics every wait sleeps under the mutex and chunks
 * are claimed under it. */
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
    int active;           /* threads taking part in the current generation (<= threads) */
    oi_task_fn fn;
    void *ctx;
    uint64_t share[OI_MAX_THREADS]; /* per thread: its units not yet claimed (oi_pool_claim) */
} oi_pool; /* mu, wake and idle are initialized when the pool starts */

/* Thread t's share of the current region: units [front, back) not yet claimed, in one word
 * (front << 32 | back) so that claims from either end are single compare-and-swaps. */
#define OI_POOL_FRONT(w) ((int64_t)((w) >> 32))
#define OI_POOL_BACK(w) ((int64_t)((w) & 0xffffffffu))
#define OI_POOL_SHARE(f, b) (((uint64_t)(f) << 32) | (uint64_t)(b))

/* Claim a chunk [*begin, *end) of the current region for thread t; 0 when every unit is
 * claimed. First from the front of its own share: two thirds of what is left of it
 * (rounded up), so an undisturbed thread makes about three calls (each call has its setup:
 * a GEMM streams the operand its threads share again, a convolution copies its input rows
 * again) and the last third stays open to the others for long; then, when its own share
 * is gone, half of what is left of another thread's share, from the back. */
static int oi_pool_claim(int t, int active, int64_t *begin, int64_t *end) {
    int v, i;
    for (i = 0; i < active; i++) {
        uint64_t w;
        int64_t f, b, size;
        v = (t + i) % active;
#if OI_POOL_ATOMICS
        uint64_t next;
        w = __atomic_load_n(&oi_pool.share[v], __ATOMIC_ACQUIRE);
        for (;;) {
            f = OI_POOL_FRONT(w);
            b = OI_POOL_BACK(w);
            if (f >= b) break;
            size = v == t ? (b - f) - (b - f) / 3 : (b - f + 1) / 2;
            next = v == t ? OI_POOL_SHARE(f + size, b) : OI_POOL_SHARE(f, b - size);
            if (__atomic_compare_exchange_n(&oi_pool.share[v], &w, next, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                *begin = v == t ? f : b - size;
                *end = v == t ? f + size : b;
                return 1;
            }
        }
#else
        pthread_mutex_lock(&oi_pool.mu);
        w = oi_pool.share[v];
        f = OI_POOL_FRONT(w);
        b = OI_POOL_BACK(w);
        size = f >= b ? 0 : v == t ? (b - f) - (b - f) / 3 : (b - f + 1) / 2;
        if (size) oi_pool.share[v] = v == t ? OI_POOL_SHARE(f + size, b) : OI_POOL_SHARE(f, b - size);
        pthread_mutex_unlock(&oi_pool.mu);
        if (size) {
            *begin = v == t ? f : b - size;
            *end = v == t ? f + size : b;
            return 1;
        }
#endif
    }
    return 0;
}

/* Run chunks of the current region in thread `t` until none is left. */
static void oi_pool_work(oi_task_fn fn, void *ctx, int active, int t) {
    int64_t begin, end;
    while (oi_pool_claim(t, active, &begin, &end)) fn(ctx, begin, end, t);
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
        int active;
        if (OI_POOL_LOAD(&oi_pool.stop)) return NULL;
        /* The caller rewrites these only after every worker of the previous generation
           counted itself done; a worker that takes no part (t >= active) may still be
           reading them then, so it checks the generation again (a torn read is redone). */
        fn = oi_pool.fn;
        ctx = oi_pool.ctx;
        active = oi_pool.active;
        OI_POOL_FENCE();
        if (OI_POOL_LOAD(&oi_pool.generation) != gen) continue; /* seen stays: read the next one */
        seen = gen;
        if (t < active) {
            oi_pool_work(fn, ctx, active, t);
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
    int active, t;
    unsigned long long t0, spin;
    if (n <= 0) return;
    if (!oi_pool.threads) oi_pool_start();
    active = n < oi_pool.threads ? (int)n : oi_pool.threads;
    if (active == 1 || n > 0xffffffffLL) { /* (shares count units in 32 bits) */
        fn(ctx, 0, n, 0);
        return;
    }
    if (!OI_POOL_ATOMICS) pthread_mutex_lock(&oi_pool.mu);
    oi_pool.fn = fn;
    oi_pool.ctx = ctx;
    oi_pool.active = active;
    for (t = 0; t < active; t++) /* (published by the generation's store below) */
        OI_POOL_STORE(&oi_pool.share[t], OI_POOL_SHARE(n * t / active, n * (t + 1) / active));
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
    oi_pool_work(fn, ctx, active, 0);
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
