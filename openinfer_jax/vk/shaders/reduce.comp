#version 450
// Axis reduction: out[o] = fold over the reduced index space of in0 at base(o).
// Kept dims and reduced dims are both described by (shape, input stride) pairs in push
// constants, so any set of axes reduces without a transpose. One invocation per output
// word; each folds its elements serially in the accumulator type.
{{EXTENSIONS}}
#define MAX_RANK {{MAX_RANK}}
layout(local_size_x = {{LOCAL_SIZE}}) in;
{{BUFFERS}}
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
#include "common.glsl"
{{FUNCTIONS}}

{{OUT_TYPE}} element(uint o) {
    uint base = 0u;
    uint rest = o;
    for (int d = int(pc.keep_rank) - 1; d >= 0; d--) {
        base += (rest % pc.keep_shape[d]) * pc.keep_stride[d];
        rest /= pc.keep_shape[d];
    }
{{INIT}}
    for (uint r = 0u; r < pc.n_red; r++) {
        uint i = base;
        uint rr = r;
        for (int d = int(pc.red_rank) - 1; d >= 0; d--) {
            i += (rr % pc.red_shape[d]) * pc.red_stride[d];
            rr /= pc.red_shape[d];
        }
        {{ACC_TYPE}} v = {{LOAD}};
{{STEP}}
    }
{{FINISH}}
}

void main() {
    uint w = flat_invocation({{LOCAL_SIZE}}u);
{{STORE}}
}
