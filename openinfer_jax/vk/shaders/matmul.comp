#version 450
// General matmul for every dtype: out[b, m, n] = sum_k A[b, m, k] * B[b, k, n] in the
// accumulator type, one invocation per output word. Batch dims broadcast by strides
// (a batch stride of 0 reuses one matrix). The f32 fast path is matmul_tiled.comp.
{{EXTENSIONS}}
#define MAX_BATCH 4
layout(local_size_x = {{LOCAL_SIZE}}) in;
{{BUFFERS}}
layout(push_constant) uniform Push {
    uint n;                  // output elements
    uint M;
    uint N;
    uint K;
    uint batch_rank;
    uint batch_shape[MAX_BATCH];
    uint a_batch_stride[MAX_BATCH];
    uint b_batch_stride[MAX_BATCH];
} pc;
#include "common.glsl"
{{FUNCTIONS}}

{{OUT_TYPE}} element(uint o) {
    uint col = o % pc.N;
    uint row = (o / pc.N) % pc.M;
    uint rest = o / (pc.N * pc.M);
    uint a_base = 0u;
    uint b_base = 0u;
    for (int d = int(pc.batch_rank) - 1; d >= 0; d--) {
        uint c = rest % pc.batch_shape[d];
        rest /= pc.batch_shape[d];
        a_base += c * pc.a_batch_stride[d];
        b_base += c * pc.b_batch_stride[d];
    }
    a_base += row * pc.K;
    b_base += col;
    {{ACC_TYPE}} acc = {{ACC_TYPE}}(0);
    for (uint k = 0u; k < pc.K; k++) {
        acc += {{ACC_TYPE}}(load0(a_base + k)) * {{ACC_TYPE}}(load1(b_base + k * pc.N));
    }
    return {{FINISH}};
}

void main() {
    uint w = flat_invocation({{LOCAL_SIZE}}u);
{{STORE}}
}
