"""Op params given as variables (`value=alpha`) in C vs the simulator, over several steps.

The C target reads such a param each time the op runs (docs/synthesis.md): dynamic scalars
that change per step, a persistent counter that `cache.increment` moves, a loop index,
scalar constants (from metadata and from a model tensor). Every op with a scalar or float param
is covered: fill, clamp and relu bounds (integer bounds rounded inward and limited to the
dtype's range), relu's slope, div/recip masks, pad's value, norm epsilons, attention scale,
rope theta. A value the op cannot take fails the step in both.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.core.errors import SimulationError
from openinfer_jax.emit import Synthesizer
from openinfer_jax.oinf import ModelLoader, write_oinf
from openinfer_jax.sim import Simulator
from tests.emit.harness import CC, build, parity, run_driver

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")

GRAPH = """
graph {
  dynamic {
    x: f32[2, 4]; xi: i32[2, 4]; xu: u8[2, 4]; xb: bool[3]; x16: f16[4];
    alpha: f32; k: i32; lo: f32; hi: i64; on: bool; d: f64; sl: f64;
    q: f32[1, 2, 3, 4]; kk: f32[1, 2, 5, 4]; vv: f32[1, 2, 5, 4]; pos: i32[5];
  }
  constant { shift: f32; scale_c: f32 @ref("scale_value"); }
  volatile {
    y: f32[2, 4]; yi: i32[2, 4]; yb: bool[3]; ycf: f32[2, 4]; yci: i32[2, 4]; ycu: u8[2, 4];
    yr: f32[2, 4]; yri: i32[2, 4]; yd: f32[2, 4]; ydi: i32[2, 4]; yp: f32[2, 6]; ypi: i32[2, 6];
    yl: f32[2, 4]; yn: f32[2, 4]; ya: f32[1, 2, 3, 4]; yro: f32[1, 2, 5, 4]; yh: f16[4];
    yrc: f16[4]; yl16: f16[4]; ym: f32[2, 4]; yk: f32[2, 4];
  }
  persistent { n: i32 @init(1); }
  block entry {
    assign acc: i32[2, 4];
    assign t: i32[2, 4];
    op fill(x, value=alpha) >> y;
    op fill(xi, value=k) >> yi;
    op fill(xb, value=on) >> yb;
    op clamp(x, min=lo, max=alpha) >> ycf;
    op clamp(xi, min=lo, max=hi) >> yci;
    op clamp(xu, min=k, max=d) >> ycu;
    op relu(x, alpha=alpha, clamp_max=hi) >> yr;
    op relu(xi, negative_slope=sl, clamp_min=k) >> yri;
    op div(x, x, div_by_zero_mask=alpha) >> yd;
    op div(xi, xi, div_by_zero_mask=k) >> ydi;
    op pad(x, pads=[1, 1], axes=[1], value=d) >> yp;
    op pad(xi, pads=[0, 2], axes=[1], value=n) >> ypi;
    op layer_norm(x, epsilon=d) >> yl;
    op rms_norm(x, epsilon=alpha) >> yn;
    op attention(q, kk, vv, scale=alpha) >> ya;
    op rope(kk, pos, theta=d) >> yro;
    op fill(x16, value=alpha) >> yh;
    op recip(x16, div_by_zero_mask=hi) >> yrc;
    op fill(x16, value=shift) >> yl16;
    op mul(x, shift) >> ym;
    op fill(x, value=scale_c) >> yk;
    op fill(xi, value=n) >> acc;
    loop add_up (i in 0..3) {
      op fill(xi, value=i) >> t;
      op add(acc, t) >> acc;
    }
    cache.increment n;
    return;
  }
}
"""

OUTPUTS = ["y", "yi", "yb", "ycf", "yci", "ycu", "yr", "yri", "yd", "ydi", "yp", "ypi", "yl",
           "yn", "ya", "yro", "yh", "yrc", "yl16", "ym", "yk", "acc"]  # fmt: skip


def _model(path: Path) -> Path:
    write_oinf(path, sizevars={}, metadata={"shift": -1.5},
               tensors={"scale_value": np.float32(0.25)})  # fmt: skip
    return path


def _step(rng: np.random.Generator, s: int) -> dict[str, np.ndarray]:
    x = rng.standard_normal((2, 4)).astype(np.float32) * 3
    x[0, 0] = 0.0  # a zero divisor: the mask
    xi = rng.integers(-200, 200, (2, 4)).astype(np.int32)
    xi[1, 1] = 0
    x16 = rng.standard_normal(4).astype(np.float16)
    x16[2] = 0
    return {
        "x": x,
        "xi": xi,
        "xu": rng.integers(0, 255, (2, 4)).astype(np.uint8),
        "xb": rng.integers(0, 2, 3).astype(bool),
        "x16": x16,
        # Per step: a fractional bound (rounded inward for ints), bounds beyond the ranges.
        "alpha": np.float32([0.5, 2.25, -0.75][s]),
        "k": np.int32([3, -40, 250][s]),
        "lo": np.float32([-1.5, -1e10, 2.5][s]),
        "hi": np.int64([100, 1 << 40, -3][s]),
        "on": np.bool_([True, False, True][s]),
        "d": np.float64([1e-5, 0.5, 1000.0][s]),
        "sl": np.float64([0.25, 0.0, 1.0][s]),
        "q": rng.standard_normal((1, 2, 3, 4)).astype(np.float32),
        "kk": rng.standard_normal((1, 2, 5, 4)).astype(np.float32),
        "vv": rng.standard_normal((1, 2, 5, 4)).astype(np.float32),
        "pos": rng.integers(0, 30, 5).astype(np.int32),
    }


def test_params_given_as_variables_match_simulator(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    model = _model(tmp_path / "m.oinf")
    steps = [_step(rng, s) for s in range(3)]
    result = parity(tmp_path, model, GRAPH, steps, outputs=OUTPUTS)
    assert result["compared"] == 3 * len(OUTPUTS)
    source = result["plan"].files["prog.c"]
    # One kernel serves both fills of f32 from different variables; literals stay baked.
    assert source.count("static int k") == len(set(_kernel_names(source)))
    assert "oi_param_of(&V_alpha" in source and "oi_param_i64(L_i_" in source


def _kernel_names(source: str) -> list[str]:
    return [line.split("(")[0].split()[-1] for line in source.splitlines()
            if line.startswith("static int k")]  # fmt: skip


BAD = """
graph {
  dynamic { xi: i32[3]; v: f32; }
  volatile { y: i32[3]; }
  block entry { op fill(xi, value=v) >> y; return; }
}
"""


def test_a_value_the_op_cannot_take_fails_the_step_in_both(tmp_path: Path) -> None:
    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={})
    xi = np.arange(3, dtype=np.int32)
    steps = [{"xi": xi, "v": np.float32(4.0)}, {"xi": xi, "v": np.float32(2.5)}]
    plan = Synthesizer("c").synthesize(model, BAD, name="prog")
    result = run_driver(build(plan, tmp_path / "c"), model, steps, tmp_path)
    assert result.returncode == 1
    assert "step 1: an invalid argument" in result.stderr or "step 1:" in result.stderr
    assert "param value is 2.5; it must be an integer in [-2147483648, 2147483647]" in result.stderr
    assert (tmp_path / "out" / "y.0.bin").exists()
    with ModelLoader.open(model) as loader:
        ex = Simulator(loader, BAD).make_executor()
        ex.insert(**steps[0])
        ex.step()
        np.testing.assert_array_equal(np.asarray(ex.fetch("y")), np.full(3, 4, np.int32))
        ex.insert(**steps[1])
        with pytest.raises(SimulationError, match=r"value=2\.5"):
            ex.step()
