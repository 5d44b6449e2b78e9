"""ONNX Attention (opset 23+): the `attention` op when it expresses the node, else the
scaled-dot-product chain written out (softcap, the qk output, or shapes it does not take).

Both follow ONNX: 3-D inputs are split into heads (q_num_heads, kv_num_heads), past_key /
past_value are concatenated before the new keys (present_* outputs), a mask shorter than
the keys is padded (false / -inf), `is_causal` masks key j for query i when
j > past_length + i (top-left alignment, offset by the past: the attention op's own `causal`
aligns to the end, so the importer writes the mask as a constant), `nonpad_kv_seqlen` masks
each batch row's padding, and grouped KV heads serve q heads i // (Hq / Hkv).
"""

from __future__ import annotations

import math

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.onnx.context import NodeContext
from openinfer_jax.onnx.converters import converter
from openinfer_jax.onnx.converters.common import expand_to, scalar
from openinfer_jax.onnx.converters.elementwise import binary
from openinfer_jax.onnx.converters.movement import reshape
from openinfer_jax.onnx.values import Tensor, Value

__all__: list[str] = []

_ATTRS = ("is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode", "scale",
          "softcap", "softmax_precision")  # fmt: skip


def _heads(ctx: NodeContext, x: Value, heads: int, tag: str) -> Tensor:
    """[B, S, H*D] -> [B, H, S, D]."""
    t = ctx.as_tensor(x)
    b, s, hidden = t.shape
    split = reshape(ctx, t, (b, s, heads, hidden // heads), hint=ctx.hint(0, f"{tag}_split"))
    return ctx.emit("transpose", [split], hint=ctx.hint(0, f"{tag}_heads"), perm=[0, 2, 1, 3])


def _mask(ctx: NodeContext, q: Tensor, skv: int, past: int) -> Tensor | None:
    """One additive/boolean mask [.., Sq, Skv] from attn_mask, is_causal and nonpad_kv_seqlen
    (None when none applies). A bool result means true = attend."""
    sq = q.shape[2]
    mask: Value | None = ctx.value(3) if ctx.has(3) else None
    if mask is not None:
        m = ctx.as_tensor(mask)
        if m.shape[-1] < skv:  # shorter than the keys: the rest is masked out
            fill = False if m.dtype is DType.BOOL else -math.inf
            width = [0] * (2 * len(m.shape))
            width[2 * len(m.shape) - 1] = skv - m.shape[-1]
            mask = ctx.emit("pad", [m], hint=ctx.hint(0, "mask_padded"), pads=width, value=fill)
    parts: list[Tensor] = []
    if mask is not None:
        parts.append(ctx.as_tensor(mask))
    if int(ctx.attr("is_causal", 0)):
        i, j = np.meshgrid(np.arange(sq), np.arange(skv), indexing="ij")
        parts.append(ctx.constant(j <= past + i, DType.BOOL, ctx.hint(0, "causal")))
    if ctx.has(6):
        lens = ctx.value(6)
        batch = q.shape[0]
        positions = ctx.constant(
            np.arange(skv, dtype=np.int64).reshape(1, skv), DType.I64, ctx.hint(0, "key_positions")
        )
        per_row = reshape(
            ctx,
            ctx.emit("cast", [lens], hint=ctx.hint(0, "nonpad"), to=DType.I64),
            (batch, 1),
            hint=ctx.hint(0, "nonpad_col"),
        )
        valid = binary(ctx, "lt", positions, per_row, hint=ctx.hint(0, "nonpad_mask"))
        parts.append(reshape(ctx, valid, (batch, 1, 1, skv), hint=ctx.hint(0, "nonpad_mask4")))
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    # Combine: bools with and; a float mask turns the bools into -inf where false.
    bools = [p for p in parts if p.dtype is DType.BOOL]
    floats = [p for p in parts if p.dtype is not DType.BOOL]
    combined: Tensor | None = None
    for i, p in enumerate(bools):
        combined = (
            p
            if combined is None
            else binary(ctx, "and", combined, p, hint=ctx.hint(0, f"mask_and{i}"))
        )
    if not floats:
        return combined
    bias = floats[0]
    if combined is not None:
        zero, minus_inf = scalar(ctx, 0.0, bias.dtype), scalar(ctx, -math.inf, bias.dtype)
        extra = ctx.emit("where", [combined, zero, minus_inf], hint=ctx.hint(0, "mask_bias"))
        bias = binary(ctx, "add", bias, extra, hint=ctx.hint(0, "mask_sum"))
    return bias


@converter(
    "Attention",
    attrs=_ATTRS,
    becomes="attention (or matmul, softmax, matmul when softcap or the qk output is asked for)",
)
def _attention(ctx: NodeContext) -> None:
    q, k, v = (ctx.as_tensor(ctx.value(i)) for i in range(3))
    three_d = len(q.shape) == 3
    if three_d:
        hq, hkv = int(ctx.attr("q_num_heads", 0)), int(ctx.attr("kv_num_heads", 0))
        if not hq or not hkv:
            raise ctx.error("3-D inputs need q_num_heads and kv_num_heads")
        q, k, v = _heads(ctx, q, hq, "q"), _heads(ctx, k, hkv, "k"), _heads(ctx, v, hkv, "v")
    past = 0
    if ctx.has(4):
        past = ctx.shape(4)[2]
        k = ctx.emit(
            "concat",
            [ctx.value(4), k],
            hint=ctx.hint(1) if len(ctx.node.output) > 1 else None,
            axis=2,
        )
    if ctx.has(5):
        v = ctx.emit(
            "concat",
            [ctx.value(5), v],
            hint=ctx.hint(2) if len(ctx.node.output) > 2 else None,
            axis=2,
        )
    ctx.set_output(1, k)
    ctx.set_output(2, v)
    skv = k.shape[2]
    scale = ctx.attr("scale", None)
    scale = float(scale) if scale is not None else 1.0 / math.sqrt(q.shape[3])
    mask = _mask(ctx, q, skv, past)
    softcap = float(ctx.attr("softcap", 0.0) or 0.0)
    wants_qk = len(ctx.node.output) > 3 and bool(ctx.node.output[3])
    if softcap == 0.0 and not wants_qk:
        inputs = [q, k, v] + ([mask] if mask is not None else [])
        y = ctx.emit(
            "attention", inputs, hint=ctx.hint(0, "heads") if three_d else None, scale=scale
        )
    else:
        y = _written_out(ctx, q, k, v, mask, scale, softcap)
    if three_d:
        merged = ctx.emit("transpose", [y], hint=ctx.hint(0, "merged"), perm=[0, 2, 1, 3])
        b, s = merged.shape[:2]
        y = reshape(ctx, merged, (b, s, merged.shape[2] * merged.shape[3]))
    ctx.set_output(0, y)


def _written_out(ctx: NodeContext, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None,
                 scale: float, softcap: float) -> Tensor:  # fmt: skip
    """softmax((q k^T) * scale [softcapped] + mask) v as separate steps (and the qk output)."""
    dtype = q.dtype
    reps = q.shape[1] // k.shape[1]
    if reps > 1:  # grouped KV: every kv head serves `reps` consecutive q heads
        k, v = _repeat_heads(ctx, k, reps, "k"), _repeat_heads(ctx, v, reps, "v")
    k_t = ctx.emit("transpose", [k], hint=ctx.hint(0, "k_t"), perm=[0, 1, 3, 2])
    scores = ctx.emit("matmul", [q, k_t], hint=ctx.hint(0, "qk"))
    scores = ctx.emit("mul", [scores, scalar(ctx, scale, dtype)], hint=ctx.hint(0, "scaled"))
    if softcap:
        capped = ctx.emit("div", [scores, scalar(ctx, softcap, dtype)], hint=ctx.hint(0, "cap_in"))
        capped = ctx.emit("tanh", [capped], hint=ctx.hint(0, "cap_tanh"))
        scores = ctx.emit("mul", [capped, scalar(ctx, softcap, dtype)], hint=ctx.hint(0, "capped"))
    qk_output = scores
    biased = scores
    if mask is not None:
        if mask.dtype is DType.BOOL:
            zero, minus_inf = scalar(ctx, 0.0, dtype), scalar(ctx, -math.inf, dtype)
            mask = ctx.emit("where", [mask, zero, minus_inf], hint=ctx.hint(0, "mask_bias"))
        biased = binary(ctx, "add", scores, mask, hint=ctx.hint(0, "biased"))
    probs = ctx.emit("softmax", [biased], hint=ctx.hint(0, "probs"), axis=3)
    mode = int(ctx.attr("qk_matmul_output_mode", 0))
    if len(ctx.node.output) > 3 and ctx.node.output[3]:
        ctx.set_output(3, {0: qk_output, 1: qk_output, 2: biased, 3: probs}[mode])
    return ctx.emit("matmul", [probs, v], hint=ctx.hint(0, "heads"))


def _repeat_heads(ctx: NodeContext, t: Tensor, reps: int, tag: str) -> Tensor:
    """[B, H, S, D] -> [B, H*reps, S, D] with each head repeated `reps` times in place."""
    b, h, s, d = t.shape
    five = reshape(ctx, t, (b, h, 1, s, d), hint=ctx.hint(0, f"{tag}_5d"))
    grown = expand_to(ctx, five, (b, h, reps, s, d), ctx.hint(0, f"{tag}_rep"))
    return reshape(ctx, grown, (b, h * reps, s, d), hint=ctx.hint(0, f"{tag}_grouped"))
