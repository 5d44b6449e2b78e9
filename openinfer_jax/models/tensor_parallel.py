"""Tensor-parallel (Megatron-style) sharding plan for the llama-family decoder graph.

`llama_plan(config, devices)` returns the plan `Simulator(..., mesh=, sharding=plan)` takes
(docs/sharding.md) for the variable names of `openinfer_jax.models.llama`:

- Q/K/V and gate/up projections are split by output rows (column parallel: the weights are in
  the PyTorch ``[out, in]`` layout, so their dim 0), whole heads per device;
- the O and down projections are split by input columns (row parallel, dim 1), so each block
  half (attention, MLP) ends in one all-reduce of its ``[rows, hidden]`` output;
- the K/V cache tables (storage ``[layer, token, kv_head, head_dim]``) are split over KV heads,
  so every device attends only with its own heads and no cache entry is ever moved;
- embedding, norms and the LM head stay replicated (each device computes the same logits:
  one replicated vocabulary product instead of an all-gather per step).

The specs are text (``"model, None"``), so building a plan imports no JAX.
"""

from __future__ import annotations

import math

from openinfer_jax.core.errors import ShardingError
from openinfer_jax.models.llama import LlamaConfig

__all__ = ["AXIS", "llama_plan"]

# The mesh axis the plan splits over (`openinfer_jax.sim.sharding.device_mesh`'s default).
AXIS = "model"


def llama_plan(cfg: LlamaConfig, devices: int, axis: str = AXIS) -> dict[str, str]:
    """The tensor-parallel plan of the llama graph for `cfg` over `devices` devices of `axis`.

    Raises:
        ShardingError: `devices` below 1, or a split that would cut a head or leave devices
            unequal parts (names the variable, the dim and the sizes that do not divide).
    """
    if devices < 1:
        raise ShardingError(f"tensor-parallel plan: devices must be >= 1, got {devices}")
    # (variable, dim, size, what the dim counts, the count that must divide)
    checks = (
        ("Wq", 0, cfg.q_rows, "attention heads", cfg.heads),
        ("Wk", 0, cfg.kv_rows, "key/value heads", cfg.kv_heads),
        ("Wv", 0, cfg.kv_rows, "key/value heads", cfg.kv_heads),
        ("Wg", 0, cfg.intermediate, "intermediate_size", cfg.intermediate),
        ("Wu", 0, cfg.intermediate, "intermediate_size", cfg.intermediate),
        ("Wo", 1, cfg.q_rows, "attention heads", cfg.heads),
        ("Wd", 1, cfg.intermediate, "intermediate_size", cfg.intermediate),
        ("K", 2, cfg.kv_heads, "key/value heads", cfg.kv_heads),
        ("V", 2, cfg.kv_heads, "key/value heads", cfg.kv_heads),
    )
    for name, dim, size, what, count in checks:
        if count % devices:
            common = math.gcd(cfg.heads, cfg.kv_heads, cfg.intermediate)
            fits = ", ".join(str(n) for n in range(1, common + 1) if common % n == 0)
            raise ShardingError(
                f"tensor-parallel plan over {devices} devices: variable {name!r} dim {dim} "
                f"(size {size}, {count} {what}) is not divisible by {devices}; device counts "
                f"that fit this model: {fits}"
            )
    column, row, heads = f"{axis}, None", f"None, {axis}", f"None, None, {axis}, None"
    return {
        "Wq": column,
        "Wk": column,
        "Wv": column,
        "Wg": column,
        "Wu": column,
        "Wo": row,
        "Wd": row,
        "K": heads,
        "V": heads,
    }
