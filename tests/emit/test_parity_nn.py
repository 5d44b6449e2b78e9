"""Model-building ops in C vs the simulator: embedding and gather (negative and out-of-range
indices clamp), concat, attention with a bool mask, with a float mask plus causal and over an
f16 cache (grouped heads),
batch_norm, global_average_pool, pad (constant, reflect, wrap), rope (both pair layouts),
conv1d/conv2d (groups, strides, pads, dilations, bias), max_pool (float and int), avg_pool, linear (with and without bias)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.oinf import write_oinf
from tests.emit.harness import CC, parity

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")

GRAPH = """
graph {
  dynamic {
    ids: i32[2, 3]; gi: i64[4]; ui: u8[3];
    q: f32[2, 2, 3, 4]; k: f32[2, 2, 5, 4]; v: f32[2, 2, 5, 4];
    kh: f16[2, 1, 5, 4]; vh: f16[2, 1, 5, 4];
    mb: bool[2, 1, 1, 5]; b3: f32[2, 3, 3]; mf: f32[3, 5]; a: f32[2, 3]; b: f32[2, 5];
    img: f32[2, 3, 4, 4]; bs: f32[3]; bb: f32[3]; bm: f32[3]; bv: f32[3];
    pos: i32[5]; p2: i64[5];
    lw: f32[4, 3]; lbias: f32[4];
    sig: f32[2, 4, 9]; cw: f32[6, 2, 3]; cb: f32[6]; iw: f32[3, 3, 2, 2]; im: i32[1, 2, 5, 5];
  }
  constant { table: f32[V, D]; }
  volatile {
    e: f32[2, 3, D]; g: f32[4, D]; g1: f32[2, 4]; g2: f32[3, D];
    o1: f32[2, 2, 3, 4]; o2: f32[2, 2, 3, 4]; o3: f32[2, 2, 3, 4]; c: f32[2, 8];
    bn: f32[2, 3, 4, 4]; gp: f32[2, 3, 1, 1]; pc: f32[2, 6]; pr: f32[2, 9]; pe: f32[3, 4];
    r1: f32[2, 2, 5, 4]; r2: f32[2, 2, 5, 4];
    lo: f32[2, 3, 4]; lb: f32[2, 3, 4];
    c1: f32[2, 6, 5]; c2: f32[2, 3, 2, 2]; mp: f32[2, 3, 2, 2]; ap: f32[2, 3, 3, 3]; ip: i32[1, 2, 3, 3];
  }
  block entry {
    op embedding(table, ids) >> e;
    op gather(table, gi, axis=0) >> g;
    op gather(a, gi, axis=1) >> g1;
    op gather(table, ui) >> g2;
    op attention(q, k, v, mb) >> o1;
    op attention(q, k, v, mf, causal=true) >> o2;
    op attention(q, kh, vh, causal=true) >> o3;
    op concat(a, b, axis=1) >> c;
    op batch_norm(img, bs, bb, bm, bv, epsilon=0.001) >> bn;
    op global_average_pool(img) >> gp;
    op pad(a, pads=[1, 2], axes=[1], value=-1.5) >> pc;
    op pad(a, pads=[3, 3], axes=[1], mode="reflect") >> pr;
    op pad(a, pads=[1, 1, 0, 0], mode="wrap") >> pe;
    op rope(k, pos, theta=100.0) >> r1;
    op rope(k, p2, interleaved=true, rotary_dim=2) >> r2;
    op linear(b3, lw) >> lo;
    op linear(b3, lw, lbias) >> lb;
    op conv1d(sig, cw, cb, strides=[2], pads=[1, 1], groups=2) >> c1;
    op conv2d(img, iw, strides=[2, 1], dilations=[1, 2]) >> c2;
    op max_pool(img, kernel_shape=[2, 2], strides=[2, 2]) >> mp;
    op avg_pool(img, kernel_shape=[3, 3], pads=[1, 1, 0, 0], strides=[1, 1]) >> ap;
    op max_pool(im, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]) >> ip;
    return;
  }
}
"""


def test_nn_ops_match_simulator(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    model = tmp_path / "m.oinf"
    write_oinf(
        model,
        sizevars={"V": 10, "D": 8},
        metadata={},
        tensors={"table": rng.standard_normal((10, 8)).astype(np.float32)},
    )

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    steps = [
        {
            "ids": rng.integers(-12, 12, (2, 3)).astype(np.int32),
            "gi": rng.integers(-5, 5, 4).astype(np.int64),
            "ui": rng.integers(0, 255, 3).astype(np.uint8),
            "q": f32(2, 2, 3, 4),
            "k": f32(2, 2, 5, 4),
            "v": f32(2, 2, 5, 4),
            "kh": f32(2, 1, 5, 4).astype(np.float16),
            "vh": f32(2, 1, 5, 4).astype(np.float16),
            "mb": rng.integers(0, 2, (2, 1, 1, 5)).astype(bool),
            "mf": f32(3, 5),
            "a": f32(2, 3),
            "b": f32(2, 5),
            "img": f32(2, 3, 4, 4),
            "bs": f32(3),
            "bb": f32(3),
            "bm": f32(3),
            "bv": np.abs(f32(3)),
            "pos": rng.integers(0, 50, 5).astype(np.int32),
            "p2": rng.integers(0, 50, 5).astype(np.int64),
            "sig": f32(2, 4, 9),
            "b3": f32(2, 3, 3),
            "lw": f32(4, 3),
            "lbias": f32(4),
            "cw": f32(6, 2, 3),
            "cb": f32(6),
            "iw": f32(3, 3, 2, 2),
            "im": rng.integers(-100, 100, (1, 2, 5, 5)).astype(np.int32),
        }
        for _ in range(2)
    ]
    outputs = ["e", "g", "g1", "g2", "o1", "o2", "o3", "c", "bn", "gp", "pc", "pr", "pe", "r1", "r2"]
    outputs += ["c1", "c2", "mp", "ap", "ip", "lo", "lb"]
    result = parity(tmp_path, model, GRAPH, steps, outputs=outputs)
    assert result["compared"] == 2 * len(outputs)


NORM_GRAPH = """
graph {
  dynamic { x: f32[4, 3, 8]; s: f32[8]; bias: f32[1, 8]; full: f32[3, 8]; }
  volatile { y1: f32[4, 3, 8]; y2: f32[4, 3, 8]; y3: f32[4, 3, 8]; }
  block entry {
    op layer_norm(x, s, bias, axis=1) >> y1;
    op rms_norm(x, s, axis=1) >> y2;
    op layer_norm(x, full, axis=1) >> y3;
    return;
  }
}
"""


def test_norm_params_that_broadcast_over_the_row_repeat(tmp_path: Path) -> None:
    """Regression: a scale of shape [8] over a [3, 8] row was read past its end."""
    rng = np.random.default_rng(1)
    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={})

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    steps = [{"x": f32(4, 3, 8), "s": f32(8), "bias": f32(1, 8), "full": f32(3, 8)}]
    result = parity(tmp_path, model, NORM_GRAPH, steps, outputs=["y1", "y2", "y3"])
    assert result["compared"] == 3


def test_norm_params_that_broadcast_over_inner_dims(tmp_path: Path) -> None:
    """A scale and a bias [3, 1] over a [3, 8] block repeat along the inner dim (once refused
    by the C target)."""
    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={})
    graph = """
graph {
  dynamic { x: f32[4, 3, 8]; s: f32[3, 1]; b: f32[3, 1]; }
  volatile { y: f32[4, 3, 8]; z: f32[4, 3, 8]; }
  block entry {
    op layer_norm(x, s, b, axis=1) >> y;
    op rms_norm(x, s, axis=1) >> z;
    return;
  }
}
"""
    rng = np.random.default_rng(2)
    steps = [
        {"x": rng.standard_normal((4, 3, 8)).astype(np.float32),
         "s": rng.standard_normal((3, 1)).astype(np.float32),
         "b": rng.standard_normal((3, 1)).astype(np.float32)}
        for _ in range(2)
    ]  # fmt: skip
    result = parity(tmp_path, model, graph, steps, outputs=["y", "z"])
    assert result["compared"] == 4
