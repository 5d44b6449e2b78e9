"""A generated llama-shaped decoder (batched, GQA, rope, KV cache) and its tensor-parallel plan.

Used by the sharding tests and bench/bench_sharding.py: `write_decoder(path, cfg)` writes
random weights with the real `OinfWriter` (one tensor at a time, so a 7B-shaped block never
sits in memory whole), `decoder_graph(cfg)` is one decode step for a batch in `graph{}` text,
and `decoder_plan()` splits it Megatron-style over a ``"model"`` mesh axis: the Q/K/V, gate
and up projections by output column, the attention-output and down projections by input
row, the K/V cache tables by KV head. Weights are stored `[in, out]`, so no transposes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from jax.sharding import PartitionSpec

from openinfer_jax.oinf import OinfWriter

__all__ = ["LAYER_WEIGHTS", "DecoderConfig", "decoder_graph", "decoder_plan", "write_decoder"]

# Per-layer weights: (DSL name, dims in sizevars). Table-driven so that the writer, the
# declarations and the plan cannot drift apart.
LAYER_WEIGHTS: tuple[tuple[str, str], ...] = (
    ("attn_norm", "D"),
    ("wq", "D, Q"),
    ("wk", "D, KV"),
    ("wv", "D, KV"),
    ("wo", "Q, D"),
    ("ffn_norm", "D"),
    ("wg", "D, F"),
    ("wu", "D, F"),
    ("wd", "F, D"),
)


@dataclass(frozen=True)
class DecoderConfig:
    """Decoder size: layers, width, query/KV heads, MLP width, batch, rope base."""

    layers: int = 2
    d: int = 64
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 128
    batch: int = 2
    theta: float = 10000.0
    eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.d // self.heads

    def sizevars(self) -> dict[str, int]:
        """The model's sizevars: D, Q (query width), KV (key/value width), F, H, Hkv, Dh."""
        return {
            "D": self.d,
            "Q": self.heads * self.head_dim,
            "KV": self.kv_heads * self.head_dim,
            "F": self.ffn,
            "H": self.heads,
            "Hkv": self.kv_heads,
            "Dh": self.head_dim,
        }

    def shape(self, dims: str) -> tuple[int, ...]:
        """Resolve a dims string like ``"D, KV"``."""
        sizes = self.sizevars()
        return tuple(sizes[d.strip()] for d in dims.split(","))

    def weight_bytes(self) -> int:
        """Bytes of all f32 weights."""
        per_layer = sum(int(np.prod(self.shape(dims))) for _n, dims in LAYER_WEIGHTS)
        return 4 * (self.layers * per_layer + self.d)


def write_decoder(path: Path, cfg: DecoderConfig, seed: int = 0) -> None:
    """Write random weights for `cfg` to `path` (streamed tensor by tensor)."""
    rng = np.random.default_rng(seed)
    with OinfWriter(path, overwrite=True) as writer:
        for name, value in cfg.sizevars().items():
            writer.add_sizevar(name, value)
        writer.add_metadata("num_layers", cfg.layers)
        for layer in range(cfg.layers):
            for name, dims in LAYER_WEIGHTS:
                shape = cfg.shape(dims)
                if name.endswith("norm"):
                    data = 1.0 + 0.1 * rng.standard_normal(shape, np.float32)
                else:
                    # 1/sqrt(fan_in) keeps activations O(1) through the layers.
                    data = rng.standard_normal(shape, np.float32) / np.float32(math.sqrt(shape[0]))
                writer.add_tensor(f"layers.{layer}.{name}", data.astype(np.float32))
        writer.add_tensor("final_norm", np.ones(cfg.d, np.float32))


