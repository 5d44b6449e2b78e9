"""Streaming steps for bench_vk.py: one graph on the Vulkan simulator, the emitted Vulkan
program and the CPU simulator.

* `vad`: a VAD-shaped streaming step (Silero-like sizes): a 512-sample chunk through a
  strided conv1d front end (1 -> 64 channels, k 16, stride 4) and a second conv1d (64 -> 64,
  k 3, stride 2), ReLUs, a mean over time, an LSTM cell (64 -> 64) whose state is a
  persistent tensor carried from step to step, and a linear + sigmoid speech probability.
* `cnn`: the EfficientNet-Lite0-shaped CNN of bench/edge_workloads.py on one image.

Each side runs the same model file and inputs; a round runs the three sides one after the
other (interleaved), and each side keeps its least CPU time and its least wall time per step
over the rounds (each figure its own best round). CPU time counts every thread of the
process (lavapipe's workers included); wall time is what the step takes on this shared
machine. Each round also times a pure-Python loop (`contention`): its wall / CPU ratio says
how much a CPU-bound step is stretched by other processes at that moment (1.0 on an idle
machine), and the load averages are recorded at the start and the end. The emitted program is built with
`openinfer_jax.emit.driver_run` and timed by its driver (`REPEAT` steps after one untimed
step); its CPU time per step is the difference between a run with REPEAT steps and one with
none, over REPEAT.
"""

from __future__ import annotations

import os
import resource
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from edge_workloads import cnn_graph, cnn_weights

from openinfer_jax.emit.driver_run import build_driver, write_inputs
from openinfer_jax.emit.synthesizer import Synthesizer
from openinfer_jax.oinf import write_oinf
from openinfer_jax.sim import Simulator

VAD_SIZES = {"T": 512, "C": 64, "K1": 16, "H": 64, "F": 126, "G": 63}

VAD_GRAPH = """
graph {
  dynamic { x: f32[1, 1, T]; }
  volatile {
    w1: f32[C, 1, K1]; b1: f32[C]; w2: f32[C, C, 3]; b2: f32[C];
    wi: f32[4*H, C]; wr: f32[4*H, H]; bl: f32[8*H]; wo: f32[1, H]; bo: f32[1];
    f: f32[1, C, F]; g: f32[1, C, G]; feat: f32[1, C]; s: f32[2, 1, H];
    s0: f32[1, 1, H]; h: f32[1, H]; logit: f32[1, 1]; prob: f32[1, 1];
  }
  persistent { state: f32[2, 1, H]; }
  block entry {
    op conv1d(x, w1, b1, strides=[4], pads=[2, 2]) >> f;
    op relu(f) >> f;
    op conv1d(f, w2, b2, strides=[2], pads=[1, 1]) >> g;
    op relu(g) >> g;
    op mean_axis(g, axes=[2]) >> feat;
    cache.read state >> s;
    op lstm_cell(feat, wi, wr, s, bl) >> s;
    cache.write s >> state;
    op slice(s, starts=[0], ends=[1], axes=[0]) >> s0;
    op reshape(s0, shape=[1, 64]) >> h;
    op linear(h, wo, bo) >> logit;
    op sigmoid(logit) >> prob;
    return;
  }
}
"""


@dataclass(frozen=True)
class Workload:
    """A graph, its model writer, one step's inputs and the output every side returns."""

    name: str
    graph: str
    write_model: Callable[[Path], None]
    inputs: Callable[[np.random.Generator], dict[str, np.ndarray]]
    output: str


