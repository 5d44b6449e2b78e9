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


STREAM_GRAPH = """
graph {
  dynamic { x: f32[B]; }
  volatile { a: f32[B]; }
  persistent { total: f32[B] @init(0.0); }
  block entry {
    assign t: f32[B];
    assign s: f32[B];
    cache.read total >> s;
    op add(x, a) >> t;
    op add(s, t) >> s;
    cache.write s >> total;
    return;
  }
}
"""


def test_stream_feeds_one_slice_per_step_and_saves_every_step(tmp_path: Path, capsys) -> None:
    model, graph, _ = setup_files(tmp_path)
    graph.write_text(STREAM_GRAPH)
    chunks = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "chunks.npy", chunks)
    out = tmp_path / "out.npz"
    code = main(["run", "--model", str(model), "--graph", str(graph), "--stream",
                 "--input", f"x={tmp_path / 'chunks.npy'}", "--fetch", "s", "--output", str(out)])  # fmt: skip
    assert code == 0
    assert "ran 3 step(s)" in capsys.readouterr().out
    saved = np.load(out)["s"]
    a = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(saved, np.cumsum(chunks + a, axis=0))


def test_stream_from_npz_whose_shape_changes_is_an_error(tmp_path: Path, capsys) -> None:
    model, graph, _ = setup_files(tmp_path)
    graph.write_text(STREAM_GRAPH)
    np.savez(tmp_path / "s.npz", np.ones(4, np.float32), np.ones(5, np.float32))
    code = main(["run", "--model", str(model), "--graph", str(graph), "--stream",
                 "--input", f"x={tmp_path / 's.npz'}"])  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert "--input x: step 1 of the stream is float32[5] but step 0 was float32[4]" in err
    assert "Traceback" not in err


def test_stream_slice_of_the_wrong_shape_is_an_error(tmp_path: Path, capsys) -> None:
    model, graph, _ = setup_files(tmp_path)
    np.save(tmp_path / "c.npy", np.ones((2, 5), np.float32))
    code = main(["run", "--model", str(model), "--graph", str(graph), "--stream",
                 "--input", f"x={tmp_path / 'c.npy'}"])  # fmt: skip
    assert code == 1
    assert "insert 'x': shape [5] does not match the declaration f32[4]" in capsys.readouterr().err


def test_run_llama_arch_without_a_graph_file(tmp_path: Path, capsys) -> None:
    from tests.models.tiny import llama_reference, write_tiny_llama

    model = write_tiny_llama(tmp_path / "llama.oinf")
    np.save(tmp_path / "tokens.npy", np.array([[3], [17], [5]], np.int32))
    saved_graph, out = tmp_path / "decode.graph", tmp_path / "out.npz"
    code = main(["run", "--model", str(model), "--arch", "llama", "--chunk", "1", "--context", "8",
                 "--stream", "--input", f"tokens={tmp_path / 'tokens.npy'}", "--fetch", "logits",
                 "--output", str(out), "--save-graph", str(saved_graph)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    logits = np.load(out)["logits"][:, 0]
    np.testing.assert_allclose(logits, llama_reference(model, [3, 17, 5]), atol=2e-5)
    assert "K(l, t): f32[2, 8] @table @fixed(l=2, t=8);" in saved_graph.read_text()


def test_run_needs_a_program_and_a_matching_arch(tmp_path: Path, capsys) -> None:
    model, _, _ = setup_files(tmp_path)
    assert main(["run", "--model", str(model)]) == 1
    assert "give the program: --graph FILE, or --arch NAME (bert, llama)" in capsys.readouterr().err
    assert main(["run", "--model", str(model), "--arch", "llama"]) == 1
    err = capsys.readouterr().err
    assert "--arch llama needs the sizevar 'num_attention_heads'" in err and "Traceback" not in err
