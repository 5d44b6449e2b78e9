"""CI smoke run of `make fuzz`: every fuzz target for a few seconds, and the differential
Python-vs-C reader check on the corpus; zero findings. (`make fuzz` runs them for minutes.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECONDS = int(os.environ.get("FUZZ_SMOKE_SECONDS", "4"))

pytestmark = pytest.mark.skipif(
    shutil.which("clang") is None, reason="clang (libFuzzer) is installed by scripts/setup.sh"
)


def test_fuzz_targets_and_differential_check_find_nothing(tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, str(ROOT / "fuzz" / "run.py"), "--seconds", str(SECONDS),
         "--work", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    targets = {r["target"]: r for r in summary["results"]}
    assert set(targets) == {
        "oinf_reader",
        "dsl_frontends",
        "oinf_loader",
        "driver_input",
        "differential",
    }
    for name, r in targets.items():
        assert r["findings"] == [], name
        assert r["executions"] > 0, name
    # the differential check covers at least the committed corpus (bad and valid files)
    assert targets["differential"]["executions"] >= 80
