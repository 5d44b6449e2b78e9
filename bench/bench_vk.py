"""Vulkan backend benchmark: f32 matmul and a decode-like MLP step, against baselines run here.

Figures (every baseline is measured in the same run, on the same machine):
1. f32 matmul N x N (1024, and 4096 unless --quick) with the Vulkan tiled shared-memory
   kernel (inputs and output resident on the device; time = dispatch + wait) vs XLA CPU
   (jax.jit matmul) and NumPy; with --torch also vs torch.matmul on CUDA with TF32 off
   (cuBLAS fp32), the issue's target being Vulkan >= 0.5 of cuBLAS at 4096.
2. a decode-like step (x[1,d] @ W1[d,4d] + b1 -> relu -> @ W2[4d,d] + x; d = 768, or 256
   with --quick): five dispatches on resident weights vs the same math in one jax.jit on
   the CPU; and the same step with `linear` (bias fused into the matmul kernel: three
   dispatches).
3. model-building ops (vk/nn_kernels.py), resident inputs, vs the same math as one jax.jit
   on the CPU: attention for a prefill (Sq = Skv) and a decode step (Sq = 1, a long cache),
   conv2d 3x3 (a ResNet-like layer), with GFLOP/s and the speedup (XLA ms / Vulkan ms).
4. streaming steps (bench/vk_streaming.py): `vad`, a VAD-shaped step (conv1d + LSTM cell,
   persistent state), and with `--stream cnn` an EfficientNet-Lite0-shaped CNN, on the Vulkan
   simulator vs the same graph emitted for the Vulkan target (built and run through
   openinfer_jax.emit.driver_run) vs the CPU simulator: ms per step, CPU and wall, best of
   `--rounds` interleaved rounds, and the pipelines the simulator creates per step.

Run: .venv/bin/python bench/bench_vk.py [--quick] [--torch] [--device-index N]
     .venv/bin/python bench/bench_vk.py --stream-only [--stream vad cnn] [--cnn-size 224]
Results: bench/results/vk.json (--stream-only: vk_stream.json). On lavapipe (Mesa's CPU Vulkan) the "device" is the same
two CPU cores as the baselines, so ratios there say how good the kernels are on a CPU,
not what a GPU gives.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from results_file import results_file
from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from vk_streaming import bench_streaming, cnn, vad  # noqa: E402

from openinfer_jax.core.dtypes import DType  # noqa: E402
from openinfer_jax.vk import VulkanBackend, vulkan_available  # noqa: E402

RESULTS = HERE / "results"


def _median_s(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _xla_cpu_matmul(a: np.ndarray, b: np.ndarray) -> Callable[[], Any]:
    import jax
    import jax.numpy as jnp

    cpu = jax.devices("cpu")[0]
    ja, jb = jax.device_put(a, cpu), jax.device_put(b, cpu)
    fn = jax.jit(jnp.matmul)
    return lambda: fn(ja, jb).block_until_ready()


def _xla_gpu_matmul(a: np.ndarray, b: np.ndarray) -> Callable[[], Any] | None:
    """jax.jit matmul on a CUDA device at HIGHEST precision: cuBLAS fp32, no TF32."""
    import jax
    import jax.numpy as jnp

    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        return None
    ja, jb = jax.device_put(a, gpu), jax.device_put(b, gpu)
    fn = jax.jit(lambda x, y: jnp.matmul(x, y, precision=jax.lax.Precision.HIGHEST))
    return lambda: fn(ja, jb).block_until_ready()


def _torch_matmul(n: int) -> Callable[[], Any] | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    a = torch.randn(n, n, device="cuda", dtype=torch.float32)
    b = torch.randn(n, n, device="cuda", dtype=torch.float32)

    def run() -> None:
        torch.matmul(a, b)
        torch.cuda.synchronize()

    return run


def bench_matmul(
    be: VulkanBackend, n: int, repeats: int, use_torch: bool, tiles: list[str], warmup: int = 1
) -> dict[str, Any]:
    """GFLOP/s of each implementation for an n x n f32 matmul, and a correctness check."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    flops = 2.0 * n**3
    row: dict[str, Any] = {"n": n}
    ta, tb = be.upload(a, DType.F32), be.upload(b, DType.F32)
    out = be.empty(DType.F32, (n, n))
    reference = a.astype(np.float64) @ b.astype(np.float64)
    for tile in tiles:
        be.matmul_tiles = tile

        def run_vk() -> None:
            be.run("matmul", [ta, tb], {}, DType.F32, (n, n), out=out)
            be.sync()

        seconds = _median_s(run_vk, repeats, warmup)
        got = be.download(out).astype(np.float64)
        err = float(np.max(np.abs(got - reference)) / np.max(np.abs(reference)))
        row[f"vulkan_{tile}_gflops"] = flops / seconds / 1e9
        row[f"vulkan_{tile}_max_rel_err"] = err
    row["vulkan_gflops"] = max(row[f"vulkan_{t}_gflops"] for t in tiles)
    row["xla_cpu_gflops"] = flops / _median_s(_xla_cpu_matmul(a, b), repeats, warmup) / 1e9
    row["numpy_gflops"] = flops / _median_s(lambda: a @ b, repeats, warmup) / 1e9
    if use_torch:
        # torch.matmul with TF32 off; without torch, XLA's GPU matmul at HIGHEST precision
        # (also cuBLAS fp32 without TF32).
        run = _torch_matmul(n)
        row["cublas_source"] = "torch"
        if run is None:
            run = _xla_gpu_matmul(a, b)
            row["cublas_source"] = "jax-gpu-highest"
        row["cublas_fp32_gflops"] = (
            flops / _median_s(run, repeats * 3, warmup=3) / 1e9 if run else None
        )
    return row


