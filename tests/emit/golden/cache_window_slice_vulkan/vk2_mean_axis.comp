#version 450
// Axis reduction: out[o] = fold over the reduced index space of in0 at base(o).
// Kept dims and reduced dims are both described by (shape, input stride) pairs in push
// constants, so any set of axes reduces without a transpose. One invocation per output
// word; each folds its elements serially in the accumulator type.

#define MAX_RANK 6
layout(local_size_x = 128) in;
layout(set = 0, binding = 0) buffer In0 { uint in0[]; };
layout(set = 0, binding = 1) buffer Out { uint outw[]; };
layout(push_constant) uniform Push {
    uint n;                    // output elements
    uint keep_rank;
    uint red_rank;
    uint n_red;                // elements folded per output
    uint keep_shape[MAX_RANK];
    uint keep_stride[MAX_RANK];
    uint red_shape[MAX_RANK];
    uint red_stride[MAX_RANK];
} pc;
// Shared helpers for every generated kernel: storage conversions of low-precision floats.
// Rounding is done here, explicitly, because GLSL leaves the rounding of packHalf2x16 and
// float-to-narrow conversions to the implementation; the references round to nearest even.

// x rounded to nearest even on the grid of a float format with `mbits` mantissa bits and
// minimum normal exponent `emin` (subnormals keep the quantum 2^(emin - mbits)).
// Overflow past `maxfinite` (after rounding) gives a signed infinity.
float quantize_float(float x, int mbits, int emin, float maxfinite) {
    if (isnan(x) || isinf(x) || x == 0.0) return x;
    int e;
    frexp(x, e);  // |x| = m * 2^e with m in [0.5, 1): the leading bit has exponent e - 1
    int q = max(e - 1, emin) - mbits;
    float r = ldexp(roundEven(ldexp(x, -q)), q);
    if (abs(r) > maxfinite) return (x < 0.0) ? -1.0 / 0.0 : 1.0 / 0.0;
    return r;
}

uint f32_to_f16_bits(float v) {
    if (isnan(v)) return 0x7e00u;
    return packHalf2x16(vec2(quantize_float(v, 10, -14, 65504.0), 0.0)) & 0xffffu;
}

// e5m2 is the upper byte of a half whose low mantissa byte is zero.
uint f32_to_e5m2_bits(float v) {
    if (isnan(v)) return 0x7fu;
    return (packHalf2x16(vec2(quantize_float(v, 2, -14, 57344.0), 0.0)) >> 8) & 0xffu;
}

// bf16 is the upper half of an f32: round the low half to nearest even on the bits.
uint f32_to_bf16_bits(float v) {
    uint u = floatBitsToUint(v);
    if (isnan(v)) return ((u >> 16) | 0x40u) & 0xffffu;
    return ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) & 0xffffu;
}

// The flat invocation index of a dispatch that may span two grid dimensions
// (work-group counts are limited to 65535 per dimension).
uint flat_invocation(uint local_size) {
    return gl_GlobalInvocationID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x * local_size;
}

float load0(uint i) { return uintBitsToFloat(in0[i]); }
uint encode_out(float v) { return floatBitsToUint(v); }


float element(uint o) {
    uint base = 0u;
    uint rest = o;
    for (int d = int(pc.keep_rank) - 1; d >= 0; d--) {
        base += (rest % pc.keep_shape[d]) * pc.keep_stride[d];
        rest /= pc.keep_shape[d];
    }
    float s = float(0);
    for (uint r = 0u; r < pc.n_red; r++) {
        uint i = base;
        uint rr = r;
        for (int d = int(pc.red_rank) - 1; d >= 0; d--) {
            i += (rr % pc.red_shape[d]) * pc.red_stride[d];
            rr /= pc.red_shape[d];
        }
        float v = float(load0(i));
        s += v;
    }
    return float(s / float(pc.n_red));
}

void main() {
    uint w = flat_invocation(128u);
    if (w >= pc.n) return;
    outw[w] = encode_out(element(w));
}
