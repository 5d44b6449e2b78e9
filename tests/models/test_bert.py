"""The BERT builder against a NumPy reference (tiny model) and MiniLM's reference embeddings."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.models import build_graph
from openinfer_jax.models.bert import bert_inputs
from openinfer_jax.oinf import ModelLoader, write_oinf
from openinfer_jax.sim import Simulator

ROOT = Path(__file__).resolve().parents[2]
SIZES = {"hidden": 16, "heads": 2, "inter": 24, "vocab": 30, "positions": 12, "layers": 2}


def write_tiny_bert(path: Path) -> Path:
    """A 2-layer BERT with random weights in the `bert` preset's names."""
    rng = np.random.default_rng(1)
    d, f = SIZES["hidden"], SIZES["inter"]

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    tensors = {
        "tok_emb.weight": w(SIZES["vocab"], d), "pos_emb.weight": w(SIZES["positions"], d),
        "type_emb.weight": w(2, d), "emb_ln.weight": 1 + w(d), "emb_ln.bias": w(d),
    }  # fmt: skip
    for layer in range(SIZES["layers"]):
        for stem, rows, cols in (
            ("q", d, d),
            ("k", d, d),
            ("v", d, d),
            ("attn_out", d, d),
            ("ffn_in", f, d),
            ("ffn_out", d, f),
        ):
            tensors[f"{stem}.weight.{layer}"] = w(rows, cols)
            tensors[f"{stem}.bias.{layer}"] = w(rows)
        for stem in ("attn_ln", "ffn_ln"):
            tensors[f"{stem}.weight.{layer}"] = 1 + w(d)
            tensors[f"{stem}.bias.{layer}"] = w(d)
    return write_oinf(
        path,
        sizevars={
            "hidden_size": d, "num_attention_heads": SIZES["heads"], "intermediate_size": f,
            "num_hidden_layers": SIZES["layers"], "vocab_size": SIZES["vocab"],
            "max_position_embeddings": SIZES["positions"], "type_vocab_size": 2,
        },
        metadata={"model_type": "bert", "layer_norm_eps": 1e-12},
        tensors=tensors,
    )  # fmt: skip


def bert_reference(path: Path, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """L2-normalized mean-pooled last hidden states (float64), written from BERT's definition."""
    from math import erf

    with ModelLoader.open(path) as m:
        t = {k: np.asarray(m.tensor(k), np.float64) for k in m.tensors}
    nh = SIZES["heads"]
    batch, seq = ids.shape
    hd = SIZES["hidden"] // nh

    def ln(x: np.ndarray, g: np.ndarray, b: np.ndarray) -> np.ndarray:
        mu = x.mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-12) * g + b

    def lin(x: np.ndarray, stem: str, layer: int) -> np.ndarray:
        return x @ t[f"{stem}.weight.{layer}"].T + t[f"{stem}.bias.{layer}"]

    def heads(x: np.ndarray) -> np.ndarray:
        return x.reshape(batch, seq, nh, hd).transpose(0, 2, 1, 3)

    h = t["tok_emb.weight"][ids] + t["pos_emb.weight"][np.arange(seq)] + t["type_emb.weight"][0]
    h = ln(h, t["emb_ln.weight"], t["emb_ln.bias"])
    for layer in range(SIZES["layers"]):
        q, k, v = (heads(lin(h, s, layer)) for s in ("q", "k", "v"))
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hd) + ((1 - mask) * -1e9)[:, None, None, :]
        p = np.exp(s - s.max(-1, keepdims=True))
        o = ((p / p.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(batch, seq, -1)
        h = ln(
            h + lin(o, "attn_out", layer), t[f"attn_ln.weight.{layer}"], t[f"attn_ln.bias.{layer}"]
        )
        f = lin(h, "ffn_in", layer)
        f = f * 0.5 * (1 + np.vectorize(erf)(f / np.sqrt(2)))
        h = ln(h + lin(f, "ffn_out", layer), t[f"ffn_ln.weight.{layer}"], t[f"ffn_ln.bias.{layer}"])
    pooled = (h * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    return pooled / np.linalg.norm(pooled, axis=-1, keepdims=True)


def test_tiny_bert_matches_reference(tmp_path: Path) -> None:
    path = write_tiny_bert(tmp_path / "bert.oinf")
    ids = np.array([[2, 5, 7, 9, 0, 0], [4, 4, 1, 8, 3, 11]])
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], np.float64)
    ex = Simulator(path, build_graph(path, "bert", batch=2, seq=6)).make_executor()
    ex.insert(bert_inputs(ids, None, mask))
    ex.step()
    np.testing.assert_allclose(
        np.asarray(ex.fetch("y")), bert_reference(path, ids, mask), atol=2e-5
    )


@pytest.mark.slow
def test_minilm_matches_sentence_transformers(minilm_oinf: Path) -> None:
    ref = np.load(ROOT / "tests" / "fixtures" / "references" / "minilm.npz")
    batch, seq = ref["input_ids"].shape
    ex = Simulator(
        minilm_oinf, build_graph(minilm_oinf, "bert", batch=batch, seq=seq)
    ).make_executor()
    ex.insert(bert_inputs(ref["input_ids"], ref["token_type_ids"], ref["attention_mask"]))
    ex.step()
    y = np.asarray(ex.fetch("y"))
    assert ((y * ref["embeddings"]).sum(-1) / np.linalg.norm(y, axis=-1)).min() >= 0.9999