def bench_decode_step(be: VulkanBackend, d: int, repeats: int) -> dict[str, Any]:
    """ms per decode-like MLP step: Vulkan (resident weights) vs one jax.jit on the CPU."""
    import jax
    import jax.numpy as jnp

    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, d), dtype=np.float32)
    w1 = (rng.standard_normal((d, 4 * d)) / np.sqrt(d)).astype(np.float32)
    b1 = rng.standard_normal((4 * d,), dtype=np.float32)
    w2 = (rng.standard_normal((4 * d, d)) / np.sqrt(4 * d)).astype(np.float32)
    tx, tw1, tb1, tw2 = (be.upload(v, DType.F32) for v in (x, w1, b1, w2))
    f32 = DType.F32
    # Activations preallocated once, as a static memory plan would do.
    h, y = be.empty(f32, (1, 4 * d)), be.empty(f32, (1, d))

    def step_vk() -> Any:
        be.run("matmul", [tx, tw1], {}, f32, (1, 4 * d), out=h)
        be.run("add", [h, tb1], {}, f32, (1, 4 * d), out=h)
        be.run("relu", [h], {}, f32, (1, 4 * d), out=h)
        be.run("matmul", [h, tw2], {}, f32, (1, d), out=y)
        be.run("add", [y, tx], {}, f32, (1, d), out=y)
        be.sync()
        return y

    cpu = jax.devices("cpu")[0]
    jx, jw1, jb1, jw2 = (jax.device_put(v, cpu) for v in (x, w1, b1, w2))

    @jax.jit
    def step_jax(x: Any, w1: Any, b1: Any, w2: Any) -> Any:
        return jnp.maximum(x @ w1 + b1, 0.0) @ w2 + x

    got = be.download(step_vk())
    want = np.asarray(step_jax(jx, jw1, jb1, jw2))
    err = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))
    vk_ms = _median_s(step_vk, repeats) * 1e3
    jax_ms = _median_s(lambda: step_jax(jx, jw1, jb1, jw2).block_until_ready(), repeats) * 1e3
    return {"d": d, "vulkan_ms": vk_ms, "xla_cpu_ms": jax_ms, "max_rel_err": err}


def bench_decode_linear(be: VulkanBackend, d: int, repeats: int) -> dict[str, Any]:
    """The decode-like step with `linear` (bias in the kernel): three dispatches instead of five."""
    rng = np.random.default_rng(1)
    f32 = DType.F32
    x = rng.standard_normal((1, d), dtype=np.float32)
    w1 = (rng.standard_normal((4 * d, d)) / np.sqrt(d)).astype(np.float32)  # [out, in]
    b1 = rng.standard_normal((4 * d,), dtype=np.float32)
    w2 = (rng.standard_normal((d, 4 * d)) / np.sqrt(4 * d)).astype(np.float32)
    b2 = np.zeros(d, np.float32)
    tx, tw1, tb1, tw2, tb2 = (be.upload(v, f32) for v in (x, w1, b1, w2, b2))
    h, y = be.empty(f32, (1, 4 * d)), be.empty(f32, (1, d))

    def step_vk() -> Any:
        be.run("linear", [tx, tw1, tb1], {}, f32, (1, 4 * d), out=h)
        be.run("relu", [h], {}, f32, (1, 4 * d), out=h)
        be.run("linear", [h, tw2, tb2], {}, f32, (1, d), out=y)
        be.sync()
        return y

    got = be.download(step_vk())
    want = np.maximum(x @ w1.T + b1, 0.0) @ w2.T
    err = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))
    return {"d": d, "vulkan_ms": _median_s(step_vk, repeats) * 1e3, "max_rel_err": err}


