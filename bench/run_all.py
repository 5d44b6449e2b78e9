"""Run every benchmark script in bench/ (bench_*.py) one after another.

Each script prints its own table of figures and ratios against a baseline measured in
the same run, and writes bench/results/<area>.json. Pass --quick to forward it to every
script (small sizes, for a fast check); a quick run's outputs go to bench/results/quick/ so
they never replace the full-run figures. A script that fails is reported, the others run.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path


def _snapshot(folder: Path) -> dict[str, bytes]:
    """The bytes of every file directly in `folder`."""
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def _divert_quick_results(folder: Path, before: dict[str, bytes]) -> None:
    """Move what a quick run wrote into folder/quick/ and put the full-run files back."""
    quick = folder / "quick"
    quick.mkdir(exist_ok=True)
    for name, data in _snapshot(folder).items():
        if before.get(name) == data:
            continue
        (quick / name).write_bytes(data)
        if name in before:
            (folder / name).write_bytes(before[name])
        else:
            (folder / name).unlink()


def main(argv: list[str]) -> int:
    """Run all benchmarks; exit 1 if any failed."""
    here = Path(__file__).resolve().parent
    results = here / "results"
    results.mkdir(exist_ok=True)
    before = _snapshot(results) if "--quick" in argv else None
    scripts = sorted(p for p in here.glob("bench_*.py"))
    failed = []
    for script in scripts:
        print(f"\n=== {script.name} ===", flush=True)
        start = time.perf_counter()
        rc = subprocess.call([sys.executable, str(script), *argv])
        print(f"--- {script.name}: exit {rc} in {time.perf_counter() - start:.1f} s", flush=True)
        if rc != 0:
            failed.append(script.name)
    if before is not None:
        _divert_quick_results(results, before)
        print(f"\nquick-run results are in {results / 'quick'}")
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
        return 1
    print(f"\nall {len(scripts)} benchmarks ran")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
