"""The llama-family decoder (llama, SmolLM2, Mistral-style GQA) as a DSL graph.

One step takes a chunk of up to `chunk` tokens:

- ``tokens: i32[chunk]`` holds them (padded), ``count: i32`` how many are real;
- ``count == 1`` runs block ``decode``: the layer stack on one row;
- ``count > 1`` runs block ``prefill``: the same stack on `chunk` rows at once, with causal
  attention inside the chunk and over the cache, and K/V written with one range write
  ``cache.write k >> K[l, pos..end]``. A 10-token prompt is one step.

Both blocks end with ``last: [1, hidden_size]``, the hidden state of the last real token;
``entry`` turns it into ``logits: [1, vocab_size]`` (final RMSNorm, the LM head or the tied
embedding) and advances ``step`` by ``count``. Padded rows of a chunk are written to the
cache beyond the new ``step``; later writes overwrite them and reads never reach them.

With ``chunk=1`` the graph is decode-only: ``tokens: i32[1]``, no ``count``, no branch.

``kv_dtype`` stores the K/V tables in another float type than the activations: with
``"f16"`` (llama.cpp's default cache type) the new rows are cast to f16 before the cache
write (``op cast(k3, to=f16) >> kc``) and attention reads the f16 keys and values with f32
queries, computing in f32: half the cache's bytes, and half the bytes a decode step reads
per context token.

Per-layer weights are prefix tables over the names of the converter's ``llama`` preset
(``q.weight.{l}``...), read by `linear` ops. Every size comes from the `.oinf` (see
`LlamaConfig.from_model`). Weights are declared with the model's types: a GGUF converted
with its Q4_1/Q8_0 blocks kept packed gives ``Wq(l): q4_1[...]`` and ``tok_emb: q8_0[...]``,
which `linear` and `embedding` read packed (docs/dsl.md); activations are f32 then.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import ArchitectureError
from openinfer_jax.ir import Graph
from openinfer_jax.models.config import metadata_float, require_tensors, sizevar, weight_type
from openinfer_jax.oinf import ModelLoader
from openinfer_jax.trace import GraphBuilder

__all__ = [
    "DEFAULT_CHUNK",
    "DEFAULT_CONTEXT",
    "KV_DTYPES",
    "LLAMA_LAYER_TENSORS",
    "LlamaConfig",
    "llama_decoder",
]

ARCH = "llama"
# Rows of a prefill step; a longer prompt takes several steps.
DEFAULT_CHUNK = 16
# Cache capacity (tokens) when the caller does not choose one: the model's context, capped
# so that the preallocated K/V tables stay small (SmolLM2: 2 x 30 x 1024 x 192 f32 = 47 MB).
DEFAULT_CONTEXT = 1024

# Types the K/V tables may be stored in (`llama_decoder`'s kv_dtype).
KV_DTYPES = ("f32", "f16", "bf16")

# DSL table name -> (.oinf pattern of the `llama` preset, (rows, cols) as config fields).
LLAMA_LAYER_TENSORS: dict[str, tuple[str, tuple[str, ...]]] = {
    "AttnNorm": ("attn_norm.weight.{l}", ("hidden",)),
    "Wq": ("q.weight.{l}", ("q_rows", "hidden")),
    "Wk": ("k.weight.{l}", ("kv_rows", "hidden")),
    "Wv": ("v.weight.{l}", ("kv_rows", "hidden")),
    "Wo": ("o.weight.{l}", ("hidden", "q_rows")),
    "FfnNorm": ("ffn_norm.weight.{l}", ("hidden",)),
    "Wg": ("gate.weight.{l}", ("intermediate", "hidden")),
    "Wu": ("up.weight.{l}", ("intermediate", "hidden")),
    "Wd": ("down.weight.{l}", ("hidden", "intermediate")),
}

_HINT = "convert the checkpoint with `openinfer convert SRC -o M.oinf --pattern llama`"


@dataclass(frozen=True)
class LlamaConfig:
    """The sizes and settings of a llama-family model, as the `.oinf` stores them."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    context: int
    rms_eps: float
    rope_theta: float
    tied: bool
    dtype: DType

    @property
    def q_rows(self) -> int:
        """Rows of the Q projection (heads x head_dim)."""
        return self.heads * self.head_dim

    @property
    def kv_rows(self) -> int:
        """Rows of the K and V projections (kv_heads x head_dim)."""
        return self.kv_heads * self.head_dim

    @classmethod
    def from_model(cls, model: ModelLoader) -> LlamaConfig:
        """Read and check the configuration of an open model.

        Raises:
            ArchitectureError: a missing sizevar, or a tensor that is missing, has another
                shape than the sizes say, or another dtype than the rest.
        """
        heads = sizevar(model, "num_attention_heads", ARCH)
        hidden = sizevar(model, "hidden_size", ARCH)
        tied = "lm_head.weight" not in model.tensors
        config = cls(
            layers=sizevar(model, "num_hidden_layers", ARCH),
            hidden=hidden,
            heads=heads,
            kv_heads=sizevar(model, "num_key_value_heads", ARCH, default=heads),
            head_dim=sizevar(model, "head_dim", ARCH, default=hidden // max(heads, 1)),
            intermediate=sizevar(model, "intermediate_size", ARCH),
            vocab=sizevar(model, "vocab_size", ARCH),
            context=sizevar(model, "max_position_embeddings", ARCH, default=DEFAULT_CONTEXT),
            rms_eps=metadata_float(model, ("rms_norm_eps",), 1e-6),
            rope_theta=metadata_float(model, ("rope_theta",), 10000.0),
            tied=tied,
            dtype=DType.F32,
        )
        expected: dict[str, tuple[int, ...]] = {
            "tok_emb.weight": (config.vocab, config.hidden),
            "norm.weight": (config.hidden,),
        }
        if not tied:
            expected["lm_head.weight"] = (config.vocab, config.hidden)
        for layer in range(config.layers):
            for pattern, dims in LLAMA_LAYER_TENSORS.values():
                expected[pattern.format(l=layer)] = tuple(getattr(config, d) for d in dims)
        dtype = require_tensors(model, ARCH, expected, hint=_HINT, quantized=True)
        return cls(**{**config.__dict__, "dtype": dtype})


class _Stack:
    """Emits the layer stack for `rows` rows into one block (names end in `suffix`)."""

    def __init__(
        self, g: GraphBuilder, cfg: LlamaConfig, tables: dict[str, Any], kv_dtype: str
    ) -> None:
        self.g, self.cfg, self.t, self.kv = g, cfg, tables, kv_dtype

    def emit(
        self, b: Any, rows: int, tokens: Any, pos: Any, end: Any, last_row: Any, suffix: str
    ) -> None:
        """Embed `tokens` ([rows] ids), run every layer, leave the last real row in `last`.

        The cache is written at ``step..end`` and read at ``0..end``: bounds the scheduler
        knows when the block starts (`end` is computed before it), so the whole stack is one
        compiled region. `pos` (= step) feeds rope as a value.
        """
        cfg, t, dt = self.cfg, self.t, self.cfg.dtype.short
        hd, nq, nkv = cfg.head_dim, cfg.heads, cfg.kv_heads

        def tmp(name: str, *dims: Any, dtype: str = dt) -> Any:
            return b.assign(f"{name}{suffix}", dtype, *dims)

        h = tmp("h", rows, "hidden_size")
        a = tmp("a", rows, "hidden_size")
        q = tmp("q", rows, cfg.q_rows)
        k = tmp("k", rows, cfg.kv_rows)
        v = tmp("v", rows, cfg.kv_rows)
        q3 = tmp("q3", rows, nq, hd)
        k3 = tmp("k3", rows, nkv, hd)
        v3 = tmp("v3", rows, nkv, hd)
        qh = tmp("qh", nq, rows, hd)
        kh = tmp("kh", nkv, rows, hd)
        kv = self.kv
        # the rows written to the cache, in its type (the activations' when they are one)
        kc = tmp("kc", rows, nkv, hd, dtype=kv) if kv != dt else k3
        vc = tmp("vc", rows, nkv, hd, dtype=kv) if kv != dt else v3
        ks = tmp("ks", rows, nkv, hd, dtype=kv)  # the cache read: it grows with the context
        vs = tmp("vs", rows, nkv, hd, dtype=kv)
        kt = tmp("kt", nkv, rows, hd, dtype=kv)
        vt = tmp("vt", nkv, rows, hd, dtype=kv)
        o = tmp("o", nq, rows, hd)
        o3 = tmp("o3", rows, nq, hd)
        gate = tmp("gate", rows, "intermediate_size")
        up = tmp("up", rows, "intermediate_size")
        b.op.embedding(t["tok_emb"], tokens) >> h
        with b.loop(f"layers{suffix}", "l", 0, "num_hidden_layers") as layer:
            b.op.rms_norm(h, t["AttnNorm"][layer], epsilon=cfg.rms_eps) >> a
            b.op.linear(a, t["Wq"][layer]) >> q
            b.op.linear(a, t["Wk"][layer]) >> k
            b.op.linear(a, t["Wv"][layer]) >> v
            b.op.reshape(q, shape=[rows, nq, hd]) >> q3
            b.op.transpose(q3, perm=[1, 0, 2]) >> qh
            b.op.rope(qh, pos, theta=cfg.rope_theta) >> qh
            b.op.reshape(k, shape=[rows, nkv, hd]) >> k3
            b.op.transpose(k3, perm=[1, 0, 2]) >> kh
            b.op.rope(kh, pos, theta=cfg.rope_theta) >> kh
            b.op.transpose(kh, perm=[1, 0, 2]) >> k3
            b.op.reshape(v, shape=[rows, nkv, hd]) >> v3
            if kv != dt:
                b.op.cast(k3, to=kv) >> kc
                b.op.cast(v3, to=kv) >> vc
            b.cache.write(kc) >> t["K"][layer, t["step"] : end]
            b.cache.write(vc) >> t["V"][layer, t["step"] : end]
            b.cache.read(t["K"][layer, 0:end]) >> ks
            b.cache.read(t["V"][layer, 0:end]) >> vs
            b.op.transpose(ks, perm=[1, 0, 2]) >> kt
            b.op.transpose(vs, perm=[1, 0, 2]) >> vt
            b.op.attention(qh, kt, vt, causal=True, scale=1.0 / math.sqrt(hd)) >> o
            b.op.transpose(o, perm=[1, 0, 2]) >> o3
            b.op.reshape(o3, shape=[rows, cfg.q_rows]) >> q
            b.op.linear(q, t["Wo"][layer]) >> a
            b.op.add(h, a) >> h
            b.op.rms_norm(h, t["FfnNorm"][layer], epsilon=cfg.rms_eps) >> a
            b.op.linear(a, t["Wg"][layer]) >> gate
            b.op.silu(gate) >> gate
            b.op.linear(a, t["Wu"][layer]) >> up
            b.op.mul(gate, up) >> gate
            b.op.linear(gate, t["Wd"][layer]) >> a
            b.op.add(h, a) >> h
        if rows == 1:
            b.transfer(h) >> t["last"]
        else:
            b.op.gather(h, last_row, axis=0) >> t["last"]


def llama_decoder(
    model: ModelLoader,
    *,
    chunk: int = DEFAULT_CHUNK,
    context: int | None = None,
    kv_dtype: str | None = None,
) -> Graph:
    """The decoder graph for `model`: `chunk` tokens per step, a K/V cache of `context` tokens
    stored as `kv_dtype` (one of KV_DTYPES; default the activations' type, f32).

    Raises:
        ArchitectureError: the model is not a llama-family model converted with the
            ``llama`` preset (names the missing or mismatched tensor or sizevar), or a
            `kv_dtype` not among KV_DTYPES.
        ValueError: `chunk` or `context` below 1.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, got {chunk}")
    if kv_dtype is not None and kv_dtype not in KV_DTYPES:
        raise ArchitectureError(f"kv_dtype must be one of {', '.join(KV_DTYPES)}, got {kv_dtype!r}")
    cfg = LlamaConfig.from_model(model)
    capacity = context if context is not None else min(cfg.context, DEFAULT_CONTEXT)
    if capacity < 1:
        raise ValueError(f"context must be >= 1, got {capacity}")
    dt = cfg.dtype.short
    kv = kv_dtype or dt
    g = GraphBuilder()
    tokens = g.dynamic("tokens", "i32", chunk)
    count = g.dynamic("count", "i32") if chunk > 1 else None
    emb_type = weight_type(model, "tok_emb.weight")
    t: dict[str, Any] = {
        "tok_emb": g.volatile(
            "tok_emb", emb_type, "vocab_size", "hidden_size", ref="tok_emb.weight"
        ),
        "final_norm": g.volatile("final_norm", dt, "hidden_size", ref="norm.weight"),
    }
    if not cfg.tied:
        head_type = weight_type(model, "lm_head.weight")
        t["lm_head"] = g.volatile(
            "lm_head", head_type, "vocab_size", "hidden_size", ref="lm_head.weight"
        )
    for name, (pattern, dims) in LLAMA_LAYER_TENSORS.items():
        shape = [_dim_name(d, cfg) for d in dims]
        t[name] = g.volatile(
            name, _table_type(model, pattern, cfg.layers), *shape, index="l", pattern=pattern
        )
    t["last"] = g.volatile("last", dt, 1, "hidden_size")
    logits = g.volatile("logits", dt, 1, "vocab_size")
    # Row counts of the two paths, as scalars for the cache bounds (pos + rows).
    t["rows_d"] = g.constant("rows_d", "i32", init=1)
    if chunk > 1:
        t["rows_p"] = g.constant("rows_p", "i32", init=chunk)
    step = t["step"] = g.persistent("step", "i32", init=0)
    fixed = {"l": cfg.layers, "t": capacity}
    t["K"] = g.persistent(
        "K", kv, cfg.kv_heads, cfg.head_dim, index=("l", "t"), table=True, fixed=fixed
    )
    t["V"] = g.persistent(
        "V", kv, cfg.kv_heads, cfg.head_dim, index=("l", "t"), table=True, fixed=fixed
    )
    stack = _Stack(g, cfg, t, kv)
    with g.block("entry") as b:
        pos = b.assign("pos", "i32")
        b.cache.read(step) >> pos
        # Cache bounds of each path, computed before the path's region starts.
        end_d = b.assign("end_d", "i32")
        b.op.add(pos, t["rows_d"]) >> end_d
        if chunk == 1:
            b.barrier()
            stack.emit(b, 1, tokens, pos, end_d, None, "_d")
        else:
            end_p = b.assign("end_p", "i32")
            b.op.add(pos, t["rows_p"]) >> end_p
            decode = b.assign("is_decode", "bool")
            b.op.eq(count, t["rows_d"]) >> decode
            b.branch(decode, "decode", "prefill")
        b.op.rms_norm(t["last"], t["final_norm"], epsilon=cfg.rms_eps) >> t["last"]
        b.op.linear(t["last"], t["lm_head"] if not cfg.tied else t["tok_emb"]) >> logits
        if chunk == 1:
            b.cache.increment(step)
        else:
            new_step = b.assign("new_step", "i32")
            b.op.add(pos, count) >> new_step
            b.cache.write(new_step) >> step
        b.return_()
    if chunk > 1:
        with g.block("decode") as b:
            first = b.assign("token", "i32", 1)
            b.op.slice(tokens, starts=[0], ends=[1]) >> first
            stack.emit(b, 1, first, pos, end_d, None, "_d")
            b.return_()
        with g.block("prefill") as b:
            last = b.assign("last_index", "i32")
            last_row = b.assign("last_row", "i32", 1)
            b.op.sub(count, t["rows_d"]) >> last
            b.op.reshape(last, shape=[1]) >> last_row
            stack.emit(b, chunk, tokens, pos, end_p, last_row, "_p")
            b.return_()
    return g.build()


def _table_type(model: ModelLoader, pattern: str, layers: int) -> str:
    """The one type every layer's tensor of a prefix table has (f32, or q4_1 when packed).

    Raises:
        ArchitectureError: two layers store the tensor differently (a partly quantized model).
    """
    first = pattern.format(l=0)
    kind = weight_type(model, first)
    for layer in range(1, layers):
        name = pattern.format(l=layer)
        other = weight_type(model, name)
        if other != kind:
            raise ArchitectureError(
                f"tensor {name!r} is {other} but {first!r} is {kind}; a prefix table needs one type "
                "for every layer: convert the whole model one way (--quantize or --dtype f32)"
            )
    return kind


def _dim_name(field: str, cfg: LlamaConfig) -> Any:
    """A sizevar name where the model has one (readable graph text), else the number."""
    names = {"hidden": "hidden_size", "intermediate": "intermediate_size"}
    if field in names:
        return names[field]
    if field == "q_rows" and cfg.q_rows == cfg.hidden:
        return "hidden_size"
    return getattr(cfg, field)
