"""The composite ops of openinfer_jax/ops/layers.py on every backend (JAX, NumPy reference,
simulator on XLA CPU and NumPy, Vulkan on lavapipe, emitted C) against NumPy formulas
written here from the ONNX definitions; and their errors, reported on the user's node."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import GraphValidationError
from openinfer_jax.ops import registry
from openinfer_jax.sim import Simulator
from tests.ops.op_backends import BACKENDS, assert_all_close, run_everywhere

F = np.float64
NO_VULKAN = tuple(b for b in BACKENDS if b != "vulkan")


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def _tol(dtype: DType) -> tuple[float, float]:
    return (1e-12, 1e-12) if dtype is DType.F64 else (2e-5, 2e-5)


def _backends(dtype: DType) -> tuple[str, ...]:
    # GLSL has no double exp/tanh: f64 sigmoid/tanh nodes run on the CPU (tested elsewhere).
    return NO_VULKAN if dtype is DType.F64 else BACKENDS


# ---- squeeze / unsqueeze ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("op", "shape", "params", "want"),
    [
        ("squeeze", (1, 3, 1, 2), {}, (3, 2)),
        ("squeeze", (1, 3, 1, 2), {"axes": (-2,)}, (1, 3, 2)),
        ("unsqueeze", (3, 2), {"axes": (0, 3)}, (1, 3, 2, 1)),
        ("unsqueeze", (3, 2), {"axes": (-1,)}, (3, 2, 1)),
    ],
)
@pytest.mark.parametrize("dtype", [DType.F32, DType.I4, DType.BOOL])
def test_squeeze_unsqueeze(
    op: str, shape: tuple[int, ...], params: dict[str, Any], want: tuple[int, ...], dtype: DType,
    tmp_path: Path,
) -> None:  # fmt: skip
    rng = np.random.default_rng(0)
    if dtype is DType.BOOL:
        x = rng.integers(0, 2, shape).astype(bool)
    elif dtype is DType.I4:
        x = rng.integers(-8, 8, shape).astype(np.int8)
    else:
        x = rng.normal(size=shape).astype(np.float32)
    # The emitted Vulkan target keeps packed types on the host; the simulator's backend has them.
    for name, got in run_everywhere(op, [x], [dtype], params, tmp_path).items():
        assert got.shape == want, name
        np.testing.assert_array_equal(got.reshape(-1), x.reshape(-1), err_msg=name)


def test_squeeze_errors_name_the_dim() -> None:
    opdef = registry.get("squeeze")
    assert opdef is not None
    with pytest.raises(registry.OpCheckError, match=r"dim 1 of x .* has size 3, not 1"):
        opdef.infer([DType.F32], [(1, 3)], {"axes": (1,)})
    with pytest.raises(registry.OpCheckError, match="axis 2 is out of range for rank 2"):
        opdef.infer([DType.F32], [(1, 3)], {"axes": (2,)})


# ---- instance_norm -----------------------------------------------------------------------------------
def _instance_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    axes = tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    shape = (-1,) + (1,) * (x.ndim - 2)
    return (x - mean) / np.sqrt(var + eps) * scale.reshape(shape) + bias.reshape(shape)


@pytest.mark.parametrize("dtype", [DType.F32, DType.F64])
def test_instance_norm(dtype: DType, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(2.0, 3.0, (2, 3, 4, 5)).astype(dtype.numpy)
    scale, bias = (rng.normal(size=3).astype(dtype.numpy) for _ in range(2))
    want = _instance_norm(x.astype(F), scale.astype(F), bias.astype(F), 1e-3)
    results = run_everywhere("instance_norm", [x, scale, bias], [dtype] * 3, {"epsilon": 1e-3},
                             tmp_path)  # fmt: skip
    assert_all_close(results, want, dtype, *_tol(dtype))


# ---- group_norm ---------------------------------------------------------------------------------------
def _group_norm(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, groups: int,
                eps: float) -> np.ndarray:  # fmt: skip
    """ONNX GroupNormalization-21: statistics per (n, group) over its channels and spatial dims."""
    g = x.reshape(x.shape[0], groups, -1)
    mean = g.mean(axis=2, keepdims=True)
    var = ((g - mean) ** 2).mean(axis=2, keepdims=True)
    y = ((g - mean) / np.sqrt(var + eps)).reshape(x.shape)
    shape = (-1,) + (1,) * (x.ndim - 2)
    return y * scale.reshape(shape) + bias.reshape(shape)


@pytest.mark.parametrize("dtype", [DType.F32, DType.F64])
@pytest.mark.parametrize("groups", [1, 2, 6])
def test_group_norm(dtype: DType, groups: int, tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(-1.0, 2.0, (2, 6, 3, 4)).astype(dtype.numpy)
    scale, bias = (rng.normal(size=6).astype(dtype.numpy) for _ in range(2))
    params = {"num_groups": groups, "epsilon": 1e-4}
    want = _group_norm(x.astype(F), scale.astype(F), bias.astype(F), groups, 1e-4)
    results = run_everywhere("group_norm", [x, scale, bias], [dtype] * 3, params, tmp_path)
    assert_all_close(results, want, dtype, *_tol(dtype))


def test_group_norm_groups_must_divide_the_channels() -> None:
    text = """graph {
  dynamic { x: f32[1, 4, 2]; s: f32[4]; }
  volatile { y: f32[1, 4, 2]; }
  block entry {
    op group_norm(x, s, s, num_groups=3) >> y;
    return;
  }
}"""
    with pytest.raises(GraphValidationError, match=r"5:5.*num_groups=3 must divide the 4 channels"):
        Simulator(None, text)


# ---- lstm_cell / gru_cell ------------------------------------------------------------------------
def _lstm(x: np.ndarray, w: np.ndarray, r: np.ndarray, state: np.ndarray,
          b: np.ndarray | None) -> np.ndarray:  # fmt: skip
    """ONNX LSTM, one step, gates i, o, f, c."""
    hidden = r.shape[1]
    h, c = state[0], state[1]
    wb, rb = (b[: 4 * hidden], b[4 * hidden :]) if b is not None else (0.0, 0.0)
    g = x @ w.T + wb + h @ r.T + rb
    i, o, f, cell = (g[:, k * hidden : (k + 1) * hidden] for k in range(4))
    c2 = _sigmoid(f) * c + _sigmoid(i) * np.tanh(cell)
    h2 = _sigmoid(o) * np.tanh(c2)
    return np.stack([h2, c2])


def _gru(x: np.ndarray, w: np.ndarray, r: np.ndarray, h: np.ndarray, b: np.ndarray | None,
         linear_before_reset: bool) -> np.ndarray:  # fmt: skip
    """ONNX GRU, one step, gates z, r, h."""
    n = r.shape[1]
    wb, rb = (b[: 3 * n], b[3 * n :]) if b is not None else (np.zeros(3 * n), np.zeros(3 * n))
    wz, wr, wh = w[:n], w[n : 2 * n], w[2 * n :]
    rz, rr, rh = r[:n], r[n : 2 * n], r[2 * n :]
    z = _sigmoid(x @ wz.T + h @ rz.T + wb[:n] + rb[:n])
    reset = _sigmoid(x @ wr.T + h @ rr.T + wb[n : 2 * n] + rb[n : 2 * n])
    if linear_before_reset:
        cand = np.tanh(x @ wh.T + reset * (h @ rh.T + rb[2 * n :]) + wb[2 * n :])
    else:
        cand = np.tanh(x @ wh.T + (reset * h) @ rh.T + rb[2 * n :] + wb[2 * n :])
    return (1 - z) * cand + z * h


@pytest.mark.parametrize("dtype", [DType.F32, DType.F64])
@pytest.mark.parametrize("bias", [True, False])
def test_lstm_cell(dtype: DType, bias: bool, tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    batch, size, hidden = 3, 5, 4
    x = rng.normal(size=(batch, size))
    w, r = rng.normal(size=(4 * hidden, size)) / 2, rng.normal(size=(4 * hidden, hidden)) / 2
    state = rng.normal(size=(2, batch, hidden))
    b = rng.normal(size=8 * hidden) if bias else None
    arrays = [a.astype(dtype.numpy) for a in (x, w, r, state, *(() if b is None else (b,)))]
    want = _lstm(*(a.astype(F) for a in arrays[:4]), arrays[4].astype(F) if bias else None)
    results = run_everywhere("lstm_cell", arrays, [dtype] * len(arrays), {}, tmp_path,
                             _backends(dtype))  # fmt: skip
    assert_all_close(results, want, dtype, *_tol(dtype))


@pytest.mark.parametrize("dtype", [DType.F32, DType.F64])
@pytest.mark.parametrize("linear_before_reset", [False, True])
def test_gru_cell(dtype: DType, linear_before_reset: bool, tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    batch, size, hidden = 2, 3, 5
    arrays = [
        rng.normal(size=(batch, size)), rng.normal(size=(3 * hidden, size)) / 2,
        rng.normal(size=(3 * hidden, hidden)) / 2, rng.normal(size=(batch, hidden)),
        rng.normal(size=6 * hidden),
    ]  # fmt: skip
    arrays = [a.astype(dtype.numpy) for a in arrays]
    params = {"linear_before_reset": linear_before_reset}
    want = _gru(*(a.astype(F) for a in arrays), linear_before_reset)
    results = run_everywhere("gru_cell", arrays, [dtype] * 5, params, tmp_path, _backends(dtype))
    assert_all_close(results, want, dtype, *_tol(dtype))


def test_gru_cell_without_bias(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    arrays = [rng.normal(size=s).astype(np.float32) for s in ((2, 3), (6, 3), (6, 2), (2, 2))]
    want = _gru(*(a.astype(F) for a in arrays), None, False)
    results = run_everywhere("gru_cell", arrays, [DType.F32] * 4, {}, tmp_path)
    assert_all_close(results, want, DType.F32, 2e-5, 2e-5)


def test_lstm_state_steps_in_place_over_a_sequence() -> None:
    """`op lstm_cell(x, w, r, state, b) >> state`, three steps of a sequence in one graph."""
    rng = np.random.default_rng(5)
    xs = rng.normal(size=(3, 2, 4)).astype(np.float32)
    w, r = (rng.normal(size=s).astype(np.float32) / 2 for s in ((12, 4), (12, 3)))
    b = rng.normal(size=24).astype(np.float32)
    steps = "\n".join(
        f"op slice(xs, starts=[{t}], ends=[{t + 1}], axes=[0]) >> x; op squeeze(x, axes=[0]) >> x2; "
        "op lstm_cell(x2, w, r, state, b) >> state;"
        for t in range(3)
    )
    graph = f"""graph {{
  dynamic {{ xs: f32[3, 2, 4]; w: f32[12, 4]; r: f32[12, 3]; b: f32[24]; }}
  volatile {{ state: f32[2, 2, 3]; x: f32[1, 2, 4]; x2: f32[2, 4]; }}
  block entry {{
    {steps}
    return;
  }}
}}"""
    ex = Simulator(None, graph).make_executor()
    ex.insert(xs=xs, w=w, r=r, b=b)
    ex.step()
    want = np.zeros((2, 2, 3))
    for t in range(3):
        want = _lstm(xs[t].astype(F), w.astype(F), r.astype(F), want, b.astype(F))
    np.testing.assert_allclose(np.asarray(ex.fetch("state")), want, rtol=2e-5, atol=2e-5)


# ---- errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            "op lstm_cell(x, r, r, s) >> s;",
            r"w must be \[4\*H, input_size\] = \(8, 3\), got \(8, 2\)",
        ),
        ("op lstm_cell(x, w, w, s) >> s;", r"lstm_cell: r must be \[4\*H, H\], got shape \(8, 3\)"),
        ("op squeeze(x, axes=[1]) >> y;", r"squeeze: dim 1 of x \(1, 3\) has size 3, not 1"),
        ("op squeeze(x, axes=[0], mode=1) >> y;", r"squeeze: unknown param 'mode'"),
    ],
)
def test_a_bad_call_is_reported_on_the_users_node(call: str, message: str) -> None:
    text = f"""graph {{
  dynamic {{ x: f32[1, 3]; w: f32[8, 3]; r: f32[8, 2]; }}
  volatile {{ s: f32[2, 1, 2]; y: f32[3]; }}
  block entry {{
    {call}
    return;
  }}
}}"""
    with pytest.raises(GraphValidationError, match=message) as info:
        Simulator(None, text)
    assert "5:5" in str(info.value)  # the user's node, line 5 column 5
    assert "__" not in str(info.value)  # never a node of the expansion


def test_composite_math_rounds_like_its_parts() -> None:
    """f16 composites round after each step: within a few f16 ulps of the f64 formula."""
    opdef = registry.get("instance_norm")
    assert opdef is not None
    rng = np.random.default_rng(6)
    x = rng.normal(size=(1, 2, 8)).astype(np.float16)
    scale, bias = np.ones(2, np.float16), np.zeros(2, np.float16)
    got = np.asarray(opdef.lower_jax(x, scale, bias), F)
    want = _instance_norm(x.astype(F), scale.astype(F), bias.astype(F), 1e-5)
    np.testing.assert_allclose(got, want, rtol=4 * 2.0**-10, atol=4 * 2.0**-10)
    assert math.isfinite(float(got.sum()))
