"""The generated test driver (`<name>_driver.c`) and the embedded-weights file.

The driver reads inputs from files, runs steps and writes outputs to files. File format
(inputs and outputs): int32 ndim, int64 dims[ndim], raw little-endian elements. Usage:
``driver MODEL STEPS IN_DIR OUT_DIR [REPEAT]``; with REPEAT the first step's inputs are run
REPEAT more times and the mean step time is printed (``ns_per_step N``). The Vulkan variant
times in wall-clock time and reports the device and the queue submissions per step.
"""

from __future__ import annotations

from openinfer_jax.emit.analysis import Analysis
from openinfer_jax.emit.c_source import dynamic_inputs, fetchable
from openinfer_jax.emit.c_types import ctype

__all__ = ["driver_file", "weights_file"]

# The fixed parts of the driver: file helpers, and main() around insert_all/fetch_all.
_FILE_IO = """\
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* An input file is checked before anything is allocated: a rank in 0..OI_MAX_DIMS,
   dims >= 0 whose byte size fits (no overflow), and exactly that many data bytes in the
   file (a truncated file is reported as such). The reason goes to oi_last_error. */
static void *read_input(const char *dir, const char *var, int step, size_t elem, int *ndim, int64_t *dims) {
    char path[1024];
    FILE *f;
    int32_t nd;
    uint64_t n = 1, have;
    long start, end;
    int d;
    void *buf;
    snprintf(path, sizeof path, "%s/%s.%d.bin", dir, var, step);
    f = fopen(path, "rb");
    if (!f) { oi_set_error("input %s: cannot open it", path); return NULL; }
    if (fread(&nd, 4, 1, f) != 1 || nd < 0 || nd > OI_MAX_DIMS) {
        oi_set_error("input %s: the header needs an int32 ndim in 0..%d (truncated file?)", path, OI_MAX_DIMS);
        fclose(f);
        return NULL;
    }
    if (nd && fread(dims, 8, (size_t)nd, f) != (size_t)nd) {
        oi_set_error("input %s: truncated in its %d dims", path, (int)nd);
        fclose(f);
        return NULL;
    }
    for (d = 0; d < nd; d++) {
        if (dims[d] < 0 || (dims[d] && n > (uint64_t)SIZE_MAX / elem / (uint64_t)dims[d])) {
            oi_set_error("input %s: dim %d is %lld (negative, or the data would not fit in memory)", path, d,
                         (long long)dims[d]);
            fclose(f);
            return NULL;
        }
        n *= (uint64_t)dims[d];
    }
    start = ftell(f);
    if (start < 0 || fseek(f, 0, SEEK_END) != 0 || (end = ftell(f)) < 0 || fseek(f, start, SEEK_SET) != 0) {
        oi_set_error("input %s: cannot size the file", path);
        fclose(f);
        return NULL;
    }
    have = (uint64_t)(end - start);
    if (have != n * elem) {
        oi_set_error("input %s: the dims need %llu data bytes, the file has %llu (%s)", path,
                     (unsigned long long)(n * elem), (unsigned long long)have, have < n * elem ? "truncated" : "extra bytes");
        fclose(f);
        return NULL;
    }
    buf = malloc(n ? (size_t)(n * elem) : 1);
    if (!buf) { oi_set_error("input %s: out of memory for %llu bytes", path, (unsigned long long)(n * elem)); fclose(f); return NULL; }
    if (n && fread(buf, elem, (size_t)n, f) != (size_t)n) {
        oi_set_error("input %s: short read", path);
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    *ndim = nd;
    return buf;
}

static int write_output(const char *dir, const char *var, int step, const void *data, size_t elem, int ndim, const int64_t *dims) {
    char path[1024];
    FILE *f;
    int32_t nd = ndim;
    int64_t n = 1;
    int d;
    snprintf(path, sizeof path, "%s/%s.%d.bin", dir, var, step);
    f = fopen(path, "wb");
    if (!f) {
        oi_set_error("output %s: cannot open it for writing (does the directory %s exist?)", path, dir);
        return 1;
    }
    for (d = 0; d < ndim; d++) n *= dims[d];
    fwrite(&nd, 4, 1, f);
    if (ndim) fwrite(dims, 8, (size_t)ndim, f);
    if (n) fwrite(data, elem, (size_t)n, f);
    if (fclose(f) != 0) {
        oi_set_error("output %s: the write failed (disk full?)", path);
        return 1;
    }
    return 0;
}
"""

_MAIN_START = """\
int main(int argc, char **argv) {
    int steps, s, rc;
    if (argc < 5) {
        fprintf(stderr, "usage: %s MODEL STEPS IN_DIR OUT_DIR [REPEAT]\\n", argv[0]);
        return 2;
    }
    steps = atoi(argv[2]);
    rc = oi_init(argv[1]);
    if (rc) { fprintf(stderr, "oi_init: %s: %s\\n", oi_error_string(rc), oi_last_error()); return 1; }
    for (s = 0; s < steps; s++) {
        rc = insert_all(argv[3], s);
        if (!rc) rc = oi_step();
        if (!rc) rc = fetch_all(argv[4], s);
        if (rc) { fprintf(stderr, "step %d: %s: %s\\n", s, oi_error_string(rc), oi_last_error()); oi_free(); return 1; }
    }
"""

