/* OpenInfer-JAX emitted runtime: tensors, dtype conversions, broadcasting, .oinf loader.
 * Plain C99, libc + libm only. Copied verbatim into every emitted C program. */
#ifndef OI_RUNTIME_H
#define OI_RUNTIME_H

#include <stddef.h>
#include <math.h>
#include <stdint.h>

#define OI_MAX_DIMS 8

/* Error codes shared by the runtime and the generated API (see oi_status_string). */
enum {
    OI_OK = 0,
    OI_ERR_IO = 1,          /* a file (the model, a driver output) cannot be opened, read or written */
    OI_ERR_FORMAT = 2,      /* the model file breaks a rule of docs/oinf.md (see oi_last_error) */
    OI_ERR_MODEL = 3,       /* the model does not match the synthesized graph (sizes, tensors) */
    OI_ERR_NOMEM = 4,       /* malloc failed (model buffer, unpacked tensors) */
    OI_ERR_SHAPE = 5,       /* an inserted tensor or an op's runtime shape exceeds its static bound */
    OI_ERR_CACHE_FULL = 6,  /* a cache table index reached the table's fixed capacity */
    OI_ERR_INDEX = 7,       /* a cache index or slice is out of range */
    OI_ERR_STATE = 8,       /* API misuse: step before init, missing insert, fetch buffer too small */
    OI_ERR_ARGUMENT = 9     /* an invalid argument (NULL pointer, negative dims) */
};

/* A tensor view: `data` points into the arena (or the model), `cap` elements are usable. */
typedef struct {
    void *data;
    int ndim;
    int64_t dims[OI_MAX_DIMS];
    int64_t cap;
} oi_tensor;

/* A block-quantized weight (docs/oinf.md section 5.1) in place in the model: packed codes,
   per-block scales and (q4_1) offsets. Kernels get it as the `data` of an oi_tensor. */
typedef struct {
    const uint8_t *codes;
    const void *scales;
    const void *offsets; /* NULL for symmetric schemes */
} oi_block_tensor;

/* One model tensor as indexed by the loader (data converted to host order, packed unpacked). */
typedef struct {
    const char *name;
    uint32_t name_len;
    uint32_t dtype;
    uint32_t ndim;
    int64_t dims[32];
    int has_data;
    const unsigned char *raw; /* bytes in the file */
    uint64_t nbytes;
    void *host;               /* host-ready elements (NULL until first use) */
    int host_owned;           /* host was allocated (else it aliases the file bytes) */
    /* block-quantized tensors (docs/oinf.md section 5.1): 0 when the tensor is not blocked */
    uint32_t block_size;      /* elements per block along the last axis */
    uint32_t block_value;     /* type code of scales/offsets: 9 (f16) or 10 (f32) */
    oi_block_tensor block;    /* codes, scales, offsets in the file */
} oi_model_tensor;

typedef struct {
    unsigned char *bytes;
    uint64_t size;
    int owns_bytes;
    uint32_t n_sizevars;
    const unsigned char **sizevar_names;
    uint32_t *sizevar_name_lens;
    uint64_t *sizevar_values;
    uint32_t n_tensors;
    oi_model_tensor *tensors;
} oi_model;

const char *oi_last_error(void);
void oi_set_error(const char *fmt, ...);
const char *oi_status_string(int code);

int oi_model_open_file(oi_model *m, const char *path);
int oi_model_open_buffer(oi_model *m, const unsigned char *bytes, uint64_t size);
void oi_model_close(oi_model *m);
int oi_model_sizevar(const oi_model *m, const char *name, uint64_t *value);
/* Host-ready data of tensor `name` checked against dtype and shape; NULL + error when absent. */
int oi_model_get(oi_model *m, const char *name, uint32_t dtype, int ndim, const int64_t *dims,
                 const void **out);
/* A block-quantized model tensor (q8_0: dtype 1, q4_0: 18, q4_1: 21), checked against the
   block layout and shape the program was synthesized for; the codes are never unpacked. */
int oi_model_get_block(oi_model *m, const char *name, uint32_t dtype, uint32_t block_size, uint32_t value_type,
                       int ndim, const int64_t *dims, const oi_block_tensor **out);

/* dtype helpers */
float oi_f16_to_f32(uint16_t h);
/* The same conversion inline, for kernels that widen every element they read (attention
   over an f16 cache): the hardware's where the compiler has _Float16 (exact for every
   value; a signaling NaN comes back quiet), else the call. */
