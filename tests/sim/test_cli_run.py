"""`openinfer run` end to end, and its one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from openinfer_jax.cli import main
from openinfer_jax.oinf import write_oinf

GRAPH = """
graph {
  dynamic { x: f32[B]; }
  volatile { a: f32[B]; y: f32[B] @init(5.0); }
  block entry {
    assign t0: f32[B];
    op add(x, a) >> t0;
    op mul(y, t0) >> y;
    return;
  }
}
"""


def setup_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={"B": 4}, metadata={}, tensors={"a": np.arange(4, dtype=np.float32)})
    graph = tmp_path / "g.graph"
    graph.write_text(GRAPH)
    x = tmp_path / "x.npy"
    np.save(x, np.ones(4, np.float32))
    return model, graph, x


def test_run_prints_fetched_values_and_writes_traces(tmp_path: Path, capsys) -> None:
    model, graph, x = setup_files(tmp_path)
    trace, chrome = tmp_path / "t.json", tmp_path / "c.json"
    code = main(
        [
            "run", "--model", str(model), "--graph", str(graph), "--steps", "2",
            "--input", f"x={x}", "--fetch", "y", "--trace", str(trace), "--chrome-trace", str(chrome),
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "y = float32[4] [ 5., 10., 15., 20.]" in out
    assert "ran 2 step(s)" in out
    assert len(json.loads(trace.read_text())) == 2 * 4
    assert json.loads(chrome.read_text())["traceEvents"]


def test_run_errors_are_one_line(tmp_path: Path, capsys) -> None:
    model, graph, _x = setup_files(tmp_path)
    assert main(["run", "--model", str(model), "--graph", str(graph)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: step: dynamic input x not inserted") and "\n" not in err
    assert main(["run", "--model", str(model), "--graph", str(graph), "--input", "x"]) == 1
    assert "expected NAME=FILE.npy" in capsys.readouterr().err
    assert main(["run", "--model", str(tmp_path / "none.oinf"), "--graph", str(graph)]) == 1
    assert "does not exist" in capsys.readouterr().err
