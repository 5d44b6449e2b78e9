"""Tiny random llama and BERT models in the converter's preset names, and NumPy references.

The references are written from the architectures' definitions (RMSNorm, rotary halves,
grouped-query causal attention, SwiGLU; post-LN BERT with GELU and mean pooling), not from
the graph builders, so a builder mistake shows up as a difference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from openinfer_jax.oinf import write_oinf

LLAMA = {"layers": 2, "hidden": 32, "heads": 4, "kv_heads": 2, "inter": 48, "vocab": 61}

# A 61-token byte-level BPE in GGUF's metadata form (as the converter stores a GGUF
# tokenizer): 2 control tokens, lowercase letters, space (Ġ), '.', digits, and 21 merges.
_MERGES = [
    ("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("e", "r"), ("a", "n"), ("o", "n"),
    ("r", "e"), ("Ġ", "a"), ("e", "n"), ("a", "t"), ("o", "r"), ("Ġ", "s"), ("e", "s"),
    ("Ġ", "c"), ("i", "s"), ("e", "d"), ("Ġ", "w"), ("i", "t"), ("a", "r"), ("Ġ", "o"),
]  # fmt: skip
TOKENS = ["<eos>", "<|im_start|>", *"abcdefghijklmnopqrstuvwxyz", "Ġ", ".", *"0123456789"]
TOKENS += ["".join(pair) for pair in _MERGES]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<eos>' + '\\n'}}{% endfor %}"
)


def tokenizer_metadata() -> dict[str, object]:
    """The GGUF tokenizer keys of the tiny model (gpt2-style BPE)."""
    import json

    types = np.ones(len(TOKENS), np.int64)
    types[:2] = 3  # control tokens
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": json.dumps(TOKENS),
        "tokenizer.ggml.merges": json.dumps([" ".join(m) for m in _MERGES]),
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.eos_token_id": 0,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.add_bos_token": False,
    }


def write_tiny_llama(path: Path, *, tied: bool = True, seed: int = 0, **overrides: int) -> Path:
    """A 2-layer llama-family model (GQA 4/2 heads of 8) with random weights."""
    c = {**LLAMA, **overrides}
    rng = np.random.default_rng(seed)
    hd = c["hidden"] // c["heads"]

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    tensors = {"tok_emb.weight": w(c["vocab"], c["hidden"]), "norm.weight": 1 + w(c["hidden"]) / 4}
    if not tied:
        tensors["lm_head.weight"] = w(c["vocab"], c["hidden"])
    for layer in range(c["layers"]):
        tensors |= {
            f"attn_norm.weight.{layer}": 1 + w(c["hidden"]) / 4,
            f"q.weight.{layer}": w(c["heads"] * hd, c["hidden"]),
            f"k.weight.{layer}": w(c["kv_heads"] * hd, c["hidden"]),
            f"v.weight.{layer}": w(c["kv_heads"] * hd, c["hidden"]),
            f"o.weight.{layer}": w(c["hidden"], c["heads"] * hd),
            f"ffn_norm.weight.{layer}": 1 + w(c["hidden"]) / 4,
            f"gate.weight.{layer}": w(c["inter"], c["hidden"]),
            f"up.weight.{layer}": w(c["inter"], c["hidden"]),
            f"down.weight.{layer}": w(c["hidden"], c["inter"]),
        }
    return write_oinf(
        path,
        sizevars={
            "num_hidden_layers": c["layers"], "hidden_size": c["hidden"],
            "num_attention_heads": c["heads"], "num_key_value_heads": c["kv_heads"],
            "head_dim": hd, "intermediate_size": c["inter"], "vocab_size": c["vocab"],
            "max_position_embeddings": 256,
        },
        metadata={
            "model_type": "llama", "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            **tokenizer_metadata(),
        },
        tensors=tensors,
    )  # fmt: skip


def llama_reference(path: Path, ids: list[int]) -> np.ndarray:
    """Logits [len(ids), vocab] of the model at `path` for `ids` (float64 NumPy)."""
    from openinfer_jax.oinf import ModelLoader

    with ModelLoader.open(path) as m:
        t = {k: np.asarray(m.tensor(k), np.float64) for k in m.tensors}
        sv = dict(m.sizevars)
        eps, theta = float(m.metadata["rms_norm_eps"]), float(m.metadata["rope_theta"])
    n, hd = len(ids), sv["head_dim"]
    nq, nkv = sv["num_attention_heads"], sv["num_key_value_heads"]

    def rms(x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    def rope(x: np.ndarray) -> np.ndarray:  # x [heads, n, hd], half-split pairs
        inv = theta ** (-np.arange(0, hd, 2) / hd)
        ang = np.arange(n)[:, None] * inv[None, :]
        cos, sin = np.cos(ang), np.sin(ang)
        a, b = x[..., : hd // 2], x[..., hd // 2 :]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)

    h = t["tok_emb.weight"][ids]
    for layer in range(sv["num_hidden_layers"]):
        a = rms(h, t[f"attn_norm.weight.{layer}"])
        q = rope((a @ t[f"q.weight.{layer}"].T).reshape(n, nq, hd).transpose(1, 0, 2))
        k = rope((a @ t[f"k.weight.{layer}"].T).reshape(n, nkv, hd).transpose(1, 0, 2))
        v = (a @ t[f"v.weight.{layer}"].T).reshape(n, nkv, hd).transpose(1, 0, 2)
        k, v = np.repeat(k, nq // nkv, 0), np.repeat(v, nq // nkv, 0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + np.triu(np.full((n, n), -np.inf), 1)
        p = np.exp(s - s.max(-1, keepdims=True))
        o = (p / p.sum(-1, keepdims=True)) @ v
        h = h + o.transpose(1, 0, 2).reshape(n, nq * hd) @ t[f"o.weight.{layer}"].T
        a = rms(h, t[f"ffn_norm.weight.{layer}"])
        g = a @ t[f"gate.weight.{layer}"].T
        h = (
            h
            + (g / (1 + np.exp(-g)) * (a @ t[f"up.weight.{layer}"].T)) @ t[f"down.weight.{layer}"].T
        )
    head = t.get("lm_head.weight", t["tok_emb.weight"])
    return rms(h, t["norm.weight"]) @ head.T
