/* OpenInfer-JAX emitted runtime: see oi_runtime.h. The .oinf loader enforces the rules
 * R1..R37 of docs/oinf.md (each check cites its rule), bounded on hostile input: counts and
 * lengths are checked against the bytes available before any loop or allocation, and sizes
 * are computed with overflow checks. */
#if defined(__linux__) && !defined(_DEFAULT_SOURCE)
#define _DEFAULT_SOURCE /* madvise under -std=c99 (oi_hint_huge_pages) */
#endif
#include "oi_runtime.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

static char oi_error_buf[256];

const char *oi_last_error(void) { return oi_error_buf; }

void oi_set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(oi_error_buf, sizeof oi_error_buf, fmt, ap);
    va_end(ap);
}

const char *oi_status_string(int code) {
    switch (code) {
    case OI_OK: return "ok";
    case OI_ERR_IO: return "a file cannot be opened, read or written";
    case OI_ERR_FORMAT: return "invalid .oinf file";
    case OI_ERR_MODEL: return "the model does not match the synthesized graph";
    case OI_ERR_NOMEM: return "out of memory";
    case OI_ERR_SHAPE: return "a shape exceeds its static bound";
    case OI_ERR_CACHE_FULL: return "a cache table is full";
    case OI_ERR_INDEX: return "a cache index is out of range";
    case OI_ERR_STATE: return "invalid call sequence";
    case OI_ERR_ARGUMENT: return "invalid argument";
    default: return "unknown error";
    }
}

