"""The BERT-family encoder (BERT, MiniLM sentence encoders) as a DSL graph.

One step encodes a padded batch: ``ids``, ``types`` and ``positions`` (``i32[batch, seq]``),
an additive attention ``mask`` (``[batch, 1, 1, seq]``: 0 for tokens, -1e9 for padding) and
mean-pooling weights ``pool`` (``[batch, seq, 1]``). The layers run as a loop over prefix
tables named by the converter's ``bert`` preset (``q.weight.{l}``...); the result ``y`` is
the L2-normalized mean of the last hidden states, as sentence-transformers computes it.
`bert_inputs` builds the five inputs from token ids and an attention mask.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ir import Graph
from openinfer_jax.models.config import metadata_float, require_tensors, sizevar
from openinfer_jax.oinf import ModelLoader
from openinfer_jax.trace import GraphBuilder

__all__ = ["BERT_LAYER_TENSORS", "BertConfig", "bert_encoder", "bert_inputs"]

ARCH = "bert"

# DSL table name -> (.oinf pattern of the `bert` preset, dims as config fields).
BERT_LAYER_TENSORS: dict[str, tuple[str, tuple[str, ...]]] = {
    "Wq": ("q.weight.{l}", ("hidden", "hidden")),
    "Bq": ("q.bias.{l}", ("hidden",)),
    "Wk": ("k.weight.{l}", ("hidden", "hidden")),
    "Bk": ("k.bias.{l}", ("hidden",)),
    "Wv": ("v.weight.{l}", ("hidden", "hidden")),
    "Bv": ("v.bias.{l}", ("hidden",)),
    "Wo": ("attn_out.weight.{l}", ("hidden", "hidden")),
    "Bo": ("attn_out.bias.{l}", ("hidden",)),
    "G1": ("attn_ln.weight.{l}", ("hidden",)),
    "B1": ("attn_ln.bias.{l}", ("hidden",)),
    "Wi": ("ffn_in.weight.{l}", ("intermediate", "hidden")),
    "Bi": ("ffn_in.bias.{l}", ("intermediate",)),
    "Wf": ("ffn_out.weight.{l}", ("hidden", "intermediate")),
    "Bf": ("ffn_out.bias.{l}", ("hidden",)),
    "G2": ("ffn_ln.weight.{l}", ("hidden",)),
    "B2": ("ffn_ln.bias.{l}", ("hidden",)),
}
_SIZEVARS = {"hidden": "hidden_size", "intermediate": "intermediate_size"}
_HINT = "convert the checkpoint with `openinfer convert SRC -o M.oinf --pattern bert`"


@dataclass(frozen=True)
class BertConfig:
    """The sizes and settings of a BERT-family model, as the `.oinf` stores them."""

    layers: int
    hidden: int
    heads: int
    head_dim: int
    intermediate: int
    vocab: int
    positions: int
    type_vocab: int
    eps: float
    dtype: DType

    @classmethod
    def from_model(cls, model: ModelLoader) -> BertConfig:
        """Read and check the configuration of an open model.

        Raises:
            ArchitectureError: a missing sizevar or a missing/mismatched tensor (named).
        """
        hidden = sizevar(model, "hidden_size", ARCH)
        heads = sizevar(model, "num_attention_heads", ARCH)
        config = cls(
            layers=sizevar(model, "num_hidden_layers", ARCH),
            hidden=hidden,
            heads=heads,
            head_dim=sizevar(model, "head_dim", ARCH, default=hidden // max(heads, 1)),
            intermediate=sizevar(model, "intermediate_size", ARCH),
            vocab=sizevar(model, "vocab_size", ARCH),
            positions=sizevar(model, "max_position_embeddings", ARCH),
            type_vocab=sizevar(model, "type_vocab_size", ARCH),
            eps=metadata_float(model, ("layer_norm_eps",), 1e-12),
            dtype=DType.F32,
        )
        expected: dict[str, tuple[int, ...]] = {
            "tok_emb.weight": (config.vocab, hidden),
            "pos_emb.weight": (config.positions, hidden),
            "type_emb.weight": (config.type_vocab, hidden),
            "emb_ln.weight": (hidden,),
            "emb_ln.bias": (hidden,),
        }
        for layer in range(config.layers):
            for pattern, dims in BERT_LAYER_TENSORS.values():
                expected[pattern.format(l=layer)] = tuple(getattr(config, d) for d in dims)
        dtype = require_tensors(model, ARCH, expected, hint=_HINT)
        return cls(**{**config.__dict__, "dtype": dtype})


def bert_encoder(model: ModelLoader, *, batch: int = 1, seq: int = 128) -> Graph:
    """The encoder graph for `model` on a padded batch of `batch` x `seq` tokens.

    Raises:
        ArchitectureError: the model does not fit (names the tensor or sizevar).
        ValueError: `batch` or `seq` below 1, or `seq` beyond the position table.
    """
    if batch < 1 or seq < 1:
        raise ValueError(f"batch and seq must be >= 1, got batch={batch}, seq={seq}")
    cfg = BertConfig.from_model(model)
    if seq > cfg.positions:
        raise ValueError(f"seq={seq} exceeds the model's {cfg.positions} positions")
    dt = cfg.dtype.short
    nh, hd = cfg.heads, cfg.head_dim
    g = GraphBuilder()
    ids = g.dynamic("ids", "i32", batch, seq)
    types = g.dynamic("types", "i32", batch, seq)
    positions = g.dynamic("positions", "i32", batch, seq)
    mask = g.dynamic("mask", dt, batch, 1, 1, seq)
    pool = g.dynamic("pool", dt, batch, seq, 1)
    emb = {
        name: g.volatile(name, dt, *dims, ref=ref)
        for name, ref, dims in (
            ("tok_emb", "tok_emb.weight", ("vocab_size", "hidden_size")),
            ("pos_emb", "pos_emb.weight", ("max_position_embeddings", "hidden_size")),
            ("type_emb", "type_emb.weight", ("type_vocab_size", "hidden_size")),
            ("emb_g", "emb_ln.weight", ("hidden_size",)),
            ("emb_b", "emb_ln.bias", ("hidden_size",)),
        )
    }
    w = {
        name: g.volatile(name, dt, *(_SIZEVARS[d] for d in dims), index="l", pattern=pattern)
        for name, (pattern, dims) in BERT_LAYER_TENSORS.items()
    }
    with g.block("entry") as b:
        h = b.assign("h", dt, batch, seq, "hidden_size")
        e = b.assign("e", dt, batch, seq, "hidden_size")
        a = b.assign("a", dt, batch, seq, "hidden_size")
        c = b.assign("c", dt, batch, seq, "hidden_size")
        q, k, v = (b.assign(n, dt, batch, seq, "hidden_size") for n in ("q", "k", "v"))
        q4, k4, v4, o4 = (b.assign(n, dt, batch, seq, nh, hd) for n in ("q4", "k4", "v4", "o4"))
        qh, kh, vh, oh = (b.assign(n, dt, batch, nh, seq, hd) for n in ("qh", "kh", "vh", "oh"))
        f = b.assign("f", dt, batch, seq, "intermediate_size")
        pooled = b.assign("pooled", dt, batch, "hidden_size")
        sq = b.assign("sq", dt, batch, "hidden_size")
        norm = b.assign("norm", dt, batch, 1)
        y = b.assign("y", dt, batch, "hidden_size")
        b.op.embedding(emb["tok_emb"], ids) >> h
        b.op.embedding(emb["pos_emb"], positions) >> e
        b.op.add(h, e) >> h
        b.op.embedding(emb["type_emb"], types) >> e
        b.op.add(h, e) >> h
        b.op.layer_norm(h, emb["emb_g"], emb["emb_b"], epsilon=cfg.eps) >> h
        with b.loop("layers", "l", 0, "num_hidden_layers") as layer:
            for x, W, B, x4, xh in (
                (q, "Wq", "Bq", q4, qh),
                (k, "Wk", "Bk", k4, kh),
                (v, "Wv", "Bv", v4, vh),
            ):
                b.op.linear(h, w[W][layer], w[B][layer]) >> x
                b.op.reshape(x, shape=[batch, seq, nh, hd]) >> x4
                b.op.transpose(x4, perm=[0, 2, 1, 3]) >> xh
            b.op.attention(qh, kh, vh, mask, scale=1.0 / math.sqrt(hd)) >> oh
            b.op.transpose(oh, perm=[0, 2, 1, 3]) >> o4
            b.op.reshape(o4, shape=[batch, seq, nh * hd]) >> c
            b.op.linear(c, w["Wo"][layer], w["Bo"][layer]) >> a
            b.op.add(h, a) >> h
            b.op.layer_norm(h, w["G1"][layer], w["B1"][layer], epsilon=cfg.eps) >> h
            b.op.linear(h, w["Wi"][layer], w["Bi"][layer]) >> f
            b.op.gelu(f) >> f
            b.op.linear(f, w["Wf"][layer], w["Bf"][layer]) >> a
            b.op.add(h, a) >> h
            b.op.layer_norm(h, w["G2"][layer], w["B2"][layer], epsilon=cfg.eps) >> h
        b.op.mul(h, pool) >> a
        b.op.sum_axis(a, axes=[1]) >> pooled
        b.op.mul(pooled, pooled) >> sq
        b.op.sum_axis(sq, axes=[1], keepdims=True) >> norm
        b.op.rsqrt(norm) >> norm
        b.op.mul(pooled, norm) >> y
        b.return_()
    return g.build()


def bert_inputs(
    ids: np.ndarray, types: np.ndarray | None, attention_mask: np.ndarray, dtype: Any = np.float32
) -> dict[str, np.ndarray]:
    """The five inputs of `bert_encoder` for a padded batch of token ids ([batch, seq]).

    `attention_mask` is 1 for tokens and 0 for padding (as tokenizers return it); `types`
    defaults to zeros.
    """
    ids = np.asarray(ids)
    batch, seq = ids.shape
    mask = np.asarray(attention_mask).astype(np.float64)
    counts = np.maximum(mask.sum(1, keepdims=True), 1.0)
    return {
        "ids": ids.astype(np.int32),
        "types": (np.zeros_like(ids) if types is None else np.asarray(types)).astype(np.int32),
        "positions": np.broadcast_to(np.arange(seq, dtype=np.int32), (batch, seq)).copy(),
        "mask": ((1.0 - mask) * -1e9).reshape(batch, 1, 1, seq).astype(dtype),
        "pool": (mask / counts).reshape(batch, seq, 1).astype(dtype),
    }
