"""Sharding benchmark: a 7B-shaped decoder decode step on 1 device vs N devices (tensor parallel).

Figures (all measured in this run; ratios against the 1-device simulator measured here):
1. decode-step time and tokens/s of the generated decoder (openinfer_jax.sim.sharding_models:
   8 layers of a 7B-shaped block, d=4096, 32 heads, ffn 11008, batch 8, random f32 weights in
   a generated .oinf, KV cache prefilled to `--context` tokens) through the simulator on one
   device and sharded over N devices with the Megatron plan; speedup = t(1) / t(N)
   (target >= 1.6x on 2 GPUs).
2. per-device memory of weights + KV cache (bytes of the shards each device holds; on GPUs
   also the allocator's bytes in use) vs the single-device figure (target ~ 1/N plus the
   replicated norms).
3. collectives per step (from the compiled HLO) and the max |difference| of the outputs
   (sharded vs one device) after the timed steps.
4. with `--smollm2 build/smollm2.oinf` (the converted SmolLM2-135M of examples/smollm2):
   greedy decode through the example's graph on 1 vs N devices; same tokens, max logit
   difference, decode-step time.

On CPU the N devices are emulated (XLA_FLAGS=--xla_force_host_platform_device_count=N, set
here before jax starts): they share the same cores, so only correctness and memory are
reported, not speed, and the full run uses one 7B-shaped layer unless --layers says more. `--quick`: 2 layers, d=256, batch 8. Results: bench/results/sharding.json.

Run: `.venv/bin/python bench/bench_sharding.py [--quick] [--devices N] [--smollm2 OINF]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny decoder (2 layers, d=256)")
    parser.add_argument("--devices", type=int, default=2, help="devices of the sharded run (2)")
    parser.add_argument("--steps", type=int, default=0, help="timed steps (default 20, quick 5)")
    parser.add_argument(
        "--context", type=int, default=0, help="prefilled KV length (256, quick 32)"
    )
    parser.add_argument("--layers", type=int, default=0, help="override the number of layers")
    parser.add_argument("--batch", type=int, default=0, help="override the batch (8)")
    parser.add_argument(
        "--precision",
        default="",
        help="jax_default_matmul_precision for both runs (e.g. tensorfloat32); default XLA's",
    )
    parser.add_argument("--model", type=Path, help="reuse/write the generated .oinf here")
    parser.add_argument(
        "--smollm2",
        type=Path,
        metavar="OINF",
        help="also decode with the converted SmolLM2 (examples/smollm2) on 1 vs N devices",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="default: bench/results/[quick/]sharding.json"
    )
    return parser.parse_args(argv)


ARGS = _parse(sys.argv[1:])
# Emulated CPU devices must be asked for before jax starts; harmless where GPUs exist.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "")
        + f" --xla_force_host_platform_device_count={max(ARGS.devices, 1)}"
    ).strip()
sys.path.insert(0, str(HERE.parent))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from results_file import results_file  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from openinfer_jax.sim import Simulator  # noqa: E402
from openinfer_jax.sim.sharding import device_mesh  # noqa: E402
from openinfer_jax.sim.sharding_models import (  # noqa: E402
    DecoderConfig,
    decoder_graph,
    decoder_plan,
    write_decoder,
)


def _config(args: argparse.Namespace) -> DecoderConfig:
    if args.quick:
        cfg = DecoderConfig(layers=2, d=256, heads=8, kv_heads=8, ffn=512, batch=8)
    else:
        cfg = DecoderConfig(layers=8, d=4096, heads=32, kv_heads=32, ffn=11008, batch=8)
    return DecoderConfig(args.layers or cfg.layers, cfg.d, cfg.heads, cfg.kv_heads, cfg.ffn,
                         args.batch or cfg.batch)  # fmt: skip


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

    def step(self) -> np.ndarray:
        """One decode step; returns y (on the host, so the step has finished)."""
        x = self.inputs.standard_normal((self.cfg.batch, self.cfg.d)).astype(np.float32)
        self.ex.insert(x=x)
        self.ex.step()
        return self.ex.fetch("y")

    def device_bytes(self) -> dict[str, dict[str, int]]:
        """Bytes of weight and KV-cache shards per device."""
        out: dict[str, dict[str, int]] = {}

        def add(arr: Any, what: str) -> None:
            for shard in getattr(arr, "addressable_shards", []):
                slot = out.setdefault(str(shard.device), {"weights": 0, "kv": 0})
                slot[what] += int(shard.data.nbytes)

        for arr in self.ex._pristine.values():
            add(arr, "weights")
        for arr in self.ex._var_initial.values():
            add(arr, "weights")
        for table in self.ex.persistent.tables.values():
            add(table.buffer, "kv")
        return out


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

    def step(self) -> np.ndarray:
        """One decode step; returns y on the host."""
        x = self.inputs.standard_normal((self.cfg.batch, self.cfg.d)).astype(np.float32)
        y, self.kc, self.vc = self.fn(
            self.params, self.final, self.kc, self.vc, x, np.int32(self.pos)
        )
        self.pos += 1
        return np.asarray(y)


def _timed(run: Run | PureStep, warmup: int, steps: int) -> tuple[float, np.ndarray]:
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


# SmolLM2 (9 heads, 3 KV heads, torch (out, in) weights): projections split Megatron-style,
# the tied embedding by vocabulary row, the K/V tables by head dim.
SMOLLM2_PLAN = {
    "W[qkvgu]": ("model", None),
    "W[od]": (None, "model"),
    "tok_emb": ("model", None),
    "[KV]": (None, None, None, "model"),
}


def smollm2_rows(path: Path, devices: int, steps: int) -> list[dict[str, Any]]:
    """Greedy decode with the SmolLM2 example's graph on 1 and `devices` devices."""
    from openinfer_jax.models import build_graph

    text = build_graph(path, "llama", chunk=1)
    prompt = [1, 504, 3458, 314, 260, 1345]
    rows: list[dict[str, Any]] = []
    base: tuple[list[int], np.ndarray] | None = None
    for n in sorted({1, devices}):
        if n == 1:
            sim = Simulator(path, text, device=jax.devices()[0])
        else:
            sim = Simulator(path, text, mesh=device_mesh(n), sharding=SMOLLM2_PLAN)
        ex = sim.make_executor()
        for token in prompt:
            ex.insert(tokens=np.asarray([token], np.int32))
            ex.step()
        tokens, times, logits = [], [], ex.fetch("logits")[0]
        for _ in range(steps):
            tokens.append(int(np.argmax(logits)))
            ex.insert(tokens=np.asarray([tokens[-1]], np.int32))
            start = time.perf_counter()
            ex.step()
            logits = ex.fetch("logits")[0]
            times.append((time.perf_counter() - start) * 1e3)
        ms = statistics.median(times[2:] or times)
        if base is None:
            base = (tokens, logits)
        rows.append(
            {
                "devices": n,
                "step_ms": ms,
                "tokens_per_s": 1e3 / ms,
                "same_tokens": tokens == base[0],
                "max_abs_logit_diff": float(np.max(np.abs(logits - base[1]))),
                "speedup": rows[0]["step_ms"] / ms if rows else 1.0,
            }
        )
        sim.model.close()
    return rows


