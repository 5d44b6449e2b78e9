/* mlp.h: API of the program synthesized by OpenInfer-JAX. Generated; do not edit. */
#ifndef MLP_H
#define MLP_H

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

/* x: f32[8, 16] */
int oi_insert_x(const float *data, int ndim, const int64_t *dims);

/* Fetch after a step: `capacity` elements at `out`; `dims` receives up to OI_MAX_DIMS sizes. */
#define OI_BOUND_b1 32
int oi_fetch_b1(float *out, int64_t capacity, int *ndim, int64_t *dims);
#define OI_BOUND_b2 4
int oi_fetch_b2(float *out, int64_t capacity, int *ndim, int64_t *dims);
#define OI_BOUND_h 256
int oi_fetch_h(float *out, int64_t capacity, int *ndim, int64_t *dims);
#define OI_BOUND_w1 512
int oi_fetch_w1(float *out, int64_t capacity, int *ndim, int64_t *dims);
#define OI_BOUND_w2 128
int oi_fetch_w2(float *out, int64_t capacity, int *ndim, int64_t *dims);
#define OI_BOUND_x 128
int oi_fetch_x(float *out, int64_t capacity, int *ndim, int64_t *dims);
#define OI_BOUND_y 32
int oi_fetch_y(float *out, int64_t capacity, int *ndim, int64_t *dims);

#endif