def _attention_jax(causal: bool) -> Callable[..., Any]:
    import jax
    import jax.numpy as jnp

    @jax.jit
    def run(q: Any, k: Any, v: Any) -> Any:
        scores = (q @ jnp.swapaxes(k, -1, -2)) / np.sqrt(q.shape[-1])
        if causal:
            sq, skv = q.shape[-2], k.shape[-2]
            visible = jnp.arange(skv)[None, :] <= jnp.arange(sq)[:, None] + (skv - sq)
            scores = jnp.where(visible, scores, -jnp.inf)
        return jax.nn.softmax(scores, axis=-1) @ v

    return run


def _conv2d_jax(pad: int) -> Callable[..., Any]:
    import jax

    @jax.jit
    def run(x: Any, w: Any, b: Any) -> Any:
        y = jax.lax.conv_general_dilated(x, w, (1, 1), [(pad, pad), (pad, pad)])
        return y + b[None, :, None, None]

    return run


def bench_nn_op(
    be: VulkanBackend,
    label: str,
    op: str,
    arrays: list[np.ndarray],
    params: dict[str, Any],
    baseline: Callable[..., Any],
    flops: float,
    repeats: int,
) -> dict[str, Any]:
    """ms per call of `op` on resident device tensors vs `baseline` (jax.jit) on the CPU."""
    import jax

    from openinfer_jax.ops import registry

    opdef = registry.get(op)
    assert opdef is not None
    dtypes = [DType.F32] * len(arrays)
    out_dtype, out_shape = opdef.infer(dtypes, [a.shape for a in arrays], params)
    tensors = [be.upload(a, DType.F32) for a in arrays]
    out = be.empty(out_dtype, out_shape)

    def run_vk() -> None:
        be.run(op, tensors, params, out_dtype, out_shape, out=out)
        be.sync()

    cpu = jax.devices("cpu")[0]
    host = [jax.device_put(a, cpu) for a in arrays]
    want = np.asarray(baseline(*host))
    run_vk()
    got = be.download(out)
    err = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))
    vk_ms = _median_s(run_vk, repeats) * 1e3
    xla_ms = _median_s(lambda: baseline(*host).block_until_ready(), repeats) * 1e3
    return {
        "label": label,
        "op": op,
        "shapes": [list(a.shape) for a in arrays],
        "vulkan_ms": vk_ms,
        "xla_cpu_ms": xla_ms,
        "vulkan_gflops": flops / vk_ms / 1e6,
        "xla_cpu_gflops": flops / xla_ms / 1e6,
        "speedup_vs_xla_cpu": xla_ms / vk_ms,
        "max_rel_err": err,
    }


def bench_nn_ops(be: VulkanBackend, quick: bool) -> list[dict[str, Any]]:
    """Attention (prefill and decode) and conv2d rows."""
    rng = np.random.default_rng(2)
    normal = lambda *shape: rng.standard_normal(shape, dtype=np.float32)  # noqa: E731
    heads, dim = (4, 64) if quick else (8, 64)
    seq, cache = (64, 256) if quick else (128, 1024)
    channels, size = (16, 28) if quick else (32, 56)
    repeats = 3 if quick else 5
    rows = []
    q, k, v = normal(1, heads, seq, dim), normal(1, heads, seq, dim), normal(1, heads, seq, dim)
    rows.append(bench_nn_op(be, f"attention prefill H={heads} S={seq} D={dim}, causal",
                            "attention", [q, k, v], {"causal": True}, _attention_jax(True),
                            4.0 * heads * seq * seq * dim, repeats))  # fmt: skip
    q1, kc, vc = (
        normal(1, heads, 1, dim),
        normal(1, heads, cache, dim),
        normal(1, heads, cache, dim),
    )
    rows.append(bench_nn_op(be, f"attention decode H={heads} Skv={cache} D={dim}", "attention",
                            [q1, kc, vc], {}, _attention_jax(False),
                            4.0 * heads * cache * dim, repeats))  # fmt: skip
    x = normal(1, channels, size, size)
    w = normal(2 * channels, channels, 3, 3) / np.float32(3 * np.sqrt(channels))
    b = normal(2 * channels)
    flops = 2.0 * 2 * channels * size * size * channels * 9
    rows.append(bench_nn_op(be, f"conv2d {channels}->{2 * channels} ch, {size}x{size}, 3x3",
                            "conv2d", [x, w, b], {"pads": (1, 1, 1, 1)}, _conv2d_jax(1),
                            flops, repeats))  # fmt: skip
    return rows


