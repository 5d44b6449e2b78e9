"""`openinfer verify` and `openinfer inspect` through the real CLI entry point."""

from __future__ import annotations

import json
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


@pytest.fixture
def tokenizer_model(tmp_path: Path) -> Path:
    """A model with gguf-style long metadata: a JSON string array and a long UTF-8 text."""
    tokens = [f"tok{i}" for i in range(1000)]
    return write_oinf(
        tmp_path / "t.oinf",
        sizevars={"V": 1000},
        metadata={
            "tokenizer.ggml.tokens": json.dumps(tokens),
            "tokenizer.ggml.token_type": np.arange(1000),
            "template": np.frombuffer("é{% for m in messages %}".encode() * 20, np.uint8).copy(),
        },
        tensors={
            "a" * 30 + ".very.long.tensor.name.that.would.not.fit.in.eighty.columns.0": np.zeros(
                3, np.float32
            )
        },
    )


def test_inspect_summarizes_long_arrays(
    tokenizer_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(tokenizer_model)]) == 0
    out = capsys.readouterr().out
    assert "string array of 1,000" in out and '"tok5"' in out and "tok6" not in out
    assert "(1,000 values)" in out and "utf-8 text, 500 bytes" in out
    # Piped output (capsys is not a terminal) keeps names whole, never cut at 80 columns.
    assert "would.not.fit.in.eighty.columns.0" in out
    assert len(out.splitlines()) < 40


def test_inspect_full_prints_everything(
    tokenizer_model: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", "--full", str(tokenizer_model)]) == 0
    out = capsys.readouterr().out
    assert '"tok999"' in out and ", 999]" in out


def test_inspect_json(tokenizer_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--json", str(tokenizer_model)]) == 0
    doc = json.loads(capsys.readouterr().out)
    tokens = doc["metadata"]["tokenizer.ggml.tokens"]
    assert tokens["type"] == "string" and tokens["value"] == {
        "count": 1000,
        "first": [f"tok{i}" for i in range(6)],
    }
    assert doc["metadata"]["template"]["value"].startswith("é{% for m")
    assert doc["sizevars"] == {"V": 1000} and doc["tensors"][0]["shape"] == [3]
    assert main(["inspect", "--json", "--full", "--stats", str(tokenizer_model)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["metadata"]["tokenizer.ggml.tokens"]["value"]) == 1000
    assert doc["tensors"][0]["stats"] == {"min": 0.0, "max": 0.0, "mean": 0.0}


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("openinfer-jax 0.")


@pytest.mark.parametrize("name", ["empty_tensor_huge_dims", "ndarray_empty_huge_dim"])
def test_inspect_stats_of_shapes_numpy_cannot_hold(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Valid files whose empty arrays NumPy cannot represent still inspect (no traceback)."""
    assert main(["inspect", "--stats", str(CORPUS_DIR / "valid" / f"{name}.oinf")]) == 0
    out = capsys.readouterr().out
    assert ("not readable here" in out) == name.startswith("ndarray")


def test_inspect_into_a_closed_pipe_exits_0(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = write_oinf(
        tmp_path / "big.oinf",
        metadata={"tokens": json.dumps([f"token{i}" for i in range(20000)])},
        tensors={"w": np.zeros(2, np.float32)},
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "openinfer_jax", "inspect", "--full", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=root,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
