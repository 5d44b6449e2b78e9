"""Where a sharded decode step's time goes: host dispatch, device compute, collectives.

For the generated 7B-shaped decoder of `openinfer_jax.sim.sharding_models` (8 layers, d=4096,
32 heads, ffn 11008, f32; batch 8, context 256) on a mesh of `--devices` devices with the
Megatron plan, two runners of the same step (bench/sharding_steps.py): the simulator and the
hand-written single `jax.jit`. For each:

- timers: ``dispatch_ms`` (until the step call returns: JAX dispatches asynchronously, so
  this is the host's part unless the host waits on the device), ``wall_ms`` (until the output
  is on the host), ``pipelined_ms`` (K steps dispatched back to back, then one wait: the
  larger of host and device time per step), ``host_cpu_ms`` (process CPU time per step; on
  CPU devices it includes their compute);
- a `jax.profiler` trace of K steps, read back with `jax.profiler.ProfileData`: per step the
  device's busy time (union of its XLA op intervals), the collectives' share (all-reduce,
  all-gather, ...), the number of ops and of jitted programs run, the host time spent
  inside jitted-function calls, and ``device_idle_ms`` = wall - busy (the device waiting for
  the host, or for launches).

`repro` is a minimal JAX-only reproduction (no openinfer code): L layers of the seven
projection matmuls of the block at batch B (jitted, weights on device), at full width and at
half width (what each of 2 tensor-parallel devices computes); if halving the bytes does not
halve the time, the fixed part per step is per-kernel cost inside JAX/XLA, which sharding
cannot remove. On GPUs it also runs in subprocesses with XLA's command buffers (CUDA graphs)
off and on (`--xla_gpu_enable_command_buffer`).

On CPU, `--devices N` devices are emulated (set here before jax starts) and one 7B-shaped
layer is used unless --layers/--quick say otherwise; figures there show the method, not GPU
behaviour. Results: bench/results/sharding_profile.json (CPU) or
bench/results/sharding_profile_gpu_<kind>.json.

Run: `.venv/bin/python bench/bench_sharding_profile.py [--quick] [--devices N] [--layers L]
[--batch B] [--context C] [--steps K] [--out FILE]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective",
               "nccl", "allreduce")  # fmt: skip


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 layers, d=256")
    parser.add_argument("--devices", type=int, default=1, help="mesh size (1)")
    parser.add_argument("--layers", type=int, default=0, help="layers (8; CPU: 1)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--context", type=int, default=0, help="prefilled KV (256, quick 32)")
    parser.add_argument("--steps", type=int, default=10, help="timed/profiled steps")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--model", type=Path, help="reuse/write the generated .oinf here")
    parser.add_argument("--no-repro", action="store_true", help="skip the JAX-only repro")
    parser.add_argument(
        "--repro-child", default="", help=argparse.SUPPRESS
    )  # internal: run only the repro, print its JSON
    return parser.parse_args(argv)


ARGS = _parse(sys.argv[1:])
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "")
        + f" --xla_force_host_platform_device_count={max(ARGS.devices, 1)}"
    ).strip()
sys.path.insert(0, str(HERE.parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from results_file import results_file  # noqa: E402
from sharding_steps import PureStep, Run, pipelined  # noqa: E402

from openinfer_jax.sim.sharding_models import DecoderConfig  # noqa: E402


# ---- trace reading ------------------------------------------------------------------------------
def _union_ns(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def _stats(event: Any) -> dict[str, Any]:
    try:
        return dict(event.stats)
    except Exception:
        return {}


def read_trace(folder: Path, steps: int) -> dict[str, Any]:
    """Per-step device busy/collective time, op and program counts, host time in jit calls."""
    from jax.profiler import ProfileData

    files = sorted(folder.rglob("*.xplane.pb"))
    if not files:
        return {"error": f"no .xplane.pb under {folder}"}
    data = ProfileData.from_file(str(files[-1]))
    ops: dict[str, list[tuple[float, float, str]]] = {}
    programs: dict[str, int] = {}
    jit_calls, jit_ns = 0, 0.0
    for plane in data.planes:
        gpu = plane.name.startswith("/device:")
        lines = list(plane.lines)
        if gpu:
            names = {line.name for line in lines}
            wanted = "XLA Ops" if "XLA Ops" in names else None
            for line in lines:
                if line.name == "XLA Modules":
                    programs[plane.name] = programs.get(plane.name, 0) + len(list(line.events))
                if (wanted and line.name == wanted) or (not wanted and "Stream" in line.name):
                    for ev in line.events:
                        ops.setdefault(plane.name, []).append(
                            (ev.start_ns, ev.start_ns + ev.duration_ns, ev.name)
                        )
            continue
        for line in lines:
            for ev in line.events:
                if line.name == "python" or ev.name.startswith("PjitFunction"):
                    if ev.name.startswith("PjitFunction"):
                        jit_calls += 1
                        jit_ns += ev.duration_ns
                    continue
                st = _stats(ev)
                if "hlo_op" in st:  # CPU devices: XLA ops run on host threads
                    dev = f"cpu:{st.get('device_ordinal', 0)}"
                    ops.setdefault(dev, []).append((ev.start_ns, ev.start_ns + ev.duration_ns,
                                                    ev.name))  # fmt: skip
    per_device = {}
    for dev, spans in ops.items():
        coll = [(a, b) for a, b, n in spans if any(c in n.lower() for c in COLLECTIVES)]
        per_device[dev] = {
            "busy_ms": _union_ns([(a, b) for a, b, _ in spans]) / 1e6 / steps,
            "collective_ms": _union_ns(coll) / 1e6 / steps,
            "ops": len(spans) / steps,
            "programs": programs.get(dev, 0) / steps,
        }
    busiest = max(per_device.values(), key=lambda d: d["busy_ms"], default={})
    return {
        "device_busy_ms": busiest.get("busy_ms"),
        "collective_ms": busiest.get("collective_ms"),
        "device_ops_per_step": busiest.get("ops"),
        "programs_per_step": busiest.get("programs"),
        "jit_calls_per_step": jit_calls / steps,
        "host_in_jit_calls_ms": jit_ns / 1e6 / steps,
        "per_device": per_device,
    }


# ---- timing -----------------------------------------------------------------------------------
def profile(runner: Run | PureStep, steps: int, trace_dir: Path) -> dict[str, Any]:
    """Timers and a profiler trace of `steps` steps of `runner` (after 3 warm-up steps)."""
    for _ in range(3):
        runner.step()
    dispatch, wall, cpu = [], [], []
    for _ in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        runner.dispatch()
        t1 = time.perf_counter()
        runner.finish()
        wall.append((time.perf_counter() - t0) * 1e3)
        dispatch.append((t1 - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    ahead = pipelined(runner, steps)
    jax.profiler.start_trace(str(trace_dir))
    try:
        for _ in range(steps):
            runner.step()
    finally:
        jax.profiler.stop_trace()
    out = {
        "dispatch_ms": statistics.median(dispatch),
        "wall_ms": statistics.median(wall),
        "pipelined_ms": ahead,
        "host_cpu_ms": statistics.median(cpu),
    }
    out |= read_trace(trace_dir, steps)
    if out.get("device_busy_ms") is not None:
        out["device_idle_ms"] = out["wall_ms"] - out["device_busy_ms"]
    if out.get("device_ops_per_step"):
        out["dispatch_us_per_device_op"] = out["dispatch_ms"] * 1e3 / out["device_ops_per_step"]
    return out


# ---- the JAX-only reproduction -----------------------------------------------------------------
def repro(cfg: DecoderConfig, steps: int) -> dict[str, Any]:
    """Seven projection matmuls per layer, full vs half width, one jit; no openinfer code."""
    dev = jax.devices()[0]
    rows = {}
    for label, split in (("full", 1), ("half", 2)):
        q, f = cfg.d // split, cfg.ffn // split
        shapes = [(cfg.d, q), (cfg.d, q), (cfg.d, q), (q, cfg.d), (cfg.d, f), (cfg.d, f),
                  (f, cfg.d)]  # fmt: skip
        key = jax.random.PRNGKey(0)
        weights = []
        for _ in range(cfg.layers):
            for shape in shapes:
                key, sub = jax.random.split(key)
                w = jax.random.normal(sub, shape, jnp.float32) * 0.01  # f32: openinfer turns x64 on
                weights.append(jax.device_put(w, dev))

        def step(ws: list[Any], x: Any) -> Any:
            for i in range(cfg.layers):
                wq, wk, wv, wo, wg, wu, wd = ws[7 * i : 7 * i + 7]
                a = x @ wq + x @ wk + x @ wv
                x = x + a @ wo
                x = x + (jax.nn.silu(x @ wg) * (x @ wu)) @ wd
            return x

        fn = jax.jit(step)
        x = jax.device_put(jnp.ones((cfg.batch, cfg.d), jnp.float32), dev)
        for _ in range(3):
            fn(weights, x).block_until_ready()
        # The same arguments into a program of one tiny op: the per-call host cost of the
        # arguments alone (no kernels of the step).
        noop = jax.jit(lambda ws, x: x + 1.0)
        noop(weights, x).block_until_ready()
        calls = []
        for _ in range(steps):
            t0 = time.perf_counter()
            noop(weights, x).block_until_ready()
            calls.append((time.perf_counter() - t0) * 1e3)
        dispatch = []
        for _ in range(steps):
            t0 = time.perf_counter()
            y = fn(weights, x)
            dispatch.append((time.perf_counter() - t0) * 1e3)
            y.block_until_ready()
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            fn(weights, x).block_until_ready()
            times.append((time.perf_counter() - t0) * 1e3)
        with tempfile.TemporaryDirectory() as tmp:
            jax.profiler.start_trace(tmp)
            try:
                for _ in range(steps):
                    fn(weights, x).block_until_ready()
            finally:
                jax.profiler.stop_trace()
            trace = read_trace(Path(tmp), steps)
        nbytes = sum(int(w.nbytes) for w in weights)
        ms = statistics.median(times)
        rows[label] = {
            "weights_bytes": nbytes,
            "wall_ms": ms,
            "dispatch_ms": statistics.median(dispatch),
            "same_args_one_op_ms": statistics.median(calls),
            "effective_GBps": nbytes / (ms / 1e3) / 1e9,
            "device_busy_ms": trace.get("device_busy_ms"),
            "device_ops_per_step": trace.get("device_ops_per_step"),
        }
        del weights, fn, noop
    rows["half_over_full"] = rows["half"]["wall_ms"] / rows["full"]["wall_ms"]
    return rows


def _repro_variants(cfg: DecoderConfig, steps: int, gpu: bool) -> dict[str, Any]:
    """The repro here, and on GPUs in subprocesses with command buffers off and on."""
    out: dict[str, Any] = {"default": repro(cfg, steps)}
    if not gpu:
        return out
    variants = {
        "command_buffer_off": "--xla_gpu_enable_command_buffer=",
        "command_buffer_on": "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,"
        "CUSTOM_CALL,CUDNN --xla_gpu_graph_min_graph_size=1",
    }
    for name, flags in variants.items():
        env = dict(os.environ)
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flags}".strip()
        argv = [sys.executable, __file__, "--repro-child", "1", "--layers", str(cfg.layers),
                "--batch", str(cfg.batch), "--steps", str(steps)]  # fmt: skip
        if ARGS.quick:
            argv.append("--quick")
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
        try:
            out[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            out[name] = {"error": (proc.stderr or proc.stdout)[-2000:]}
    return out


def _config(args: argparse.Namespace, on_cpu: bool) -> DecoderConfig:
    if args.quick:
        base = DecoderConfig(layers=2, d=256, heads=8, kv_heads=8, ffn=512, batch=args.batch)
    else:
        base = DecoderConfig(layers=8, d=4096, heads=32, kv_heads=32, ffn=11008, batch=args.batch)
    layers = args.layers or (1 if on_cpu and not args.quick else base.layers)
    return DecoderConfig(layers, base.d, base.heads, base.kv_heads, base.ffn, base.batch)


def main() -> int:
    """Profile the simulator and the jit baseline on the mesh; run the repro; write JSON."""
    from openinfer_jax.sim import Simulator
    from openinfer_jax.sim.sharding import device_mesh
    from openinfer_jax.sim.sharding_models import decoder_graph, decoder_plan, write_decoder

    args = ARGS
    platform = jax.devices()[0].platform
    cfg = _config(args, platform == "cpu")
    if args.repro_child:
        print(json.dumps(repro(cfg, args.steps)))
        return 0
    context = args.context or (32 if args.quick else 256)
    kind = jax.devices()[0].device_kind
    print(f"{platform} x{args.devices} ({kind}); {cfg}; context {context}", flush=True)
    result: dict[str, Any] = {
        "platform": platform,
        "device_kind": kind,
        "devices": args.devices,
        "config": cfg.__dict__,
        "context": context,
        "steps": args.steps,
        "jax": jax.__version__,
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or Path(tmp) / "decoder.oinf"
        if not path.exists():
            write_decoder(path, cfg)
        sim = Simulator(path, decoder_graph(cfg), mesh=device_mesh(args.devices),
                        sharding=decoder_plan())  # fmt: skip
        runners: dict[str, Run | PureStep] = {"sim": Run(sim, cfg, context)}
        for name in ("sim", "jit"):
            if name == "jit":  # built after the simulator's runner is gone: one KV copy at a time
                runners["jit"] = PureStep(sim, cfg, context, 3 * args.steps + 8)
            result[name] = profile(runners.pop(name), args.steps, Path(tmp) / f"trace_{name}")
            brief = {k: v for k, v in result[name].items() if k != "per_device"}
            print(name, json.dumps(brief), flush=True)
        sim.model.close()
        del sim
    if result["sim"].get("wall_ms") and result["jit"].get("wall_ms"):
        result["sim_over_jit"] = result["sim"]["wall_ms"] / result["jit"]["wall_ms"]
        result["sim_extra_host_ms"] = result["sim"]["wall_ms"] - result["jit"]["wall_ms"]
    if not args.no_repro:
        result["repro"] = _repro_variants(cfg, args.steps, platform == "gpu")
        print("repro", json.dumps(result["repro"]), flush=True)
    out = args.out
    if out is None:
        name = "sharding_profile.json"
        if platform != "cpu" and not args.quick:
            name = f"sharding_profile_{platform}_{kind.split()[-1].lower()}.json"
        out = results_file(name, args.quick)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
