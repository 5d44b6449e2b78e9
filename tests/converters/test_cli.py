"""`openinfer convert`: exit codes, --force, dry run, progress and summary output."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from openinfer_jax.cli import main
from openinfer_jax.oinf import ModelLoader


def test_convert_prints_summary(
    tiny_bert_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "m.oinf"
    assert (
        main(["convert", str(tiny_bert_dir), "-o", str(out), "--pattern", "bert", "--dtype", "f16"])
        == 0
    )
    err = capsys.readouterr().err
    assert "conversion summary" in err and "tensors" in err and "MB/s" in err
    with ModelLoader.open(out) as m:
        assert "q.weight.1" in m.tensors


def test_existing_destination_needs_force(
    tiny_bert_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "m.oinf"
    out.write_bytes(b"keep me")
    assert main(["convert", str(tiny_bert_dir), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--force" in err and err.count("\n") == 1
    assert out.read_bytes() == b"keep me"
    assert main(["convert", str(tiny_bert_dir), "-o", str(out), "--force", "--quiet"]) == 0
    with ModelLoader.open(out) as m:
        assert len(m.tensors) == 12


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rename", "embeddings\\.(.*)=x/{1}"], "name rule"),
        (["--rename", "encoder\\.layer\\.\\d+\\.(.*)=same.{1}"], "name collision"),
        (["--include", "nothing*"], "no tensor left"),
        (["--format", "gguf"], "GGUF"),
    ],
)
def test_bad_input_exits_1_without_output(
    tiny_bert_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    out = tmp_path / "m.oinf"
    assert main(["convert", str(tiny_bert_dir / "model.safetensors"), "-o", str(out), *args]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists()


def test_corrupt_source_exits_1(
    tiny_bert_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tiny_bert_dir / "model.safetensors"
    src.write_bytes(src.read_bytes()[:-3])
    assert main(["convert", str(src), "-o", str(tmp_path / "m.oinf")]) == 1
    assert "truncated" in capsys.readouterr().err
    assert not (tmp_path / "m.oinf").exists()


def test_dry_run_writes_nothing(
    tiny_bert_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "m.oinf"
    assert (
        main(["convert", str(tiny_bert_dir), "-o", str(out), "--dry-run", "--pattern", "bert"]) == 0
    )
    text = capsys.readouterr().out
    assert "tok_emb.weight" in text and "[11, 8]" in text and "352" in text  # 11*8*4 bytes
    assert not out.exists()


def test_missing_output_argument(tiny_bert_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", str(tiny_bert_dir)]) == 1
    assert "-o" in capsys.readouterr().err


def test_config_mismatch_exit_code(
    tiny_bert_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = json.loads((tiny_bert_dir / "config.json").read_text())
    config["vocab_size"] = 99
    (tiny_bert_dir / "config.json").write_text(json.dumps(config))
    assert main(["convert", str(tiny_bert_dir), "-o", str(tmp_path / "m.oinf")]) == 1
    assert "vocab_size=99" in capsys.readouterr().err
    assert not (tmp_path / "m.oinf").exists()


@pytest.mark.parametrize(
    ("target", "message"), [("dir", "is a directory"), ("missing/m.oinf", "does not exist")]
)
def test_bad_destination(
    tiny_bert_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    target: str,
    message: str,
) -> None:
    (tmp_path / "dir").mkdir()
    assert main(["convert", str(tiny_bert_dir), "-o", str(tmp_path / target)]) == 1
    assert message in capsys.readouterr().err
    assert list((tmp_path / "dir").iterdir()) == []


def test_sizevar_adds_and_replaces(tiny_bert_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.oinf"
    args = ["convert", str(tiny_bert_dir), "-o", str(out), "--quiet"]
    assert main([*args, "--sizevar", "B=2", "--sizevar", "max_seq=128"]) == 0
    with ModelLoader.open(out) as m:
        assert m.sizevars["B"] == 2 and m.sizevars["max_seq"] == 128
        assert m.sizevars["hidden_size"] == 8  # from config.json, untouched


@pytest.mark.parametrize(
    ("sizevar", "message"),
    [
        ("B", "expected NAME=VALUE"),
        ("B=-1", "non-negative integer"),
        ("a/b=2", "NAME of"),
        ("hidden_size=9", "hidden_size=9 but tensor"),  # contradicts the weights
    ],
)
def test_bad_sizevar_is_an_error_and_writes_nothing(
    tiny_bert_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    sizevar: str,
    message: str,
) -> None:
    out = tmp_path / "m.oinf"
    assert main(["convert", str(tiny_bert_dir), "-o", str(out), "--sizevar", sizevar]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("module", "source", "extra"),
    [
        ("gguf", "m.gguf", "gguf"),
        ("flax", "m.msgpack", "flax"),
        ("orbax", "ckpt/_METADATA", "flax"),
    ],
)
def test_missing_extra_names_the_pip_install(
    module: str,
    source: str,
    extra: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = tmp_path / source
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"GGUF")  # the import is checked before the file is read
    if path.name == "_METADATA":
        path = path.parent
    # None in sys.modules makes `import gguf` fail as if the package were not installed.
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)
    out = tmp_path / "m.oinf"
    assert main(["convert", str(path), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"pip install 'openinfer-jax[{extra}]'" in err and "Traceback" not in err
    assert not out.exists()
