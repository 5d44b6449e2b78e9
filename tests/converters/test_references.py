"""Converted real models reproduce the upstream reference outputs (tests/fixtures/references).

The fixtures come from PyTorch/transformers/sentence-transformers (scripts/make_references.py).
Here a small NumPy forward pass, written from the BERT and llama equations and fed only from the
converted `.oinf` files, must reproduce them: that checks names, layouts, dtypes, config sizes
and the GGUF Q/K un-permutation end to end. (The DSL/simulator versions live in examples/.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from math import erf, sqrt
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.converters import convert
from openinfer_jax.oinf import ModelLoader

REFERENCES = Path(__file__).resolve().parents[1] / "fixtures" / "references"
_erf = np.vectorize(erf, otypes=[np.float64])


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def bert_embeddings(m: ModelLoader, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Sentence embeddings of BERT weights named by the `bert` preset (float64 math)."""
    w = {name: np.asarray(m.tensor(name), np.float64) for name in m.tensors}
    heads, eps = m.size_of("num_attention_heads"), float(m.metadata["layer_norm_eps"])
    batch, seq = ids.shape
    x = w["tok_emb.weight"][ids] + w["pos_emb.weight"][np.arange(seq)] + w["type_emb.weight"][types]
    x = layer_norm(x, w["emb_ln.weight"], w["emb_ln.bias"], eps)
    bias = np.where(mask[:, None, None, :] > 0, 0.0, -1e9)
    hd = x.shape[-1] // heads
    for layer in range(m.size_of("num_hidden_layers")):

        def dense(v: np.ndarray, stem: str, layer: int = layer) -> np.ndarray:
            return v @ w[f"{stem}.weight.{layer}"].T + w[f"{stem}.bias.{layer}"]

        def split(v: np.ndarray) -> np.ndarray:
            return v.reshape(batch, seq, heads, hd).transpose(0, 2, 1, 3)

        q, k, v = (split(dense(x, s)) for s in ("q", "k", "v"))
        attn = softmax(q @ k.transpose(0, 1, 3, 2) / sqrt(hd) + bias) @ v
        attn = attn.transpose(0, 2, 1, 3).reshape(batch, seq, -1)
        x = layer_norm(x + dense(attn, "attn_out"), w[f"attn_ln.weight.{layer}"], w[f"attn_ln.bias.{layer}"], eps)
        h = dense(x, "ffn_in")
        h = 0.5 * h * (1.0 + _erf(h / sqrt(2.0)))
        x = layer_norm(x + dense(h, "ffn_out"), w[f"ffn_ln.weight.{layer}"], w[f"ffn_ln.bias.{layer}"], eps)
    pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    return pooled / np.linalg.norm(pooled, axis=-1, keepdims=True)


def test_minilm_embeddings_match_sentence_transformers(minilm_dir: Path, tmp_path: Path) -> None:
    ref = np.load(REFERENCES / "minilm.npz")
    out = tmp_path / "minilm.oinf"
    convert(minilm_dir, out, pattern="bert")
    with ModelLoader.open(out) as m:
        got = bert_embeddings(m, ref["input_ids"], ref["token_type_ids"], ref["attention_mask"])
    cosine = (got * ref["embeddings"]).sum(-1)
    assert cosine.min() >= 0.9999, cosine
    np.testing.assert_allclose(got, ref["embeddings"], atol=1e-5)


