"""Simulator benchmark: a GPT-2-small decode step vs one hand-written jax.jit, and cache growth.

Figures (all measured in this run, ratios against baselines measured in this run):
1. decode step (12 layers, d=768, 12 heads, KV cache; random weights in a generated .oinf,
   the step written in graph{} text, see examples/kv_cache_decode.py) through the simulator
   vs the same math as ONE jax.jit function with the KV cache as donated arrays, at
   context 128 and 1024, the two sides' steps alternating. Target simulator/pure-JAX <= 1.15
   (issue 18).
2. the same step in the simulator's eager NumPy interpreter (device="numpy"): speedup.
3. one `cache.write` at table size 16 vs 16,384 (target ratio <= 1.5).
4. decode step time vs context 1..2048 (CSV; a PNG too when matplotlib is installed).
5. the bucket ladder: decode step at context 1024, 1536 and 2048 with the ladder of padded
   cache reads (sim/values.py, BUCKETS_PER_DOUBLING) vs the power-of-two ladder it replaced,
   both measured in this run; and how many buckets (compilations) each has up to 2048.

`--quick` shrinks the model (2 layers, d=128) and the contexts; `--ladder-only` runs part 5
alone; `--decode-only` runs part 1 alone (with the host CPU time of a simulator step).
Results: bench/results/sim.json (quick runs: bench/results/quick/).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from kv_cache_decode import LAYER_TENSORS, Config, graph_text, write_model  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from openinfer_jax.sim import Simulator, values  # noqa: E402
from openinfer_jax.sim.values import bucket_size  # noqa: E402

RESULTS = HERE / "results"


def _median_ms(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


# ---- the simulator side ------------------------------------------------------------------------
class SimDecode:
    """A simulator executor positioned at a given context by loading a prefilled KV cache."""

    def __init__(self, sim: Simulator, cfg: Config) -> None:
        self.sim = sim
        self.cfg = cfg
        self.rng = np.random.default_rng(3)
        self.ex = sim.make_executor()

    def prefill(self, context: int) -> None:
        """Fresh executor whose tables hold `context` random entries per layer."""
        cfg = self.cfg
        self.ex = self.sim.make_executor()
        shape = (cfg.layers, context, cfg.heads, cfg.head_dim)
        for name in ("K", "V"):
            self.ex.set_persistent(name, (self.rng.standard_normal(shape) * 0.5).astype(np.float32))
        self.ex.set_persistent("step", np.asarray(context, np.int32))

    host_ms: list[float] = []
    host_cpu_ms: list[float] = []
    own_ms: list[float] = []

    def step(self) -> None:
        """One decode step, waiting for its result; records the host-side (dispatch) time,
        wall and CPU time of this process (on a GPU the CPU time is the host's own work)."""
        x = self.rng.standard_normal((1, self.cfg.d)).astype(np.float32)
        dispatched = self.ex.dispatch_ns  # Executor.stats["dispatch_ns"], read cheaply
        start = time.perf_counter()
        cpu = time.process_time()
        self.ex.insert(x=x)
        self.ex.step()
        self.host_cpu_ms.append((time.process_time() - cpu) * 1e3)
        self.host_ms.append((time.perf_counter() - start) * 1e3)
        # The simulator's own host work: the host part less the time inside XLA's calls.
        xla_ms = (self.ex.dispatch_ns - dispatched) / 1e6
        self.own_ms.append(self.host_ms[-1] - xla_ms)
        jax.block_until_ready(self.ex.fetch_device("y"))


# ---- the pure-JAX baseline ------------------------------------------------------------------------
def _layer_norm(x: Any, g: Any, b: Any) -> Any:
    mu = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, -1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g + b


def make_pure_jax(cfg: Config) -> Callable[..., Any]:
    """The decode step as ONE jitted function; caches [L, C, H, Dh] donated, masked by position."""
    d, h, dh = cfg.d, cfg.heads, cfg.head_dim

    def step(params: dict[str, Any], kc: Any, vc: Any, x: Any, pos: Any) -> tuple[Any, Any, Any]:
        hid = x
        cap = kc.shape[1]
        visible = jnp.arange(cap) <= pos
        for layer in range(cfg.layers):
            p = {name: params[f"h.{layer}.{name}"] for name, _ in LAYER_TENSORS}
            a = _layer_norm(hid, p["ln1_g"], p["ln1_b"])
            qkv = a @ p["w_qkv"] + p["b_qkv"]
            q, k, v = qkv[:, :d], qkv[:, d : 2 * d], qkv[:, 2 * d :]
            at = (jnp.int32(layer), pos, jnp.int32(0), jnp.int32(0))
            kc = jax.lax.dynamic_update_slice(kc, k.reshape(1, 1, h, dh), at)
            vc = jax.lax.dynamic_update_slice(vc, v.reshape(1, 1, h, dh), at)
            keys, values = kc[layer], vc[layer]  # [C, H, Dh]
            scores = jnp.einsum("hd,chd->hc", q.reshape(h, dh), keys) / math.sqrt(dh)
            scores = jnp.where(visible[None, :], scores, -jnp.inf)
            probs = jax.nn.softmax(scores, axis=-1)
            att = jnp.einsum("hc,chd->hd", probs, values).reshape(1, d)
            hid = hid + att @ p["w_o"] + p["b_o"]
            a = _layer_norm(hid, p["ln2_g"], p["ln2_b"])
            f = jax.nn.gelu(a @ p["w_fc"] + p["b_fc"], approximate=False)
            hid = hid + f @ p["w_pr"] + p["b_pr"]
        return _layer_norm(hid, params["lnf_g"], params["lnf_b"]), kc, vc

    return jax.jit(step, donate_argnums=(1, 2))


class PureDecode:
    """The baseline positioned at a context, with a cache of the same bucket size as the simulator's."""

    host_ms: list[float] = []

    def __init__(self, fn: Callable[..., Any], params: dict[str, Any], cfg: Config) -> None:
        self.fn, self.params, self.cfg = fn, params, cfg
        self.rng = np.random.default_rng(3)

    def prefill(self, context: int, capacity: int) -> None:
        """Caches of `capacity` positions, the first `context` random."""
        cfg = self.cfg
        shape = (cfg.layers, capacity, cfg.heads, cfg.head_dim)
        kc = np.zeros(shape, np.float32)
        vc = np.zeros(shape, np.float32)
        kc[:, :context] = (
            self.rng.standard_normal((cfg.layers, context, cfg.heads, cfg.head_dim)) * 0.5
        )
        vc[:, :context] = (
            self.rng.standard_normal((cfg.layers, context, cfg.heads, cfg.head_dim)) * 0.5
        )
        device = next(iter(self.params.values())).devices().pop()
        self.kc, self.vc = jax.device_put(kc, device), jax.device_put(vc, device)
        self.pos = context

    def step(self) -> None:
        """One decode step, waiting for its result."""
        x = self.rng.standard_normal((1, self.cfg.d)).astype(np.float32)
        start = time.perf_counter()
        # A host scalar goes to the device with the call's other operands (jnp.int32 would
        # be a computation of its own, dispatched every step).
        y, self.kc, self.vc = self.fn(self.params, self.kc, self.vc, x, np.int32(self.pos))
        self.host_ms.append((time.perf_counter() - start) * 1e3)
        self.pos += 1
        y.block_until_ready()


# Timed steps per prefill: from context 128 or 1024 they stay inside one read bucket (no
# compilation among the timed steps); more repeats take more rounds.
STEPS_PER_ROUND = 25
WARM = 3  # untimed steps per round (a new executor's first calls set up its buffers)


def interleaved(ours: SimDecode, pure: PureDecode, ctx: int, repeats: int) -> dict[str, Any]:
    """Decode steps at context `ctx`, simulator and jax.jit alternating step by step, so
    both see the same machine state (a GPU host's speed drifts between runs by more than
    the gap measured). Returns the step times (ms) of each side and the medians of the
    simulator's host part, of its own host work (outside XLA's calls), its best host CPU
    time and the jit's host part."""
    sim_times: list[float] = []
    jax_times: list[float] = []
    host_ms: list[float] = []
    own_ms: list[float] = []
    host_cpu_ms: list[float] = []
    jax_host_ms: list[float] = []
    left = repeats
    while left > 0:
        steps = min(left, STEPS_PER_ROUND)
        left -= steps
        ours.prefill(ctx)
        pure.prefill(ctx, bucket_size(ctx + WARM + steps + 1))
        for _ in range(WARM):
            ours.step()
            pure.step()
        ours.host_ms, ours.own_ms, ours.host_cpu_ms, pure.host_ms = [], [], [], []
        for _ in range(steps):
            sim_times.append(_median_ms(ours.step, 1))
            jax_times.append(_median_ms(pure.step, 1))
        host_ms += ours.host_ms
        own_ms += ours.own_ms
        host_cpu_ms += ours.host_cpu_ms
        jax_host_ms += pure.host_ms
    return {
        "sim_times": sim_times,
        "jax_times": jax_times,
        "host_ms": statistics.median(host_ms),
        "own_ms": statistics.median(own_ms),
        "host_cpu_ms": min(host_cpu_ms),
        "jax_host_ms": statistics.median(jax_host_ms),
    }


# ---- cache growth -------------------------------------------------------------------------------------
CACHE_GRAPH = """
graph {
  dynamic { x: f32[H, Dh]; }
  persistent { n: i32 @init(0); A(t): f32[H, Dh] @table; }
  block entry {
    cache.write x >> A[n];
    cache.increment n;
    return;
  }
}
"""


def cache_write_ms(sim: Simulator, size: int, repeats: int, shape: tuple[int, int]) -> float:
    """Median time of a step holding one cache.write into a table of `size` entries."""
    ex = sim.make_executor()
    ex.set_persistent("A", np.zeros((size, *shape), np.float32))
    ex.set_persistent("n", np.asarray(size, np.int32))
    x = np.ones(shape, np.float32)
    table = ex.persistent.tables["A"]

    def one() -> None:
        ex.insert(x=x)
        ex.step()
        table.buffer.block_until_ready()

    for _ in range(3):
        one()
    # Stay inside the capacity so only writes are measured (growth is amortized separately).
    return _median_ms(one, repeats)


# ---- the bucket ladder -------------------------------------------------------------------------------
def ladder_rows(
    path: Path, cfg: Config, contexts: list[int], repeats: int, device: str
) -> list[dict[str, Any]]:
    """Decode step ms per context with the current ladder and the power-of-two one.

    The step at context c reads c+1.. entries, so c = 1024 pads to 1280 on the ladder and
    to 2048 with powers of two. Each ladder gets its own simulator (its own executables);
    the timed steps alternate between the two, so both see the same machine load.
    """
    ladders = {"ladder": values.BUCKETS_PER_DOUBLING, "pow2": 1}
    saved = values.BUCKETS_PER_DOUBLING
    decs = {
        name: SimDecode(Simulator(path, graph_text(cfg), device=device), cfg) for name in ladders
    }
    times: dict[str, dict[int, list[float]]] = {name: {} for name in ladders}

    def run(name: str, fn: Callable[[], Any]) -> float:
        values.BUCKETS_PER_DOUBLING = ladders[name]  # read by every bucket_size call
        try:
            start = time.perf_counter()
            fn()
            return (time.perf_counter() - start) * 1e3
        finally:
            values.BUCKETS_PER_DOUBLING = saved

    for ctx in contexts:
        for name, dec in decs.items():
            run(name, lambda dec=dec, ctx=ctx: dec.prefill(ctx))
            run(name, dec.step)  # compiles this context's bucket
            run(name, dec.step)
            times[name][ctx] = []
        for _ in range(repeats):
            for name, dec in decs.items():
                times[name][ctx].append(run(name, dec.step))
    for dec in decs.values():
        dec.sim.model.close()
    rows = []
    for ctx in contexts:
        ms = {name: statistics.median(times[name][ctx]) for name in ladders}
        rows.append(
            {
                "context": ctx,
                "padded_to": bucket_size(ctx + 1),
                "padded_to_pow2": bucket_size(ctx + 1, per_doubling=1),
                "ladder_ms": ms["ladder"],
                "pow2_ms": ms["pow2"],
                "speedup": ms["pow2"] / ms["ladder"],
            }
        )
    return rows


def _ladder_table(rows: list[dict[str, Any]], top: int) -> Table:
    buckets = len({bucket_size(n) for n in range(1, top + 1)})
    pow2 = len({bucket_size(n, per_doubling=1) for n in range(1, top + 1)})
    table = Table(
        title=f"bucket ladder ({values.BUCKETS_PER_DOUBLING} buckets per doubling: {buckets} "
        f"compilations up to {top}) vs powers of two ({pow2})"
    )
    for col in ("context", "padded to", "ms", "pow2 padded to", "pow2 ms", "speedup"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["context"]), str(r["padded_to"]), f"{r['ladder_ms']:.2f}",
            str(r["padded_to_pow2"]), f"{r['pow2_ms']:.2f}", f"{r['speedup']:.2f}x",
        )  # fmt: skip
    return table


