/* Timing main for bench/bench_edge.py: runs an emitted program's steps and reports the CPU
 * time (clock(), every thread of the process) and the wall time (CLOCK_MONOTONIC) of the
 * steps in chosen windows. Built with the emitted test driver, whose input reader it reuses:
 *
 *   cc -O3 -march=native -DDRIVER='"prog_driver.c"' edge_main.c prog.c oi_runtime.c -lm
 *   ./edge MODEL STEPS INPUT_STEPS IN_DIR START:COUNT...
 *
 * Step s reads IN_DIR/<input>.<s % INPUT_STEPS>.bin; each window prints one line
 * `window START COUNT cpu_ms_per_step wall_ms_per_step`, then `peak_rss_kb N` (VmHWM: the
 * peak resident memory of this process; ru_maxrss would keep the forking parent's peak across
 * exec). */
#define _POSIX_C_SOURCE 199309L
#define main oi_generated_driver_main
#include DRIVER
#undef main

static long peak_rss_kb(void) {
    char line[256];
    long kb = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld", &kb) == 1) break;
    fclose(f);
    return kb;
}

static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    int steps, input_steps, s, w, windows, rc;
    long start[64], count[64];
    double cpu[64], wall[64];
    if (argc < 6) {
        fprintf(stderr, "usage: %s MODEL STEPS INPUT_STEPS IN_DIR START:COUNT...\n", argv[0]);
        return 2;
    }
    steps = atoi(argv[2]);
    input_steps = atoi(argv[3]);
    windows = argc - 5;
    if (windows > 64 || input_steps < 1) return 2;
    for (w = 0; w < windows; w++) {
        if (sscanf(argv[5 + w], "%ld:%ld", &start[w], &count[w]) != 2) return 2;
        cpu[w] = wall[w] = 0.0;
    }
    rc = oi_init(argv[1]);
    if (rc) {
        fprintf(stderr, "init: %s: %s\n", oi_error_string(rc), oi_last_error());
        return 1;
    }
    for (s = 0; s < steps; s++) {
        clock_t c0, c1;
        double w0, w1;
        rc = insert_all(argv[4], s % input_steps);
        if (rc) break;
        c0 = clock();
        w0 = wall_seconds();
        rc = oi_step();
        w1 = wall_seconds();
        c1 = clock();
        if (rc) break;
        for (w = 0; w < windows; w++)
            if (s >= start[w] && s < start[w] + count[w]) {
                cpu[w] += (double)(c1 - c0) / CLOCKS_PER_SEC;
                wall[w] += w1 - w0;
            }
    }
    if (rc) {
        fprintf(stderr, "step %d: %s: %s\n", s, oi_error_string(rc), oi_last_error());
        oi_free();
        return 1;
    }
    for (w = 0; w < windows; w++)
        printf("window %ld %ld %.6f %.6f\n", start[w], count[w], 1e3 * cpu[w] / (double)count[w],
               1e3 * wall[w] / (double)count[w]);
    printf("peak_rss_kb %ld\n", peak_rss_kb());
    oi_free();
    (void)&fetch_all;
    return 0;
}