_MAIN_TIMING = """\
    if (argc > 5) {
        int repeat = atoi(argv[5]), r;
        clock_t t0, t1;
        double total = 0;
        /* one untimed step first: model tensors are prepared on first use */
        rc = insert_all(argv[3], 0);
        if (!rc) rc = oi_step();
        for (r = 0; !rc && r < repeat; r++) {
            rc = insert_all(argv[3], 0);
            if (rc) break;
            t0 = clock();
            rc = oi_step();
            t1 = clock();
            if (rc) break;
            total += (double)(t1 - t0);
        }
        if (rc) { fprintf(stderr, "timing: %s: %s\\n", oi_error_string(rc), oi_last_error()); oi_free(); return 1; }
        printf("ns_per_step %.0f\\n", repeat ? total * 1e9 / CLOCKS_PER_SEC / repeat : 0.0);
    }
    oi_free();
    return 0;
}
"""

# Vulkan: wall-clock time (the GPU's work is not this process's CPU time), and a report of
# the device and the queue submissions / dispatches per step after the steps.
_VK_WALL = """\
#include "oi_vulkan.h"

static clock_t wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (clock_t)((double)ts.tv_sec * CLOCKS_PER_SEC + (double)ts.tv_nsec * (CLOCKS_PER_SEC / 1e9));
}
"""

_VK_REPORT = """\
    printf("vk_device %s\\n", oi_vk_device_name());
    printf("vk_submits_per_step %.3f\\n", steps ? (double)oi_vk_submits() / steps : 0.0);
    printf("vk_dispatches_per_step %.3f\\n", steps ? (double)oi_vk_dispatches() / steps : 0.0);
    printf("vk_fallbacks_per_step %.3f\\n", steps ? (double)oi_vk_fallbacks() / steps : 0.0);
"""


def _lines(text: str) -> list[str]:
    return text.splitlines()


def _insert_all(an: Analysis) -> list[str]:
    out = [
        "static int insert_all(const char *dir, int step) {",
        "    int rc = 0, ndim;",
        "    int64_t dims[OI_MAX_DIMS];",
        "    void *buf;",
    ]
    for vname in dynamic_inputs(an):
        ct = ctype(an.vars[vname].dtype)
        out += [
            f'    buf = read_input(dir, "{vname}", step, {ct.size}, &ndim, dims);',
            "    if (!buf) return OI_ERR_ARGUMENT; /* the input file; oi_last_error says why */",
            f"    rc = oi_insert_{vname}((const {ct.storage} *)buf, ndim, dims);",
            "    free(buf);",
            "    if (rc) return rc;",
        ]
    return [
        *out,
        "    (void)buf; (void)ndim; (void)dims; (void)dir; (void)step; (void)&read_input;",
        "    return rc;",
        "}",
        "",
    ]


def _fetch_all(an: Analysis, outputs: tuple[str, ...]) -> list[str]:
    out = [
        "static int fetch_all(const char *dir, int step) {",
        "    int rc = 0, ndim;",
        "    int64_t dims[OI_MAX_DIMS];",
        "    void *buf;",
    ]
    for vname in fetchable(an, outputs):
        dtype = an.tables[vname].dtype if vname in an.tables else an.vars[vname].dtype
        ct = ctype(dtype)
        out += [
            f"    buf = malloc((size_t)OI_BOUND_{vname} * {ct.size} + 1);",
            "    if (!buf) return OI_ERR_NOMEM;",
            f"    rc = oi_fetch_{vname}(({ct.storage} *)buf, OI_BOUND_{vname}, &ndim, dims);",
            f'    if (!rc && write_output(dir, "{vname}", step, buf, {ct.size}, ndim, dims)) rc = OI_ERR_IO;',
            "    free(buf);",
            "    if (rc) return rc;",
        ]
    return [
        *out,
        "    (void)buf; (void)ndim; (void)dims; (void)dir; (void)step; (void)&write_output;",
        "    return rc;",
        "}",
        "",
    ]


def driver_file(an: Analysis, name: str, outputs: tuple[str, ...], vulkan: bool = False) -> str:
    """The text of `<name>_driver.c` (see the module docstring)."""
    out = [
        f"/* {name}_driver.c: test driver generated by OpenInfer-JAX. Do not edit.",
        " * usage: driver MODEL.oinf STEPS IN_DIR OUT_DIR [REPEAT]",
        " * files: IN_DIR/<input>.<step>.bin and OUT_DIR/<output>.<step>.bin, each",
        " *        int32 ndim, int64 dims[ndim], then the raw elements. */",
        f'#include "{name}.h"',
        "",
    ]
    if vulkan:
        out.insert(0, "#define _POSIX_C_SOURCE 199309L /* clock_gettime */")
    io = _lines(_FILE_IO)
    if vulkan:
        k = io.index("#include <time.h>") + 1
        io[k:k] = _lines(_VK_WALL)
    out += [*io, "", *_insert_all(an), *_fetch_all(an, outputs), *_lines(_MAIN_START)]
    timing = _lines(_MAIN_TIMING)
    if vulkan:
        out += _lines(_VK_REPORT)
        timing = [line.replace("clock()", "wall()") for line in timing]
    return "\n".join(out + timing + [""])


def weights_file(name: str, data: bytes) -> str:
    """The model file as a C array (for --embed-weights); 16 bytes a line, no timestamps."""
    lines = [
        f"/* {name}_weights.c: the .oinf model embedded by OpenInfer-JAX ({len(data)} bytes). Generated. */",
        "#include <stdint.h>",
        "",
        f"const unsigned char oi_{name}_weights[{max(len(data), 1)}] = {{",
    ]
    for i in range(0, len(data), 16):
        lines.append("    " + ", ".join(f"0x{b:02x}" for b in data[i : i + 16]) + ",")
    if not data:
        lines.append("    0")
    lines.append("};")
    lines.append(f"const uint64_t oi_{name}_weights_size = UINT64_C({len(data)});")
    lines.append("")
    return "\n".join(lines)
