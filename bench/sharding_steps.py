"""The decode steps the sharding benchmarks time: the simulator and a hand-written `jax.jit`.

Shared by bench/bench_sharding.py (1 vs N devices) and bench/bench_sharding_profile.py (where
a step's time goes). Both steps run the generated 7B-shaped decoder of
`openinfer_jax.sim.sharding_models` from the same `.oinf`, with the same KV prefill and the
same inputs (seeded), so after the same number of steps their outputs agree.
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any

import jax
import numpy as np

from openinfer_jax.sim import Simulator
from openinfer_jax.sim.sharding_models import DecoderConfig, decoder_plan

__all__ = ["PureStep", "Run", "allocator_bytes", "device_bytes", "pipelined", "timed"]


class Run:
    """One simulator (one device or a mesh) positioned at a prefilled context."""

    def __init__(self, sim: Simulator, cfg: DecoderConfig, context: int) -> None:
        self.sim, self.cfg = sim, cfg
        self.ex = sim.make_executor()
        rng = np.random.default_rng(7)
        shape = (cfg.layers, context, cfg.batch, cfg.kv_heads, cfg.head_dim)
        for name in ("K", "V"):
            self.ex.set_persistent(name, (rng.standard_normal(shape) * 0.5).astype(np.float32))
        self.ex.set_persistent("step", np.asarray(context, np.int32))
        self.inputs = np.random.default_rng(11)

    def dispatch(self) -> None:
        """Insert the next input and run one step, without waiting for the device."""
        x = self.inputs.standard_normal((self.cfg.batch, self.cfg.d)).astype(np.float32)
        self.ex.insert(x=x)
        self.ex.step()

    def finish(self) -> np.ndarray:
        """y of the last step, on the host (so the step has finished)."""
        return self.ex.fetch("y")

    def step(self) -> np.ndarray:
        """One decode step; returns y (on the host, so the step has finished)."""
        self.dispatch()
        return self.finish()

    def kv_arrays(self) -> list[Any]:
        """The K/V cache buffers (device arrays)."""
        return [table.buffer for table in self.ex.persistent.tables.values()]


class PureStep:
    """Baseline: the same decode step as ONE hand-written jax.jit function (no scheduler).

    Same weights, same shardings (the Megatron plan, or one device), KV caches
    `[L, capacity, B, Hkv, Dh]` donated and masked by position. Its 1-vs-N ratio is what
    XLA's SPMD partitioning gives; the simulator's figure adds the scheduler's host time.
    """

    def __init__(self, sim: Simulator, cfg: DecoderConfig, context: int, steps: int) -> None:
        import jax.numpy as jnp
        from jax.sharding import NamedSharding, PartitionSpec

        from openinfer_jax.ops import nn_jax
        from openinfer_jax.sim.sharding_models import LAYER_WEIGHTS

        self.cfg = cfg
        plan = decoder_plan()
        mesh = sim.sharded.mesh if sim.sharded is not None else None

        def place(value: Any, spec: PartitionSpec | None) -> Any:
            if mesh is None:
                return jax.device_put(value, sim.jax_device)
            return jax.device_put(value, NamedSharding(mesh, spec or PartitionSpec()))

        model = sim.model
        self.params = [
            {name: place(np.asarray(model.tensor(f"layers.{layer}.{name}")), plan.get(name))
             for name, _dims in LAYER_WEIGHTS}
            for layer in range(cfg.layers)
        ]  # fmt: skip
        self.final = place(np.asarray(model.tensor("final_norm")), None)
        capacity = 1 << (context + steps + 8).bit_length()
        shape = (cfg.layers, capacity, cfg.batch, cfg.kv_heads, cfg.head_dim)
        rng = np.random.default_rng(7)
        caches = []
        for _ in range(2):
            buf = np.zeros(shape, np.float32)
            buf[:, :context] = rng.standard_normal((cfg.layers, context, *shape[2:])) * 0.5
            caches.append(place(buf, plan["K"]))
        self.kc, self.vc = caches
        self.pos = context
        self.inputs = np.random.default_rng(11)
        self.y: Any = None
        b, h, hkv, dh = cfg.batch, cfg.heads, cfg.kv_heads, cfg.head_dim

        def step(params: Any, final: Any, kc: Any, vc: Any, x: Any, pos: Any) -> Any:
            hid = x
            visible = jnp.arange(kc.shape[1]) <= pos
            for layer, p in enumerate(params):
                a = nn_jax.rms_norm(hid, p["attn_norm"], epsilon=cfg.eps)
                q = nn_jax.rope((a @ p["wq"]).reshape(b, h, 1, dh), pos, theta=cfg.theta)
                k = nn_jax.rope((a @ p["wk"]).reshape(b, hkv, 1, dh), pos, theta=cfg.theta)
                v = (a @ p["wv"]).reshape(b, hkv, 1, dh)
                zero = jnp.int32(0)
                at = (jnp.int32(layer), pos, zero, zero, zero)
                kc = jax.lax.dynamic_update_slice(kc, k.reshape(1, 1, b, hkv, dh), at)
                vc = jax.lax.dynamic_update_slice(vc, v.reshape(1, 1, b, hkv, dh), at)
                keys = kc[layer].transpose(1, 2, 0, 3)  # [B, Hkv, C, Dh]
                values = vc[layer].transpose(1, 2, 0, 3)
                o = nn_jax.attention(q, keys, values, visible)
                hid = hid + o.reshape(b, h * dh) @ p["wo"]
                a = nn_jax.rms_norm(hid, p["ffn_norm"], epsilon=cfg.eps)
                hid = hid + (jax.nn.silu(a @ p["wg"]) * (a @ p["wu"])) @ p["wd"]
            return nn_jax.rms_norm(hid, final, epsilon=cfg.eps), kc, vc

        self.fn = jax.jit(step, donate_argnums=(2, 3))

    def dispatch(self) -> None:
        """Run one step without waiting for the device."""
        x = self.inputs.standard_normal((self.cfg.batch, self.cfg.d)).astype(np.float32)
        self.y, self.kc, self.vc = self.fn(
            self.params, self.final, self.kc, self.vc, x, np.int32(self.pos)
        )
        self.pos += 1

    def finish(self) -> np.ndarray:
        """y of the last step on the host."""
        return np.asarray(self.y)

    def step(self) -> np.ndarray:
        """One decode step; returns y on the host."""
        self.dispatch()
        return self.finish()

    def kv_arrays(self) -> list[Any]:
        """The K/V cache buffers (device arrays)."""
        return [self.kc, self.vc]


def timed(run: Run | PureStep, warmup: int, steps: int) -> tuple[float, np.ndarray]:
    """Median ms of `steps` blocking steps after `warmup`, and the last output."""
    for _ in range(warmup):
        run.step()
    times = []
    y = None
    for _ in range(steps):
        start = time.perf_counter()
        y = run.step()
        times.append((time.perf_counter() - start) * 1e3)
    assert y is not None
    return statistics.median(times), y


def pipelined(run: Run | PureStep, steps: int) -> float:
    """ms per step when `steps` steps are dispatched back to back and waited for once: the
    device's time per step where the host keeps ahead, else the host's."""
    start = time.perf_counter()
    for _ in range(steps):
        run.dispatch()
    run.finish()
    return (time.perf_counter() - start) * 1e3 / steps


def device_bytes(kv: list[Any]) -> dict[str, dict[str, int]]:
    """Bytes per device of every live jax array, split into the K/V buffers `kv` and the rest
    (weights, plus the few small activations a step keeps)."""
    gc.collect()  # arrays of a simulator already dropped may wait for the cycle collector
    kv_ids = {id(a) for a in kv}
    out: dict[str, dict[str, int]] = {}
    for arr in jax.live_arrays():
        what = "kv" if id(arr) in kv_ids else "weights"
        for shard in getattr(arr, "addressable_shards", []):
            slot = out.setdefault(str(shard.device), {"weights": 0, "kv": 0})
            slot[what] += int(shard.data.nbytes)
    return out


def allocator_bytes() -> dict[str, int]:
    """Bytes in use per device as its allocator reports them (GPUs; empty on CPU)."""
    out = {}
    for dev in jax.local_devices():
        stats = dev.memory_stats() if hasattr(dev, "memory_stats") else None
        if stats and "bytes_in_use" in stats:
            out[str(dev)] = int(stats["bytes_in_use"])
    return out
