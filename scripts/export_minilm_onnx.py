"""Export all-MiniLM-L6-v2 as ONNX (the way torch.onnx.export writes a Hugging Face BERT), for
bench/bench_onnx.py's comparison of the imported program with examples/minilm.

Run with the peer venv (torch): ``build/peervenv/bin/python scripts/export_minilm_onnx.py
WEIGHTS.npz OUT.onnx``. WEIGHTS.npz holds the checkpoint's tensors under their Hugging Face
names (the benchmark writes it from the packaged safetensors, since the peer venv has no
safetensors reader). The model is scripts/make_onnx_fixtures.py's TinyBert at MiniLM's sizes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_onnx_fixtures import OPSET, TinyBert

# TinyBert parameter -> Hugging Face BertModel tensor ({l}: layer index).
_NAMES = {
    "word.weight": "embeddings.word_embeddings.weight",
    "position.weight": "embeddings.position_embeddings.weight",
    "token_type.weight": "embeddings.token_type_embeddings.weight",
    "emb_ln.weight": "embeddings.LayerNorm.weight",
    "emb_ln.bias": "embeddings.LayerNorm.bias",
    "pooler.weight": "pooler.dense.weight",
    "pooler.bias": "pooler.dense.bias",
}
_LAYER = {
    "attention.query": "attention.self.query",
    "attention.key": "attention.self.key",
    "attention.value": "attention.self.value",
    "attn_out": "attention.output.dense",
    "attn_ln": "attention.output.LayerNorm",
    "ffn_in": "intermediate.dense",
    "ffn_out": "output.dense",
    "ffn_ln": "output.LayerNorm",
}


def _source(name: str) -> str:
    if name in _NAMES:
        return _NAMES[name]
    _, layer, rest = name.split(".", 2)
    module, param = rest.rsplit(".", 1)
    return f"encoder.layer.{layer}.{_LAYER[module]}.{param}"


def main() -> None:
    """Load the weights into TinyBert(MiniLM sizes) and export it with dynamic batch/seq."""
    weights, out = np.load(sys.argv[1]), Path(sys.argv[2])
    model = TinyBert(vocab=30522, hidden=384, heads=12, layers=6, inner=1536, positions=512).eval()
    state = model.state_dict()
    for name in state:
        if name == "position_ids":
            continue
        state[name] = torch.from_numpy(weights[_source(name)].copy())
    model.load_state_dict(state)
    args = (torch.zeros((1, 8), dtype=torch.int64),) * 3
    axes = {"batch": 0, "seq": 1}
    names = ["input_ids", "attention_mask", "token_type_ids"]
    with torch.no_grad():
        torch.onnx.export(
            model, args, str(out), dynamo=False, opset_version=OPSET, input_names=names,
            output_names=["last_hidden_state", "pooled"], do_constant_folding=True,
            dynamic_axes={**{n: {v: k for k, v in axes.items()} for n in names},
                          "last_hidden_state": {0: "batch", 1: "seq"}, "pooled": {0: "batch"}},
        )  # fmt: skip


if __name__ == "__main__":
    main()
