"""Vulkan backend benchmark: f32 matmul and a decode-like MLP step, against baselines run here.

Figures (every baseline is measured in the same run, on the same machine):
1. f32 matmul N x N (1024, and 4096 unless --quick) with the Vulkan tiled shared-memory
   kernel (inputs and output resident on the device; time = dispatch + wait) vs XLA CPU
   (jax.jit matmul) and NumPy; with --torch also vs torch.matmul on CUDA with TF32 off
   (cuBLAS fp32), the issue's target being Vulkan >= 0.5 of cuBLAS at 4096.
2. a decode-like step (x[1,d] @ W1[d,4d] + b1 -> relu -> @ W2[4d,d] + x; d = 768, or 256
   with --quick): five dispatches on resident weights vs the same math in one jax.jit on
   the CPU.

Run: .venv/bin/python bench/bench_vk.py [--quick] [--torch] [--device-index N]
Results: bench/results/vk.json. On lavapipe (Mesa's CPU Vulkan) the "device" is the same
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
from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from openinfer_jax.oinf.dtypes import DType  # noqa: E402
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
    args = parser.parse_args(argv)
    console = Console()
    ok, reason = vulkan_available(args.device_index)
    if not ok:
        console.print(f"[yellow]bench_vk: skipped, Vulkan unavailable: {reason}[/yellow]")
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "vk.json").write_text(json.dumps({"skipped": reason}, indent=2) + "\n")
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
    if decode is None:
        payload = {"device": be.properties, "quick": args.quick, "matmul": rows}
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "vk.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
        return 0
    dt = Table(title=f"decode-like MLP step, d={decode['d']} (ms/step; ratio = Vulkan / XLA CPU)")
    for col in ("Vulkan", "XLA CPU (jax.jit)", "ratio", "max rel err"):
        dt.add_column(col, justify="right")
    decode["ratio_vs_xla_cpu"] = decode["vulkan_ms"] / decode["xla_cpu_ms"]
    dt.add_row(f"{decode['vulkan_ms']:.2f}", f"{decode['xla_cpu_ms']:.2f}",
               f"{decode['ratio_vs_xla_cpu']:.2f}", f"{decode['max_rel_err']:.1e}")  # fmt: skip
    console.print(dt)
    RESULTS.mkdir(exist_ok=True)
    payload = {"device": be.properties, "quick": args.quick, "matmul": rows, "decode_step": decode}
    (RESULTS / "vk.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
