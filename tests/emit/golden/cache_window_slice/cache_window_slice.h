/* cache_window_slice.h: API of the program synthesized by OpenInfer-JAX. Generated; do not edit. */
#ifndef CACHE_WINDOW_SLICE_H
#define CACHE_WINDOW_SLICE_H

#include "oi_runtime.h"

/* Load and check the model (docs/oinf.md rules), bind weights, initialize persistent state.
 * Returns OI_OK or an OI_ERR_* code; oi_last_error() says why. */
int oi_init(const char *oinf_path);
/* Run one step; dynamic inputs must be inserted before every step. */
int oi_step(void);
/* Release the model; oi_init may be called again. */
void oi_free(void);
/* A short text for an error code (oi_last_error() has the details). */
const char *oi_error_string(int code);
/* Between steps: every persistent variable back to its initial value, every cache table
 * emptied (as after oi_init, without reloading the model). */
int oi_reset(void);
/* Between steps: set persistent variable `name` to `bytes` of `data` (its whole declared
 * value, elements as in oi_insert_*), or a cache table with one index to bytes / entry
 * bytes entries. OI_ERR_ARGUMENT: unknown name; OI_ERR_SHAPE: a size that does not fit;
 * OI_ERR_CACHE_FULL: more entries than the table's capacity. */
int oi_set_persistent(const char *name, const void *data, size_t bytes);

/* x: f32[5] */
int oi_insert_x(const float *data, int ndim, const int64_t *dims);

/* Set a persistent variable (its declared dims) or a cache table ([counts per index...,
 * entry dims]: a prefill) between steps, checked like an insert. */
int oi_set_persistent_A(const float *data, int ndim, const int64_t *dims);
int oi_set_persistent_count(const int32_t *data, int ndim, const int64_t *dims);

/* Fetch after a step: `capacity` elements at `out`; `dims` receives up to OI_MAX_DIMS sizes. */
#define OI_BOUND_A 80
int oi_fetch_A(float *out, int64_t capacity, int *ndim, int64_t *dims);
#define OI_BOUND_avg 5
int oi_fetch_avg(float *out, int64_t capacity, int *ndim, int64_t *dims);
#define OI_BOUND_count 1
int oi_fetch_count(int32_t *out, int64_t capacity, int *ndim, int64_t *dims);
#define OI_BOUND_end 1
int oi_fetch_end(int32_t *out, int64_t capacity, int *ndim, int64_t *dims);
#define OI_BOUND_start 1
int oi_fetch_start(int32_t *out, int64_t capacity, int *ndim, int64_t *dims);
#define OI_BOUND_win 80
int oi_fetch_win(float *out, int64_t capacity, int *ndim, int64_t *dims);
#define OI_BOUND_window 1
int oi_fetch_window(int32_t *out, int64_t capacity, int *ndim, int64_t *dims);
#define OI_BOUND_x 5
int oi_fetch_x(float *out, int64_t capacity, int *ndim, int64_t *dims);
#define OI_BOUND_zero 1
int oi_fetch_zero(int32_t *out, int64_t capacity, int *ndim, int64_t *dims);

#endif
