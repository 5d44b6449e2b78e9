"""The generated C driver checks its input files before allocating: a negative or huge dim
is refused (it went straight into malloc), a truncated file is reported as truncated (it
was "cannot read the model file"), an extra byte too, a missing output directory by its path. Built with ASan/UBSan when clang is
there, so an overflow would also show."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.emit import Synthesizer
from openinfer_jax.oinf import write_oinf
from tests.emit.harness import CC, CFLAGS, build

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")

GRAPH = """graph { dynamic { x: f32[4]; } volatile { y: f32[4]; }
  block entry { op add(x, x) >> y; return; } }"""


def _header(*dims: int) -> bytes:
    return struct.pack("<i", len(dims)) + struct.pack(f"<{len(dims)}q", *dims)


CASES = {
    "negative_dim": (_header(-1) + b"\x00" * 16, "dim 0 is -1"),
    "huge_dim": (_header(1 << 62, 4), "dim 0 is 4611686018427387904"),
    "truncated": (_header(4) + b"\x00" * 10, "the file has 10 (truncated)"),
    "extra_bytes": (_header(4) + b"\x00" * 20, "the file has 20 (extra bytes)"),
    "truncated_dims": (struct.pack("<i", 2) + b"\x00" * 8, "truncated in its 2 dims"),
    "bad_rank": (struct.pack("<i", 99), "ndim in 0..8"),
    "empty": (b"", "ndim in 0..8"),
}


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("driver")
    model = write_oinf(work / "m.oinf", tensors={})
    plan = Synthesizer("c").synthesize(model, GRAPH, name="prog")
    flags = list(CFLAGS)
    if shutil.which("clang") and CC == "clang":
        flags += ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    return build(plan, work / "c", flags=flags), model


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_file_is_named_not_allocated(
    driver: tuple[Path, Path], tmp_path: Path, case: str
) -> None:
    exe, model = driver
    data, expected = CASES[case]
    ins, outs = tmp_path / "in", tmp_path / "out"
    ins.mkdir()
    outs.mkdir()
    (ins / "x.0.bin").write_bytes(data)
    result = subprocess.run(
        [str(exe), str(model), "1", str(ins), str(outs)], capture_output=True, text=True
    )
    assert result.returncode == 1, result.stderr
    assert f"input {ins}/x.0.bin" in result.stderr and expected in result.stderr, result.stderr
    assert "model file" not in result.stderr


def test_good_input_still_runs(driver: tuple[Path, Path], tmp_path: Path) -> None:
    exe, model = driver
    ins, outs = tmp_path / "in", tmp_path / "out"
    ins.mkdir()
    outs.mkdir()
    (ins / "x.0.bin").write_bytes(_header(4) + np.arange(4, dtype=np.float32).tobytes())
    result = subprocess.run(
        [str(exe), str(model), "1", str(ins), str(outs)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_missing_output_directory_is_named(driver: tuple[Path, Path], tmp_path: Path) -> None:
    """An OUT_DIR that does not exist is reported as the output file that cannot be written,
    not as an unreadable model."""
    exe, model = driver
    ins, outs = tmp_path / "in", tmp_path / "missing"
    ins.mkdir()
    (ins / "x.0.bin").write_bytes(_header(4) + np.arange(4, dtype=np.float32).tobytes())
    result = subprocess.run(
        [str(exe), str(model), "1", str(ins), str(outs)], capture_output=True, text=True
    )
    assert result.returncode == 1, result.stderr
    assert f"output {outs}/" in result.stderr, result.stderr
    assert f"cannot open it for writing (does the directory {outs} exist?)" in result.stderr
    assert "model file" not in result.stderr
