"""bench_edge's kernel table: the runtime's f32 GEMM/GEMV against XLA's dot, one thread each,
on the shapes of SmolLM2 decode and the MiniLM encoder (GFLOP/s and the ratio per shape).

C: bench/kernels_main.c compiled against emit/runtime (oi_gemm.h), one process per shape,
B as a linear layer's W [N, K]; the GEMM shapes (M >= OI_GEMV_MAX_ROWS) use B packed once
as the emitted code does for a model weight. XLA: ``jit(lambda a, w: a @ w.T)`` in one
process per round with one intra-op thread. Both pinned to the same CPU, timed in CPU time
(`clock` / `process_time`), best of 5 batches per run and best over the rounds; the C and
XLA runs alternate their order between rounds. `--xla-side` is that XLA process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RUNTIME = HERE.parent / "openinfer_jax" / "emit" / "runtime"

#: (label, M, N, K): C[M, N] = A[M, K] W[N, K]^T
SHAPES = [
    ("decode q/o 576x576", 1, 576, 576),
    ("decode gate/up 1536x576", 1, 1536, 576),
    ("decode down 576x1536", 1, 576, 1536),
    ("decode lm_head 49152x576", 1, 49152, 576),
    ("minilm 128x384x384", 128, 384, 384),
    ("minilm 128x1536x384", 128, 1536, 384),
    ("minilm 128x384x1536", 128, 384, 1536),
    ("minilm 1024x384x384", 1024, 384, 384),
]
QUICK = [SHAPES[0], SHAPES[3], SHAPES[4]]


def build(cc: str, flags: list[str], out: Path) -> Path:
    """kernels_main compiled into `out`; returns the executable."""
    exe = out / "kernels_main"
    subprocess.run([cc, *flags, f"-I{RUNTIME}", str(HERE / "kernels_main.c"), "-lm", "-o", str(exe)],
                   check=True, capture_output=True)  # fmt: skip
    return exe


def run_c(exe: Path, pinned: Any, m: int, n: int, k: int, seconds: float) -> float:
    prepack = "1" if m >= 4 else "0"
    out = subprocess.run(pinned([str(exe), str(m), str(n), str(k), "1", prepack, str(seconds)], 1),
                         check=True, capture_output=True, text=True).stdout  # fmt: skip
    return float(out.split()[0])


def run_xla(pinned: Any, shapes: list[tuple[str, int, int, int]], seconds: float) -> list[float]:
    env = {**os.environ, "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false",
           "JAX_PLATFORMS": "cpu"}  # fmt: skip
    spec = json.dumps([[m, n, k] for _, m, n, k in shapes])
    cmd = [sys.executable, str(Path(__file__)), "--xla-side", spec, str(seconds)]
    out = subprocess.run(pinned(cmd, 1), check=True, capture_output=True, text=True, env=env)
    return [float(v) for v in json.loads(out.stdout.strip().splitlines()[-1])]


def _xla_side(spec: str, seconds: float) -> None:
    import jax
    import numpy as np

    f = jax.jit(lambda a, w: a @ w.T)
    best_all = []
    rng = np.random.default_rng(0)
    for m, n, k in json.loads(spec):
        a = jax.device_put(rng.random((m, k), np.float32) - 0.5)
        w = jax.device_put(rng.random((n, k), np.float32) - 0.5)
        f(a, w).block_until_ready()
        c0, calls = time.process_time(), 0
        while time.process_time() - c0 < seconds / 50:
            f(a, w).block_until_ready()
            calls += 1
        calls = max(1, calls * 10)
        best = float("inf")
        for _ in range(5):
            c0 = time.process_time()
            for _ in range(calls):
                r = f(a, w)
            r.block_until_ready()
            best = min(best, (time.process_time() - c0) / calls)
        best_all.append(best)
    print(json.dumps(best_all))


def measure(exe: Path, pinned: Any, rounds: int, quick: bool) -> dict[str, Any]:
    """Best seconds per call of each side per shape, GFLOP/s and C/XLA throughput ratios."""
    shapes = QUICK if quick else SHAPES
    seconds = 0.3 if quick else 1.0
    c_best = [float("inf")] * len(shapes)
    x_best = [float("inf")] * len(shapes)
    for r in range(rounds):
        sides = ["c", "xla"] if r % 2 == 0 else ["xla", "c"]
        for side in sides:
            if side == "c":
                for i, (_, m, n, k) in enumerate(shapes):
                    c_best[i] = min(c_best[i], run_c(exe, pinned, m, n, k, seconds))
            else:
                for i, t in enumerate(run_xla(pinned, shapes, seconds)):
                    x_best[i] = min(x_best[i], t)
        print(f"  round {r + 1}/{rounds} done", flush=True)
    rows = {}
    for (label, m, n, k), c, x in zip(shapes, c_best, x_best):
        flops = 2.0 * m * n * k
        rows[label] = {"M": m, "N": n, "K": k, "c_us": c * 1e6, "xla_us": x * 1e6,
                       "c_gflops": flops / c / 1e9, "xla_gflops": flops / x / 1e9,
                       "c_vs_xla": x / c}  # fmt: skip
    return rows


def table(rows: dict[str, Any]) -> list[str]:
    """Printable lines of `measure`'s result."""
    out = [f"{'shape (M x N x K)':<26} {'C GFLOP/s':>10} {'XLA GFLOP/s':>12} {'C/XLA':>7}"]
    for label, r in rows.items():
        out.append(
            f"{label:<26} {r['c_gflops']:10.1f} {r['xla_gflops']:12.1f} {r['c_vs_xla']:6.0%}"
        )
    return out


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--xla-side":
        _xla_side(sys.argv[2], float(sys.argv[3]))
