#version 450
// Elementwise kernel: out[o] = EXPR(in0[idx0(o)], in1[idx1(o)], ...) with NumPy broadcasting.
// Bindings: 0..ARITY-1 = input word buffers, ARITY = output word buffer.
// Broadcasting is by strides: input k's element index for output element o is
// sum_d coord_d(o) * strides[k * MAX_RANK + d], with stride 0 along broadcast dims (the host
// collapses contiguous dims first, so rank is usually 1 or 2). No expanded copies.
// Each invocation writes one whole output word (several elements of a narrow type), so
// neighbouring elements in one word never race.
{{EXTENSIONS}}
#define MAX_RANK {{MAX_RANK}}
#define ARITY {{ARITY}}
layout(local_size_x = {{LOCAL_SIZE}}) in;
{{BUFFERS}}
layout(push_constant) uniform Push {
    uint n;                         // output elements
    uint rank;                      // collapsed rank, 1..MAX_RANK
    uint shape[MAX_RANK];           // collapsed output shape
    uint strides[ARITY * MAX_RANK]; // element strides of each input over the output index
    uint p[6];                      // scalar params as raw bits (see kernels.py)
} pc;
#include "common.glsl"
{{FUNCTIONS}}

{{OUT_TYPE}} element(uint o) {
    uint idx[ARITY];
    for (int k = 0; k < ARITY; k++) idx[k] = 0u;
    uint rest = o;
    for (int d = int(pc.rank) - 1; d >= 0; d--) {
        uint c = rest % pc.shape[d];
        rest /= pc.shape[d];
        for (int k = 0; k < ARITY; k++) idx[k] += c * pc.strides[k * MAX_RANK + d];
    }
{{INDEX_ADJUST}}
{{OPERANDS}}
    return {{EXPR}};
}

void main() {
    uint w = flat_invocation({{LOCAL_SIZE}}u);
{{STORE}}
}