static inline float oi_f16_to_f32_inline(uint16_t h) {
#if defined(__FLT16_MANT_DIG__) && !defined(OI_NO_FLOAT16)
    _Float16 v;
    __builtin_memcpy(&v, &h, 2);
    return (float)v;
#else
    return oi_f16_to_f32(h);
#endif
}
uint16_t oi_f32_to_f16(float f);
float oi_bf16_to_f32(uint16_t h);
uint16_t oi_f32_to_bf16(float f);
float oi_f8_to_f32(uint8_t h);
uint8_t oi_f32_to_f8(float f);
/* Narrow floats, one byte per element (f4e2m1 in the low 4 bits): `kind` is an OI_NARROW_*. */
enum { OI_NARROW_E4M3FN, OI_NARROW_E4M3FNUZ, OI_NARROW_E5M2FNUZ, OI_NARROW_F4E2M1, OI_NARROW_E8M0 };
float oi_narrow_to_f32(uint8_t code, int kind);
/* Nearest even (saturate: clamp to the finite range first; else out of range gives NaN,
 * f4e2m1 clamps anyway); e8m0 takes the exponent of (float)x rounded by `mode`
 * (0 down, 1 up when any mantissa bit is set, 2 half up on the mantissa). */
uint8_t oi_narrow_from_f64(double x, int kind, int saturate, int mode);

/* Broadcast iteration over up to 4 inputs: `off[k]` is input k's element offset. */
typedef struct {
    int ndim;
    int n_in;
    int64_t numel;
    int flat;
    int64_t dims[OI_MAX_DIMS];
    int64_t idx[OI_MAX_DIMS];
    int64_t stride[4][OI_MAX_DIMS];
    int64_t off[4];
    /* Row broadcasting (a bias over rows): when every input is either the whole output or
       the same trailing block of `row` elements, element (r, j) of input k is at r * rs[k] + j. */
    int64_t row;
    int64_t rs[4];
} oi_iter;

int oi_iter_init(oi_iter *it, oi_tensor *out, int n_in, const oi_tensor *const *in, int broadcast);
void oi_iter_next(oi_iter *it);

int64_t oi_numel(const oi_tensor *t);
int oi_set_shape(oi_tensor *t, int ndim, const int64_t *dims);
int oi_copy(oi_tensor *dst, const oi_tensor *src, size_t elem);
/* Set the shape and zero the elements (an `assign`). */
int oi_zero(oi_tensor *t, int ndim, const int64_t *dims, size_t elem);
/* Copy `src` into a persistent variable after checking it has the declared shape. */
int oi_write_whole(oi_tensor *dst, const oi_tensor *src, int ndim, const int64_t *dims, size_t elem);

/* The undo journal of one step: table entries that existed before the step are saved here
   before they are overwritten, so a failed step can put them back (docs/synthesis.md). */
typedef struct {
    unsigned char *buf;
    size_t cap, used;
    int overflow;
} oi_journal;

/* A persistent cache table preallocated to its capacity: storage [caps..., entry]. */
typedef struct {
    int n_idx;
    const int64_t *caps;
    int64_t *counts;
    int entry_nd;
    const int64_t *entry;
    size_t elem;
    void *data;
    const char *name;
    oi_journal *journal;          /* NULL: no undo */
    int64_t saved[OI_MAX_DIMS];   /* counts at the start of the step */
    /* @auto_dim tables: per index, -1 for a table axis or the entry dim its count widens
       (storage [caps of the table axes..., entry dims + caps of their auto axes]); NULL for
       plain tables, whose storage is [caps..., entry]. */
    const int *autod;
} oi_table;

/* Start a step: remember the counts. Roll back a failed step: replay `j` backwards, zero the
   entries appended during the step (storage beyond the counts is always zero), restore the
   counts. Returns 0 when the journal overflowed (the state could not be fully restored). */
void oi_table_begin(oi_table *t);
/* Empty a table (oi_init, oi_reset): zero the entries its counts cover (only those can hold
   data; the rest of its storage, never written, is not touched: its pages stay unallocated
   in a fresh arena), then the counts. `nbytes`: its storage, zeroed whole for @auto_dim
   tables. */
void oi_table_clear(oi_table *t, size_t nbytes);
int oi_journal_rollback(oi_journal *j, oi_table *const *tables, int n_tables);

/* One index of a cache access: a scalar (kind 0) or a slice with optional bounds (kind 1). */
typedef struct {
    int kind;
    int has_lo, has_hi;
    int64_t lo, hi;
} oi_sel;

/* Between steps (oi_set_persistent): the table holds `counts[a]` entries per table axis,
   copied from `data` laid out [counts..., entry]; the rest of its storage is zero. Not
   journaled. OI_ERR_CACHE_FULL when a count exceeds the axis' capacity, OI_ERR_ARGUMENT for
   a negative count or an @auto_dim table (the simulator cannot load those either). */
