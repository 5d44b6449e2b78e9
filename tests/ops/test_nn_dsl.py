"""The model-building ops written in `graph{}` text, run by the simulator, vs the NumPy references.

Checks that params spelled in the DSL (negative int lists, strings, booleans, floats) reach the
ops as declared, and that validation and simulation agree with the references end to end.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.core.errors import GraphValidationError
from openinfer_jax.oinf import ModelLoader, write_oinf
from openinfer_jax.ops import registry
from openinfer_jax.sim import Simulator

GRAPH = """
graph {
  dynamic { x: f32[B, D]; ids: i32[3]; }
  volatile { table: f32[V, D]; w: f32[4, 2, 3, 3]; }
  persistent { step: i32 @init(5); }
  block entry {
    assign e: f32[3, D];
    assign s: f32[B, 4];
    assign p: f32[B, 12];
    assign c: f32[B, 20];
    assign t: f32[B, 2, 4];
    assign a: f32[B, 2, 4];
    assign o: f32[B, 2, 4];
    assign z: f32[B, D];
    assign m: bool[B, D];
    assign pos: i32;
    assign img: f32[1, 2, 4, 4];
    assign cv: f32[1, 4, 4, 4];
    assign mp: f32[1, 4, 2, 2];
    op embedding(table, ids) >> e;
    op slice(x, starts=[-1], ends=[-10], axes=[1], steps=[-2]) >> s;
    op pad(x, pads=[0, 2, 0, 2], mode="reflect") >> p;
    op concat(x, x, s, axis=-1) >> c;
    op reshape(x, shape=[0, 2, -1]) >> t;
    cache.read step >> pos;
    op rope(t, pos, theta=100000.0, interleaved=true) >> a;
    op softmax(x, axis=-1) >> z;
    op gt(x, z) >> m;
    op where(m, x, z) >> z;
    op layer_norm(z, epsilon=0.001) >> z;
    op gelu(z, approximate="tanh") >> z;
    op attention(t, t, t, causal=true, scale=0.25) >> o;
    op reshape(x, shape=[1, 2, 4, 4]) >> img;
    op conv2d(img, w, pads=[1, 1, 1, 1]) >> cv;
    op max_pool(cv, kernel_shape=[2, 2], strides=[2, 2]) >> mp;
    return;
  }
}
"""


def ref(name: str, *arrays: np.ndarray, **params: object) -> np.ndarray:
    """The registered NumPy reference of `name`."""
    op = registry.get(name)
    assert op is not None
    return op.reference(*arrays, **params)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(11)
    path = tmp_path_factory.mktemp("nn_dsl") / "m.oinf"
    tensors = {
        "table": rng.standard_normal((10, 8)).astype(np.float32),
        "w": rng.standard_normal((4, 2, 3, 3)).astype(np.float32),
    }
    write_oinf(path, sizevars={"B": 4, "D": 8, "V": 10}, metadata={}, tensors=tensors)
    return path


def test_graph_of_nn_ops_matches_references(model: Path) -> None:
    rng = np.random.default_rng(12)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    ids = np.array([1, -1, 20], np.int32)
    with ModelLoader.open(model) as m:
        ex = Simulator(m, GRAPH).make_executor()
        ex.insert(x=x, ids=ids)
        ex.run_step()
        got = {
            name: np.asarray(ex.fetch(name)) for name in ("e", "s", "p", "c", "a", "o", "z", "mp")
        }
        table, w = np.asarray(m.tensor("table")), np.asarray(m.tensor("w"))
    t = ref("reshape", x, shape=(0, 2, -1))
    z = ref("softmax", x)
    z = ref("gelu", ref("layer_norm", np.where(x > z, x, z), epsilon=0.001), approximate="tanh")
    s = ref("slice", x, starts=(-1,), ends=(-10,), axes=(1,), steps=(-2,))
    img = ref("conv2d", x.reshape(1, 2, 4, 4), w, pads=(1, 1, 1, 1))
    want = {
        "e": ref("embedding", table, ids),
        "s": s,
        "p": ref("pad", x, pads=(0, 2, 0, 2), mode="reflect"),
        "c": ref("concat", x, x, s, axis=-1),
        "a": ref("rope", t, np.int32(5), theta=1e5, interleaved=True),
        "o": ref("attention", t, t, t, causal=True, scale=0.25),
        "z": z,
        "mp": ref("max_pool", img, kernel_shape=(2, 2), strides=(2, 2)),
    }
    for name, expected in want.items():
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5, err_msg=name)


def test_bad_nn_op_in_text_names_the_node(model: Path) -> None:
    text = GRAPH.replace(
        'op pad(x, pads=[0, 2, 0, 2], mode="reflect") >> p;',
        'op pad(x, pads=[0, 2], mode="reflect") >> p;',
    )
    with (
        ModelLoader.open(model) as m,
        pytest.raises(GraphValidationError, match=r"op pad.*pads has 2 values; expected 4"),
    ):
        Simulator(m, text)
