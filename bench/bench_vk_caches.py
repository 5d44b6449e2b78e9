"""Persistent caches resident on the Vulkan device (issue 7) vs kept in host memory.

Both sides run in this run on the same Vulkan device (`device="vulkan"`), the same model
and the same inputs; the baseline keeps cache tables in JAX host memory
(``OPENINFER_VK_HOST_CACHES=1``, the layout before issue 7: every `cache.write` downloads
its source, every `cache.read` uploads the slice), the other keeps them on the device.

1. examples/kv_cache_decode.py's decode (2 layers, d=64, 4 heads; 12 steps, `fetch("y")`
   after each): host<->device transfers and bytes per steady-state step, step time.
2. the same step after prefilling the KV tables to a context (64 and 1024 entries): the
   baseline moves the whole K/V slices every step, the device side nothing of them.

Ratios are device caches / host caches (lower is better). The two modes alternate for 3
rounds and each keeps its round of least CPU time (the machine's cores are shared; CPU time,
lavapipe's threads included, is steadier than wall time then). Results:
bench/results/vk_caches.json. `--quick`: one round, fewer steps, contexts 64 and 256.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))

from kv_cache_decode import Config, graph_text, write_model  # noqa: E402
from results_file import results_file  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from openinfer_jax.sim import Simulator  # noqa: E402
from openinfer_jax.vk import vulkan_available  # noqa: E402

MODES = {"host caches (before)": "1", "device caches": "0"}  # OPENINFER_VK_HOST_CACHES
COUNTERS = ("vk_uploads", "vk_downloads", "vk_bytes")
RATIO_KEYS = ("uploads_per_step", "downloads_per_step", "bytes_per_step", "ms_per_step",
              "cpu_ms_per_step")  # fmt: skip


def run_decode(sim: Simulator, cfg: Config, steps: int, context: int) -> dict[str, Any]:
    """`steps` decode steps from a KV cache prefilled to `context`; per-step figures.

    The first step is left out of the steady-state figures (it uploads the weights).
    """
    ex = sim.make_executor()
    rng = np.random.default_rng(5)
    if context:
        shape = (cfg.layers, context, cfg.heads, cfg.head_dim)
        for name in ("K", "V"):
            ex.set_persistent(name, (rng.standard_normal(shape) * 0.5).astype(np.float32))
        ex.set_persistent("step", np.asarray(context, np.int32))
    per_step, outputs = [], []
    for _ in range(steps):
        before = {k: ex.stats[k] for k in COUNTERS}
        x = rng.standard_normal((1, cfg.d)).astype(np.float32)
        start, cpu = time.perf_counter(), time.process_time()
        ex.insert(x=x)
        ex.step()
        outputs.append(ex.fetch("y"))  # waits for the device: the step's full time
        row = {k: ex.stats[k] - before[k] for k in COUNTERS}
        row["ms"] = (time.perf_counter() - start) * 1e3
        # CPU time of the process, lavapipe's threads included: steadier than wall time
        # when other jobs share the cores.
        row["cpu_ms"] = (time.process_time() - cpu) * 1e3
        per_step.append(row)
    steady = per_step[1:]
    return {
        "uploads_per_step": statistics.mean(r["vk_uploads"] for r in steady),
        "downloads_per_step": statistics.mean(r["vk_downloads"] for r in steady),
        "bytes_per_step": statistics.mean(r["vk_bytes"] for r in steady),
        "ms_per_step": statistics.median(r["ms"] for r in steady),
        "cpu_ms_per_step": statistics.median(r["cpu_ms"] for r in steady),
        "uploads_total": sum(r["vk_uploads"] for r in per_step),
        "downloads_total": sum(r["vk_downloads"] for r in per_step),
        "dispatches": sim.vulkan.dispatch_count,
        "outputs": outputs,
    }


def measure(
    sim: Simulator, cfg: Config, steps: int, context: int, rounds: int
) -> dict[str, dict[str, Any]]:
    """Both modes on one scenario, alternating for `rounds` rounds (the CPU is shared:
    each mode keeps its fastest round's step time); checks that they compute the same."""
    out: dict[str, dict[str, Any]] = {}
    for _ in range(rounds):
        for mode, flag in MODES.items():
            os.environ["OPENINFER_VK_HOST_CACHES"] = flag
            try:
                dispatched = sim.vulkan.dispatch_count
                figures = run_decode(sim, cfg, steps, context)
                figures["dispatches"] -= dispatched
            finally:
                os.environ.pop("OPENINFER_VK_HOST_CACHES", None)
            if mode not in out or figures["cpu_ms_per_step"] < out[mode]["cpu_ms_per_step"]:
                out[mode] = figures
    host, device = (out[m].pop("outputs") for m in MODES)
    np.testing.assert_allclose(np.stack(device), np.stack(host), rtol=1e-5, atol=1e-6)
    return out


def _ratio(a: float, b: float) -> float | None:
    return None if b == 0 else a / b


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, write bench/results/vk_caches.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps, smaller contexts")
    parser.add_argument("--rounds", type=int, default=None,
                        help="alternating rounds per scenario (default 3, quick 1)")  # fmt: skip
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    ok, device_name = vulkan_available()
    if not ok:
        print(f"no Vulkan device: {device_name}")
        return 1
    cfg = Config(layers=2, d=64, heads=4)
    scenarios = [("decode from empty", 12 if not args.quick else 6, 0)]
    for context in (64, 256) if args.quick else (64, 1024):
        scenarios.append((f"decode at context {context}", 4 if args.quick else 6, context))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gpt.oinf"
        write_model(path, cfg)
        sim = Simulator(path, graph_text(cfg), device="vulkan")
        for name, steps, context in scenarios:
            figures = measure(sim, cfg, steps, context, rounds)
            rows.append({"scenario": name, "steps": steps, "context": context, **figures})
        sim.model.close()

    table = Table(title=f"Vulkan persistent caches: host vs device ({device_name})")
    for col in ("scenario", "caches", "uploads/step", "downloads/step", "KiB/step",
                "ms/step", "CPU ms/step", "dispatches"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("scenario", "caches") else "right")
    for row in rows:
        host, device = (row[m] for m in MODES)
        for mode in MODES:
            f = row[mode]
            table.add_row(row["scenario"], mode, f"{f['uploads_per_step']:.1f}",
                          f"{f['downloads_per_step']:.1f}", f"{f['bytes_per_step'] / 1024:.1f}",
                          f"{f['ms_per_step']:.1f}", f"{f['cpu_ms_per_step']:.1f}",
                          str(f["dispatches"]))  # fmt: skip
        ratios = {key: _ratio(device[key], host[key]) for key in RATIO_KEYS}
        row["ratios"] = ratios
        table.add_row("", "[bold]ratio device/host[/bold]",
                      *(f"{v:.2f}" if v is not None else "-" for v in ratios.values()), "",
                      end_section=True)  # fmt: skip
    Console(width=140).print(table)
    result = {"device": device_name, "config": dataclasses.asdict(cfg), "quick": args.quick,
              "rounds": rounds, "rows": rows}  # fmt: skip
    results_file("vk_caches.json", args.quick).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