int oi_table_load(oi_table *t, const void *data, const int64_t *counts);

int oi_table_read(oi_table *t, const oi_sel *sel, int nsel, oi_tensor *dst);
/* The same entries for a reader that only reads them (an attention kernel): `view` points
   into the table's storage when they are contiguous there, else they are copied into
   `fallback` (as oi_table_read) and `view` is a copy of it. */
int oi_table_view(oi_table *t, const oi_sel *sel, int nsel, oi_tensor *fallback, oi_tensor *view);
int oi_table_write(oi_table *t, const oi_sel *sel, int nsel, const oi_tensor *src);
int oi_table_reset(oi_table *t, const oi_sel *sel, int nsel);
/* Element 0 of a buffer of dtype `code`, as an integer / a double. */
int64_t oi_get_i64(const void *data, uint32_t code);
double oi_get_f64(const void *data, uint32_t code);
void oi_add_scalar(void *data, uint32_t code, int64_t delta);

/* An op param given as a variable (`value=alpha`), read when the op runs: the scalar as a
   double and, for integer and bool variables, exactly (`i`; `u64` marks an unsigned 64-bit
   value whose bits are in `i`). */
typedef struct {
    double f;
    int64_t i;
    int is_int, u64;
} oi_param;

/* The scalar variable `t` of dtype `code` as a param; OI_ERR_SHAPE unless it has one element. */
int oi_param_of(const oi_tensor *t, uint32_t code, oi_param *out);
/* A loop index or other int64 as a param. */
oi_param oi_param_i64(int64_t v);
/* An integer-valued param (fill/pad value, div_by_zero_mask of an integer op): an integer in
   [lo, hi] (t1 also excludes 0 when `nonzero`), else OI_ERR_ARGUMENT naming `what`. The value
   is returned as int64 bits (an unsigned value above INT64_MAX wraps, and is cast back). */
int oi_param_int(oi_param p, int64_t lo, uint64_t hi, int nonzero, const char *what, int64_t *out);
/* A float param that must be a number (clamp bounds; NaN cannot be rounded to an integer). */
int oi_param_number(oi_param p, const char *what);

/* Clamp bounds of an integer op from a float (the registry's int_bounds): rounded inward,
   ceil for a lower bound and floor for an upper one, then limited to the dtype's [lo, hi]. */
static inline int64_t oi_sbound(double v, int upper, int64_t lo, int64_t hi) {
    double r = upper ? floor(v) : ceil(v);
    if (!(r > (double)lo)) return lo;
    if (r >= (double)hi) return hi;
    return (int64_t)r;
}
static inline uint64_t oi_ubound(double v, int upper, uint64_t hi) {
    double r = upper ? floor(v) : ceil(v);
    if (!(r > 0.0)) return 0;
    if (r >= (double)hi) return hi;
    return (uint64_t)r;
}

/* Reductions: the output iterates the kept axes, `oi_red_offset` walks the reduced ones. */
typedef struct {
    int n_keep, n_red;
    int64_t keep_dims[OI_MAX_DIMS], keep_stride[OI_MAX_DIMS];
    int64_t red_dims[OI_MAX_DIMS], red_stride[OI_MAX_DIMS];
    int64_t out_n, red_n;
} oi_red_plan;

int oi_red_init(oi_red_plan *p, oi_tensor *out, const oi_tensor *in, unsigned axes_mask, int keepdims);
int64_t oi_red_offset(const oi_red_plan *p, int64_t r);
int64_t oi_keep_offset(const oi_red_plan *p, int64_t q);

/* Scalar helpers with the registry's semantics (NaN passes clamps, integer division wraps). */
static inline float oi_nan_clamp_float(float y, float lo, float hi) {
    /* min(max(y, lo), hi) as the reference: with lo > hi every value becomes hi */
    float t = y < lo ? lo : y;
    return y != y ? y : (t > hi ? hi : t);
}
static inline double oi_nan_clamp_double(double y, double lo, double hi) {
    /* min(max(y, lo), hi) as the reference: with lo > hi every value becomes hi */
    double t = y < lo ? lo : y;
    return y != y ? y : (t > hi ? hi : t);
}
/* a * b + c with the product rounded to double first, as the reference and the other
 * backends compute an f64 fma: the volatile store keeps the compiler from contracting the
 * two into one fused operation (C fma() would round once). For f32 operands widened to
 * double the product is exact and this equals a fused result. */
