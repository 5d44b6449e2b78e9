"""Sharding benchmark: a 7B-shaped decoder decode step on 1 device vs N devices (tensor parallel).

Figures (all measured in this run, for every batch x context of the sweep; ratios against
the 1-device simulator measured here):
1. decode-step time and tokens/s of the generated decoder (openinfer_jax.sim.sharding_models:
   8 layers of a 7B-shaped block, d=4096, 32 heads, ffn 11008, random f32 weights in a
   generated .oinf, KV cache prefilled to the context) through the simulator on one device
   and sharded over N devices with the Megatron plan; speedup = t(1) / t(N) (target >= 1.6x
   on 2 GPUs at batch 8), and the same step as one hand-written `jax.jit` with the same
   shardings (bench/sharding_steps.py), its speedup and sim/jit ratio (target <= 1.15);
   `fit`: t = a + b * context per (devices, batch, runner) when two contexts ran.
2. per-device memory of weights + KV cache (bytes of the shards each device holds; on GPUs
   also the allocator's bytes in use) vs the single-device figure (target ~ 1/N plus the
   replicated norms).
3. collectives per step (from the compiled HLO), the max |difference| of the outputs
   (sharded vs one device) and of the jit baseline vs the simulator (same inputs).
4. with `--smollm2 build/smollm2.oinf` (the converted SmolLM2-135M of examples/smollm2):
   greedy decode through the example's graph on 1 vs N devices; same tokens, max logit
   difference, decode-step time.

Defaults: on GPUs batches 1,8 and contexts 256,2048 (the issue-20 sweep); on CPU (N devices
emulated with XLA_FLAGS=--xla_force_host_platform_device_count=N, set here before jax
starts) batch 8, context 256 and one 7B-shaped layer unless --layers says more: emulated
devices share the same cores, so only correctness and memory are reported, not speed.
`--quick`: 2 layers, d=256, batch 8, context 32. The JSON is rewritten after every row (a
run cut short keeps what it measured): bench/results/sharding.json on CPU,
bench/results/sharding_gpu_<kind>x<N>.json on GPUs (e.g. sharding_gpu_h200x2.json).

Run: `.venv/bin/python bench/bench_sharding.py [--quick] [--devices N] [--batch 1,8]
[--context 256,2048] [--smollm2 OINF]`.
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


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tiny decoder (2 layers, d=256)")
    parser.add_argument("--devices", type=int, default=2, help="devices of the sharded run (2)")
    parser.add_argument("--steps", type=int, default=0, help="timed steps (default 20, quick 5)")
    parser.add_argument(
        "--context", type=_ints, default=[], help="prefilled KV lengths, e.g. 256,2048"
    )
    parser.add_argument("--layers", type=int, default=0, help="override the number of layers")
    parser.add_argument("--batch", type=_ints, default=[], help="batches, e.g. 1,8")
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
    parser.add_argument("--out", type=Path, default=None, help="default: see the module doc")
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
from sharding_steps import PureStep, Run, allocator_bytes, device_bytes, pipelined, timed  # noqa: E402

from openinfer_jax.sim import Simulator  # noqa: E402
from openinfer_jax.sim.sharding import device_mesh  # noqa: E402
from openinfer_jax.sim.sharding_models import (  # noqa: E402
    DecoderConfig,
    decoder_graph,
    decoder_plan,
    write_decoder,
)


def _config(args: argparse.Namespace, on_cpu: bool) -> DecoderConfig:
    """The decoder (batch 8; one layer on CPU unless --layers/--quick)."""
    if args.quick:
        cfg = DecoderConfig(layers=2, d=256, heads=8, kv_heads=8, ffn=512, batch=8)
    else:
        cfg = DecoderConfig(layers=8, d=4096, heads=32, kv_heads=32, ffn=11008, batch=8)
    # Correctness only on CPU: one 7B-shaped layer (0.75 GiB) instead of 8 (6 GiB), so
    # bench/run_all.py fits a 2-core, 24 GB machine.
    layers = args.layers or (1 if on_cpu and not args.quick else cfg.layers)
    return DecoderConfig(layers, cfg.d, cfg.heads, cfg.kv_heads, cfg.ffn, cfg.batch)


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


def _fit(points: list[tuple[int, float]]) -> dict[str, float] | None:
    """Least-squares t = a + b * context over (context, ms) points (None below 2 contexts)."""
    if len({c for c, _ in points}) < 2:
        return None
    b, a = np.polyfit([c for c, _ in points], [ms for _, ms in points], 1)
    return {"fixed_ms": float(a), "us_per_token": float(b) * 1e3}


def _default_out(args: argparse.Namespace, platform: str) -> Path:
    if platform == "cpu" or args.quick:
        return results_file("sharding.json", args.quick)
    kind = jax.devices()[0].device_kind.split()[-1].lower()
    return results_file(f"sharding_{platform}_{kind}x{args.devices}.json", False)


def _row(
    sim: Simulator, cfg: DecoderConfig, context: int, steps: int, start_bytes: dict[str, int]
) -> tuple[dict[str, Any], np.ndarray]:
    """Time the simulator and the jit baseline at one context; memory and collectives."""
    run = Run(sim, cfg, context)
    ms, y = timed(run, warmup=3, steps=steps)
    ahead_ms = pipelined(run, steps)
    per_device = device_bytes(run.kv_arrays())
    in_use = allocator_bytes()
    collectives = 0
    if sim.sharded is not None:
        sim.with_trace()
        run.step()
        sim.tracing = False  # the next context is timed untraced again
        collectives = sum(r["collectives"]["total"] for r in sim.sharded.regions.values())
    del run
    pure = PureStep(sim, cfg, context, 2 * steps + 3)
    pure_ms, pure_y = timed(pure, warmup=3, steps=steps)
    pure_ahead_ms = pipelined(pure, steps)
    del pure
    top = max(per_device.values(), key=lambda d: d["weights"] + d["kv"])
    row = {
        "batch": cfg.batch,
        "context": context,
        "step_ms": ms,
        "tokens_per_s": cfg.batch / (ms / 1e3),
        "pure_jax_step_ms": pure_ms,
        "sim_over_pure_jax": ms / pure_ms,
        # Steps dispatched back to back, one wait: the host's dispatch hidden where it can be.
        "pipelined_step_ms": ahead_ms,
        "pure_jax_pipelined_step_ms": pure_ahead_ms,
        "pure_jax_max_abs_diff": float(np.max(np.abs(pure_y.astype(np.float64) - y))),
        "weights_bytes_per_device": top["weights"],
        "kv_bytes_per_device": top["kv"],
        "allocator_bytes_per_device": max(
            (in_use[k] - start_bytes.get(k, 0) for k in in_use), default=0
        ),
        "collectives_per_step": collectives,
    }
    return row, y


def _table(rows: list[dict[str, Any]], title: str, on_cpu: bool) -> Table:
    table = Table(title=title)
    for col in ("devices", "batch", "context", "step ms", "tokens/s", "speedup", "jit ms",
                "jit speedup", "sim/jit", "weights MiB/dev", "KV MiB/dev", "mem ratio",
                "collectives/step", "max |diff|", "jit |diff|"):  # fmt: skip
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
            str(row["devices"]), str(row["batch"]), str(row["context"]), *speed,
            f"{row['weights_bytes_per_device'] / 2**20:.1f}",
            f"{row['kv_bytes_per_device'] / 2**20:.1f}",
            f"{row['memory_ratio']:.3f}", str(row["collectives_per_step"]),
            f"{row['max_abs_diff']:.2e}", f"{row['pure_jax_max_abs_diff']:.2e}",
        )  # fmt: skip
    return table


def main() -> int:
    """Build the decoder, time 1 vs N devices per batch and context, write the JSON."""
    args = ARGS
    if args.precision:
        jax.config.update("jax_default_matmul_precision", args.precision)
    platform = jax.devices()[0].platform
    on_cpu = platform == "cpu"
    cfg0 = _config(args, on_cpu)
    batches = args.batch or ([8] if on_cpu or args.quick else [1, 8])
    contexts = args.context or ([32] if args.quick else [256] if on_cpu else [256, 2048])
    steps = args.steps or (5 if args.quick or on_cpu else 20)
    out = args.out or _default_out(args, platform)
    out.parent.mkdir(parents=True, exist_ok=True)
    console = Console(width=200)
    console.print(
        f"decoder: {cfg0.layers} layers, d={cfg0.d}, {cfg0.heads} heads ({cfg0.kv_heads} kv), "
        f"ffn {cfg0.ffn}; batches {batches}, contexts {contexts}; weights "
        f"{cfg0.weight_bytes() / 2**30:.2f} GiB; {platform} x{len(jax.devices())}"
    )
    result: dict[str, Any] = {
        "platform": platform,
        "device_kind": jax.devices()[0].device_kind,
        "devices": args.devices,
        "config": {k: v for k, v in cfg0.__dict__.items() if k != "batch"},
        "batches": batches,
        "contexts": contexts,
        "steps": steps,
        "quick": args.quick,
        "matmul_precision": args.precision or "default",
        "rows": [],
        "fits": [],
        "smollm2": [],
    }
    rows: list[dict[str, Any]] = result["rows"]
    start_bytes = allocator_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or Path(tmp) / "decoder.oinf"
        if not path.exists():
            began = time.perf_counter()
            write_decoder(path, cfg0)  # the weights do not depend on the batch
            console.print(f"wrote {path} in {time.perf_counter() - began:.1f} s")
        for batch in batches:
            cfg = DecoderConfig(cfg0.layers, cfg0.d, cfg0.heads, cfg0.kv_heads, cfg0.ffn, batch)
            text = decoder_graph(cfg)
            base: dict[int, dict[str, Any]] = {}
            base_y: dict[int, np.ndarray] = {}
            for n in sorted({1, args.devices}):
                if n == 1:
                    sim = Simulator(path, text, device=jax.devices()[0])
                else:
                    sim = Simulator(path, text, mesh=device_mesh(n), sharding=decoder_plan())
                for context in contexts:
                    row, y = _row(sim, cfg, context, steps, start_bytes)
                    first = base.setdefault(context, row)
                    base_y.setdefault(context, y)
                    mem = row["weights_bytes_per_device"] + row["kv_bytes_per_device"]
                    row |= {
                        "devices": n,
                        "speedup": first["step_ms"] / row["step_ms"],
                        "pure_jax_speedup": first["pure_jax_step_ms"] / row["pure_jax_step_ms"],
                        "pipelined_speedup": first["pipelined_step_ms"] / row["pipelined_step_ms"],
                        "pure_jax_pipelined_speedup": first["pure_jax_pipelined_step_ms"]
                        / row["pure_jax_pipelined_step_ms"],
                        "memory_ratio": mem
                        / (first["weights_bytes_per_device"] + first["kv_bytes_per_device"]),
                        "max_abs_diff": float(
                            np.max(np.abs(y.astype(np.float64) - base_y[context]))
                        ),
                    }
                    rows.append(row)
                    console.print(
                        f"devices {n} batch {batch} context {context}: sim {row['step_ms']:.2f}"
                        f" ms, jit {row['pure_jax_step_ms']:.2f} ms, speedup "
                        f"{row['speedup']:.2f}x (jit {row['pure_jax_speedup']:.2f}x); pipelined: "
                        f"sim {row['pipelined_step_ms']:.2f} ms, jit "
                        f"{row['pure_jax_pipelined_step_ms']:.2f} ms, speedup "
                        f"{row['pipelined_speedup']:.2f}x (jit "
                        f"{row['pure_jax_pipelined_speedup']:.2f}x); diff {row['max_abs_diff']:.1e}"
                    )
                    out.write_text(json.dumps(result, indent=1))
                sim.model.close()
                del sim
    for n in sorted({1, args.devices}):
        for batch in batches:
            mine = [r for r in rows if r["devices"] == n and r["batch"] == batch]
            for runner, key in (("sim", "step_ms"), ("jit", "pure_jax_step_ms")):
                fit = _fit([(r["context"], r[key]) for r in mine])
                if fit is not None:
                    result["fits"].append({"devices": n, "batch": batch, "runner": runner} | fit)
    title = f"decode step, 1 vs {args.devices} {platform} devices (median of {steps})"
    console.print(_table(rows, title, on_cpu))
    for fit in result["fits"]:
        console.print(
            f"fit {fit['runner']} devices {fit['devices']} batch {fit['batch']}: "
            f"{fit['fixed_ms']:.2f} ms + {fit['us_per_token']:.3f} us/token"
        )
    if on_cpu:
        console.print("emulated CPU devices share the same cores: speed is not reported")
    if args.smollm2:
        result["smollm2"] = smollm2_rows(args.smollm2, args.devices, 8 if args.quick else 24)
        small = Table(title=f"SmolLM2-135M greedy decode, 1 vs {args.devices} {platform} devices")
        for col in ("devices", "step ms", "tokens/s", "speedup", "same tokens", "max |logit diff|"):
            small.add_column(col, justify="right")
        for row in result["smollm2"]:
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
    out.write_text(json.dumps(result, indent=1))
    console.print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
