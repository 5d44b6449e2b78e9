#version 450
#extension GL_EXT_control_flow_attributes : enable
// f32 convolution as an implicit GEMM, on the tiling scheme of matmul_tiled.comp: for each
// (batch, group) (grid z), OUT[m, p] = sum_k W[m, k] * X[k, p], with m the group's output
// channels, k = (c, ky, kx) over its input channels and kernel taps (W's own row-major
// layout [M, C/groups, KH, KW]) and p = (oy, ox) over output positions. X[k, p] is read from
// the input on the fly, 0 in the padding: no im2col copy is ever made. A work group computes
// a BM x BN tile through shared memory, each invocation a TM x TN register block.
// HAS_BIAS (a define from the generator) adds bias[m] in the epilogue.
#define BM {{BM}}
#define BN {{BN}}
#define BK {{BK}}
#define TM {{TM}}
#define TN {{TN}}
#define THREADS_M (BM / TM)
#define THREADS_N (BN / TN)
#define THREADS (THREADS_M * THREADS_N)
{{VARIANT}}
layout(local_size_x = THREADS) in;
layout(set = 0, binding = 0) readonly buffer X { float x[]; };
layout(set = 0, binding = 1) readonly buffer Wt { float w[]; };
#ifdef HAS_BIAS
layout(set = 0, binding = 2) readonly buffer Bias { float bias[]; };
layout(set = 0, binding = 3) writeonly buffer Out { float y[]; };
#else
layout(set = 0, binding = 2) writeonly buffer Out { float y[]; };
#endif
layout(push_constant) uniform Push {
    uint n;        // output elements
    uint C;        // input channels
    uint H;
    uint W;
    uint M;        // output channels
    uint OH;
    uint OW;
    uint KH;
    uint KW;
    uint sh;
    uint sw;
    uint ph;       // begin pads
    uint pw;
    uint dh;
    uint dw;
    uint groups;
} pc;

shared float As[BK][BM];
shared float Bs[BK][BN];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint tm = tid / THREADS_N;
    uint tn = tid % THREADS_N;
    uint group = gl_WorkGroupID.z % pc.groups;
    uint batch = gl_WorkGroupID.z / pc.groups;
    uint cg = pc.C / pc.groups;
    uint mg = pc.M / pc.groups;
    uint taps = pc.KH * pc.KW;
    uint kdim = cg * taps;
    uint positions = pc.OH * pc.OW;
    uint row0 = gl_WorkGroupID.y * BM;  // output channel within the group
    uint col0 = gl_WorkGroupID.x * BN;  // output position
    uint w_base = group * mg * kdim;
    uint x_base = (batch * pc.C + group * cg) * pc.H * pc.W;

    float acc[TM][TN];
    [[unroll]] for (int i = 0; i < TM; i++)
        [[unroll]] for (int j = 0; j < TN; j++) acc[i][j] = 0.0;
    float ra[TM];
    float rb[TN];

    for (uint k0 = 0u; k0 < kdim; k0 += BK) {
        [[unroll]] for (uint s = 0u; s < (BM * BK) / THREADS; s++) {
            uint t = tid + s * THREADS;
            uint m = t / BK;
            uint k = t % BK;
            uint gm = row0 + m;
            uint gk = k0 + k;
            As[k][m] = (gm < mg && gk < kdim) ? w[w_base + gm * kdim + gk] : 0.0;
        }
        [[unroll]] for (uint s = 0u; s < (BN * BK) / THREADS; s++) {
            uint t = tid + s * THREADS;
            uint k = t / BN;
            uint p = col0 + t % BN;
            uint gk = k0 + k;
            float v = 0.0;
            if (gk < kdim && p < positions) {
                uint c = gk / taps;
                uint r = gk % taps;
                int iy = int((p / pc.OW) * pc.sh + (r / pc.KW) * pc.dh) - int(pc.ph);
                int ix = int((p % pc.OW) * pc.sw + (r % pc.KW) * pc.dw) - int(pc.pw);
                if (iy >= 0 && iy < int(pc.H) && ix >= 0 && ix < int(pc.W))
                    v = x[x_base + (c * pc.H + uint(iy)) * pc.W + uint(ix)];
            }
            Bs[k][t % BN] = v;
        }
        barrier();
        [[unroll]] for (uint k = 0u; k < BK; k++) {
            [[unroll]] for (int i = 0; i < TM; i++) ra[i] = As[k][tm + uint(i) * THREADS_M];
            [[unroll]] for (int j = 0; j < TN; j++) rb[j] = Bs[k][tn + uint(j) * THREADS_N];
            [[unroll]] for (int i = 0; i < TM; i++)
                [[unroll]] for (int j = 0; j < TN; j++) acc[i][j] = fma(ra[i], rb[j], acc[i][j]);
        }
        barrier();
    }
    [[unroll]] for (int i = 0; i < TM; i++) {
        uint gm = row0 + tm + uint(i) * THREADS_M;
        if (gm >= mg) continue;
        uint channel = group * mg + gm;
        uint out_base = (batch * pc.M + channel) * positions;
        [[unroll]] for (int j = 0; j < TN; j++) {
            uint p = col0 + tn + uint(j) * THREADS_N;
#ifdef HAS_BIAS
            if (p < positions) y[out_base + p] = acc[i][j] + bias[channel];
#else
            if (p < positions) y[out_base + p] = acc[i][j];
#endif
        }
    }
}