def _allocator_bytes() -> dict[str, int]:
    out = {}
    for dev in jax.local_devices():
        stats = dev.memory_stats() if hasattr(dev, "memory_stats") else None
        if stats and "bytes_in_use" in stats:
            out[str(dev)] = int(stats["bytes_in_use"])
    return out


def main() -> int:
    """Build the decoder, time 1 vs N devices, print the table, write the JSON."""
    args = ARGS
    cfg = _config(args)
    if args.precision:
        jax.config.update("jax_default_matmul_precision", args.precision)
    platform = jax.devices()[0].platform
    on_cpu = platform == "cpu"
    if on_cpu and not args.quick and not args.layers:
        # Correctness only on CPU: one 7B-shaped layer (0.75 GiB) instead of 8 (6 GiB), so
        # bench/run_all.py fits a 2-core, 24 GB machine.
        cfg = DecoderConfig(1, cfg.d, cfg.heads, cfg.kv_heads, cfg.ffn, cfg.batch)
    steps = args.steps or (5 if args.quick or on_cpu else 20)
    context = args.context or (32 if args.quick else 256)
    console = Console(width=160)
    console.print(
        f"decoder: {cfg.layers} layers, d={cfg.d}, {cfg.heads} heads ({cfg.kv_heads} kv), "
        f"ffn {cfg.ffn}, batch {cfg.batch}, context {context}; weights "
        f"{cfg.weight_bytes() / 2**30:.2f} GiB; {platform} x{len(jax.devices())}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or Path(tmp) / "decoder.oinf"
        if not path.exists():
            start = time.perf_counter()
            write_decoder(path, cfg)
            console.print(f"wrote {path} in {time.perf_counter() - start:.1f} s")
        text = decoder_graph(cfg)
        rows: list[dict[str, Any]] = []
        base_y = None
        base_ms = None
        base_pure = None
        base_mem = None
        for n in sorted({1, args.devices}):
            before = _allocator_bytes()
            if n == 1:
                sim = Simulator(path, text, device=jax.devices()[0])
            else:
                sim = Simulator(path, text, mesh=device_mesh(n), sharding=decoder_plan())
            run = Run(sim, cfg, context)
            ms, y = _timed(run, warmup=3, steps=steps)
            per_device = run.device_bytes()
            pure_ms: float | None = None
            if not on_cpu:  # a speed baseline: meaningless on emulated devices
                pure = PureStep(sim, cfg, context, steps + 3)
                pure_ms, _pure_y = _timed(pure, warmup=3, steps=steps)
                del pure
            after = _allocator_bytes()
            collectives = 0
            if sim.sharded is not None:
                sim.with_trace()
                run.step()
                collectives = sum(r["collectives"]["total"] for r in sim.sharded.regions.values())
            top = max(per_device.values(), key=lambda d: d["weights"] + d["kv"])
            row = {
                "devices": n,
                "step_ms": ms,
                "tokens_per_s": cfg.batch / (ms / 1e3),
                "pure_jax_step_ms": pure_ms,
                "weights_bytes_per_device": top["weights"],
                "kv_bytes_per_device": top["kv"],
                "allocator_bytes_per_device": max(
                    (after.get(k, 0) - before.get(k, 0) for k in after), default=0
                ),
                "collectives_per_step": collectives,
            }
            if base_y is None:
                base_y, base_ms, base_mem = y, ms, top["weights"] + top["kv"]
                base_pure = pure_ms
                row["max_abs_diff"] = 0.0
            else:
                row["max_abs_diff"] = float(np.max(np.abs(y.astype(np.float64) - base_y)))
            row["speedup"] = base_ms / ms if base_ms else 1.0
            row["pure_jax_speedup"] = base_pure / pure_ms if base_pure and pure_ms else None
            row["sim_over_pure_jax"] = ms / pure_ms if pure_ms else None
            row["memory_ratio"] = (top["weights"] + top["kv"]) / base_mem if base_mem else 1.0
            rows.append(row)
            sim.model.close()
            del run, sim
    table = Table(title=f"decode step, 1 vs {args.devices} {platform} devices (median of {steps})")
    for col in ("devices", "step ms", "tokens/s", "speedup", "pure-JAX ms", "pure speedup",
                "sim/pure", "weights MiB/dev", "KV MiB/dev", "mem ratio", "collectives/step",
                "max |diff|"):  # fmt: skip
        table.add_column(col, justify="right")
    for row in rows:
        speed = (
            ("n/a (CPU)", "n/a", "n/a", "n/a", "n/a", "n/a")
            if on_cpu
            else (f"{row['step_ms']:.2f}", f"{row['tokens_per_s']:.0f}", f"{row['speedup']:.2f}x",
                  f"{row['pure_jax_step_ms']:.2f}", f"{row['pure_jax_speedup']:.2f}x",
                  f"{row['sim_over_pure_jax']:.2f}")
        )  # fmt: skip
        table.add_row(
            str(row["devices"]), *speed,
            f"{row['weights_bytes_per_device'] / 2**20:.1f}",
            f"{row['kv_bytes_per_device'] / 2**20:.1f}",
            f"{row['memory_ratio']:.3f}", str(row["collectives_per_step"]),
            f"{row['max_abs_diff']:.2e}",
        )  # fmt: skip
    console.print(table)
    if on_cpu:
        console.print("emulated CPU devices share the same cores: speed is not reported")
    smollm2: list[dict[str, Any]] = []
    if args.smollm2:
        smollm2 = smollm2_rows(args.smollm2, args.devices, 8 if args.quick else 24)
        small = Table(title=f"SmolLM2-135M greedy decode, 1 vs {args.devices} {platform} devices")
        for col in ("devices", "step ms", "tokens/s", "speedup", "same tokens", "max |logit diff|"):
            small.add_column(col, justify="right")
        for row in smollm2:
            speed = (
                ("n/a (CPU)", "n/a", "n/a")
                if on_cpu
                else (
                    f"{row['step_ms']:.2f}",
                    f"{row['tokens_per_s']:.0f}",
                    f"{row['speedup']:.2f}x",
                )
            )
            small.add_row(str(row["devices"]), *speed, str(row["same_tokens"]),
                          f"{row['max_abs_logit_diff']:.2e}")  # fmt: skip
        console.print(small)
    result = {
        "platform": platform,
        "device_kind": jax.devices()[0].device_kind,
        "config": cfg.__dict__,
        "context": context,
        "steps": steps,
        "quick": args.quick,
        "matmul_precision": args.precision or "default",
        "rows": rows,
        "smollm2": smollm2,
    }
    if args.out is None:
        args.out = results_file("sharding.json", args.quick)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    console.print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
