"""Where a benchmark writes its JSON: bench/results/<name> for full runs, and
bench/results/quick/<name> for `--quick` runs, so a short check never overwrites the figures
that the docs quote (bench/run_all.py relies on it too)."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def results_file(name: str, quick: bool) -> Path:
    """The output path of `name` (e.g. ``"vk.json"``); its folder exists on return."""
    folder = RESULTS / "quick" if quick else RESULTS
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name
