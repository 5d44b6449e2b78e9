"""`openinfer show GRAPH` in every format, and its errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from openinfer_jax.cli import main
from openinfer_jax.ir import from_json, to_json_text
from openinfer_jax.trace import parse, parse_file

from .fixtures import SEED_DIR

CONDENSED = SEED_DIR / "001_condensed.graph"


def test_show_prints_canonical_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(CONDENSED)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("graph {\n")
    assert parse(out) == parse_file(CONDENSED)


def test_show_json_and_back(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(CONDENSED), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert from_json(data) == parse_file(CONDENSED)
    # A JSON graph is accepted as input too.
    path = tmp_path / "g.json"
    path.write_text(to_json_text(parse_file(CONDENSED)), encoding="utf-8")
    assert main(["show", str(path)]) == 0
    assert parse(capsys.readouterr().out) == parse_file(CONDENSED)


def test_show_dot_to_file(tmp_path: Path) -> None:
    out = tmp_path / "g.dot"
    assert main(["show", str(CONDENSED), "--format", "dot", "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    assert text.startswith('digraph "001_condensed" {')


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz not installed")
def test_show_svg(tmp_path: Path) -> None:
    out = tmp_path / "g.svg"
    assert main(["show", str(CONDENSED), "--format", "svg", "-o", str(out)]) == 0
    svg = out.read_text(encoding="utf-8")
    assert "<svg" in svg and "block entry" in svg


def test_svg_without_graphviz_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no `dot` on PATH
    assert main(["show", str(CONDENSED), "--format", "svg"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: Graphviz 'dot' was not found on PATH") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("content", "suffix", "message"),
    [
        ("block entry {\n  return\n}\n", ".graph", ":2:9: missing ';'"),
        ('{"format": "openinfer-graph", "version": 9, "vars": [], "blocks": []}', ".json",
         "graph JSON at version: unsupported graph JSON version 9"),
        ('{"format": ', ".json", ":1:12: invalid JSON"),
    ],
)  # fmt: skip
def test_bad_graph_files_exit_1_with_one_located_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, suffix: str, message: str
) -> None:
    path = tmp_path / f"bad{suffix}"
    path.write_text(content, encoding="utf-8")
    assert main(["show", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}")
    assert message in err
    assert "Traceback" not in err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(tmp_path / "nope.graph")]) == 1
    assert "cannot read the graph file" in capsys.readouterr().err


def test_show_builds_the_arch_graph(tmp_path, capsys) -> None:
    from openinfer_jax.cli import main as cli_main
    from tests.models.tiny import write_tiny_llama

    model = write_tiny_llama(tmp_path / "llama.oinf")
    assert cli_main(["show", "--model", str(model), "--arch", "llama", "--chunk", "2"]) == 0
    out = capsys.readouterr().out
    assert "tokens: i32[2];" in out and "block prefill {" in out
    assert cli_main(["show", "--model", str(model), "--arch", "llama", "--seq", "2"]) == 1
    assert "takes the options chunk, context, kv_dtype, not seq" in capsys.readouterr().err
    args = ["show", "--model", str(model), "--arch", "llama", "--kv-dtype", "f16"]
    assert cli_main(args) == 0
    assert "K(l, t): f16[" in capsys.readouterr().out