static inline double oi_mul_add_double(double a, double b, double c) {
    volatile double product = a * b;
    return product + c;
}
static inline int64_t oi_min_int64_t(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t oi_max_int64_t(int64_t a, int64_t b) { return a > b ? a : b; }
static inline uint64_t oi_min_uint64_t(uint64_t a, uint64_t b) { return a < b ? a : b; }
static inline uint64_t oi_max_uint64_t(uint64_t a, uint64_t b) { return a > b ? a : b; }
/* A ternary (t2/t1) store: the value clipped to [-1, 1], as the registry's references do. */
static inline int8_t oi_ternary(int64_t v) { return (int8_t)(v < 0 ? -1 : (v > 0 ? 1 : 0)); }
static inline int64_t oi_tdiv(int64_t a, int64_t b, int64_t mask) {
    if (b == 0) return mask;
    if (b == -1) return (int64_t)(0 - (uint64_t)a); /* INT64_MIN / -1 wraps like the reference */
    return a / b;
}
static inline int64_t oi_trem(int64_t a, int64_t b) {
    if (b == 0 || b == -1) return 0;
    return a % b;
}
static inline int64_t oi_floordiv(int64_t a, int64_t b, int64_t mask) {
    int64_t q, r;
    if (b == 0) return mask;
    q = oi_tdiv(a, b, mask);
    r = oi_trem(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) q -= 1;
    return q;
}
/* Fused multiply-add where the target has a fast one (C99's FP_FAST_FMA[F]): ISO C modes
   do not contract a * b + c on their own, which would halve the matmul's throughput. */
#if defined(FP_FAST_FMAF)
#define OI_FMAF(a, b, c) fmaf((a), (b), (c))
#else
#define OI_FMAF(a, b, c) ((a) * (b) + (c))
#endif
#if defined(FP_FAST_FMA)
#define OI_FMA(a, b, c) fma((a), (b), (c))
#else
#define OI_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* GCC on AVX-512 targets defaults to 256-bit vectors; the matmul kernel asks for 512. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__AVX512F__)
#define OI_WIDE_SIMD __attribute__((target("prefer-vector-width=512")))
#else
#define OI_WIDE_SIMD
#endif

/* erf for f32 without a libm call, so GELU loops vectorize: x clamped to [-4, 4] (erf is
   +-1 to f32 precision beyond), then an odd rational function of x; max abs error 4.2e-7
   (the rational approximation Eigen and XLA use for f32). NaN propagates. */
static inline float oi_erf_f32(float x) {
    float c = x < -4.0f ? -4.0f : (x > 4.0f ? 4.0f : x), x2 = c * c, p, q;
    p = -2.72614225801306e-10f;
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 - 2.10102402082508e-06f;
    p = p * x2 - 5.69250639462346e-05f;
    p = p * x2 - 7.34990630326855e-04f;
    p = p * x2 - 2.95459980854025e-03f;
    p = p * x2 - 1.60960333262415e-02f;
    q = -1.45660718464996e-05f;
    q = q * x2 - 2.13374055278905e-04f;
    q = q * x2 - 1.68282697438203e-03f;
    q = q * x2 - 7.37332916720468e-03f;
    q = q * x2 - 1.42647390514189e-02f;
    return c * p / q;
}

/* An integral double wrapped modulo 2**64 (non-finite: 0), as a non-saturating cast does. */
static inline uint64_t oi_f64_wrap_u64(double r) {
    double reduced, upper, lower;
    if (!(r - r == 0)) return 0;
    reduced = fmod(r, 18446744073709551616.0);
    upper = floor(reduced / 4294967296.0);
    lower = reduced - upper * 4294967296.0;
    return ((uint64_t)(int64_t)upper << 32) + (uint64_t)(int64_t)lower;
}
static inline uint64_t oi_popcount(uint64_t v) {
    uint64_t n = 0;
    while (v) { n += v & 1u; v >>= 1; }
    return n;
}

#ifdef OI_TRACE
/* The trace you can diff (docs/synthesis.md): built with -DOI_TRACE, the program writes one
   JSON line per node that writes a variable, in the simulator's trace schema with a summary
   of the value (`openinfer trace-diff sim.json c.json`). To $OI_TRACE_FILE, else stderr.
   Without OI_TRACE none of this is compiled. */
typedef struct {
    const char *head;         /* the fixed fields, as JSON members */
    int nscope;               /* enclosing loop indices the simulator reports */
    const char *const *keys;  /* their names, as JSON strings */
    uint32_t code;            /* dtype of the value */
    uint32_t elem;            /* bytes per element in memory */
    int is_float;
    const char *dtype;        /* its short name, as a JSON string */
} oi_trace_site;

void oi_trace_node(const oi_trace_site *site, int64_t step, const int64_t *scope, const oi_tensor *value);
void oi_trace_close(void);
#endif

#endif
