/* Stress test of the emitted runtime's thread pool (oi_pool.h through oi_parallel.h): many
 * regions of every size, with pauses long enough for the workers and the caller to fall
 * asleep and restarts of the pool between them. Every unit of every region must run
 * exactly once, in a slot below the thread count, never in two calls of one slot at once
 * (per-slot scratch); a lost wake-up hangs (the test's timeout
 * catches it). Prints "ok REGIONS" on success. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <string.h>
#include <time.h>

#define OI_MAX_THREADS 4
#include "oi_parallel.h"

#define MAX_UNITS 64

static int hits[MAX_UNITS];
static int bad_slot, slot_shared;
static int busy[OI_MAX_THREADS]; /* a call in this slot is running (per-slot scratch) */

static void mark(void *ctx, int64_t begin, int64_t end, int slot) {
    int64_t i;
    volatile long spin;
    (void)ctx;
    if (slot < 0 || slot >= OI_MAX_THREADS) {
        bad_slot = 1;
        return;
    }
    if (__atomic_exchange_n(&busy[slot], 1, __ATOMIC_SEQ_CST)) slot_shared = 1;
    for (i = begin; i < end; i++) hits[i]++;
    for (spin = 0; spin < (begin % 3) * 2000; spin++) {
    } /* uneven ranges: the caller waits on the others sometimes */
    __atomic_store_n(&busy[slot], 0, __ATOMIC_SEQ_CST);
}

int main(int argc, char **argv) {
    long regions = argc > 1 ? atol(argv[1]) : 20000, r;
    unsigned seed = 12345;
    for (r = 0; r < regions; r++) {
        int64_t n, i;
        seed = seed * 1103515245u + 12345u;
        n = 1 + (int64_t)((seed >> 16) % MAX_UNITS);
        memset(hits, 0, sizeof hits);
        oi_parallel_for(n, mark, NULL);
        for (i = 0; i < MAX_UNITS; i++)
            if (hits[i] != (i < n)) {
                printf("region %ld: unit %lld ran %d times (n %lld)\n", r, (long long)i, hits[i], (long long)n);
                return 1;
            }
        if (r % 2000 == 1999) { /* let every thread fall asleep */
            struct timespec ts = {0, 3000000};
            nanosleep(&ts, NULL);
        }
        if (r % 5000 == 4999) oi_parallel_shutdown(); /* the next region starts the pool again */
    }
    oi_parallel_shutdown();
    if (bad_slot) {
        printf("a slot outside [0, OI_MAX_THREADS)\n");
        return 1;
    }
    if (slot_shared) {
        printf("two calls ran in one slot at once\n");
        return 1;
    }
    printf("ok %ld\n", regions);
    return 0;
}