def _print_decode(
    console: Console, cfg: Config, quick: bool, device: str, decode_rows: list[dict[str, Any]]
) -> None:
    """Print the decode table (simulator vs the hand-written jax.jit)."""
    table = Table(
        title=f"simulator: decode step, {cfg.layers} layers d={cfg.d} "
        f"({'quick' if quick else 'GPT-2 small'}, {device}, {os.cpu_count()} CPUs)"
    )
    for col in (
        "context",
        "simulator ms",
        "(host part)",
        "(own: outside XLA calls, % of step <=20)",
        "(host CPU, best)",
        "pure jax.jit ms",
        "(its host part)",
        "sim / jax (<=1.15)",
        "numpy eager ms",
        "speedup vs numpy",
    ):
        table.add_column(col, justify="right")
    for row in decode_rows:
        table.add_row(
            str(row["context"]),
            f"{row['sim_ms']:.2f}",
            f"{row['sim_host_ms']:.2f}",
            f"{row['sim_own_host_ms']:.2f} ({row['sim_own_host_share']:.0%})",
            f"{row['sim_host_cpu_ms_best']:.2f}",
            f"{row['pure_jax_ms']:.2f}",
            f"{row['pure_jax_host_ms']:.2f}",
            f"{row['ratio_sim_over_jax']:.2f}",
            f"{row['numpy_eager_ms']:.1f}",
            f"{row['speedup_vs_numpy']:.1f}x",
        )
    console.print(table)


