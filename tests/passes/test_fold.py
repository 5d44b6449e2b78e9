"""The passes before a backend: weight transposes folded into `linear`, bias adds fused into
it. Each rewrite is checked two ways: the report says what changed, and the simulator gives
the same outputs for the graph before and after. The cases the passes must leave alone (a
transposed weight someone else reads, a fetched temporary, a written weight, other
dtypes and ranks, a bias of the wrong shape) are left unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from openinfer_jax.ir.nodes import Op
from openinfer_jax.ir.printer import format_graph
from openinfer_jax.ir.walk import walk
from openinfer_jax.oinf import ModelLoader, write_oinf
from openinfer_jax.passes import optimize
from openinfer_jax.sim import Simulator
from openinfer_jax.trace.load import load_graph

LAYERED = """
graph {
  dynamic { x: f32[2, K]; }
  volatile {
    W(l): f32[N, K] @pattern("w.{l}");
    B(l): f32[N] @pattern("b.{l}");
    U: f32[K, N] @ref("u");
  }
  block entry {
    assign h: f32[2, K];
    assign wt: f32[K, N];
    assign y: f32[2, N];
    assign z: f32[2, N];
    assign s: f32[2, N];
    loop layers (l in 0..L) {
      op transpose(W[l], perm=[1, 0]) >> wt;
      op matmul(h, wt) >> y;
      op matmul(x, wt) >> z;
      op add(y, B[l]) >> y;
      op add(y, z) >> s;
      op tanh(s) >> h;
    }
    op matmul(x, U) >> y;
    return;
  }
}
"""


def _model(tmp: Path) -> Path:
    rng = np.random.default_rng(3)
    tensors = {"u": rng.standard_normal((4, 4)).astype(np.float32)}
    for layer in range(3):
        tensors[f"w.{layer}"] = rng.standard_normal((4, 4)).astype(np.float32)
        tensors[f"b.{layer}"] = rng.standard_normal(4).astype(np.float32)
    path = tmp / "m.oinf"
    write_oinf(path, sizevars={"K": 4, "N": 4, "L": 3}, metadata={}, tensors=tensors)
    return path


def _ops(graph) -> list[str]:
    return [
        f"{n.op}({', '.join(map(str, n.inputs))}) >> {n.output}"
        for b in graph.blocks
        for n in walk(b.nodes)
        if isinstance(n, Op)
    ]


def _run(model: Path, graph, x: np.ndarray, outputs: list[str]) -> dict[str, np.ndarray]:
    with ModelLoader.open(model) as loader:
        ex = Simulator(loader, graph).make_executor()
        ex.insert(x=x)
        ex.step()
        return {name: np.asarray(ex.fetch(name)) for name in outputs}


def test_transpose_folded_into_linear_and_bias_fused(tmp_path: Path) -> None:
    model = _model(tmp_path)
    graph = load_graph(LAYERED)
    with ModelLoader.open(model) as loader:
        out, report = optimize(graph, loader.sizevars, ["h", "y"])
    ops = _ops(out)
    # both matmuls reading the transposed weight now read W[l] in place; the transpose and
    # the assign of wt are gone; the bias add moved into the linear
    assert ops[:4] == [
        "linear(h, W[l], B[l]) >> y",
        "linear(x, W[l]) >> z",
        "add(y, z) >> s",
        "tanh(s) >> h",
    ]
    assert "assign wt" not in format_graph(out)
    assert len(report.folded) == 2  # one line per matmul that now reads W[l] in place
    assert all("transpose(W[l], perm=[1, 0])" in line for line in report.folded)
    assert len(report.fused) == 1 and "add(y, B[l])" in report.fused[0]
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    before, after = _run(model, graph, x, ["h", "y"]), _run(model, out, x, ["h", "y"])
    for name in before:
        np.testing.assert_allclose(after[name], before[name], rtol=1e-5, atol=1e-6)


def test_a_fetched_transpose_is_kept(tmp_path: Path) -> None:
    model = _model(tmp_path)
    graph = load_graph(LAYERED)
    with ModelLoader.open(model) as loader:
        out, report = optimize(graph, loader.sizevars, ["h", "wt"])
    assert "transpose(W[l]) >> wt" in _ops(out)
    assert not report.folded


SKIPPED = """
graph {
  dynamic { x: f32[2, 4]; x16: f16[2, 4]; }
  volatile { W: f32[4, 4] @ref("w"); V: f32[4, 4] @ref("v"); H: f16[4, 4] @ref("h"); b2: f32[2] @ref("b2"); }
  block entry {
    assign t: f32[4, 4];
    assign t2: f32[4, 4];
    assign t16: f16[4, 4];
    assign y: f32[2, 4];
    assign y2: f32[2, 4];
    assign y16: f16[2, 4];
    op transpose(W, perm=[1, 0]) >> t;
    op matmul(x, t) >> y;
    op add(t, t) >> t;
    op transpose(V) >> t2;
    op matmul(x, t2) >> y2;
    op mul(V, V) >> V;
    op transpose(H, perm=[1, 0]) >> t16;
    op matmul(x16, t16) >> y16;
    op linear(x, W) >> y2;
    op add(y2, b2) >> y2;
    return;
  }
}
"""


def test_left_alone_when_the_result_could_change(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    path = tmp_path / "m.oinf"
    write_oinf(path, sizevars={}, metadata={}, tensors={
        "w": rng.standard_normal((4, 4)).astype(np.float32),
        "v": rng.standard_normal((4, 4)).astype(np.float32),
        "h": rng.standard_normal((4, 4)).astype(np.float16),
        "b2": rng.standard_normal(2).astype(np.float32)})  # fmt: skip
    graph = load_graph(SKIPPED)
    with ModelLoader.open(path) as loader:
        out, report = optimize(graph, loader.sizevars, ["y", "y2", "y16", "t"])
    # t is read by an add (and fetched), V is written by a node, H is f16, b2 is not [N]
    assert out == graph
    assert report.lines() == []


def test_new_nodes_name_the_node_whose_output_they_write(tmp_path: Path) -> None:
    model = _model(tmp_path)
    graph = load_graph(LAYERED)
    with ModelLoader.open(model) as loader:
        out, report = optimize(graph, loader.sizevars, ["h", "y"])
    new = [n for b in out.blocks for n in walk(b.nodes) if id(n) in report.origins]
    assert [(n.op, report.origins[id(n)].op) for n in new] == [
        ("linear", "add"),
        ("linear", "matmul"),
    ]
    assert all(report.origins[id(n)].output == n.output for n in new)