def _nn_table(rows: list[dict[str, Any]], device: str) -> Table:
    table = Table(
        title=f"model-building ops on {device} (ms per call; speedup = XLA ms / Vulkan ms)"
    )
    for col in ("op", "Vulkan ms", "XLA CPU ms", "Vulkan GFLOP/s", "XLA GFLOP/s", "speedup",
                "max rel err"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["label"], f"{r['vulkan_ms']:.2f}", f"{r['xla_cpu_ms']:.2f}",
                      f"{r['vulkan_gflops']:.2f}", f"{r['xla_cpu_gflops']:.2f}",
                      f"{r['speedup_vs_xla_cpu']:.2f}", f"{r['max_rel_err']:.1e}")  # fmt: skip
    return table


def _streaming(args: argparse.Namespace, console: Console) -> list[dict[str, Any]]:
    """The streaming workloads (vk_streaming.py): one table row per side."""
    rows = []
    for name in args.stream:
        if name == "vad":
            row = bench_streaming(vad(), args.rounds, 5 if args.quick else args.steps)
        else:
            # 3 warm steps: a result buffer alternates between two (the step before's value
            # is held for rollback), so pipelines are all built by the third step.
            size = 64 if args.quick else args.cnn_size
            row = bench_streaming(cnn(size), args.rounds, 1, warm=3)
        rows.append(row)
        table = Table(title=f"{name} step (ms per step, best of {args.rounds} interleaved rounds)")
        for col in ("side", "CPU ms", "wall ms", "dispatches", "pipelines created"):
            table.add_column(col, justify="right")
        for side, r in row["sides"].items():
            created = r.get("pipelines_created_per_step")
            table.add_row(side, f"{r['cpu_ms']:.2f}", f"{r['wall_ms']:.2f}",
                          f"{r.get('dispatches_per_step', float('nan')):.0f}",
                          "-" if created is None else f"{created:.2f}")  # fmt: skip
        console.print(table)
        console.print(
            f"  sim vulkan / emitted: CPU {row['ratio_sim_vs_emitted_cpu']:.2f}x, wall "
            f"{row['ratio_sim_vs_emitted_wall']:.2f}x; max |vulkan - cpu| "
            f"{row['max_abs_diff_vulkan_vs_cpu']:.1e}; emitted build {row['emitted_build_s']:.1f} s\n"
            f"  {row['device']}; load average {row['load_average_start_end']}; a pure-Python "
            f"loop's wall/CPU per round {row['contention_wall_per_cpu']}"
        )
    return rows


