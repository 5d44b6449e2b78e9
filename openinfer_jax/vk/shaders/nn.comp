#version 450
// Model-building ops (vk/nn_kernels.py): out[o] = element(o), one invocation per output word.
// element() is generated per op x dtypes x static params (pad mode, bias present...); every
// shape, stride and window size arrives in the push constants p[], so one compiled kernel
// serves every shape. Bindings: 0..k-1 = input word buffers, k = output word buffer.
{{EXTENSIONS}}
layout(local_size_x = {{LOCAL_SIZE}}) in;
{{BUFFERS}}
layout(push_constant) uniform Push {
    uint n;       // output elements
    uint p[31];   // op-specific words, laid out by the generator in nn_kernels.py
} pc;
#include "common.glsl"
{{FUNCTIONS}}

{{OUT_TYPE}} element(uint o) {
{{BODY}}
}

void main() {
    uint w = flat_invocation({{LOCAL_SIZE}}u);
{{STORE}}
}
