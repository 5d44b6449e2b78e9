"""KV-cache decode: a GPT-2-shaped transformer decoding several tokens with a growing cache.

Each step inserts one token's hidden state, runs every layer (layer norm, fused qkv
projection, attention over all cached keys/values, MLP with GELU), appends this token's
k/v to the persistent tables `K(l, t)` / `V(l, t)` and bumps `step`. The result of every
step is checked against a NumPy implementation of the same math.

Run: `python examples/kv_cache_decode.py`. The functions here (`Config`, `write_model`,
`graph_text`, `numpy_step`) are reused by bench/bench_sim.py for the GPT-2-small benchmark.
"""

from __future__ import annotations

import math
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from openinfer_jax.oinf import OinfWriter
from openinfer_jax.sim import Simulator

# Per-layer weights: (name, shape as a function of the config). Table-driven so the model
# writer, the graph declarations and the NumPy reference cannot drift apart.
LAYER_TENSORS: tuple[tuple[str, str], ...] = (
    ("ln1_g", "D"),
    ("ln1_b", "D"),
    ("w_qkv", "D,3*D"),
    ("b_qkv", "3*D"),
    ("w_o", "D,D"),
    ("b_o", "D"),
    ("ln2_g", "D"),
    ("ln2_b", "D"),
    ("w_fc", "D,4*D"),
    ("b_fc", "4*D"),
    ("w_pr", "4*D,D"),
    ("b_pr", "D"),
)


@dataclass(frozen=True)
class Config:
    """Model size: layers, width, heads."""

    layers: int = 2
    d: int = 64
    heads: int = 4

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.d // self.heads

    def dims(self, spec: str) -> tuple[int, ...]:
        """Resolve a shape spec like ``"D,3*D"`` for this config."""
        return tuple(
            math.prod(self.d if term == "D" else int(term) for term in part.split("*"))
            for part in spec.split(",")
        )


def write_model(path: Path, cfg: Config, seed: int = 0) -> None:
    """Write random GPT-2-like weights to `path` with the real OinfWriter (streamed per tensor)."""
    rng = np.random.default_rng(seed)
    with OinfWriter(path, overwrite=True) as w:
        w.add_sizevar("D", cfg.d)
        w.add_sizevar("H", cfg.heads)
        w.add_sizevar("Dh", cfg.head_dim)
        w.add_metadata("num_layers", cfg.layers)
        for layer in range(cfg.layers):
            for name, spec in LAYER_TENSORS:
                shape = cfg.dims(spec)
                scale = 1.0 if name.endswith("_g") else 0.02
                data = (rng.standard_normal(shape) * scale).astype(np.float32)
                if name.endswith("_g"):
                    data = (1.0 + 0.1 * data).astype(np.float32)
                w.add_tensor(f"h.{layer}.{name}", data)
        w.add_tensor("lnf_g", np.ones(cfg.d, np.float32))
        w.add_tensor("lnf_b", np.zeros(cfg.d, np.float32))