/* ---- little-endian reads (no host-order assumption) ---------------------------------- */
static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t rd64(const unsigned char *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

/* ---- dtype table (codes of docs/oinf.md section 3) ----------------------------------- */
/* bits per element on disk; 0 = not a tensor type */
static unsigned oi_bits(uint32_t code) {
    static const unsigned char bits[26] = {0, 8, 16, 32, 64, 8, 16, 32, 64, 16, 32, 64, 8,
                                           0, 0, 0, 16, 8, 4, 2, 1, 4, 2, 1, 2, 1};
    return code < 26 ? bits[code] : 0;
}
static int oi_is_packed(uint32_t code) { return code >= 18 && code <= 25; }
static int oi_packed_signed(uint32_t code) { return code >= 18 && code <= 20; }

/* ---- float conversions (round to nearest even) ----------------------------------------- */
static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float oi_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
    if (exp == 0x1f) return u2f(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        float v = ldexpf((float)man, -24);
        return sign ? -v : v;
    }
    return u2f(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t oi_f32_to_f16(float f) {
    uint32_t u = f2u(f), sign = (u >> 16) & 0x8000u;
    int32_t exp = (int32_t)((u >> 23) & 0xff);
    uint32_t man = u & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    exp -= 112;
    if (exp >= 0x1f) return (uint16_t)(sign | 0x7c00u);
    if (exp <= 0) {
        uint32_t full, shift, half, rest, q;
        if (exp < -10) return (uint16_t)sign;
        full = man | 0x800000u;
        shift = (uint32_t)(14 - exp);
        q = full >> shift;
        rest = full & ((1u << shift) - 1);
        half = 1u << (shift - 1);
        if (rest > half || (rest == half && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    {
        uint32_t q = ((uint32_t)exp << 10) | (man >> 13), rest = man & 0x1fffu;
        if (rest > 0x1000u || (rest == 0x1000u && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
}

float oi_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t oi_f32_to_bf16(float f) {
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* e5m2 is the upper byte of an f16 */
float oi_f8_to_f32(uint8_t h) { return oi_f16_to_f32((uint16_t)((uint16_t)h << 8)); }

uint8_t oi_f32_to_f8(float f) {
    uint16_t h;
    uint32_t rest, q;
    if (f != f) return 0x7d;
    h = oi_f32_to_f16(f);
    if ((h & 0x7c00u) == 0x7c00u) return (uint8_t)(h >> 8);
    q = h >> 8;
    rest = h & 0xffu;
    if (rest > 0x80u || (rest == 0x80u && (q & 1))) q++;
    /* rounding up past the largest finite value gives inf, as it should */
    return (uint8_t)q;
}

/* ---- narrow floats (ONNX's float8 variants, float4 e2m1, e8m0 scales) ---------------------- */
typedef struct {
    int ebits, mbits, bias;
    double max; /* largest finite value */
} oi_narrow_format;

static const oi_narrow_format oi_narrow_formats[] = {
    {4, 3, 7, 448.0},    /* e4m3fn: S.1111.111 is NaN, no inf */
    {4, 3, 8, 240.0},    /* e4m3fnuz: 0x80 is NaN, no -0, no inf */
    {5, 2, 16, 57344.0}, /* e5m2fnuz: likewise */
    {2, 1, 1, 6.0},      /* f4e2m1: no NaN, no inf */
};

float oi_narrow_to_f32(uint8_t code, int kind) {
    const oi_narrow_format *f;
    int sign, e, m, bits;
    double v;
    if (kind == OI_NARROW_E8M0) return code == 0xFF ? NAN : ldexpf(1.0f, (int)code - 127);
    f = &oi_narrow_formats[kind];
    bits = f->ebits + f->mbits;
    if (kind == OI_NARROW_F4E2M1) code &= 0x0F;
    if ((kind == OI_NARROW_E4M3FNUZ || kind == OI_NARROW_E5M2FNUZ) && code == 0x80) return NAN;
    if (kind == OI_NARROW_E4M3FN && (code & 0x7F) == 0x7F) return NAN;
    sign = (code >> bits) & 1;
    e = (code >> f->mbits) & ((1 << f->ebits) - 1);
    m = code & ((1 << f->mbits) - 1);
    v = e == 0 ? ldexp((double)m, 1 - f->bias - f->mbits)
               : ldexp(1.0 + ldexp((double)m, -f->mbits), e - f->bias);
    return (float)(sign ? -v : v);
}

static uint8_t oi_e8m0_from_f32(float x, int saturate, int mode) {
    uint32_t bits;
    uint32_t exponent;
    int up = 0;
    memcpy(&bits, &x, 4);
    exponent = (bits >> 23) & 0xFFu;
    if (mode == 1) up = (bits & 0x7FFFFFu) != 0;
    else if (mode == 2) up = (bits & 0x400000u) && ((bits & 0x3FFFFFu) || exponent > 0);
    if (exponent == 0xFFu || (saturate && exponent == 0xFEu)) up = 0;
    return (uint8_t)(exponent + (uint32_t)up);
}

uint8_t oi_narrow_from_f64(double x, int kind, int saturate, int mode) {
    const oi_narrow_format *f;
    int bits, exponent, negative, emin, fnuz;
    double a, quantum, r;
    uint8_t magnitude;
    if (kind == OI_NARROW_E8M0) return oi_e8m0_from_f32((float)x, saturate, mode);
    f = &oi_narrow_formats[kind];
    bits = f->ebits + f->mbits;
    fnuz = kind == OI_NARROW_E4M3FNUZ || kind == OI_NARROW_E5M2FNUZ;
    negative = signbit(x) != 0;
    if (x != x) {
        if (kind == OI_NARROW_F4E2M1) return 0x08; /* no NaN: -0, as ml_dtypes */
        return fnuz ? 0x80 : 0x7F;
    }
    a = fabs(x);
    if (saturate || kind == OI_NARROW_F4E2M1) {
        if (a > f->max) a = f->max;
    } else if (isinf(a)) {
        return fnuz ? 0x80 : 0x7F;
    }
    emin = 1 - f->bias; /* the smallest normal exponent */
    if (a == 0.0) {
        magnitude = 0;
    } else {
        frexp(a, &exponent); /* a = g * 2^exponent, g in [0.5, 1) */
        exponent -= 1;
        if (exponent < emin) exponent = emin;
        quantum = ldexp(1.0, exponent - f->mbits);
        r = nearbyint(a / quantum) * quantum; /* nearest even: the default rounding mode */
        if (r > f->max) {
            if (kind == OI_NARROW_F4E2M1) r = f->max;
            else return fnuz ? 0x80 : 0x7F;
        }
        if (r < ldexp(1.0, emin)) {
            magnitude = (uint8_t)(r / ldexp(1.0, emin - f->mbits));
        } else {
            frexp(r, &exponent);
            exponent -= 1;
            magnitude = (uint8_t)(((exponent + f->bias) << f->mbits) |
                                  (int)((ldexp(r, -exponent) - 1.0) * (double)(1 << f->mbits)));
        }
    }
    if (!negative || (fnuz && magnitude == 0)) return magnitude;
    return (uint8_t)(magnitude | (1u << bits));
}

/* ---- tensors and broadcasting --------------------------------------------------------- */
int64_t oi_numel(const oi_tensor *t) {
    int64_t n = 1;
    int i;
    for (i = 0; i < t->ndim; i++) n *= t->dims[i];
    return n;
}

int oi_set_shape(oi_tensor *t, int ndim, const int64_t *dims) {
    int64_t n = 1;
    int i;
    if (ndim < 0 || ndim > OI_MAX_DIMS) {
        oi_set_error("rank %d exceeds OI_MAX_DIMS=%d", ndim, OI_MAX_DIMS);
        return OI_ERR_SHAPE;
    }
    for (i = 0; i < ndim; i++) {
        if (dims[i] < 0) {
            oi_set_error("negative dimension %lld", (long long)dims[i]);
            return OI_ERR_ARGUMENT;
        }
        n *= dims[i];
    }
    if (n > t->cap) {
        oi_set_error("%lld elements exceed the static bound of %lld", (long long)n, (long long)t->cap);
        return OI_ERR_SHAPE;
    }
    t->ndim = ndim;
    for (i = 0; i < ndim; i++) t->dims[i] = dims[i];
    return OI_OK;
}

int oi_copy(oi_tensor *dst, const oi_tensor *src, size_t elem) {
    int rc;
    if (dst == src) return OI_OK;
    rc = oi_set_shape(dst, src->ndim, src->dims);
    if (rc) return rc;
    memmove(dst->data, src->data, (size_t)oi_numel(src) * elem);
    return OI_OK;
}

int oi_zero(oi_tensor *t, int ndim, const int64_t *dims, size_t elem) {
    int rc = oi_set_shape(t, ndim, dims);
    if (rc) return rc;
    memset(t->data, 0, (size_t)oi_numel(t) * elem);
    return OI_OK;
}

int oi_write_whole(oi_tensor *dst, const oi_tensor *src, int ndim, const int64_t *dims, size_t elem) {
    int d;
    if (src->ndim != ndim) {
        oi_set_error("value rank %d differs from the declared rank %d", src->ndim, ndim);
        return OI_ERR_SHAPE;
    }
    for (d = 0; d < ndim; d++)
        if (src->dims[d] != dims[d]) {
            oi_set_error("value dim %d is %lld, declared %lld", d, (long long)src->dims[d], (long long)dims[d]);
            return OI_ERR_SHAPE;
        }
    return oi_copy(dst, src, elem);
}

int oi_iter_init(oi_iter *it, oi_tensor *out, int n_in, const oi_tensor *const *in, int broadcast) {
    int64_t dims[OI_MAX_DIMS];
    int ndim = 0, k, a, rc;
    for (k = 0; k < n_in; k++)
        if (in[k]->ndim > ndim) ndim = in[k]->ndim;
    for (a = 0; a < ndim; a++) {
        int64_t d = 1;
        for (k = 0; k < n_in; k++) {
            int ax = a - (ndim - in[k]->ndim);
            int64_t dk = ax >= 0 ? in[k]->dims[ax] : 1;
            if (dk == 1) continue;
            if (d != 1 && d != dk) {
                oi_set_error("shapes do not broadcast (axis %d: %lld vs %lld)", a, (long long)d, (long long)dk);
                return OI_ERR_SHAPE;
            }
            d = dk;
        }
        dims[a] = d;
    }
    if (!broadcast)
        for (k = 1; k < n_in; k++) {
            int same = in[k]->ndim == in[0]->ndim;
            for (a = 0; same && a < in[0]->ndim; a++) same = in[k]->dims[a] == in[0]->dims[a];
            if (!same) {
                oi_set_error("input %d's shape differs from input 0's and the op does not broadcast", k);
                return OI_ERR_SHAPE;
            }
        }
    rc = oi_set_shape(out, ndim, dims);
    if (rc) return rc;
    it->ndim = ndim;
    it->n_in = n_in;
    it->numel = oi_numel(out);
    it->flat = 1;
    for (k = 0; k < n_in; k++) {
        int64_t s = 1;
        if (oi_numel(in[k]) != it->numel) it->flat = 0;
        for (a = ndim - 1; a >= 0; a--) {
            int ax = a - (ndim - in[k]->ndim);
            int64_t dk = ax >= 0 ? in[k]->dims[ax] : 1;
            it->stride[k][a] = dk == 1 ? 0 : s;
            s *= dk;
        }
        it->off[k] = 0;
    }
    for (a = 0; a < ndim; a++) {
        it->dims[a] = dims[a];
        it->idx[a] = 0;
    }
    it->row = 0;
    if (!it->flat && it->numel > 0) {
        int64_t row = 0;
        int ok = 1;
        for (k = 0; k < n_in && ok; k++) {
            int lead = 0, d;
            int64_t nk = oi_numel(in[k]);
            if (nk == it->numel) { it->rs[k] = -1; continue; }
            while (lead < in[k]->ndim && in[k]->dims[lead] == 1) lead++;
            for (d = lead; d < in[k]->ndim && ok; d++)
                if (in[k]->dims[d] != dims[ndim - (in[k]->ndim - d)]) ok = 0;
            if (row && nk != row) ok = 0;
            row = nk;
            it->rs[k] = 0;
        }
        if (ok && row > 0) {
            it->row = row;
            for (k = 0; k < n_in; k++) it->rs[k] = it->rs[k] < 0 ? row : 0;
        }
    }
    return OI_OK;
}

void oi_iter_next(oi_iter *it) {
    int a, k;
    for (a = it->ndim - 1; a >= 0; a--) {
        it->idx[a]++;
        for (k = 0; k < it->n_in; k++) it->off[k] += it->stride[k][a];
        if (it->idx[a] < it->dims[a]) return;
        for (k = 0; k < it->n_in; k++) it->off[k] -= it->stride[k][a] * it->dims[a];
        it->idx[a] = 0;
    }
}

int oi_red_init(oi_red_plan *p, oi_tensor *out, const oi_tensor *in, unsigned axes_mask, int keepdims) {
    int64_t stride[OI_MAX_DIMS], dims[OI_MAX_DIMS], s = 1;
    int d, nd = 0;
    for (d = in->ndim - 1; d >= 0; d--) { stride[d] = s; s *= in->dims[d]; }
    p->n_keep = p->n_red = 0;
    p->out_n = p->red_n = 1;
    for (d = 0; d < in->ndim; d++) {
        if (axes_mask & (1u << d)) {
            p->red_dims[p->n_red] = in->dims[d];
            p->red_stride[p->n_red++] = stride[d];
            p->red_n *= in->dims[d];
            if (keepdims) dims[nd++] = 1;
        } else {
            p->keep_dims[p->n_keep] = in->dims[d];
            p->keep_stride[p->n_keep++] = stride[d];
            p->out_n *= in->dims[d];
            dims[nd++] = in->dims[d];
        }
    }
    return oi_set_shape(out, nd, dims);
}

static int64_t decode(int n, const int64_t *dims, const int64_t *stride, int64_t flat) {
    int64_t off = 0;
    int d;
    for (d = n - 1; d >= 0; d--) {
        off += (flat % dims[d]) * stride[d];
        flat /= dims[d];
    }
    return off;
}

int64_t oi_red_offset(const oi_red_plan *p, int64_t r) { return decode(p->n_red, p->red_dims, p->red_stride, r); }
int64_t oi_keep_offset(const oi_red_plan *p, int64_t q) { return decode(p->n_keep, p->keep_dims, p->keep_stride, q); }

/* ---- cache tables (semantics of docs/semantics.md; sim/caches.py is the reference) ------ */
/* The counts after a selection: a scalar index grows its axis (reads too: reading entry n of
   n entries creates it), within the axis's capacity; a write's slice of a table axis with an
   explicit non-negative end grows the axis to that end (a range write: a prefill's keys). */
static int grow_to(const oi_table *t, int a, int64_t need, int64_t *counts) {
    if (need > t->caps[a]) {
        oi_set_error("cache table %s: index %lld exceeds the capacity %lld of axis %d", t->name,
                     (long long)(need - 1), (long long)t->caps[a], a);
        return OI_ERR_CACHE_FULL;
    }
    if (need > counts[a]) counts[a] = need;
    return OI_OK;
}

static int grown_counts(const oi_table *t, const oi_sel *sel, int nsel, int write, int64_t *counts) {
    int a;
    if (nsel && nsel != t->n_idx) {
        oi_set_error("cache table %s takes %d indices, got %d", t->name, t->n_idx, nsel);
        return OI_ERR_INDEX;
    }
    for (a = 0; a < t->n_idx; a++) counts[a] = t->counts[a];
    for (a = 0; a < nsel; a++)
        if (sel[a].kind == 0) {
            int64_t pos = sel[a].lo < 0 ? sel[a].lo + t->counts[a] : sel[a].lo;
            if (pos < 0) {
                oi_set_error("cache table %s: index %lld is before the first entry", t->name, (long long)sel[a].lo);
                return OI_ERR_INDEX;
            }
            if (grow_to(t, a, pos + 1, counts) != OI_OK) return OI_ERR_CACHE_FULL;
        } else if (write && sel[a].has_hi && sel[a].hi >= 0 && !(t->autod && t->autod[a] >= 0)) {
            if (grow_to(t, a, sel[a].hi, counts) != OI_OK) return OI_ERR_CACHE_FULL;
        }
    return OI_OK;
}

static int table_plan(oi_table *t, const oi_sel *sel, int nsel, int grow, int write, int64_t *start,
                      int64_t *size, int *kept) {
    int64_t counts[OI_MAX_DIMS];
    int a;
    {
        int rc = grown_counts(t, sel, nsel, write, counts);
        if (rc != OI_OK) return rc;
    }
    for (a = 0; a < t->n_idx; a++) {
        if (nsel && sel[a].kind == 0) {
            int64_t pos = sel[a].lo < 0 ? sel[a].lo + counts[a] : sel[a].lo;
            start[a] = pos;
            size[a] = 1;
            kept[a] = 0;
        } else {
            int64_t n = counts[a];
            int64_t lo = (nsel && sel[a].has_lo) ? sel[a].lo : 0, hi = (nsel && sel[a].has_hi) ? sel[a].hi : n;
            if (lo < 0) lo += n;
            if (hi < 0) hi += n;
            if (!(0 <= lo && lo <= hi && hi <= n)) {
                oi_set_error("cache table %s: slice resolved to %lld..%lld is out of range for %lld entries", t->name,
                             (long long)lo, (long long)hi, (long long)n);
                return OI_ERR_INDEX;
            }
            start[a] = lo;
            size[a] = hi - lo;
            kept[a] = 1;
        }
    }
    if (grow)
        for (a = 0; a < t->n_idx; a++) t->counts[a] = counts[a];
    return OI_OK;
}


typedef struct {
    oi_table *table;
    size_t offset, nbytes;
} oi_record;

static void journal_save(oi_table *t, size_t offset, size_t nbytes) {
    oi_journal *j = t->journal;
    size_t need = sizeof(oi_record) + nbytes;
    oi_record rec;
    if (!j || j->overflow) return;
    need = (need + 7u) & ~(size_t)7u;
    if (j->used + need > j->cap) { j->overflow = 1; return; }
    rec.table = t;
    rec.offset = offset;
    rec.nbytes = nbytes;
    memcpy(j->buf + j->used, &rec, sizeof rec);
    memcpy(j->buf + j->used + sizeof rec, (unsigned char *)t->data + offset, nbytes);
    j->used += need;
}

static int existed(const oi_table *t, const int64_t *pos) {
    int a;
    for (a = 0; a < t->n_idx; a++)
        if (pos[a] >= t->saved[a]) return 0;
    return 1;
}

/* ---- @auto_dim tables: the k-th auto index widens entry dim k by its count ------------- */
/* Storage dims of an auto table for per-index sizes `n` (caps: the storage; counts: the
   logical extent), as in sim/caches.py `_storage_shape`. Returns the rank. */
static int auto_dims(const oi_table *t, const int64_t *n, int64_t *dims) {
    int a, d, nd = 0;
    for (a = 0; a < t->n_idx; a++)
        if (t->autod[a] < 0) dims[nd++] = n[a];
    for (d = 0; d < t->entry_nd; d++) {
        int64_t extent = t->entry[d];
        for (a = 0; a < t->n_idx; a++)
            if (t->autod[a] == d) extent += n[a];
        dims[nd++] = extent;
    }
    return nd;
}

/* The block a selection of an auto table covers, per storage dim; counts grow like
   table_plan's (a scalar index on any axis, the auto ones included). */
static int auto_plan(oi_table *t, const oi_sel *sel, int nsel, int grow, int write, int64_t *start,
                     int64_t *size, int *kept, int *rank) {
    int64_t counts[OI_MAX_DIMS];
    int a, b, nd = 0;
    {
        int rc = grown_counts(t, sel, nsel, write, counts);
        if (rc != OI_OK) return rc;
    }
    for (a = 0; a < t->n_idx + t->entry_nd; a++) {
        /* storage dims in order: the table axes, then the entry dims (widened by auto axes) */
        int axis = -1;
        int64_t extent;
        if (a < t->n_idx) {
            if (t->autod[a] >= 0) continue;
            axis = a;
            extent = counts[a];
        } else {
            extent = t->entry[a - t->n_idx];
            for (b = 0; b < t->n_idx; b++)
                if (t->autod[b] == a - t->n_idx) { axis = b; extent += counts[b]; }
        }
        kept[nd] = 1;
        if (axis < 0 || (nsel && sel[axis].kind == 0)) {
            start[nd] = 0;
            size[nd] = extent;
            if (axis >= 0 && t->autod[axis] < 0) { /* a scalar table index drops its axis */
                start[nd] = sel[axis].lo < 0 ? sel[axis].lo + counts[axis] : sel[axis].lo;
                size[nd] = 1;
                kept[nd] = 0;
            }
        } else {
            int64_t lo = (nsel && sel[axis].has_lo) ? sel[axis].lo : 0;
            int64_t hi = (nsel && sel[axis].has_hi) ? sel[axis].hi : extent;
            if (lo < 0) lo += extent;
            if (hi < 0) hi += extent;
            if (!(0 <= lo && lo <= hi && hi <= extent)) {
                oi_set_error("cache table %s: slice resolved to %lld..%lld is out of range for %lld entries",
                             t->name, (long long)lo, (long long)hi, (long long)extent);
                return OI_ERR_INDEX;
            }
            start[nd] = lo;
            size[nd] = hi - lo;
        }
        nd++;
    }
    *rank = nd;
    if (grow)
        for (a = 0; a < t->n_idx; a++) t->counts[a] = counts[a];
    return OI_OK;
}

/* Copy a block row by row (mode 0: table -> buf, 1: buf -> table, 2: zero); writes journal
   every row they overwrite, so a rollback restores the storage exactly. */
static void auto_block(oi_table *t, const int64_t *start, const int64_t *size, unsigned char *buf, int mode) {
    int64_t sdims[2 * OI_MAX_DIMS], idx[2 * OI_MAX_DIMS], rows = 1, r;
    int nd = auto_dims(t, t->caps, sdims), a;
    size_t row = (size_t)(nd ? size[nd - 1] : 1) * t->elem;
    for (a = 0; a + 1 < nd; a++) { rows *= size[a]; idx[a] = 0; }
    if (nd && size[nd - 1] == 0) return;
    for (r = 0; r < rows; r++) {
        int64_t off = 0;
        unsigned char *slot;
        for (a = 0; a < nd; a++) off = off * sdims[a] + start[a] + (a + 1 < nd ? idx[a] : 0);
        slot = (unsigned char *)t->data + (size_t)off * t->elem;
        if (mode != 0) journal_save(t, (size_t)off * t->elem, row);
        if (mode == 0) memcpy(buf + (size_t)r * row, slot, row);
        else if (mode == 1) memcpy(slot, buf + (size_t)r * row, row);
        else memset(slot, 0, row);
        for (a = nd - 2; a >= 0; a--) { if (++idx[a] < size[a]) break; idx[a] = 0; }
    }
}

static int auto_read(oi_table *t, const oi_sel *sel, int nsel, oi_tensor *dst) {
    int64_t start[2 * OI_MAX_DIMS], size[2 * OI_MAX_DIMS], dims[OI_MAX_DIMS];
    int kept[2 * OI_MAX_DIMS], nd = 0, a, rc, rank;
    rc = auto_plan(t, sel, nsel, 1, 0, start, size, kept, &rank);
    if (rc) return rc;
    for (a = 0; a < rank; a++)
        if (kept[a]) dims[nd++] = size[a];
    rc = oi_set_shape(dst, nd, dims);
    if (rc) return rc;
    auto_block(t, start, size, (unsigned char *)dst->data, 0);
    return OI_OK;
}

static int auto_write(oi_table *t, const oi_sel *sel, int nsel, const oi_tensor *src) {
    int64_t start[2 * OI_MAX_DIMS], size[2 * OI_MAX_DIMS], saved[OI_MAX_DIMS];
    int kept[2 * OI_MAX_DIMS], nd = 0, a, rc, ok = 1, rank;
    for (a = 0; a < t->n_idx; a++) saved[a] = t->counts[a];
    rc = auto_plan(t, sel, nsel, 1, 1, start, size, kept, &rank);
    if (rc) return rc;
    for (a = 0; a < rank; a++) {
        if (!kept[a]) continue;
        if (nd >= src->ndim || src->dims[nd] != size[a]) ok = 0;
        nd++;
    }
    if (!ok || nd != src->ndim) {
        for (a = 0; a < t->n_idx; a++) t->counts[a] = saved[a];
        oi_set_error("cache.write into %s: the value's shape does not match the entry shape", t->name);
        return OI_ERR_SHAPE;
    }
    auto_block(t, start, size, (unsigned char *)src->data, 1);
    return OI_OK;
}

static int auto_reset(oi_table *t, const oi_sel *sel, int nsel) {
    int64_t start[2 * OI_MAX_DIMS], size[2 * OI_MAX_DIMS];
    int kept[2 * OI_MAX_DIMS], a, rc, rank;
    oi_sel full[OI_MAX_DIMS];
    for (a = 0; a < t->n_idx; a++) {
        if (a < nsel) full[a] = sel[a];
        else { full[a].kind = 1; full[a].has_lo = full[a].has_hi = 0; full[a].lo = full[a].hi = 0; }
        if (nsel && full[a].kind == 0 && full[a].lo >= t->counts[a]) return OI_OK; /* never written */
    }
    rc = auto_plan(t, full, t->n_idx, 0, 0, start, size, kept, &rank);
    if (rc) return rc;
    auto_block(t, start, size, NULL, 2);
    if (nsel == 0)
        for (a = 0; a < t->n_idx; a++) t->counts[a] = 0;
    return OI_OK;
}

/* Zero the entries of a plain table inside the box of `counts` (every entry that can hold
   data: storage beyond the counts is always zero), those not in the box of `kept` (NULL:
   none), one memset per run of the last table axis; nothing else of the storage is touched,
   so pages never written stay unallocated. Not journaled. */
static void table_zero_box(oi_table *t, const int64_t *counts, const int64_t *kept) {
    int64_t entry = 1, idx[OI_MAX_DIMS], rows = 1, r;
    const int last = t->n_idx - 1;
    size_t chunk;
    int a;
    for (a = 0; a < t->entry_nd; a++) entry *= t->entry[a];
    chunk = (size_t)entry * t->elem;
    if (t->n_idx == 0) return;
    for (a = 0; a < last; a++) { rows *= counts[a]; idx[a] = 0; }
    if (counts[last] <= 0) return;
    for (r = 0; r < rows; r++) {
        int64_t off = 0, from = 0;
        int inside = kept != NULL;
        for (a = 0; a < last; a++) {
            off = off * t->caps[a] + idx[a];
            if (kept && idx[a] >= kept[a]) inside = 0;
        }
        if (inside) from = kept[last] < counts[last] ? kept[last] : counts[last];
        off = off * t->caps[last] + from;
        if (from < counts[last])
            memset((unsigned char *)t->data + (size_t)off * chunk, 0, (size_t)(counts[last] - from) * chunk);
        for (a = last - 1; a >= 0; a--) { if (++idx[a] < counts[a]) break; idx[a] = 0; }
    }
}

void oi_table_clear(oi_table *t, size_t nbytes) {
    int a;
    if (t->autod) memset(t->data, 0, nbytes);
    else table_zero_box(t, t->counts, NULL);
    for (a = 0; a < t->n_idx; a++) t->counts[a] = 0;
}

void oi_table_begin(oi_table *t) {
    int a;
    for (a = 0; a < t->n_idx; a++) t->saved[a] = t->counts[a];
}

int oi_journal_rollback(oi_journal *j, oi_table *const *tables, int n_tables) {
    size_t pos = 0, n = 0, k;
    int i, ok = !j->overflow;
    /* records are variable-sized: count them, then replay from the last to the first */
    while (pos < j->used) {
        oi_record rec;
        memcpy(&rec, j->buf + pos, sizeof rec);
        pos += (sizeof rec + rec.nbytes + 7u) & ~(size_t)7u;
        n++;
    }
    for (k = n; k > 0; k--) {
        size_t at = 0, m;
        oi_record rec;
        for (m = 0; m + 1 < k; m++) {
            memcpy(&rec, j->buf + at, sizeof rec);
            at += (sizeof rec + rec.nbytes + 7u) & ~(size_t)7u;
        }
        memcpy(&rec, j->buf + at, sizeof rec);
        memcpy((unsigned char *)rec.table->data + rec.offset, j->buf + at + sizeof rec, rec.nbytes);
    }
    for (i = 0; i < n_tables; i++) {
        oi_table *t = tables[i];
        int a;
        if (!t->autod) /* zero the entries appended during the step (the only ones outside saved) */
            table_zero_box(t, t->counts, t->saved);
        /* (@auto_dim tables: every overwritten row was journaled: the replay restored it all) */
        for (a = 0; a < t->n_idx; a++) t->counts[a] = t->saved[a];
    }
    j->used = 0;
    j->overflow = 0;
    return ok;
}

/* mode 0: table -> dst, 1: src -> table, 2: zero the block */
static int table_block(oi_table *t, const int64_t *start, const int64_t *size, unsigned char *buf, int mode) {
    int64_t entry = 1, idx[OI_MAX_DIMS], n = 1, i;
    size_t chunk;
    int a;
    for (a = 0; a < t->entry_nd; a++) entry *= t->entry[a];
    chunk = (size_t)entry * t->elem;
    for (a = 0; a < t->n_idx; a++) { n *= size[a]; idx[a] = 0; }
    for (i = 0; i < n; i++) {
        int64_t off = 0;
        unsigned char *slot;
        for (a = 0; a < t->n_idx; a++) off = off * t->caps[a] + start[a] + idx[a];
        slot = (unsigned char *)t->data + (size_t)off * chunk;
        if (mode != 0) {
            int64_t pos[OI_MAX_DIMS];
            for (a = 0; a < t->n_idx; a++) pos[a] = start[a] + idx[a];
            if (existed(t, pos)) journal_save(t, (size_t)off * chunk, chunk);
        }
        if (mode == 0) memcpy(buf + (size_t)i * chunk, slot, chunk);
        else if (mode == 1) memcpy(slot, buf + (size_t)i * chunk, chunk);
        else memset(slot, 0, chunk);
        for (a = t->n_idx - 1; a >= 0; a--) { if (++idx[a] < size[a]) break; idx[a] = 0; }
    }
    return OI_OK;
}

static int table_shape(const oi_table *t, const int64_t *size, const int *kept, int64_t *dims) {
    int a, nd = 0;
    for (a = 0; a < t->n_idx; a++)
        if (kept[a]) dims[nd++] = size[a];
    for (a = 0; a < t->entry_nd; a++) dims[nd++] = t->entry[a];
    return nd;
}

int oi_table_read(oi_table *t, const oi_sel *sel, int nsel, oi_tensor *dst) {
    int64_t start[OI_MAX_DIMS], size[OI_MAX_DIMS], dims[OI_MAX_DIMS];
    int kept[OI_MAX_DIMS], nd, rc;
    if (t->autod) return auto_read(t, sel, nsel, dst);
    rc = table_plan(t, sel, nsel, 1, 0, start, size, kept);
    if (rc) return rc;
    nd = table_shape(t, size, kept, dims);
    rc = oi_set_shape(dst, nd, dims);
    if (rc) return rc;
    return table_block(t, start, size, (unsigned char *)dst->data, 0);
}

int oi_table_view(oi_table *t, const oi_sel *sel, int nsel, oi_tensor *fallback, oi_tensor *view) {
    int64_t start[OI_MAX_DIMS], size[OI_MAX_DIMS], dims[OI_MAX_DIMS], entry = 1, off = 0;
    int kept[OI_MAX_DIMS], nd, rc, a, b;
    if (t->autod) {
        rc = auto_read(t, sel, nsel, fallback);
        *view = *fallback;
        return rc;
    }
    rc = table_plan(t, sel, nsel, 1, 0, start, size, kept);
    if (rc) return rc;
    nd = table_shape(t, size, kept, dims);
    /* contiguous when every axis after the first one selecting several entries is whole */
    for (a = 0; a < t->n_idx && size[a] <= 1; a++) {}
    for (b = a + 1; b < t->n_idx; b++)
        if (start[b] != 0 || size[b] != t->caps[b]) break;
    if (b < t->n_idx) {
        rc = oi_set_shape(fallback, nd, dims);
        if (!rc) rc = table_block(t, start, size, (unsigned char *)fallback->data, 0);
        *view = *fallback;
        return rc;
    }
    for (a = 0; a < t->entry_nd; a++) entry *= t->entry[a];
    for (a = 0; a < t->n_idx; a++) off = off * t->caps[a] + start[a];
    view->data = (unsigned char *)t->data + (size_t)off * (size_t)entry * t->elem;
    view->cap = INT64_MAX;
    view->ndim = 0;
    return oi_set_shape(view, nd, dims);
}

int oi_table_write(oi_table *t, const oi_sel *sel, int nsel, const oi_tensor *src) {
    int64_t start[OI_MAX_DIMS], size[OI_MAX_DIMS], dims[OI_MAX_DIMS];
    int kept[OI_MAX_DIMS], nd, rc, a;
    int64_t saved[OI_MAX_DIMS];
    if (t->autod) return auto_write(t, sel, nsel, src);
    for (a = 0; a < t->n_idx; a++) saved[a] = t->counts[a];
    rc = table_plan(t, sel, nsel, 1, 1, start, size, kept);
    if (rc) return rc;
    nd = table_shape(t, size, kept, dims);
    if (nd != src->ndim) rc = OI_ERR_SHAPE;
    for (a = 0; !rc && a < nd; a++)
        if (dims[a] != src->dims[a]) rc = OI_ERR_SHAPE;
    if (rc) {
        for (a = 0; a < t->n_idx; a++) t->counts[a] = saved[a];
        oi_set_error("cache.write into %s: the value's shape does not match the entry shape", t->name);
        return rc;
    }
    return table_block(t, start, size, (unsigned char *)src->data, 1);
}

int oi_table_load(oi_table *t, const void *data, const int64_t *counts) {
    int64_t entry = 1, total = 1, k, idx[OI_MAX_DIMS];
    size_t row;
    int a;
    if (t->autod) {
        oi_set_error("cache table %s: loading an @auto_dim table is not supported", t->name);
        return OI_ERR_ARGUMENT;
    }
    for (a = 0; a < t->n_idx; a++) {
        if (counts[a] < 0) {
            oi_set_error("cache table %s: negative count %lld for index %d", t->name, (long long)counts[a], a);
            return OI_ERR_ARGUMENT;
        }
        if (counts[a] > t->caps[a]) {
            oi_set_error("cache table %s: %lld entries along index %d exceed its capacity %lld", t->name,
                         (long long)counts[a], a, (long long)t->caps[a]);
            return OI_ERR_CACHE_FULL;
        }
        total *= counts[a];
        idx[a] = 0;
    }
    for (a = 0; a < t->entry_nd; a++) entry *= t->entry[a];
    row = (size_t)entry * t->elem;
    table_zero_box(t, t->counts, NULL);
    for (k = 0; k < total; k++) {
        int64_t slot = 0;
        for (a = 0; a < t->n_idx; a++) slot = slot * t->caps[a] + idx[a];
        memcpy((unsigned char *)t->data + (size_t)slot * row, (const unsigned char *)data + (size_t)k * row, row);
        for (a = t->n_idx - 1; a >= 0; a--) { /* the next index in row-major order */
            if (++idx[a] < counts[a]) break;
            idx[a] = 0;
        }
    }
    for (a = 0; a < t->n_idx; a++) t->counts[a] = counts[a];
    return OI_OK;
}

int oi_table_reset(oi_table *t, const oi_sel *sel, int nsel) {
    int64_t start[OI_MAX_DIMS], size[OI_MAX_DIMS];
    int kept[OI_MAX_DIMS], a, rc;
    oi_sel full[OI_MAX_DIMS];
    if (t->autod) return auto_reset(t, sel, nsel);
    if (nsel == 0) {
        int64_t start[OI_MAX_DIMS], size[OI_MAX_DIMS];
        /* zero every entry through table_block so entries that existed are journaled */
        for (a = 0; a < t->n_idx; a++) { start[a] = 0; size[a] = t->counts[a]; }
        table_block(t, start, size, NULL, 2);
        for (a = 0; a < t->n_idx; a++) t->counts[a] = 0;
        return OI_OK;
    }
    for (a = 0; a < t->n_idx; a++) {
        if (a < nsel) full[a] = sel[a];
        else { full[a].kind = 1; full[a].has_lo = full[a].has_hi = 0; full[a].lo = full[a].hi = 0; }
        if (full[a].kind == 0 && full[a].lo >= t->counts[a]) return OI_OK; /* never written: already zero */
    }
    rc = table_plan(t, full, t->n_idx, 0, 0, start, size, kept);
    if (rc) return rc;
    return table_block(t, start, size, NULL, 2);
}

int64_t oi_get_i64(const void *data, uint32_t code) {
    switch (code) {
    case 1: case 18: case 19: case 20: case 24: case 25: return *(const int8_t *)data;
    case 2: return *(const int16_t *)data;
    case 3: return *(const int32_t *)data;
    case 4: return *(const int64_t *)data;
    case 5: case 12: case 21: case 22: case 23: return *(const uint8_t *)data;
    case 6: return *(const uint16_t *)data;
    case 7: return *(const uint32_t *)data;
    case 8: return (int64_t) * (const uint64_t *)data;
    default: return (int64_t)oi_get_f64(data, code);
    }
}

double oi_get_f64(const void *data, uint32_t code) {
    switch (code) {
    case 9: return oi_f16_to_f32(*(const uint16_t *)data);
    case 10: return *(const float *)data;
    case 11: return *(const double *)data;
    case 16: return oi_bf16_to_f32(*(const uint16_t *)data);
    case 17: return oi_f8_to_f32(*(const uint8_t *)data);
    case 8: return (double)*(const uint64_t *)data;
    default: return (double)oi_get_i64(data, code);
    }
}

int oi_param_of(const oi_tensor *t, uint32_t code, oi_param *out) {
    if (oi_numel(t) != 1) {
        oi_set_error("a param variable must hold one element, it holds %lld", (long long)oi_numel(t));
        return OI_ERR_SHAPE;
    }
    out->u64 = code == 8;
    out->is_int = !(code == 9 || code == 10 || code == 11 || code == 16 || code == 17);
    out->i = out->is_int ? oi_get_i64(t->data, code) : 0;
    out->f = oi_get_f64(t->data, code);
    return OI_OK;
}

oi_param oi_param_i64(int64_t v) {
    oi_param p;
    p.f = (double)v;
    p.i = v;
    p.is_int = 1;
    p.u64 = 0;
    return p;
}

int oi_param_int(oi_param p, int64_t lo, uint64_t hi, int nonzero, const char *what, int64_t *out) {
    int ok;
    if (p.is_int && p.u64) {
        ok = (uint64_t)p.i <= hi && (lo <= 0 || (uint64_t)p.i >= (uint64_t)lo);
        *out = p.i;
    } else if (p.is_int) {
        ok = p.i >= lo && (p.i < 0 || (uint64_t)p.i <= hi);
        *out = p.i;
    } else {
        /* a float variable: an integral value inside the range (compared as doubles) */
        ok = p.f == floor(p.f) && p.f >= (double)lo && p.f <= (double)hi && p.f < 18446744073709551616.0;
        if (ok && p.f >= 9223372036854775808.0) *out = (int64_t)(uint64_t)p.f;
        else if (ok) *out = (int64_t)p.f;
    }
    if (ok && nonzero && *out == 0) ok = 0;
    if (!ok) {
        oi_set_error("param %s is %.17g; it must be an integer in [%lld, %llu]%s", what, p.f,
                     (long long)lo, (unsigned long long)hi, nonzero ? " other than 0" : "");
        return OI_ERR_ARGUMENT;
    }
    return OI_OK;
}

int oi_param_number(oi_param p, const char *what) {
    if (p.f != p.f) {
        oi_set_error("param %s is NaN; an integer op needs a number", what);
        return OI_ERR_ARGUMENT;
    }
    return OI_OK;
}

void oi_add_scalar(void *data, uint32_t code, int64_t delta) {
    switch (code) {
    case 1: *(int8_t *)data = (int8_t)(*(int8_t *)data + delta); break;
    case 2: *(int16_t *)data = (int16_t)(*(int16_t *)data + delta); break;
    case 3: *(int32_t *)data = (int32_t)(uint32_t)((uint32_t)*(int32_t *)data + (uint32_t)delta); break;
    case 4: *(int64_t *)data = (int64_t)((uint64_t)*(int64_t *)data + (uint64_t)delta); break;
    case 5: *(uint8_t *)data = (uint8_t)(*(uint8_t *)data + delta); break;
    case 6: *(uint16_t *)data = (uint16_t)(*(uint16_t *)data + delta); break;
    case 7: *(uint32_t *)data = (uint32_t)(*(uint32_t *)data + (uint32_t)delta); break;
    case 8: *(uint64_t *)data = *(uint64_t *)data + (uint64_t)delta; break;
    case 9: *(uint16_t *)data = oi_f32_to_f16(oi_f16_to_f32(*(uint16_t *)data) + (float)delta); break;
    case 10: *(float *)data += (float)delta; break;
    case 11: *(double *)data += (double)delta; break;
    case 16: *(uint16_t *)data = oi_f32_to_bf16(oi_bf16_to_f32(*(uint16_t *)data) + (float)delta); break;
    case 17: *(uint8_t *)data = oi_f32_to_f8(oi_f8_to_f32(*(uint8_t *)data) + (float)delta); break;
    default: break;
    }
}

/* ---- .oinf loader ------------------------------------------------------------------------ */
#define FAIL(rule, off, ...)                                                   \
    do {                                                                       \
        char msg_[160];                                                        \
        snprintf(msg_, sizeof msg_, __VA_ARGS__);                              \
        oi_set_error("%s violated at offset %llu: %s", rule, (unsigned long long)(off), msg_); \
        return OI_ERR_FORMAT;                                                  \
    } while (0)

static uint64_t align8(uint64_t n) { return (n + 7u) & ~(uint64_t)7u; }

typedef struct {
    const unsigned char *b;
    uint64_t pos, end;
} oi_cursor;

/* R9, R10, R11: a name string inside its section */
static int read_name(oi_cursor *c, const unsigned char **name, uint32_t *len, int is_name) {
    uint64_t n, i;
    if (c->end - c->pos < 4) FAIL("R14", c->pos, "table entry starts past the end of its section");
    n = rd32(c->b + c->pos);
    if (align8(4 + n) > c->end - c->pos) FAIL("R9", c->pos, "string of %llu bytes past the end of its section", (unsigned long long)n);
    if (is_name && n == 0) FAIL("R10", c->pos, "empty name");
    for (i = 0; i < n; i++) {
        unsigned char ch = c->b[c->pos + 4 + i];
        int ok = is_name ? ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                            ch == '.' || ch == '_' || ch == '-')
                         : (ch >= 0x20 && ch <= 0x7e);
        if (!ok) FAIL("R10", c->pos + 4 + i, "character 0x%02x not allowed in a %s", ch, is_name ? "name" : "string value");
    }
    for (i = 4 + n; i < align8(4 + n); i++)
        if (c->b[c->pos + i]) FAIL("R11", c->pos + i, "string padding byte is not 0");
    *name = c->b + c->pos + 4;
    *len = (uint32_t)n;
    c->pos += align8(4 + n);
    return OI_OK;
}

static int need(oi_cursor *c, uint64_t n, const char *what) {
    if (c->end - c->pos < n) FAIL("R14", c->pos, "%s entry past the end of its section", what);
    return OI_OK;
}

/* byte size ceil(numel * bits / 8) with overflow checks (R26); returns 0 on overflow. numel
 * itself may not fit in a u64 while the byte size does only for bits < 8, and then numel is
 * still below 2^64 (the byte size is below 2^64 and bits >= 1), so splitting numel into
 * whole bytes' worth (numel / 8) and a remainder computes the exact value. */
static int tensor_bytes(uint32_t dtype, uint32_t ndim, const unsigned char *dims, uint64_t *out) {
    uint64_t numel = 1, bits = oi_bits(dtype), i, whole, rest;
    for (i = 0; i < ndim; i++) {
        uint64_t d = rd64(dims + 8 * i);
        if (d != 0 && numel > UINT64_MAX / d) {
            /* numel overflows: only fine if some later dim is 0 */
            uint64_t j;
            for (j = i; j < ndim; j++)
                if (rd64(dims + 8 * j) == 0) { *out = 0; return 1; }
            return 0;
        }
        numel *= d;
    }
    whole = numel / 8;
    if (whole > UINT64_MAX / bits) return 0;
    whole *= bits;
    rest = ((numel % 8) * bits + 7) / 8; /* the last partial group of 8 elements */
    if (whole > UINT64_MAX - rest) return 0;
    *out = whole + rest;
    return 1;
}

/* R37: bytes [lo, hi) of the file are 0 (table tails, gaps, payload padding) */
static int zero_run(const unsigned char *b, uint64_t lo, uint64_t hi, const char *what) {
    uint64_t i;
    for (i = lo; i < hi; i++)
        if (b[i]) FAIL("R37", i, "%s byte is not 0", what);
    return OI_OK;
}

typedef struct {
    uint64_t lo, hi;
} oi_interval;

static int cmp_interval(const void *a, const void *b) {
    const oi_interval *x = (const oi_interval *)a, *y = (const oi_interval *)b;
    return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : 0;
}

static int in_data(uint64_t off, uint64_t n, uint64_t data, uint64_t size) {
    return off % 8 == 0 && off >= data && off <= size && n <= size - off;
}

typedef struct {
    const unsigned char *name;
    uint32_t len;
} oi_name;

static int cmp_name(const void *a, const void *b) {
    const oi_name *x = (const oi_name *)a, *y = (const oi_name *)b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->name, y->name, n);
    if (c) return c;
    return x->len < y->len ? -1 : x->len > y->len ? 1 : 0;
}

/* R12, in O(n log n): a file of a few MB can hold 10^5 names (quadratic took minutes) */
static int names_unique(const unsigned char *base, const unsigned char **names, const uint32_t *lens, uint32_t n,
                        const char *table) {
    uint32_t i;
    oi_name *sorted;
    if (n < 2) return OI_OK;
    sorted = (oi_name *)malloc((size_t)n * sizeof *sorted);
    if (!sorted) { oi_set_error("out of memory checking the %s names", table); return OI_ERR_NOMEM; }
    for (i = 0; i < n; i++) { sorted[i].name = names[i]; sorted[i].len = lens[i]; }
    qsort(sorted, n, sizeof *sorted, cmp_name);
    for (i = 1; i < n; i++)
        if (cmp_name(&sorted[i - 1], &sorted[i]) == 0) {
            uint64_t at = (uint64_t)(sorted[i].name - base) - 4;
            free(sorted);
            FAIL("R12", at, "duplicate name in the %s table", table);
        }
    free(sorted);
    return OI_OK;
}

static int check_metadata(const unsigned char *b, uint64_t size, uint64_t data, uint32_t type, uint64_t nbytes,
                          uint64_t off, uint64_t where) {
    const unsigned char *p;
    if (type < 1 || type > 25) FAIL("R15", where, "unknown metadata value type %u", type);
    /* no pointer is formed from `off` before R17 has bounded it (UB otherwise) */
    if (!in_data(off, nbytes, data, size)) FAIL("R17", where, "payload outside the data section or unaligned");
    p = b + off;
    if (type == 14) {
        uint64_t n, i;
        if (nbytes < 4) FAIL("R19", where, "string value shorter than its length field");
        n = rd32(p);
        if (nbytes != align8(4 + n)) FAIL("R19", where, "string value_nbytes != align8(4 + length)");
        for (i = 0; i < n; i++)
            if (p[4 + i] < 0x20 || p[4 + i] > 0x7e) FAIL("R10", off + 4 + i, "string value not printable ASCII");
        for (i = 4 + n; i < nbytes; i++)
            if (p[i]) FAIL("R11", off + i, "string padding byte is not 0");
    } else if (type == 13) {
        uint64_t bits, count;
        if (nbytes < 8) FAIL("R20", where, "bitset shorter than its header");
        bits = rd32(p);
        count = rd32(p + 4);
        if (count != (bits + 7) / 8 || nbytes != align8(8 + count)) FAIL("R20", where, "bitset byte_count/value_nbytes mismatch");
        if (bits % 8 && count && (p[8 + count - 1] >> (bits % 8))) FAIL("R20", where, "unused high bits of the bitset are not 0");
        return zero_run(b, off + 8 + count, off + nbytes, "bitset padding");
    } else if (type == 15) {
        uint32_t et, nd;
        uint64_t tb;
        if (nbytes < 8) FAIL("R21", where, "ndarray shorter than its header");
        et = rd32(p);
        nd = rd32(p + 4);
        if (oi_bits(et) == 0) FAIL("R21", where, "ndarray element type %u is not a tensor type", et);
        if (nd > 32) FAIL("R21", where, "ndarray ndim %u > 32", nd);
        if (8 + 8 * (uint64_t)nd > nbytes) FAIL("R21", where, "ndarray dims past the payload");
        if (!tensor_bytes(et, nd, p + 8, &tb) || tb > UINT64_MAX - 16 - 8 * (uint64_t)nd)
            FAIL("R21", where, "ndarray size overflows");
        if (nbytes != align8(8 + 8 * (uint64_t)nd + tb)) FAIL("R21", where, "ndarray value_nbytes mismatch");
        return zero_run(b, off + 8 + 8 * (uint64_t)nd + tb, off + nbytes, "ndarray padding");
    } else {
        uint64_t want = oi_is_packed(type) ? 1 : oi_bits(type) / 8;
        if (nbytes != want) FAIL("R18", where, "scalar of type %u has %llu bytes, expected %llu", type,
                                 (unsigned long long)nbytes, (unsigned long long)want);
    }
    return OI_OK;
}

/* R30, R33-R36: a per-block quant payload (scale_mode 3, docs/oinf.md section 5.1) */
static int check_block(oi_model_tensor *t, const unsigned char *q, uint64_t qn, uint64_t qoff, int has_data) {
    uint32_t scheme = rd32(q), zmode = rd32(q + 8), block, vtype;
    uint64_t saxis = rd64(q + 16), scount = rd64(q + 24), zaxis = rd64(q + 32), zcount = rd64(q + 40);
    uint64_t width, numel = 1, i, last;
    unsigned bits;
    if (qn < 56) FAIL("R33", qoff, "per-block payload of %llu bytes is below its 56-byte fixed part", (unsigned long long)qn);
    block = rd32(q + 48);
    vtype = rd32(q + 52);
    if (vtype != 9 && vtype != 10) FAIL("R33", qoff + 52, "block value_type %u is not 9 (f16) or 10 (f32)", vtype);
    width = vtype == 9 ? 2 : 4;
    if (scount > UINT64_MAX / 8 || zcount > UINT64_MAX / 8 || qn != align8(56 + width * (scount + zcount)))
        FAIL("R33", qoff, "quant_nbytes %llu != align8(56 + %llu * (scale_count + zp_count))", (unsigned long long)qn,
             (unsigned long long)width);
    if (rd32(q + 12) || (zmode != 0 && zmode != 3)) FAIL("R30", qoff, "per-block payload needs reserved 0 and zp_mode 0 or 3");
    if (!has_data || !((t->dtype == 1 && scheme == 1) || (t->dtype == 18 && scheme == 1) || (t->dtype == 21 && scheme == 2)))
        FAIL("R35", qoff, "dtype %u with scheme %u is no block scheme (q8_0 i8 symmetric, q4_0 i4 symmetric, q4_1 u4 asymmetric)",
             t->dtype, scheme);
    bits = oi_bits(t->dtype);
    for (i = 0; i < t->ndim; i++) numel *= (uint64_t)t->dims[i]; /* fits: R26 checked it */
    last = t->ndim ? (uint64_t)t->dims[t->ndim - 1] : 0;
    if (t->ndim < 1 || saxis != t->ndim - 1 || block < 1 || last % block || (block * bits) % 8 || scount != numel / block ||
        (scheme == 2 && (zmode != 3 || zaxis != saxis || zcount != scount)) ||
        (scheme == 1 && (zmode != 0 || zaxis != 0 || zcount != 0)))
        FAIL("R34", qoff, "block layout (block %u, %llu scales) does not fit the shape or scheme", block, (unsigned long long)scount);
    for (i = 0; i < scount + zcount; i++) {
        const unsigned char *v = q + 56 + width * i;
        int bad = width == 2 ? (((uint32_t)v[0] | ((uint32_t)v[1] << 8)) & 0x7c00u) == 0x7c00u
                             : (rd32(v) & 0x7f800000u) == 0x7f800000u;
        if (bad) FAIL("R36", qoff + 56 + width * i, "block %s %llu is not finite", i < scount ? "scale" : "offset",
                      (unsigned long long)(i < scount ? i : i - scount));
    }
    for (i = 56 + width * (scount + zcount); i < qn; i++) /* R37: zero padding */
        if (q[i]) FAIL("R37", qoff + i, "per-block quant padding byte is not 0");
    t->block_size = block;
    t->block_value = vtype;
    t->block.codes = t->raw;
    t->block.scales = q + 56;
    t->block.offsets = zcount ? q + 56 + width * scount : NULL;
    return OI_OK;
}

static int parse(oi_model *m) {
    const unsigned char *b = m->bytes;
    uint64_t size = m->size, off[5], i;
    uint32_t version, n_sv, n_md, n_t, k;
    oi_cursor c;
    oi_interval *blobs = NULL;
    const unsigned char **md_names = NULL;
    uint32_t *md_lens = NULL, n_blobs = 0;
    const unsigned char **t_names = NULL;
    uint32_t *t_lens = NULL;
    int rc = OI_OK;

    if (size < 72) FAIL("R1", 0, "file of %llu bytes is shorter than the 72-byte header", (unsigned long long)size);
    if (memcmp(b, "OINF\0", 5) != 0) FAIL("R2", 0, "bad magic");
    version = rd32(b + 5);
    if (version != 1 && version != 2) FAIL("R3", 5, "unsupported version %u", version);
    if (rd32(b + 9) != 0 || rd32(b + 25) != 0) FAIL("R4", 9, "header flags/reserved not 0");
    if (b[69] || b[70] || b[71]) FAIL("R5", 69, "header padding not 0");
    n_sv = rd32(b + 13);
    n_md = rd32(b + 17);
    n_t = rd32(b + 21);
    for (i = 0; i < 5; i++) off[i] = rd64(b + 29 + 8 * i);
    if (off[4] != size) FAIL("R6", 61, "file_size %llu != file length %llu", (unsigned long long)off[4], (unsigned long long)size);
    if (!(72 <= off[0] && off[0] <= off[1] && off[1] <= off[2] && off[2] <= off[3] && off[3] <= size))
        FAIL("R7", 29, "section offsets not ascending within the file");
    for (i = 0; i < 4; i++)
        if (off[i] % 8) FAIL("R8", 29 + 8 * i, "section offset not a multiple of 8");
    /* R13: bound every loop by the section size */
    if ((uint64_t)n_sv * 16 > off[1] - off[0]) FAIL("R13", 13, "%u sizevars cannot fit their section", n_sv);
    if ((uint64_t)n_md * 32 > off[2] - off[1]) FAIL("R13", 17, "%u metadata entries cannot fit their section", n_md);
    if ((uint64_t)n_t * (version == 1 ? 36 : 52) > off[3] - off[2]) FAIL("R13", 21, "%u tensors cannot fit their section", n_t);

    m->n_sizevars = n_sv;
    m->sizevar_names = (const unsigned char **)calloc(n_sv + 1, sizeof *m->sizevar_names);
    m->sizevar_name_lens = (uint32_t *)calloc(n_sv + 1, sizeof *m->sizevar_name_lens);
    m->sizevar_values = (uint64_t *)calloc(n_sv + 1, sizeof *m->sizevar_values);
    m->tensors = (oi_model_tensor *)calloc(n_t + 1, sizeof *m->tensors);
    blobs = (oi_interval *)calloc((size_t)n_md + 2 * (size_t)n_t + 1, sizeof *blobs);
    md_names = (const unsigned char **)calloc(n_md + 1, sizeof *md_names);
    md_lens = (uint32_t *)calloc(n_md + 1, sizeof *md_lens);
    t_names = (const unsigned char **)calloc(n_t + 1, sizeof *t_names);
    t_lens = (uint32_t *)calloc(n_t + 1, sizeof *t_lens);
    if (!m->sizevar_names || !m->sizevar_name_lens || !m->sizevar_values || !m->tensors || !blobs || !md_names ||
        !md_lens || !t_names || !t_lens) {
        rc = OI_ERR_NOMEM;
        oi_set_error("out of memory indexing the model");
        goto done;
    }
    c.b = b;
    c.pos = off[0];
    c.end = off[1];
    for (k = 0; k < n_sv; k++) {
        if ((rc = read_name(&c, &m->sizevar_names[k], &m->sizevar_name_lens[k], 1))) goto done;
        if ((rc = need(&c, 8, "sizevar"))) goto done;
        m->sizevar_values[k] = rd64(b + c.pos);
        c.pos += 8;
    }
    if ((rc = names_unique(b, m->sizevar_names, m->sizevar_name_lens, n_sv, "sizevar"))) goto done;
    if ((rc = zero_run(b, c.pos, c.end, "sizevars table tail"))) goto done;
    c.pos = off[1];
    c.end = off[2];
    for (k = 0; k < n_md; k++) {
        uint64_t where;
        uint32_t type;
        uint64_t nbytes, voff;
        if ((rc = read_name(&c, &md_names[k], &md_lens[k], 1))) goto done;
        if ((rc = need(&c, 24, "metadata"))) goto done;
        where = c.pos;
        type = rd32(b + c.pos);
        if (rd32(b + c.pos + 4) != 0) { oi_set_error("R16 violated at offset %llu: value_flags not 0", (unsigned long long)(c.pos + 4)); rc = OI_ERR_FORMAT; goto done; }
        nbytes = rd64(b + c.pos + 8);
        voff = rd64(b + c.pos + 16);
        c.pos += 24;
        if ((rc = check_metadata(b, size, off[3], type, nbytes, voff, where))) goto done;
        if (nbytes) { blobs[n_blobs].lo = voff; blobs[n_blobs].hi = voff + nbytes; n_blobs++; }
    }
    if ((rc = names_unique(b, md_names, md_lens, n_md, "metadata"))) goto done;
    if ((rc = zero_run(b, c.pos, c.end, "metadata table tail"))) goto done;
    c.pos = off[2];
    c.end = off[3];
    m->n_tensors = n_t;
    for (k = 0; k < n_t; k++) {
        oi_model_tensor *t = &m->tensors[k];
        uint64_t where, flags, dn, doff, qn = 0, qoff = 0, want;
        const unsigned char *dims;
        if ((rc = read_name(&c, &t_names[k], &t_lens[k], 1))) goto done;
        t->name = (const char *)t_names[k];
        t->name_len = t_lens[k];
        if ((rc = need(&c, 12, "tensor"))) goto done;
        where = c.pos;
        t->dtype = rd32(b + c.pos);
        t->ndim = rd32(b + c.pos + 4);
        flags = rd32(b + c.pos + 8);
        c.pos += 12;
        if (oi_bits(t->dtype) == 0) { oi_set_error("R22 violated at offset %llu: dtype %u is not a tensor type", (unsigned long long)where, t->dtype); rc = OI_ERR_FORMAT; goto done; }
        if (t->ndim > 32) { oi_set_error("R23 violated at offset %llu: ndim %u > 32", (unsigned long long)(where + 4), t->ndim); rc = OI_ERR_FORMAT; goto done; }
        if ((rc = need(&c, 8 * (uint64_t)t->ndim + (version == 1 ? 16 : 32), "tensor"))) goto done;
        dims = b + c.pos;
        for (i = 0; i < t->ndim; i++) t->dims[i] = (int64_t)rd64(dims + 8 * i);
        c.pos += 8 * (uint64_t)t->ndim;
        dn = rd64(b + c.pos);
        doff = rd64(b + c.pos + 8);
        if (version == 2) { qn = rd64(b + c.pos + 16); qoff = rd64(b + c.pos + 24); }
        c.pos += version == 1 ? 16 : 32;
        if (flags & ~(uint64_t)(version == 1 ? 1u : 3u)) { oi_set_error("R24 violated at offset %llu: unknown tensor flag bits 0x%llx", (unsigned long long)(where + 8), (unsigned long long)flags); rc = OI_ERR_FORMAT; goto done; }
        if ((!(flags & 1) && (dn || doff)) || (!(flags & 2) && (qn || qoff))) { oi_set_error("R25 violated at offset %llu: nbytes/offset set without their flag", (unsigned long long)(where + 8)); rc = OI_ERR_FORMAT; goto done; }
        if (!tensor_bytes(t->dtype, t->ndim, dims, &want)) { oi_set_error("R26 violated at offset %llu: tensor byte size overflows u64", (unsigned long long)where); rc = OI_ERR_FORMAT; goto done; }
        if (flags & 1) {
            if (dn != want) { oi_set_error("R27 violated at offset %llu: data_nbytes %llu != %llu", (unsigned long long)where, (unsigned long long)dn, (unsigned long long)want); rc = OI_ERR_FORMAT; goto done; }
            if (!in_data(doff, dn, off[3], size)) { oi_set_error("R28 violated at offset %llu: data outside the data section or unaligned", (unsigned long long)where); rc = OI_ERR_FORMAT; goto done; }
            t->has_data = 1;
            t->raw = b + doff;
            t->nbytes = dn;
            if (dn) { blobs[n_blobs].lo = doff; blobs[n_blobs].hi = doff + dn; n_blobs++; }
        }
        if (flags & 2) {
            const unsigned char *q;
            uint32_t scheme, smode, zmode;
            uint64_t saxis, scount, zaxis, zcount;
            if (!in_data(qoff, qn, off[3], size) || qn < 48) { oi_set_error("R29 violated at offset %llu: quant payload outside the data section", (unsigned long long)where); rc = OI_ERR_FORMAT; goto done; }
            q = b + qoff;
            scheme = rd32(q); smode = rd32(q + 4); zmode = rd32(q + 8);
            saxis = rd64(q + 16); scount = rd64(q + 24); zaxis = rd64(q + 32); zcount = rd64(q + 40);
            if (smode == 3) {
                if ((rc = check_block(t, q, qn, qoff, (flags & 1) != 0))) goto done;
                blobs[n_blobs].lo = qoff; blobs[n_blobs].hi = qoff + qn; n_blobs++;
                continue;
            }
            if (scount > (UINT64_MAX / 8) || zcount > (UINT64_MAX / 8) || qn != align8(48 + 4 * scount + 4 * zcount)) { oi_set_error("R29 violated at offset %llu: quant_nbytes mismatch", (unsigned long long)where); rc = OI_ERR_FORMAT; goto done; }
            if (scheme < 1 || scheme > 2 || smode < 1 || smode > 2 || zmode > 2 || rd32(q + 12)) { oi_set_error("R30 violated at offset %llu: bad quant codes", (unsigned long long)qoff); rc = OI_ERR_FORMAT; goto done; }
            if ((smode == 1 && (saxis != 0 || scount != 1)) ||
                (smode == 2 && (saxis >= t->ndim || scount != (uint64_t)t->dims[saxis])) ||
                (zmode == 0 && (zaxis != 0 || zcount != 0)) || (zmode != 0 && zmode != smode) ||
                (zmode == 1 && (zaxis != 0 || zcount != 1)) ||
                (zmode == 2 && (zaxis != saxis || zcount != (uint64_t)t->dims[zaxis])) || (scheme == 1 && zmode != 0)) {
                oi_set_error("R31 violated at offset %llu: quant shape rules", (unsigned long long)qoff);
                rc = OI_ERR_FORMAT;
                goto done;
            }
            if ((rc = zero_run(b, qoff + 48 + 4 * scount + 4 * zcount, qoff + qn, "quant padding"))) goto done;
            blobs[n_blobs].lo = qoff; blobs[n_blobs].hi = qoff + qn; n_blobs++;
        }
    }
    if ((rc = names_unique(b, t_names, t_lens, n_t, "tensor"))) goto done;
    if ((rc = zero_run(b, c.pos, c.end, "tensors table tail"))) goto done;
    qsort(blobs, n_blobs, sizeof *blobs, cmp_interval);
    for (k = 1; k < n_blobs; k++)
        if (blobs[k].lo < blobs[k - 1].hi) { oi_set_error("R32 violated at offset %llu: blobs overlap", (unsigned long long)blobs[k].lo); rc = OI_ERR_FORMAT; goto done; }
    {
        uint64_t at = off[3]; /* R37: the data section outside the blobs */
        for (k = 0; k <= n_blobs; k++) {
            uint64_t next = k < n_blobs ? blobs[k].lo : size;
            if ((rc = zero_run(b, at, next, "data section gap"))) goto done;
            if (k < n_blobs) at = blobs[k].hi;
        }
    }
done:
    free(blobs);
    free(md_names);
    free(md_lens);
    free(t_names);
    free(t_lens);
    return rc;
}

int oi_model_open_buffer(oi_model *m, const unsigned char *bytes, uint64_t size) {
    int rc;
    memset(m, 0, sizeof *m);
    m->bytes = (unsigned char *)bytes;
    m->size = size;
    rc = parse(m);
    if (rc) oi_model_close(m);
    return rc;
}

/* Ask Linux for transparent huge pages behind a large buffer before it is written (the
 * model's weights: a decode step streams all of them once per token, and with 4 KiB pages
 * the TLB misses cost about a fifth of a memory-bound GEMV). Advice only: ignored where
 * unsupported or refused. */
static void oi_hint_huge_pages(void *p, size_t n) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t page = 4096, lo = ((uintptr_t)p + page - 1) & ~(page - 1);
    const uintptr_t hi = ((uintptr_t)p + n) & ~(page - 1);
    if (n >= ((size_t)2 << 20) && hi > lo) (void)madvise((void *)lo, (size_t)(hi - lo), MADV_HUGEPAGE);
#else
    (void)p;
    (void)n;
#endif
}

int oi_model_open_file(oi_model *m, const char *path) {
    FILE *f;
    long len;
    unsigned char *buf;
    int rc;
    memset(m, 0, sizeof *m);
    f = fopen(path, "rb");
    if (!f) { oi_set_error("cannot open %s", path); return OI_ERR_IO; }
    if (fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        oi_set_error("cannot size %s", path);
        return OI_ERR_IO;
    }
    buf = (unsigned char *)malloc(len ? (size_t)len : 1);
    if (!buf) { fclose(f); oi_set_error("out of memory reading %s", path); return OI_ERR_NOMEM; }
    oi_hint_huge_pages(buf, (size_t)len);
    if (len && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        fclose(f);
        oi_set_error("short read of %s", path);
        return OI_ERR_IO;
    }
    fclose(f);
    rc = oi_model_open_buffer(m, buf, (uint64_t)len);
    if (rc) { free(buf); return rc; }
    m->owns_bytes = 1;
    return OI_OK;
}

void oi_model_close(oi_model *m) {
    uint32_t k;
    if (m->tensors)
        for (k = 0; k < m->n_tensors; k++)
            if (m->tensors[k].host_owned) free(m->tensors[k].host);
    free(m->tensors);
    free((void *)m->sizevar_names);
    free(m->sizevar_name_lens);
    free(m->sizevar_values);
    if (m->owns_bytes) free(m->bytes);
    memset(m, 0, sizeof *m);
}

int oi_model_sizevar(const oi_model *m, const char *name, uint64_t *value) {
    uint32_t k;
    size_t n = strlen(name);
    for (k = 0; k < m->n_sizevars; k++)
        if (m->sizevar_name_lens[k] == n && memcmp(m->sizevar_names[k], name, n) == 0) {
            *value = m->sizevar_values[k];
            return 1;
        }
    return 0;
}

/* Unpack / byte-swap one tensor into host-ready elements (packed types: one byte each). */
static int prepare(oi_model_tensor *t) {
    uint64_t numel = 1, i;
    unsigned bits = oi_bits(t->dtype);
    for (i = 0; i < t->ndim; i++) numel *= (uint64_t)t->dims[i];
    if (oi_is_packed(t->dtype)) {
        int8_t *out = (int8_t *)malloc(numel ? (size_t)numel : 1);
        if (!out) { oi_set_error("out of memory unpacking %.*s", (int)t->name_len, t->name); return OI_ERR_NOMEM; }
        for (i = 0; i < numel; i++) {
            uint64_t bit = i * bits;
            unsigned v = ((unsigned)t->raw[bit / 8] | (bit / 8 + 1 < t->nbytes ? (unsigned)t->raw[bit / 8 + 1] << 8 : 0u)) >> (bit % 8);
            v &= (1u << bits) - 1u;
            if (t->dtype == 25) out[i] = (int8_t)(v ? 1 : -1);              /* t1: 0 = -1, 1 = +1 */
            else if (oi_packed_signed(t->dtype) || t->dtype == 24)
                out[i] = (int8_t)((int)(v ^ (1u << (bits - 1))) - (int)(1u << (bits - 1)));
            else out[i] = (int8_t)v;
        }
        t->host = out;
        t->host_owned = 1;
        return OI_OK;
    }
    {
        size_t width = bits / 8, n = (size_t)numel * width;
        const uint16_t probe = 1;
        unsigned char *out;
        if (*(const unsigned char *)&probe == 1 && (uintptr_t)t->raw % (width ? width : 1) == 0) {
            /* little-endian host and an aligned blob (data offsets are 8-aligned by R28; a
               file read into malloc'd memory keeps that): the bytes are used in place */
            t->host = (void *)t->raw;
            t->host_owned = 0;
            return OI_OK;
        }
        out = (unsigned char *)malloc(n ? n : 1);
        if (!out) { oi_set_error("out of memory loading %.*s", (int)t->name_len, t->name); return OI_ERR_NOMEM; }
        for (i = 0; i < numel; i++) {
            /* assemble each element from little-endian bytes: correct on any host order */
            uint64_t v = 0;
            size_t j;
            for (j = 0; j < width; j++) v |= (uint64_t)t->raw[i * width + j] << (8 * j);
            switch (width) {
            case 1: { uint8_t x = (uint8_t)v; memcpy(out + i, &x, 1); break; }
            case 2: { uint16_t x = (uint16_t)v; memcpy(out + 2 * i, &x, 2); break; }
            case 4: { uint32_t x = (uint32_t)v; memcpy(out + 4 * i, &x, 4); break; }
            default: memcpy(out + 8 * i, &v, 8); break;
            }
        }
        t->host = out;
        t->host_owned = 1;
    }
    return OI_OK;
}

static oi_model_tensor *find_tensor(oi_model *m, const char *name) {
    uint32_t k;
    size_t n = strlen(name);
    for (k = 0; k < m->n_tensors; k++)
        if (m->tensors[k].name_len == n && memcmp(m->tensors[k].name, name, n) == 0) return &m->tensors[k];
    oi_set_error("the model has no tensor %s", name);
    return NULL;
}

int oi_model_get_block(oi_model *m, const char *name, uint32_t dtype, uint32_t block_size, uint32_t value_type,
                       int ndim, const int64_t *dims, const oi_block_tensor **out) {
    oi_model_tensor *t = find_tensor(m, name);
    const uint16_t probe = 1;
    int i;
    if (!t) return OI_ERR_MODEL;
    if (t->dtype != dtype || t->block_size != block_size || t->block_value != value_type || (int)t->ndim != ndim) {
        oi_set_error("model tensor %s is dtype %u block %u scales %u rank %u; the program was synthesized for dtype %u "
                     "block %u scales %u rank %d (re-synthesize for this model)", name, t->dtype, t->block_size,
                     t->block_value, t->ndim, dtype, block_size, value_type, ndim);
        return OI_ERR_MODEL;
    }
    for (i = 0; i < ndim; i++)
        if (t->dims[i] != dims[i]) {
            oi_set_error("model tensor %s: dim %d is %lld, the graph needs %lld", name, i, (long long)t->dims[i],
                         (long long)dims[i]);
            return OI_ERR_MODEL;
        }
    if (*(const unsigned char *)&probe != 1 || (uintptr_t)t->block.scales % (value_type == 9 ? 2 : 4)) {
        /* the kernels read scales as host-order words in place (8-aligned blobs keep them aligned) */
        oi_set_error("model tensor %s: block scales need a little-endian host and an aligned payload", name);
        return OI_ERR_MODEL;
    }
    *out = &t->block;
    return OI_OK;
}

int oi_model_get(oi_model *m, const char *name, uint32_t dtype, int ndim, const int64_t *dims, const void **out) {
    uint32_t k;
    size_t n = strlen(name);
    int i;
    for (k = 0; k < m->n_tensors; k++) {
        oi_model_tensor *t = &m->tensors[k];
        if (t->name_len != n || memcmp(t->name, name, n) != 0) continue;
        if (t->dtype != dtype || (int)t->ndim != ndim) {
            oi_set_error("model tensor %s has dtype %u rank %u, the graph needs dtype %u rank %d", name, t->dtype,
                         t->ndim, dtype, ndim);
            return OI_ERR_MODEL;
        }
        for (i = 0; i < ndim; i++)
            if (t->dims[i] != dims[i]) {
                oi_set_error("model tensor %s: dim %d is %lld, the graph needs %lld", name, i, (long long)t->dims[i],
                             (long long)dims[i]);
                return OI_ERR_MODEL;
            }
        if (!t->has_data) { *out = NULL; return OI_OK; }
        if (!t->host) {
            int rc = prepare(t);
            if (rc) return rc;
        }
        *out = t->host;
        return OI_OK;
    }
    oi_set_error("the model has no tensor %s", name);
    return OI_ERR_MODEL;
}

#ifdef OI_TRACE
static FILE *oi_trace_out;

static FILE *trace_file(void) {
    if (!oi_trace_out) {
        const char *path = getenv("OI_TRACE_FILE");
        oi_trace_out = path && *path ? fopen(path, "w") : NULL;
        if (!oi_trace_out) oi_trace_out = stderr;
    }
    return oi_trace_out;
}

static void trace_number(FILE *f, double v, int valid) {
    if (valid && v == v && v - v == 0) fprintf(f, "%.17g", v);
    else fputs("null", f);
}

/* The summary of sim/summaries.py: counts, min/max/sum/L1 of the finite elements, a sum
   weighted by ((i * 2654435761) mod 2^32) / 2^32 - 0.5, and for integer types a checksum
   sum(v_i * (2i + 1)) mod 2^64. */
void oi_trace_node(const oi_trace_site *site, int64_t step, const int64_t *scope, const oi_tensor *value) {
    FILE *f = trace_file();
    const unsigned char *p = (const unsigned char *)value->data;
    int64_t n = oi_numel(value), i, nan = 0, inf = 0, finite = 0;
    double lo = 0, hi = 0, sum = 0, l1 = 0, wsum = 0;
    uint64_t check = 0;
    int d;
    for (i = 0; i < n; i++) {
        const void *e = p + (size_t)i * site->elem;
        double w = (double)(uint32_t)((uint64_t)i * 2654435761u) / 4294967296.0 - 0.5;
        double v;
        if (site->is_float) {
            v = oi_get_f64(e, site->code);
            if (v != v) { nan++; continue; }
            if (v - v != 0) { inf++; continue; }
        } else {
            int64_t k = oi_get_i64(e, site->code);
            check += (uint64_t)k * (2u * (uint64_t)i + 1u);
            v = (double)k;
        }
        if (!finite || v < lo) lo = v;
        if (!finite || v > hi) hi = v;
        finite++;
        sum += v;
        l1 += fabs(v);
        wsum += w * v;
    }
    fprintf(f, "{\"step\": %lld, \"scope\": {", (long long)step);
    for (d = 0; d < site->nscope; d++) fprintf(f, "%s%s: %lld", d ? ", " : "", site->keys[d], (long long)scope[d]);
    fprintf(f, "}, %s, \"output_shapes\": [[", site->head);
    for (d = 0; d < value->ndim; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)value->dims[d]);
    fprintf(f, "]], \"output_summaries\": [{\"shape\": [");
    for (d = 0; d < value->ndim; d++) fprintf(f, "%s%lld", d ? ", " : "", (long long)value->dims[d]);
    fprintf(f, "], \"dtype\": %s, \"numel\": %lld, \"nan\": %lld, \"inf\": %lld, \"min\": ", site->dtype,
            (long long)n, (long long)nan, (long long)inf);
    trace_number(f, lo, finite > 0);
    fputs(", \"max\": ", f);
    trace_number(f, hi, finite > 0);
    fputs(", \"sum\": ", f);
    trace_number(f, sum, 1);
    fputs(", \"l1\": ", f);
    trace_number(f, l1, 1);
    fputs(", \"wsum\": ", f);
    trace_number(f, wsum, 1);
    if (!site->is_float) fprintf(f, ", \"checksum\": \"%016llx\"", (unsigned long long)check);
    fputs("}]}\n", f);
    fflush(f);
}

void oi_trace_close(void) {
    if (oi_trace_out && oi_trace_out != stderr) fclose(oi_trace_out);
    oi_trace_out = NULL;
}
#endif
