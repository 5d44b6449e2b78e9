/* libFuzzer target: the generated C driver's input-file reader (read_input in
 * <prog>_driver.c, emit/c_driver.py) on arbitrary file contents, built with
 * -fsanitize=fuzzer,address,undefined by fuzz/run.py, which synthesizes the small program
 * whose driver is included here. A crash, a sanitizer report or a leak is a finding. */
#define main oi_driver_main /* libFuzzer brings its own main */
#include "prog_driver.c"
#undef main

#include <sys/stat.h>
#include <unistd.h>

static char dir_[64];

static void cleanup(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/x.0.bin", dir_);
    remove(path);
    rmdir(dir_);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[128];
    FILE *f;
    int ndim = 0;
    int64_t dims[OI_MAX_DIMS];
    void *buf;
    if (!dir_[0]) {
        snprintf(dir_, sizeof dir_, "/tmp/oi-driver-fuzz-%d", (int)getpid());
        mkdir(dir_, 0700);
        atexit(cleanup);
    }
    snprintf(path, sizeof path, "%s/x.0.bin", dir_);
    f = fopen(path, "wb");
    if (!f) return 0;
    if (size) fwrite(data, 1, size, f);
    fclose(f);
    buf = read_input(dir_, "x", 0, 4, &ndim, dims);
    free(buf);
    return 0;
}