def main(argv: list[str]) -> int:
    """Run the benchmark; print a table; write bench/results/vk.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1024 only, fewer repeats, d=256")
    parser.add_argument(
        "--torch", action="store_true", help="compare with torch.matmul on CUDA (TF32 off)"
    )
    parser.add_argument("--device-index", type=int, default=0)
    parser.add_argument(
        "--sizes", type=int, nargs="*", default=None, help="matmul sizes (default 1024 4096)"
    )
    parser.add_argument(
        "--tiles", nargs="*", default=None,
        help="tiled-matmul configs to compare (names or BMxBNxBKxTMxTN)",
    )  # fmt: skip
    parser.add_argument("--no-decode", action="store_true", help="skip the decode-like step")
    parser.add_argument("--no-nn", action="store_true", help="skip attention and conv2d")
    parser.add_argument("--stream", nargs="*", choices=("vad", "cnn"), default=["vad"],
                        help="streaming workloads (default: vad)")  # fmt: skip
    parser.add_argument("--stream-only", action="store_true", help="only the streaming steps")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per side")
    parser.add_argument("--steps", type=int, default=20, help="timed vad steps per round")
    parser.add_argument("--cnn-size", type=int, default=224, help="cnn image size")
    args = parser.parse_args(argv)
    console = Console()
    ok, reason = vulkan_available(args.device_index)
    if not ok:
        console.print(f"[yellow]bench_vk: skipped, Vulkan unavailable: {reason}[/yellow]")
        results_file("vk.json", args.quick).write_text(
            json.dumps({"skipped": reason}, indent=2) + "\n"
        )
        return 0
    if args.stream_only:
        # Rows by workload: a run of one workload keeps the other's last figures.
        path = results_file("vk_stream.json", args.quick)
        old = json.loads(path.read_text()) if path.is_file() else {}
        rows = {r["workload"]: r for r in old.get("streaming", []) if isinstance(r, dict)}
        rows.update({r["workload"]: r for r in _streaming(args, console)})
        payload = {"streaming": list(rows.values())}
        path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
        return 0
    be = VulkanBackend(args.device_index)
    sizes = args.sizes or ([1024] if args.quick else [1024, 4096])
    gpu = be.capabilities.device_type != "cpu"
    tiles = args.tiles or (["large", "small"] if gpu else [be.matmul_tiles])
    repeats = 3 if args.quick else 5
    rows = []
    for n in sizes:
        # lavapipe takes minutes for one 4096^2 product: time a single run there.
        slow = n > 2048 and not gpu
        rows.append(
            bench_matmul(be, n, 1 if slow else repeats, args.torch, tiles, 0 if slow else 1)
        )
    be.matmul_tiles = max(tiles, key=lambda t: rows[-1][f"vulkan_{t}_gflops"])
    decode = (
        None
        if args.no_decode
        else bench_decode_step(be, 256 if args.quick else 768, 5 if args.quick else 20)
    )

    table = Table(title=f"f32 matmul on {be.device_name} (GFLOP/s; ratio = Vulkan / baseline)")
    for col in (
        "N",
        "Vulkan",
        "XLA CPU",
        "NumPy",
        "vs XLA",
        "vs NumPy",
        "cuBLAS fp32",
        "vs cuBLAS",
        "max rel err",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        cublas = r.get("cublas_fp32_gflops")
        table.add_row(
            str(r["n"]),
            f"{r['vulkan_gflops']:.1f}",
            f"{r['xla_cpu_gflops']:.1f}",
            f"{r['numpy_gflops']:.1f}",
            f"{r['vulkan_gflops'] / r['xla_cpu_gflops']:.2f}",
            f"{r['vulkan_gflops'] / r['numpy_gflops']:.2f}",
            f"{cublas:.1f}" if cublas else "-",
            f"{r['vulkan_gflops'] / cublas:.2f}" if cublas else "-",
            f"{max(v for k, v in r.items() if k.endswith('max_rel_err')):.1e}",
        )
        if cublas:
            r["ratio_vs_cublas"] = r["vulkan_gflops"] / cublas
        r["ratio_vs_xla_cpu"] = r["vulkan_gflops"] / r["xla_cpu_gflops"]
    console.print(table)
    if len(tiles) > 1:
        for r in rows:
            tiles_txt = ", ".join(f"{t}: {r[f'vulkan_{t}_gflops']:.1f}" for t in tiles)
            console.print(f"  N={r['n']} tiles (GFLOP/s) {tiles_txt}")
    payload: dict[str, Any] = {"device": be.properties, "quick": args.quick, "matmul": rows}
    if decode is not None:
        dt = Table(
            title=f"decode-like MLP step, d={decode['d']} (ms/step; ratio = Vulkan / XLA CPU)"
        )
        for col in ("variant", "Vulkan", "XLA CPU (jax.jit)", "ratio", "max rel err"):
            dt.add_column(col, justify="right")
        decode["ratio_vs_xla_cpu"] = decode["vulkan_ms"] / decode["xla_cpu_ms"]
        fused = bench_decode_linear(be, decode["d"], 5 if args.quick else 20)
        fused["xla_cpu_ms"] = decode["xla_cpu_ms"]  # the same math
        fused["ratio_vs_xla_cpu"] = fused["vulkan_ms"] / decode["xla_cpu_ms"]
        for name, r in (("matmul + add (5 dispatches)", decode),
                        ("linear with bias (3 dispatches)", fused)):  # fmt: skip
            dt.add_row(name, f"{r['vulkan_ms']:.2f}", f"{r['xla_cpu_ms']:.2f}",
                       f"{r['ratio_vs_xla_cpu']:.2f}", f"{r['max_rel_err']:.1e}")  # fmt: skip
        console.print(dt)
        payload["decode_step"] = decode
        payload["decode_step_linear"] = fused
    if not args.no_nn:
        nn_rows = bench_nn_ops(be, args.quick)
        console.print(_nn_table(nn_rows, be.device_name))
        payload["nn_ops"] = nn_rows
    if args.stream:
        payload["streaming"] = _streaming(args, console)
    results_file("vk.json", args.quick).write_text(
        json.dumps(payload, indent=2, default=str) + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
