#version 450
// Element copy between device buffers: dst[dst_off + j] = src[src_off + j], j < n, for an
// element width of BITS bits (1..32; 64-bit types copy as two 32-bit elements). Used for
// cache tables (write_slice/read_slice) without a host round trip. One invocation per
// destination word; words only partly covered keep their other elements (read-modify-
// write by the one invocation that owns the word).
#define BITS {{BITS}}u
#define EPW (32u / BITS)
layout(local_size_x = {{LOCAL_SIZE}}) in;
layout(set = 0, binding = 0) buffer Src { uint src[]; };
layout(set = 0, binding = 1) buffer Dst { uint dst[]; };
layout(push_constant) uniform Push {
    uint n;
    uint src_off;
    uint dst_off;
    uint first_word;           // dst word of element dst_off
} pc;
#include "common.glsl"

uint src_element(uint i) {
    return (BITS == 32u) ? src[i] : bitfieldExtract(src[(i * BITS) >> 5], int((i * BITS) & 31u), int(BITS));
}

void main() {
    uint w = pc.first_word + flat_invocation({{LOCAL_SIZE}}u);
    uint first = w * EPW;      // first element index held by word w
    uint end = pc.dst_off + pc.n;
    if (first >= end) return;
    uint word = dst[w];
    for (uint k = 0u; k < EPW; k++) {
        uint e = first + k;
        if (e < pc.dst_off || e >= end) continue;
        uint v = src_element(pc.src_off + (e - pc.dst_off));
        word = (BITS == 32u) ? v : bitfieldInsert(word, v, int(k * BITS), int(BITS));
    }
    dst[w] = word;
}