def graph_text(cfg: Config) -> str:
    """The decode step in `graph{}` text."""
    d, h, dh = cfg.d, cfg.heads, cfg.head_dim
    decls = "\n".join(
        f"    {name}(l): f32[{spec.replace(',', ', ')}] @pattern(\"h.{{l}}.{name}\");"
        for name, spec in LAYER_TENSORS
    )
    return f"""
graph {{
  dynamic {{ x: f32[1, D]; }}
  volatile {{
{decls}
    lnf_g: f32[D];
    lnf_b: f32[D];
  }}
  constant {{ num_layers: u32; }}
  persistent {{
    step: i32 @init(0);
    K(l, t): f32[H, Dh] @table;
    V(l, t): f32[H, Dh] @table;
  }}
  block entry {{
    assign h: f32[1, D];
    assign a: f32[1, D];
    assign qkv: f32[1, 3*D];
    assign q: f32[1, D];
    assign k: f32[1, D];
    assign v: f32[1, D];
    assign qh: f32[H, 1, Dh];
    assign kh: f32[H, Dh];
    assign vh: f32[H, Dh];
    assign ks: f32[1, H, Dh];
    assign vs: f32[1, H, Dh];
    assign kt: f32[H, 1, Dh];
    assign vt: f32[H, 1, Dh];
    assign o: f32[H, 1, Dh];
    assign o2: f32[1, D];
    assign f: f32[1, 4*D];
    assign y: f32[1, D];
    transfer x >> h;
    loop layers (l in 0..num_layers) {{
      op layer_norm(h, ln1_g[l], ln1_b[l]) >> a;
      op matmul(a, w_qkv[l]) >> qkv;
      op add(qkv, b_qkv[l]) >> qkv;
      op slice(qkv, starts=[0], ends=[{d}], axes=[1]) >> q;
      op slice(qkv, starts=[{d}], ends=[{2 * d}], axes=[1]) >> k;
      op slice(qkv, starts=[{2 * d}], ends=[{3 * d}], axes=[1]) >> v;
      op reshape(q, shape=[{h}, 1, {dh}]) >> qh;
      op reshape(k, shape=[{h}, {dh}]) >> kh;
      op reshape(v, shape=[{h}, {dh}]) >> vh;
      cache.write kh >> K[l, step];
      cache.write vh >> V[l, step];
      cache.read K[l, ..] >> ks;
      cache.read V[l, ..] >> vs;
      op transpose(ks, perm=[1, 0, 2]) >> kt;
      op transpose(vs, perm=[1, 0, 2]) >> vt;
      op attention(qh, kt, vt, scale={1.0 / math.sqrt(dh)!r}) >> o;
      op reshape(o, shape=[1, {d}]) >> o2;
      op matmul(o2, w_o[l]) >> a;
      op add(a, b_o[l]) >> a;
      op add(h, a) >> h;
      op layer_norm(h, ln2_g[l], ln2_b[l]) >> a;
      op matmul(a, w_fc[l]) >> f;
      op add(f, b_fc[l]) >> f;
      op gelu(f) >> f;
      op matmul(f, w_pr[l]) >> a;
      op add(a, b_pr[l]) >> a;
      op add(h, a) >> h;
    }}
    op layer_norm(h, lnf_g, lnf_b) >> y;
    cache.increment step;
    return;
  }}
}}
"""


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * g + b


def _gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def numpy_step(
    weights: dict[str, np.ndarray], cfg: Config, x: np.ndarray, cache: list[tuple[list, list]]
) -> np.ndarray:
    """One decode step in float64 NumPy; appends to `cache` (per layer: list of k, list of v)."""
    d, h, dh = cfg.d, cfg.heads, cfg.head_dim
    hid = x.astype(np.float64)
    for layer in range(cfg.layers):
        p = {name: weights[f"h.{layer}.{name}"].astype(np.float64) for name, _ in LAYER_TENSORS}
        a = _layer_norm(hid, p["ln1_g"], p["ln1_b"])
        qkv = a @ p["w_qkv"] + p["b_qkv"]
        q, k, v = qkv[:, :d], qkv[:, d : 2 * d], qkv[:, 2 * d :]
        cache[layer][0].append(k.reshape(h, dh))
        cache[layer][1].append(v.reshape(h, dh))
        keys = np.stack(cache[layer][0], axis=1)  # [H, n, Dh]
        values = np.stack(cache[layer][1], axis=1)
        scores = np.einsum("hd,hnd->hn", q.reshape(h, dh), keys) / math.sqrt(dh)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probs = scores / scores.sum(-1, keepdims=True)
        att = np.einsum("hn,hnd->hd", probs, values).reshape(1, d)
        hid = hid + att @ p["w_o"] + p["b_o"]
        a = _layer_norm(hid, p["ln2_g"], p["ln2_b"])
        f = _gelu(a @ p["w_fc"] + p["b_fc"])
        hid = hid + f @ p["w_pr"] + p["b_pr"]
    return _layer_norm(hid, np.ones(d), np.zeros(d))


def main() -> int:
    """Decode 12 tokens and check every step against NumPy."""
    cfg = Config(layers=2, d=64, heads=4)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gpt.oinf"
        write_model(path, cfg)
        sim = Simulator(path, graph_text(cfg))
        ex = sim.make_executor()
        weights = {name: np.array(sim.model.tensor(name)) for name in sim.model.tensors}
        cache: list[tuple[list, list]] = [([], []) for _ in range(cfg.layers)]
        rng = np.random.default_rng(1)
        steps = 12
        for _ in range(steps):
            x = rng.standard_normal((1, cfg.d)).astype(np.float32)
            ex.insert(x=x)
            ex.step()
            want = numpy_step(weights, cfg, x, cache)
            np.testing.assert_allclose(ex.fetch("y"), want, rtol=2e-4, atol=2e-4)
        assert int(ex.fetch("step")) == steps
        assert ex.fetch("K").shape == (cfg.layers, steps, cfg.heads, cfg.head_dim)
        stats = ex.stats
        sim.model.close()
    print(f"decoded {steps} tokens, every step matches NumPy; {stats['compilations']} compilations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
