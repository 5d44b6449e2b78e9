#version 450
#extension GL_EXT_control_flow_attributes : enable
// Scaled dot-product attention, one work group per (batch, head, query) row:
//   out[row, c] = sum_j exp(s_j - M) v[j, c] / sum_j exp(s_j - M),  s_j = q.k_j * scale + mask
// Pass 1: each invocation folds its share of the keys into a running (max, sum of exp), and
// a tree in shared memory merges them into the row's (M, S). Pass 2: the keys in chunks of WG;
// each invocation computes one exp(s_j - M) into shared memory, then accumulates its output
// columns (c = tid + u * WG) over the chunk. Hidden keys (causal, bool mask false, score
// -inf) weigh 0; a row with no visible key gives 0 like the reference.
// The result is written as f32 words (f32 outputs directly; narrower ones through a cast).
// SPLIT (a define from the generator): the keys are split into `splits` ranges of `chunk`
// keys, one work group each (a decode step has few rows: without it most of a GPU idles);
// each writes its partial (max, sum, unnormalized output row) and a second kernel merges
// the partials of a row (nn_kernels.attention_merge_kernel).
{{EXTENSIONS}}
#define WG {{WG}}
#define COLS {{COLS}}
{{VARIANT}}
layout(local_size_x = WG) in;
{{BUFFERS}}
layout(push_constant) uniform Push {
    uint rows;      // batch * Hq * Sq
    uint hq;
    uint sq;
    uint skv;
    uint d;         // head dim of q and k
    uint dv;        // head dim of v
    uint group;     // Hq / Hkv: query heads per kv head
    uint causal;    // 1: key j is visible to query i iff j <= i + skv - sq
    uint scale;     // f32 bits
    uint m_batch;   // mask element strides (0 along broadcast dims)
    uint m_head;
    uint m_query;
    uint m_key;
    uint splits;    // key ranges per row (1 without SPLIT)
    uint chunk;     // keys per range
} pc;
#include "common.glsl"
{{FUNCTIONS}}

shared float red_m[WG];
shared float red_s[WG];
shared float probs[WG];

const float NEG_INF = -1.0 / 0.0;

float score(uint q_base, uint k_base, uint m_base, uint i, uint j) {
    if (pc.causal != 0u && j + pc.sq > i + pc.skv) return NEG_INF;
{{MASK_SELECT}}
    float acc = 0.0;
    for (uint t = 0u; t < pc.d; t++) acc += float(load0(q_base + t)) * float(load1(k_base + j * pc.d + t));
    acc *= uintBitsToFloat(pc.scale);
{{MASK_ADD}}
    return acc;
}

void main() {
    uint group_id = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
    uint row = group_id / pc.splits;
    if (row >= pc.rows) return;  // the same for the whole group: barriers stay uniform
    uint j_begin = (group_id % pc.splits) * pc.chunk;
    uint j_end = min(pc.skv, j_begin + pc.chunk);
    uint tid = gl_LocalInvocationID.x;
    uint i = row % pc.sq;
    uint h = (row / pc.sq) % pc.hq;
    uint b = row / (pc.sq * pc.hq);
    uint hkv = pc.hq / pc.group;
    uint kv = b * hkv + h / pc.group;
    uint q_base = row * pc.d;
    uint k_base = kv * pc.skv * pc.d;
    uint v_base = kv * pc.skv * pc.dv;
    uint m_base = b * pc.m_batch + h * pc.m_head + i * pc.m_query;

    // Pass 1: (max, sum of exp(s - max)) of this invocation's keys, updated online.
    float m = NEG_INF;
    float s = 0.0;
    for (uint j = j_begin + tid; j < j_end; j += WG) {
        float x = score(q_base, k_base, m_base, i, j);
        if (x == NEG_INF) continue;
        if (x > m) { s = s * exp(m - x) + 1.0; m = x; }
        else s += exp(x - m);
    }
    red_m[tid] = m;
    red_s[tid] = s;
    barrier();
    for (uint half_ = WG / 2u; half_ > 0u; half_ >>= 1) {
        if (tid < half_) {
            float m1 = red_m[tid], m2 = red_m[tid + half_];
            float mm = max(m1, m2);
            if (mm != NEG_INF) {
                float s1 = (m1 == NEG_INF) ? 0.0 : red_s[tid] * exp(m1 - mm);
                float s2 = (m2 == NEG_INF) ? 0.0 : red_s[tid + half_] * exp(m2 - mm);
                red_m[tid] = mm;
                red_s[tid] = s1 + s2;
            }
        }
        barrier();
    }
    float row_max = red_m[0];
    float row_sum = red_s[0];

    // Pass 2: weights of a chunk of keys in shared memory, then the weighted sum of v.
    float acc[COLS];
    [[unroll]] for (int u = 0; u < COLS; u++) acc[u] = 0.0;
    for (uint j0 = j_begin; j0 < j_end; j0 += WG) {
        uint j = j0 + tid;
        float p = 0.0;
        if (j < j_end) {
            float x = score(q_base, k_base, m_base, i, j);
            p = (x == NEG_INF) ? 0.0 : exp(x - row_max);
        }
        probs[tid] = p;
        barrier();
        uint count = min(uint(WG), j_end - j0);
        for (uint jj = 0u; jj < count; jj++) {
            float pj = probs[jj];
            uint v_row = v_base + (j0 + jj) * pc.dv;
            [[unroll]] for (int u = 0; u < COLS; u++) {
                uint c = tid + uint(u) * WG;
                if (c < pc.dv) acc[u] += pj * float(load2(v_row + c));
            }
        }
        barrier();
    }
#ifdef SPLIT
    uint part = group_id * (pc.dv + 2u);  // (max, sum, dv unnormalized outputs)
    if (tid == 0u) {
        outw[part] = floatBitsToUint(row_max);
        outw[part + 1u] = floatBitsToUint(row_sum);
    }
    [[unroll]] for (int u = 0; u < COLS; u++) {
        uint c = tid + uint(u) * WG;
        if (c < pc.dv) outw[part + 2u + c] = floatBitsToUint(acc[u]);
    }
#else
    [[unroll]] for (int u = 0; u < COLS; u++) {
        uint c = tid + uint(u) * WG;
        if (c < pc.dv) outw[row * pc.dv + c] = floatBitsToUint(row_sum > 0.0 ? acc[u] / row_sum : 0.0);
    }
#endif
}
