#version 450
#extension GL_EXT_control_flow_attributes : enable
// f32 matmul, tiled through shared memory with register blocking:
// each work group computes a BM x BN tile of C, each invocation a TM x TN block of it,
// marching over K in steps of BK. A and B are row-major (contiguous); batch dims come from
// gl_WorkGroupID.z and broadcast by strides (a batch stride of 0 reuses one matrix).
// Loops with constant trip counts are unrolled ([[unroll]]) so the TM x TN accumulators and
// the register rows stay in registers (dynamically indexed arrays would spill to memory).
// Variants (defines from the generator): B_TRANSPOSED reads B as [N, K] (linear's weight
// layout, w[n, k]); HAS_BIAS adds bias[n] in the epilogue (binding 2, C moves to 3).

#define BM 64
#define BN 64
#define BK 16
#define TM 8
#define TN 8
#define THREADS_M (BM / TM)
#define THREADS_N (BN / TN)
#define THREADS (THREADS_M * THREADS_N)
#define MAX_BATCH 4
layout(local_size_x = THREADS) in;
layout(set = 0, binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 1) readonly buffer B { float b[]; };
#ifdef HAS_BIAS
layout(set = 0, binding = 2) readonly buffer Bias { float bias[]; };
layout(set = 0, binding = 3) writeonly buffer C { float c[]; };
#else
layout(set = 0, binding = 2) writeonly buffer C { float c[]; };
#endif
layout(push_constant) uniform Push {
    uint n;
    uint M;
    uint N;
    uint K;
    uint batch_rank;
    uint batch_shape[MAX_BATCH];
    uint a_batch_stride[MAX_BATCH];
    uint b_batch_stride[MAX_BATCH];
} pc;

shared float As[BK][BM];
shared float Bs[BK][BN];

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint tm = tid / THREADS_N;
    uint tn = tid % THREADS_N;
    uint row0 = gl_WorkGroupID.y * BM;
    uint col0 = gl_WorkGroupID.x * BN;
    uint rest = gl_WorkGroupID.z;
    uint a_base = 0u;
    uint b_base = 0u;
    for (int d = int(pc.batch_rank) - 1; d >= 0; d--) {
        uint cb = rest % pc.batch_shape[d];
        rest /= pc.batch_shape[d];
        a_base += cb * pc.a_batch_stride[d];
        b_base += cb * pc.b_batch_stride[d];
    }
    uint c_base = gl_WorkGroupID.z * pc.M * pc.N;

    float acc[TM][TN];
    [[unroll]] for (int i = 0; i < TM; i++)
        [[unroll]] for (int j = 0; j < TN; j++) acc[i][j] = 0.0;
    float ra[TM];
    float rb[TN];

    for (uint k0 = 0u; k0 < pc.K; k0 += BK) {
        // Cooperative loads, consecutive invocations on consecutive addresses.
        [[unroll]] for (uint s = 0u; s < (BM * BK) / THREADS; s++) {
            uint t = tid + s * THREADS;
            uint m = t / BK;
            uint k = t % BK;
            uint gr = row0 + m;
            uint gk = k0 + k;
            As[k][m] = (gr < pc.M && gk < pc.K) ? a[a_base + gr * pc.K + gk] : 0.0;
        }
        [[unroll]] for (uint s = 0u; s < (BN * BK) / THREADS; s++) {
            uint t = tid + s * THREADS;
#ifdef B_TRANSPOSED
            uint k = t % BK;  // consecutive invocations walk one row of w[n, :]
            uint nn = t / BK;
#else
            uint k = t / BN;
            uint nn = t % BN;
#endif
            uint gk = k0 + k;
            uint gc = col0 + nn;
#ifdef B_TRANSPOSED
            Bs[k][nn] = (gk < pc.K && gc < pc.N) ? b[b_base + gc * pc.K + gk] : 0.0;
#else
            Bs[k][nn] = (gk < pc.K && gc < pc.N) ? b[b_base + gk * pc.N + gc] : 0.0;
#endif
        }
        barrier();
        [[unroll]] for (uint k = 0u; k < BK; k++) {
            // Rows/cols interleaved by THREADS_M / THREADS_N to spread shared-memory banks.
            [[unroll]] for (int i = 0; i < TM; i++) ra[i] = As[k][tm + uint(i) * THREADS_M];
            [[unroll]] for (int j = 0; j < TN; j++) rb[j] = Bs[k][tn + uint(j) * THREADS_N];
            [[unroll]] for (int i = 0; i < TM; i++)
                [[unroll]] for (int j = 0; j < TN; j++) acc[i][j] = fma(ra[i], rb[j], acc[i][j]);
        }
        barrier();
    }
    [[unroll]] for (int i = 0; i < TM; i++) {
        uint gr = row0 + tm + uint(i) * THREADS_M;
        if (gr >= pc.M) continue;
        [[unroll]] for (int j = 0; j < TN; j++) {
            uint gc = col0 + tn + uint(j) * THREADS_N;
#ifdef HAS_BIAS
            if (gc < pc.N) c[c_base + gr * pc.N + gc] = acc[i][j] + bias[gc];
#else
            if (gc < pc.N) c[c_base + gr * pc.N + gc] = acc[i][j];
#endif
        }
    }
}
