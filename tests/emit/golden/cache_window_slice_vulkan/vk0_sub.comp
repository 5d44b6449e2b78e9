#version 450
// Elementwise kernel: out[o] = EXPR(in0[idx0(o)], in1[idx1(o)], ...) with NumPy broadcasting.
// Bindings: 0..ARITY-1 = input word buffers, ARITY = output word buffer.
// Broadcasting is by strides: input k's element index for output element o is
// sum_d coord_d(o) * strides[k * MAX_RANK + d], with stride 0 along broadcast dims (the host
// collapses contiguous dims first, so rank is usually 1 or 2). No expanded copies.
// Each invocation writes one whole output word (several elements of a narrow type), so
// neighbouring elements in one word never race.

#define MAX_RANK 6
#define ARITY 2
layout(local_size_x = 128) in;
layout(set = 0, binding = 0) buffer In0 { uint in0[]; };
layout(set = 0, binding = 1) buffer In1 { uint in1[]; };
layout(set = 0, binding = 2) buffer Out { uint outw[]; };
layout(push_constant) uniform Push {
    uint n;                         // output elements
    uint rank;                      // collapsed rank, 1..MAX_RANK
    uint shape[MAX_RANK];           // collapsed output shape
    uint strides[ARITY * MAX_RANK]; // element strides of each input over the output index
    uint p[6];                      // scalar params as raw bits (see kernels.py)
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

int load0(uint i) { return int(in0[i]); }
int load1(uint i) { return int(in1[i]); }
uint encode_out(int v) { return uint(v); }
#define OT int
#define T0 int
#define T1 int


int element(uint o) {
    uint idx[ARITY];
    for (int k = 0; k < ARITY; k++) idx[k] = 0u;
    uint rest = o;
    for (int d = int(pc.rank) - 1; d >= 0; d--) {
        uint c = rest % pc.shape[d];
        rest /= pc.shape[d];
        for (int k = 0; k < ARITY; k++) idx[k] += c * pc.strides[k * MAX_RANK + d];
    }

    int x0 = load0(idx[0]);
    int x1 = load1(idx[1]);
    return int(x0 - x1);
}

void main() {
    uint w = flat_invocation(128u);
    if (w >= pc.n) return;
    outw[w] = encode_out(element(w));
}