def decoder_graph(cfg: DecoderConfig) -> str:
    """One decode step of the whole batch in `graph{}` text."""
    b, h, hkv, dh = cfg.batch, cfg.heads, cfg.kv_heads, cfg.head_dim
    decls = "\n".join(
        f'    {name}(l): f32[{dims}] @pattern("layers.{{l}}.{name}");'
        for name, dims in LAYER_WEIGHTS
    )
    eps, theta = cfg.eps, cfg.theta
    return f"""
graph {{
  dynamic {{ x: f32[{b}, D]; }}
  volatile {{
{decls}
    final_norm: f32[D];
  }}
  constant {{ num_layers: u32; }}
  persistent {{
    step: i32 @init(0);
    K(l, t): f32[{b}, Hkv, Dh] @table @fixed(l={cfg.layers});
    V(l, t): f32[{b}, Hkv, Dh] @table @fixed(l={cfg.layers});
  }}
  block entry {{
    assign h: f32[{b}, D];
    assign a: f32[{b}, D];
    assign q: f32[{b}, Q];
    assign k: f32[{b}, KV];
    assign v: f32[{b}, KV];
    assign qh: f32[{b}, {h}, 1, {dh}];
    assign kh: f32[{b}, {hkv}, 1, {dh}];
    assign kw: f32[{b}, {hkv}, {dh}];
    assign vw: f32[{b}, {hkv}, {dh}];
    assign ks: f32[1, {b}, {hkv}, {dh}];
    assign vs: f32[1, {b}, {hkv}, {dh}];
    assign kt: f32[{b}, {hkv}, 1, {dh}];
    assign vt: f32[{b}, {hkv}, 1, {dh}];
    assign o: f32[{b}, {h}, 1, {dh}];
    assign g: f32[{b}, F];
    assign u: f32[{b}, F];
    assign y: f32[{b}, D];
    assign pos: i32;
    transfer x >> h;
    cache.read step >> pos;
    loop layers (l in 0..num_layers) {{
      op rms_norm(h, attn_norm[l], epsilon={eps!r}) >> a;
      op matmul(a, wq[l]) >> q;
      op matmul(a, wk[l]) >> k;
      op matmul(a, wv[l]) >> v;
      op reshape(q, shape=[{b}, {h}, 1, {dh}]) >> qh;
      op rope(qh, pos, theta={theta!r}) >> qh;
      op reshape(k, shape=[{b}, {hkv}, 1, {dh}]) >> kh;
      op rope(kh, pos, theta={theta!r}) >> kh;
      op reshape(kh, shape=[{b}, {hkv}, {dh}]) >> kw;
      op reshape(v, shape=[{b}, {hkv}, {dh}]) >> vw;
      cache.write kw >> K[l, step];
      cache.write vw >> V[l, step];
      cache.read K[l, ..] >> ks;
      cache.read V[l, ..] >> vs;
      op transpose(ks, perm=[1, 2, 0, 3]) >> kt;
      op transpose(vs, perm=[1, 2, 0, 3]) >> vt;
      op attention(qh, kt, vt, scale={1.0 / math.sqrt(dh)!r}) >> o;
      op reshape(o, shape=[{b}, {h * dh}]) >> q;
      op matmul(q, wo[l]) >> a;
      op add(h, a) >> h;
      op rms_norm(h, ffn_norm[l], epsilon={eps!r}) >> a;
      op matmul(a, wg[l]) >> g;
      op silu(g) >> g;
      op matmul(a, wu[l]) >> u;
      op mul(g, u) >> g;
      op matmul(g, wd[l]) >> a;
      op add(h, a) >> h;
    }}
    op rms_norm(h, final_norm, epsilon={eps!r}) >> y;
    cache.increment step;
    return;
  }}
}}
"""


def decoder_plan(axis: str = "model") -> dict[str, PartitionSpec]:
    """Tensor parallelism over mesh axis `axis` (Megatron: one all-reduce per block half)."""
    column = PartitionSpec(None, axis)
    row = PartitionSpec(axis, None)
    cache = PartitionSpec(None, None, None, axis, None)  # [l, t, batch, kv head, head dim]
    return {
        "wq": column,
        "wk": column,
        "wv": column,
        "wg": column,
        "wu": column,
        "wo": row,
        "wd": row,
        "K": cache,
        "V": cache,
    }