def _write_vad(path: Path) -> None:
    rng = np.random.default_rng(0)
    c, k1, h = VAD_SIZES["C"], VAD_SIZES["K1"], VAD_SIZES["H"]

    def r(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    tensors = {"w1": r(c, 1, k1), "b1": r(c), "w2": r(c, c, 3), "b2": r(c), "wi": r(4 * h, c),
               "wr": r(4 * h, h), "bl": r(8 * h), "wo": r(1, h), "bo": r(1)}  # fmt: skip
    write_oinf(path, sizevars=VAD_SIZES, metadata={}, tensors=tensors)


def vad() -> Workload:
    """The VAD-shaped streaming step."""
    return Workload(
        "vad",
        VAD_GRAPH,
        _write_vad,
        lambda rng: {"x": rng.standard_normal((1, 1, VAD_SIZES["T"])).astype(np.float32)},
        "prob",
    )


def cnn(size: int) -> Workload:
    """The EfficientNet-Lite0-shaped CNN on a [1, 3, size, size] image."""
    return Workload(
        "cnn",
        cnn_graph(size),
        lambda path: write_oinf(path, sizevars={}, metadata={}, tensors=cnn_weights()),
        lambda rng: {"x": rng.standard_normal((1, 3, size, size)).astype(np.float32)},
        "logits",
    )


class SimSide:
    """The workload on the simulator (`device` cpu or vulkan), one executor for all rounds."""

    def __init__(self, work: Workload, model: Path, device: str, feeds: list[dict]) -> None:
        self.sim = Simulator(model, work.graph, device=device)
        self.ex = self.sim.make_executor()
        self.work, self.feeds = work, feeds
        self.outputs: list[np.ndarray] = []

    def step(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        self.ex.insert(**feed)
        self.ex.step()
        return np.asarray(self.ex.fetch(self.work.output))

    def warm(self, steps: int) -> None:
        """First steps: compile regions / build pipelines (not timed)."""
        for k in range(steps):
            self.outputs.append(self.step(self.feeds[k % len(self.feeds)]))

    def timed(self, steps: int) -> dict[str, float]:
        """ms per step (CPU and wall) over `steps`, and pipelines created per step."""
        vk = self.sim.vulkan
        before = vk.stats if vk is not None else {}
        c0, w0 = time.process_time(), time.perf_counter()
        for k in range(steps):
            self.step(self.feeds[k % len(self.feeds)])
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        row = {"cpu_ms": cpu / steps * 1e3, "wall_ms": wall / steps * 1e3}
        if vk is not None:
            after = vk.stats
            for key in ("pipelines_created", "dispatches", "submits"):
                row[f"{key}_per_step"] = (after[key] - before[key]) / steps
        return row


class EmittedSide:
    """The workload emitted for the Vulkan target and run by its generated driver."""

    def __init__(self, work: Workload, model: Path, feeds: list[dict], build: Path) -> None:
        plan = Synthesizer("vulkan").synthesize(
            model, work.graph, name=work.name, outputs=[work.output]
        )
        start = time.perf_counter()
        self.exe = build_driver(plan, build / "emitted")
        self.build_s = time.perf_counter() - start
        self.model = model
        self.ins, self.outs = write_inputs(build / "work", feeds[:1])

    def _run(self, repeat: int) -> tuple[float, float, str]:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(
            [str(self.exe), str(self.model), "1", str(self.ins), str(self.outs), str(repeat)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
        return cpu, wall, done.stdout

    def timed(self, steps: int) -> dict[str, float]:
        """ms per step: the driver's own timing (wall) and the CPU difference of two runs."""
        cpu0, _, _ = self._run(0)
        cpu1, _, out = self._run(steps)
        report = dict(line.split(" ", 1) for line in out.strip().splitlines() if " " in line)
        return {
            "cpu_ms": max(cpu1 - cpu0, 0.0) / steps * 1e3,
            "wall_ms": float(report["ns_per_step"]) / 1e6,
            "dispatches_per_step": float(report.get("vk_dispatches_per_step", "nan")),
            "submits_per_step": float(report.get("vk_submits_per_step", "nan")),
        }


def _ratio(best: dict[str, dict[str, float]], key: str) -> float:
    """Simulator / emitted for `key`; NaN when the emitted figure rounds to 0 (its CPU time
    is a difference of two runs, at the clock's resolution)."""
    emitted = best["emitted_vulkan"][key]
    return best["sim_vulkan"][key] / emitted if emitted > 0 else float("nan")


def contention(loops: int = 200_000) -> float:
    """Wall / CPU time of a pure-Python loop: 1.0 when this process has a core to itself."""
    c0, w0 = time.process_time(), time.perf_counter()
    total = 0
    for i in range(loops):
        total += i * i
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return wall / max(cpu, 1e-9)


def bench_streaming(work: Workload, rounds: int, steps: int, warm: int = 3) -> dict[str, Any]:
    """Best-of-`rounds` interleaved figures of the three sides (see the module docstring)."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        model = base / f"{work.name}.oinf"
        work.write_model(model)
        rng = np.random.default_rng(1)
        feeds = [work.inputs(rng) for _ in range(max(steps, warm))]
        sides: dict[str, Any] = {
            "sim_vulkan": SimSide(work, model, "vulkan", feeds),
            "emitted_vulkan": EmittedSide(work, model, feeds, base),
            "sim_cpu": SimSide(work, model, "cpu", feeds),
        }
        for side in sides.values():
            if isinstance(side, SimSide):
                side.warm(warm)
        vk, cpu = sides["sim_vulkan"], sides["sim_cpu"]
        # The same inputs give the same outputs on both simulators (state carried along).
        max_abs = max(float(np.max(np.abs(a - b))) for a, b in zip(vk.outputs, cpu.outputs))
        load = [os.getloadavg()[0]]
        best: dict[str, dict[str, float]] = {}
        ratios = []
        for _ in range(rounds):
            ratios.append(contention())
            for name, side in sides.items():
                row = side.timed(steps)
                if name not in best:
                    best[name] = row
                for key in ("cpu_ms", "wall_ms"):
                    best[name][key] = min(best[name][key], row[key])
        load.append(os.getloadavg()[0])
        first = vk.sim.vulkan.stats
        return {
            "workload": work.name,
            "device": vk.sim.vulkan.device_name,
            "rounds": rounds,
            "steps": steps,
            "load_average_start_end": load,
            "contention_wall_per_cpu": [round(r, 2) for r in ratios],
            "sides": best,
            "max_abs_diff_vulkan_vs_cpu": max_abs,
            "emitted_build_s": sides["emitted_vulkan"].build_s,
            "vulkan_pipelines_total": first["pipelines_created"],
            "ratio_sim_vs_emitted_cpu": _ratio(best, "cpu_ms"),
            "ratio_sim_vs_emitted_wall": _ratio(best, "wall_ms"),
        }