# ---- main ---------------------------------------------------------------------------------------------
def main(argv: list[str]) -> int:
    """Run the benchmark and print a table; write bench/results/sim.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small model and contexts")
    parser.add_argument(
        "--device", default="cpu", choices=("cpu", "gpu"), help="JAX device for both sides"
    )
    parser.add_argument(
        "--no-eager", action="store_true", help="skip the NumPy interpreter baseline"
    )
    parser.add_argument("--ladder-only", action="store_true", help="only the bucket ladder part")
    parser.add_argument(
        "--decode-only", action="store_true", help="only the decode step vs jax.jit part"
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help="timed steps per figure (default 10; quick 5)"
    )
    args = parser.parse_args(argv)
    quick = args.quick
    cfg = Config(layers=2, d=128, heads=4) if quick else Config(layers=12, d=768, heads=12)
    contexts = [16, 64] if quick else [128, 1024]
    sweep = (
        [1, 4, 16, 64, 256] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 1536, 2048]
    )
    ladder_contexts = [256, 384, 512] if quick else [1024, 1536, 2048]
    repeats = args.repeats or (5 if quick else 10)
    eager_repeats = 2 if quick else 3
    console = Console()
    out_dir = RESULTS / "quick" if quick else RESULTS
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "config": {"layers": cfg.layers, "d": cfg.d, "heads": cfg.heads},
        "quick": quick,
        "device": args.device,
        "jax": jax.__version__,
        "cpu_count": os.cpu_count(),
    }
    device = jax.devices(args.device)[0]

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gpt.oinf"
        console.print(f"writing random weights: {cfg.layers} layers, d={cfg.d}, {cfg.heads} heads")
        write_model(path, cfg)
        ladder = (
            []
            if args.decode_only
            else ladder_rows(path, cfg, ladder_contexts, repeats, args.device)
        )
        results["ladder"] = ladder
        if ladder:
            console.print(_ladder_table(ladder, ladder_contexts[-1]))
        if args.ladder_only:  # a partial run: never over the full run's sim.json
            (RESULTS / "quick").mkdir(exist_ok=True)
            (RESULTS / "quick" / "sim_ladder.json").write_text(json.dumps(results, indent=1))
            return 0
        sim = Simulator(path, graph_text(cfg), device=args.device)
        params = {
            name: jax.device_put(np.array(sim.model.tensor(name)), device)
            for name in sim.model.tensors
        }
        pure = PureDecode(make_pure_jax(cfg), params, cfg)
        ours = SimDecode(sim, cfg)
        eager = SimDecode(Simulator(path, graph_text(cfg), device="numpy"), cfg)
        eager_off = args.no_eager or args.decode_only

        decode_rows = []
        for ctx in contexts:
            sides = interleaved(ours, pure, ctx, repeats)
            sim_ms = statistics.median(sides["sim_times"])
            jax_ms = statistics.median(sides["jax_times"])
            eager_ms = math.nan
            if not eager_off:
                eager.prefill(ctx)
                eager.step()
                eager_ms = _median_ms(eager.step, eager_repeats)
            decode_rows.append(
                {
                    "context": ctx,
                    "sim_ms": sim_ms,
                    "sim_host_ms": sides["host_ms"],
                    "sim_own_host_ms": sides["own_ms"],
                    "sim_own_host_share": sides["own_ms"] / sim_ms,
                    "sim_host_cpu_ms_best": sides["host_cpu_ms"],
                    "pure_jax_ms": jax_ms,
                    "pure_jax_host_ms": sides["jax_host_ms"],
                    "ratio_sim_over_jax": sim_ms / jax_ms,
                    "numpy_eager_ms": eager_ms,
                    "speedup_vs_numpy": eager_ms / sim_ms,
                }
            )
        results["decode"] = decode_rows
        results["compilations"] = ours.ex.stats["compilations"]
        if args.decode_only:
            _print_decode(console, cfg, quick, args.device, decode_rows)
            (RESULTS / "quick").mkdir(exist_ok=True)
            suffix = "" if args.device == "cpu" else f"_{args.device}"
            out = RESULTS / "quick" / f"sim_decode{suffix}.json"
            out.write_text(json.dumps(results, indent=1))
            console.print(f"wrote {out}")
            return 0

        growth_sim = Simulator(
            None, CACHE_GRAPH.replace("H, Dh", f"{cfg.heads}, {cfg.head_dim}"), device=args.device
        )
        shape = (cfg.heads, cfg.head_dim)
        small = cache_write_ms(growth_sim, 16, repeats * 20, shape)
        large = cache_write_ms(growth_sim, 16384, repeats * 20, shape)
        results["cache_write"] = {
            "size_16_ms": small,
            "size_16384_ms": large,
            "ratio": large / small,
        }

        curve = []
        for ctx in sweep:  # first pass compiles every bucket the measured steps will touch
            ours.prefill(ctx)
            for _ in range(2 + max(3, repeats // 2)):
                ours.step()
        for ctx in sweep:
            ours.prefill(ctx)
            ours.step()
            ours.step()
            curve.append({"context": ctx, "sim_ms": _median_ms(ours.step, max(3, repeats // 2))})
        results["decode_vs_context"] = curve
        sim.model.close()

    _print_decode(console, cfg, quick, args.device, decode_rows)
    cw = results["cache_write"]
    growth = Table(title="cache.write cost vs table size")
    for col in ("size 16 ms", "size 16384 ms", "ratio (<=1.5)"):
        growth.add_column(col, justify="right")
    growth.add_row(f"{cw['size_16_ms']:.3f}", f"{cw['size_16384_ms']:.3f}", f"{cw['ratio']:.2f}")
    console.print(growth)
    sweep_table = Table(title="decode step vs context")
    sweep_table.add_column("context", justify="right")
    sweep_table.add_column("ms", justify="right")
    for row in curve:
        sweep_table.add_row(str(row["context"]), f"{row['sim_ms']:.2f}")
    console.print(sweep_table)

    console.print(_ladder_table(ladder, ladder_contexts[-1]))
    csv = out_dir / "decode_vs_context.csv"
    csv.write_text(
        "context,sim_ms\n" + "".join(f"{r['context']},{r['sim_ms']:.4f}\n" for r in curve)
    )
    results["plot"] = _plot(curve, out_dir)
    suffix = "" if args.device == "cpu" else f"_{args.device}"
    (out_dir / f"sim{suffix}.json").write_text(json.dumps(results, indent=1))
    console.print(f"wrote {out_dir / f'sim{suffix}.json'}, {csv}; plot: {results['plot']}")
    return 0


def _plot(curve: list[dict[str, Any]], out_dir: Path) -> str:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: wrote decode_vs_context.csv only"
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r["context"] for r in curve], [r["sim_ms"] for r in curve], marker="o")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context length")
    ax.set_ylabel("decode step (ms)")
    ax.set_title("simulator decode step vs context")
    out = out_dir / "decode_vs_context.png"
    fig.savefig(out, dpi=100, bbox_inches="tight")
    return str(out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
