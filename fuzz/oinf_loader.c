/* libFuzzer target: the emitted C .oinf loader (emit/runtime/oi_runtime.c) on arbitrary bytes,
 * built with -fsanitize=fuzzer,address,undefined by fuzz/run.py. A crash, a sanitizer report
 * or a leak is a finding; rejecting the input is not. */
#include "oi_runtime.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    oi_model m;
    uint32_t k;
    /* a private copy: the loader may keep pointers into the buffer while the model is open */
    unsigned char *copy = (unsigned char *)malloc(size ? size : 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    if (oi_model_open_buffer(&m, copy, (uint64_t)size) == OI_OK) {
        for (k = 0; k < m.n_tensors; k++) {
            const oi_model_tensor *t = &m.tensors[k];
            char name[256];
            const void *out = NULL;
            size_t n = t->name_len < sizeof name - 1 ? t->name_len : sizeof name - 1;
            memcpy(name, t->name, n);
            name[n] = 0;
            if (t->has_data && t->nbytes <= (1u << 20))
                (void)oi_model_get(&m, name, t->dtype, (int)t->ndim, t->dims, &out);
        }
        oi_model_close(&m);
    }
    free(copy);
    return 0;
}
