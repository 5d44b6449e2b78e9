"""The sharding benchmarks run end to end on 2 emulated CPU devices with tiny shapes.

`bench/bench_sharding.py --devices 2` is the command the two-GPU run uses unchanged; here it
sweeps batches 1 and 8 at two contexts and must report, per row, the sharded outputs equal to
one device, the jit baseline equal to the simulator, half the KV cache per device and two
all-reduces per layer. `bench/bench_sharding_profile.py` must separate dispatch, device busy
time and collectives from its profiler trace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).strip(os.pathsep)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_sweep_on_two_devices(tmp_path: Path) -> None:
    out = tmp_path / "sharding.json"
    _bench("bench_sharding.py", "--quick", "--devices", "2", "--batch", "1,8",
           "--context", "16,40", "--steps", "2", "--out", str(out))  # fmt: skip
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert [(r["batch"], r["devices"], r["context"]) for r in rows] == [
        (b, n, c) for b in (1, 8) for n in (1, 2) for c in (16, 40)
    ]
    layers = result["config"]["layers"]
    for row in rows:
        assert row["max_abs_diff"] < 1e-4 and row["pure_jax_max_abs_diff"] < 1e-4, row
        assert row["pipelined_step_ms"] > 0 and row["pure_jax_pipelined_step_ms"] > 0, row
        if row["devices"] == 2:
            assert row["collectives_per_step"] == 2 * layers, row
            one = next(
                r for r in rows
                if (r["devices"], r["batch"], r["context"]) == (1, row["batch"], row["context"])
            )  # fmt: skip
            assert row["kv_bytes_per_device"] * 2 == one["kv_bytes_per_device"]
    assert {(f["devices"], f["batch"], f["runner"]) for f in result["fits"]} == {
        (n, b, r) for n in (1, 2) for b in (1, 8) for r in ("sim", "jit")
    }


@pytest.mark.slow
def test_profile_separates_dispatch_compute_collectives(tmp_path: Path) -> None:
    out = tmp_path / "profile.json"
    _bench("bench_sharding_profile.py", "--quick", "--devices", "2", "--steps", "2",
           "--out", str(out))  # fmt: skip
    result = json.loads(out.read_text())
    for runner in ("sim", "jit"):
        prof = result[runner]
        assert 0 < prof["dispatch_ms"] <= prof["wall_ms"], prof
        assert prof["device_busy_ms"] > 0 and prof["device_ops_per_step"] > 0, prof
        assert 0 < prof["collective_ms"] <= prof["device_busy_ms"], prof
        assert set(prof["per_device"]) == {"cpu:0", "cpu:1"}, prof
    full, half = result["repro"]["default"]["full"], result["repro"]["default"]["half"]
    assert half["weights_bytes"] * 2 == full["weights_bytes"]
