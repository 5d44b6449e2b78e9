"""The emitted runtime's thread pool (emit/runtime/oi_pool.h) under stress: regions of every
size from 1 to 64 units, pauses that let the workers and the caller fall asleep, restarts of
the pool; every unit must run exactly once and no wake-up may be lost (a hang fails on the
timeout). Built with -Wall -Wextra -Werror like the emitted programs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from openinfer_jax.emit.runtime_files import RUNTIME_DIR
from tests.emit.harness import CC

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")

SOURCE = Path(__file__).with_name("c") / "pool_stress.c"


@pytest.fixture(scope="module")
def stress(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("pool") / "stress"
    flags = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{RUNTIME_DIR}"]
    subprocess.run([CC, *flags, str(SOURCE), "-pthread", "-o", str(exe)], check=True)
    return exe


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_every_unit_runs_once_and_no_wakeup_is_lost(stress: Path, threads: int) -> None:
    # 4 threads on a 2-CPU machine also covers workers preempted in the middle of a region
    regions = 20000 if threads <= 2 else 4000
    env = {"OI_THREADS": str(threads), "PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        [str(stress), str(regions)], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip() == f"ok {regions}"
