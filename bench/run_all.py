"""Run every benchmark script in bench/ (bench_*.py) one after another.

Each script prints its own table of figures and ratios against a baseline measured in
the same run, and writes bench/results/<area>.json. Pass --quick to forward it to every
script (small sizes, for a fast check). A script that fails is reported, the others run.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    """Run all benchmarks; exit 1 if any failed."""
    here = Path(__file__).resolve().parent
    (here / "results").mkdir(exist_ok=True)
    scripts = sorted(p for p in here.glob("bench_*.py"))
    failed = []
    for script in scripts:
        print(f"\n=== {script.name} ===", flush=True)
        start = time.perf_counter()
        rc = subprocess.call([sys.executable, str(script), *argv])
        print(f"--- {script.name}: exit {rc} in {time.perf_counter() - start:.1f} s", flush=True)
        if rc != 0:
            failed.append(script.name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
        return 1
    print(f"\nall {len(scripts)} benchmarks ran")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
