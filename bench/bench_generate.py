"""`openinfer generate` on SmolLM2-135M, one thread: prefill one step vs token by token,
decode tokens/s, cold vs warm start with the compile cache, and the same through `--target c`.

Every row is a fresh process (`openinfer generate ... --ids`), pinned to one CPU with XLA on
one thread; its summary line gives prefill and decode rates, and the process's CPU time and
wall time are measured from outside (CPU time is the steadier figure on a shared machine).

    python bench/bench_generate.py [--model build/smollm2.oinf] [--tokens 16] [--quick]

Cold start: an empty compile-cache directory; warm: the same directory again. Results go to
bench/results/generate.json (bench/results/quick/ with --quick).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from results_file import results_file  # noqa: E402

PROMPT = "Once upon a time, in a quiet village by the sea, a small robot named Echo woke up and"
_SUMMARY = re.compile(
    r"\[(\d+) prompt tokens in (\d+) step\(s\): ([\d.]+) s, ([\d.inf]+) tok/s \| (\d+) new tokens, "
    r"decode ([\d.inf]+) tok/s \| per CPU second: prefill ([\d.inf]+), decode ([\d.inf]+) tok/s "
    r".*load ([\d.]+) s, total ([\d.]+) s\]"
)


def run(model: Path, env: dict[str, str], *args: str) -> dict[str, float]:
    """One `openinfer generate` process; its summary figures plus CPU and wall seconds."""
    cmd = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    cmd += [
        sys.executable,
        "-m",
        "openinfer_jax",
        "generate",
        str(model),
        PROMPT,
        "--ids",
        *args,
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    match = _SUMMARY.search(done.stderr)
    if match is None:
        raise SystemExit(f"no summary line in:\n{done.stderr[-2000:]}")
    p_tok, p_steps, p_s, p_rate, new, d_rate, p_cpu_rate, d_cpu_rate, load, total = match.groups()
    return {
        "prompt_tokens": int(p_tok), "prefill_steps": int(p_steps), "prefill_s": float(p_s),
        "prefill_tok_s": float(p_rate), "new_tokens": int(new), "decode_tok_s": float(d_rate),
        "prefill_tok_per_cpu_s": float(p_cpu_rate), "decode_tok_per_cpu_s": float(d_cpu_rate),
        "load_s": float(load), "total_s": float(total), "process_wall_s": round(wall, 2),
        "process_cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
    }  # fmt: skip


def steady_rows(model: Path, tokens: int) -> dict[str, dict[str, float]]:
    """In this process, one thread: each configuration generates twice and the second run
    (every bucket already compiled) is measured in CPU seconds: steady prefill and decode."""
    os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    from openinfer_jax.generate import Generator

    rows: dict[str, dict[str, float]] = {}
    for target, chunk in (("sim", 16), ("sim", 1), ("c", 16), ("c", 1)):
        with Generator(model, target=target, chunk=chunk, context=256, compile_cache=False) as gen:
            for _ in range(2):
                result = gen.generate(PROMPT, max_new_tokens=tokens, stop_at_eos=False)
        label = f"{target} chunk{chunk} steady"
        rows[label] = {
            "prompt_tokens": result.prompt_tokens, "prefill_steps": result.prefill_steps,
            "prefill_tok_per_cpu_s": round(result.prefill_tokens_per_cpu_s, 2),
            "decode_tok_per_cpu_s": round(result.decode_tokens_per_cpu_s, 2),
            "prefill_tok_s": round(result.prefill_tokens_per_s, 2),
            "decode_tok_s": round(result.decode_tokens_per_s, 2),
        }  # fmt: skip
        print(label, rows[label], flush=True)
    return rows


def main() -> int:
    """Run the rows and write the results file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=HERE.parent / "build" / "smollm2.oinf")
    parser.add_argument("--tokens", type=int, default=16, help="new tokens per run")
    parser.add_argument("--quick", action="store_true", help="fewer tokens, no C rows")
    parser.add_argument(
        "--steady-only", action="store_true",
        help="only the in-process steady rows (written to generate_steady.json)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.steady_only:
        rows = steady_rows(args.model, 4 if args.quick else args.tokens)
        out = results_file("generate_steady.json", args.quick)
        out.write_text(json.dumps({"prompt": PROMPT, "rows": rows}, indent=1) + "\n")
        print(f"wrote {out}")
        return 0
    if not args.model.is_file():
        raise SystemExit(
            f"{args.model}: convert it first (openinfer convert ... --pattern llama --dtype f32)"
        )
    new = ["-n", str(4 if args.quick else args.tokens), "--no-stop", "--context", "256"]
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {
            **os.environ,
            "OPENINFER_COMPILE_CACHE": str(Path(cache) / "jax"),
            "XDG_CACHE_HOME": cache,
            "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
            "OMP_NUM_THREADS": "1",
        }
        for label, extra in (
            ("sim chunk16 cold", ["--chunk", "16"]),
            ("sim chunk16 warm", ["--chunk", "16"]),
            ("sim chunk1 cold", ["--chunk", "1"]),
            ("sim chunk1 warm", ["--chunk", "1"]),
        ):
            rows[label] = run(args.model, env, *new, *extra)
            print(label, rows[label], flush=True)
        if not args.quick:
            for label, extra in (
                ("c chunk16 build+run", ["--chunk", "16", "--target", "c"]),
                ("c chunk16", ["--chunk", "16", "--target", "c"]),
                ("c chunk1 build+run", ["--chunk", "1", "--target", "c"]),
                ("c chunk1", ["--chunk", "1", "--target", "c"]),
            ):
                rows[label] = run(args.model, env, *new, *extra)
                print(label, rows[label], flush=True)
    cold, warm = rows["sim chunk16 cold"], rows["sim chunk16 warm"]
    summary = {
        "warm/cold total (target <= 0.2)": round(warm["total_s"] / cold["total_s"], 3),
        "warm/cold process cpu": round(warm["process_cpu_s"] / cold["process_cpu_s"], 3),
        "prefill one step vs token by token (sim, warm, per CPU s)": round(
            warm["prefill_tok_per_cpu_s"] / rows["sim chunk1 warm"]["prefill_tok_per_cpu_s"], 2
        ),
    }
    print(json.dumps(summary, indent=1))
    out = results_file("generate.json", args.quick)
    out.write_text(
        json.dumps({"prompt": PROMPT, "rows": rows, "summary": summary}, indent=1) + "\n"
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
