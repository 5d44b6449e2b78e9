"""`openinfer verify` and `openinfer inspect` through the real CLI entry point."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.cli import main
from openinfer_jax.oinf import DType, QuantParams, QuantScale, TensorSpec, write_oinf
from tests.oinf.make_corpus import CORPUS_DIR


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return write_oinf(
        tmp_path / "m.oinf",
        sizevars={"B": 4},
        metadata={"mode": "clamp_up", "arr": np.arange(3.0)},
        tensors={
            "w": np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8),
            "q": TensorSpec(
                np.array([1, -2, 3]),
                dtype=DType.I4,
                quant=QuantParams.symmetric(QuantScale.per_tensor(0.25)),
            ),
            "kv": TensorSpec(dtype=DType.F16, shape=(2, 2)),
        },
    )


def test_verify_valid(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(model)]) == 0
    assert "OK" in capsys.readouterr().out


def test_verify_lists_every_violation(capsys: pytest.CaptureFixture[str], model: Path) -> None:
    bad = CORPUS_DIR / "quant_bad_scheme.oinf"
    assert main(["verify", str(model), str(bad)]) == 1
    out = capsys.readouterr().out
    assert "INVALID" in out and "R30" in out and "offset" in out


def test_inspect(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(model)]) == 0
    out = capsys.readouterr().out
    for text in ("sizevars", "clamp_up", "float64[3]", "i4", "symmetric", "no data", "[8, 8]"):
        assert text in out, text


def test_inspect_stats(model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--stats", str(model)]) == 0
    out = capsys.readouterr().out
    assert "histogram" in out and "-1" in out and "█" in out


def test_inspect_bad_file_is_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(CORPUS_DIR / "count_huge_tensors.oinf")]) == 1
    err = capsys.readouterr().err
    assert (
        err.startswith("error: header.n_tensors at offset 21")
        and "R13" in err
        and "Traceback" not in err
    )


def test_inspect_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tmp_path / "nope.oinf")]) == 1
    assert "cannot open" in capsys.readouterr().err
