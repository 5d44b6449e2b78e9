#version 450
#extension GL_EXT_control_flow_attributes : enable
// Scaled dot-product attention for many queries (prefill), tiled like FlashAttention: a work
// group takes BQ queries of one (batch, head) and walks the keys in chunks of BKV. Per chunk:
// K and V rows go to shared memory once for all BQ queries; the BQ x BKV scores are computed
// from shared memory (4 per invocation); then each query row updates its running max M and
// sum L (online softmax: earlier terms rescaled by exp(M_old - M_new)) and its output
// accumulators O += exp(s - M) v. Hidden keys (causal, bool mask false, score -inf) weigh 0;
// a row with no visible key gives 0 like the reference. 64 invocations: 4 per query row,
// each owning the output columns c = lane + 4u (u < COLS, so Dv <= 4 * COLS). The result is
// written as f32 words (f32 outputs directly; narrower ones through a cast).
{{EXTENSIONS}}
#define BQ 16
#define BKV 16
#define MAXD {{MAXD}}
#define COLS {{COLS}}
layout(local_size_x = 64) in;
{{BUFFERS}}
layout(push_constant) uniform Push {
    uint rows;      // batch * Hq * Sq
    uint hq;
    uint sq;
    uint skv;
    uint d;         // head dim of q and k (<= MAXD)
    uint dv;        // head dim of v (<= 4 * COLS)
    uint group;     // Hq / Hkv
    uint causal;    // 1: key j is visible to query i iff j <= i + skv - sq
    uint scale;     // f32 bits
    uint m_batch;   // mask element strides (0 along broadcast dims)
    uint m_head;
    uint m_query;
    uint m_key;
} pc;
#include "common.glsl"
{{FUNCTIONS}}

shared float Qs[BQ][MAXD];
shared float Ks[BKV][MAXD + 1];  // +1: rows land on different banks
shared float Vs[BKV][4 * COLS];
shared float S[BQ][BKV];

const float NEG_INF = -1.0 / 0.0;

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint bh = gl_WorkGroupID.y;            // batch * Hq + head
    uint i0 = gl_WorkGroupID.x * BQ;       // first query of the block
    uint h = bh % pc.hq;
    uint b = bh / pc.hq;
    uint hkv = pc.hq / pc.group;
    uint kv = b * hkv + h / pc.group;
    uint k_base = kv * pc.skv * pc.d;
    uint v_base = kv * pc.skv * pc.dv;
    float scale = uintBitsToFloat(pc.scale);

    for (uint t = tid; t < BQ * pc.d; t += 64u) {
        uint r = t / pc.d;
        uint i = i0 + r;
        Qs[r][t % pc.d] = (i < pc.sq) ? float(load0((bh * pc.sq + i) * pc.d + t % pc.d)) : 0.0;
    }

    uint row = tid >> 2;    // this invocation's query row in the block
    uint lane = tid & 3u;   // and its share of the columns
    uint i = i0 + row;
    uint m_base = b * pc.m_batch + h * pc.m_head + min(i, pc.sq - 1u) * pc.m_query;
    float m = NEG_INF;
    float l = 0.0;
    float o[COLS];
    [[unroll]] for (int u = 0; u < COLS; u++) o[u] = 0.0;

    for (uint j0 = 0u; j0 < pc.skv; j0 += BKV) {
        barrier();  // the previous chunk's K, V and S are no longer read
        for (uint t = tid; t < BKV * pc.d; t += 64u) {
            uint j = j0 + t / pc.d;
            Ks[t / pc.d][t % pc.d] = (j < pc.skv) ? float(load1(k_base + j * pc.d + t % pc.d)) : 0.0;
        }
        for (uint t = tid; t < BKV * pc.dv; t += 64u) {
            uint j = j0 + t / pc.dv;
            Vs[t / pc.dv][t % pc.dv] = (j < pc.skv) ? float(load2(v_base + j * pc.dv + t % pc.dv)) : 0.0;
        }
        barrier();
        // Scores: row `row`, keys lane, lane + 4, lane + 8, lane + 12 of the chunk.
        [[unroll]] for (uint q = 0u; q < BKV / 4u; q++) {
            uint jj = lane + 4u * q;
            uint j = j0 + jj;
            float s = NEG_INF;
            bool visible = i < pc.sq && j < pc.skv;
            if (visible && pc.causal != 0u && j + pc.sq > i + pc.skv) visible = false;
{{MASK_SELECT}}
            if (visible) {
                float acc = 0.0;
                for (uint t = 0u; t < pc.d; t++) acc += Qs[row][t] * Ks[jj][t];
                s = acc * scale;
{{MASK_ADD}}
            }
            S[row][jj] = s;
        }
        barrier();
        // Online softmax update of this row (the 4 lanes of a row compute it alike).
        float chunk_max = NEG_INF;
        [[unroll]] for (uint jj = 0u; jj < BKV; jj++) chunk_max = max(chunk_max, S[row][jj]);
        float m_new = max(m, chunk_max);
        if (m_new != NEG_INF) {  // else nothing is visible yet
            float alpha = (m == NEG_INF) ? 0.0 : exp(m - m_new);
            l *= alpha;
            [[unroll]] for (int u = 0; u < COLS; u++) o[u] *= alpha;
            [[unroll]] for (uint jj = 0u; jj < BKV; jj++) {
                float s = S[row][jj];
                float p = (s == NEG_INF) ? 0.0 : exp(s - m_new);
                l += p;
                [[unroll]] for (int u = 0; u < COLS; u++) {
                    uint c = lane + 4u * uint(u);
                    if (c < pc.dv) o[u] += p * Vs[jj][c];
                }
            }
            m = m_new;
        }
    }
    if (i >= pc.sq) return;
    uint out_base = (bh * pc.sq + i) * pc.dv;
    [[unroll]] for (int u = 0; u < COLS; u++) {
        uint c = lane + 4u * uint(u);
        if (c < pc.dv) outw[out_base + c] = floatBitsToUint(l > 0.0 ? o[u] / l : 0.0);
    }
}