class Llama:
    """A NumPy llama decoder over weights named by the `llama` preset, with a KV cache."""

    def __init__(self, m: ModelLoader) -> None:
        self.w = {name: np.asarray(m.tensor(name), np.float32) for name in m.tensors}
        self.layers = m.size_of("num_hidden_layers")
        self.heads = m.size_of("num_attention_heads")
        self.kv_heads = m.size_of("num_key_value_heads")
        self.hd = m.size_of("head_dim")
        self.eps = float(m.metadata["rms_norm_eps"])
        theta = float(m.metadata["rope_theta"])
        self.inv_freq = 1.0 / theta ** (np.arange(0, self.hd, 2, dtype=np.float64) / self.hd)
        self.cache: list[tuple[np.ndarray, np.ndarray]] = []

    def rms(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + self.eps).astype(np.float32) * weight

    def rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        angles = positions[:, None] * self.inv_freq[None, :]
        cos = np.cos(np.concatenate([angles, angles], -1)).astype(np.float32)
        sin = np.sin(np.concatenate([angles, angles], -1)).astype(np.float32)
        half = self.hd // 2
        rotated = np.concatenate([-x[..., half:], x[..., :half]], -1)
        return x * cos[None] + rotated * sin[None]

    def step(self, tokens: np.ndarray) -> np.ndarray:
        """Run `tokens` (appending to the cache) and return the logits of the last one."""
        w, start = self.w, (self.cache[0][0].shape[1] if self.cache else 0)
        positions = np.arange(start, start + len(tokens), dtype=np.float64)
        x = w["tok_emb.weight"][tokens]
        n, group = len(tokens), self.heads // self.kv_heads
        causal = np.triu(np.full((n, start + n), -np.inf, np.float32), start + 1)
        for layer in range(self.layers):
            h = self.rms(x, w[f"attn_norm.weight.{layer}"])
            q = (h @ w[f"q.weight.{layer}"].T).reshape(n, self.heads, self.hd).transpose(1, 0, 2)
            k = (h @ w[f"k.weight.{layer}"].T).reshape(n, self.kv_heads, self.hd).transpose(1, 0, 2)
            v = (h @ w[f"v.weight.{layer}"].T).reshape(n, self.kv_heads, self.hd).transpose(1, 0, 2)
            q, k = self.rope(q, positions), self.rope(k, positions)
            if len(self.cache) > layer:
                k = np.concatenate([self.cache[layer][0], k], 1)
                v = np.concatenate([self.cache[layer][1], v], 1)
                self.cache[layer] = (k, v)
            else:
                self.cache.append((k, v))
            k, v = np.repeat(k, group, 0), np.repeat(v, group, 0)
            attn = softmax(q @ k.transpose(0, 2, 1) / np.float32(sqrt(self.hd)) + causal) @ v
            x = x + attn.transpose(1, 0, 2).reshape(n, -1) @ w[f"o.weight.{layer}"].T
            h = self.rms(x, w[f"ffn_norm.weight.{layer}"])
            gate = h @ w[f"gate.weight.{layer}"].T
            x = x + ((gate / (1.0 + np.exp(-gate))) * (h @ w[f"up.weight.{layer}"].T)) @ w[f"down.weight.{layer}"].T
        return self.rms(x[-1], w["norm.weight"]) @ w["tok_emb.weight"].T  # tied embeddings


@pytest.fixture(scope="module")
def smollm_loader(smollm_packed_oinf: Path) -> Iterator[ModelLoader]:
    with ModelLoader.open(smollm_packed_oinf) as m:
        yield m


@pytest.mark.slow
def test_smollm2_greedy_tokens_and_logits_match_transformers(smollm_loader: ModelLoader) -> None:
    ref = np.load(REFERENCES / "smollm2.npz")
    manifest = json.loads((REFERENCES / "manifest.json").read_text())
    steps = 4  # the full 32 steps x 3 prompts are the simulator's job; 4 keep this test short
    for i in range(len(manifest["smollm2"]["prompts"])):
        model = Llama(smollm_loader)
        logits = model.step(ref[f"prompt{i}_ids"])
        first = ref[f"prompt{i}_first_logits"].astype(np.float32)
        # the reference logits are stored as float16: compare at that precision
        np.testing.assert_allclose(logits, first, atol=2e-2, rtol=2e-3)
        tokens = []
        for step in range(steps):
            token = int(np.argmax(logits))
            tokens.append(token)
            np.testing.assert_allclose(
                logits[ref[f"prompt{i}_topk_ids"][step]], ref[f"prompt{i}_topk_logits"][step], atol=2e-3, rtol=1e-4
            )
            logits = model.step(np.asarray([token]))
        assert tokens == ref[f"prompt{i}_generated"][:steps].tolist()
