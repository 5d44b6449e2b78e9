"""ONNX function ops imported as their function body, and Scan unrolled."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from openinfer_jax.onnx import OnnxImportError, import_model
from tests.onnx.helpers import FLOAT, INT64, make_model, reference, run_imported, tensor_info


def _loss_model(reduction: str) -> object:
    node = helper.make_node(
        "SoftmaxCrossEntropyLoss",
        ["scores", "labels", "weights"],
        ["loss", "log_prob"],
        reduction=reduction,
        ignore_index=1,
    )
    out_shape = [] if reduction != "none" else [3, 2]
    return make_model(
        [node],
        [tensor_info("scores", FLOAT, [3, 4, 2]), tensor_info("labels", INT64, [3, 2])],
        [tensor_info("loss", FLOAT, out_shape), tensor_info("log_prob", FLOAT, [3, 4, 2])],
        initializers={"weights": np.array([0.5, 1.0, 2.0, 1.5], dtype=np.float32)},
        opset=13,
    )


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_loss_is_imported_as_its_function_body(tmp_path: Path, reduction: str) -> None:
    model = _loss_model(reduction)
    result = import_model(model)
    # SoftmaxCrossEntropyLoss's body calls NegativeLogLikelihoodLoss: both are inlined
    assert result.report.expanded == {
        "SoftmaxCrossEntropyLoss": 1,
        "NegativeLogLikelihoodLoss": 1,
    }
    assert "function bodies inlined: " in result.report.format()
    rng = np.random.default_rng(0)
    feed = {
        "scores": rng.standard_normal((3, 4, 2)).astype(np.float32),
        "labels": np.array([[0, 1], [3, 2], [1, 1]], dtype=np.int64),  # 1 is ignored
    }
    got = run_imported(result, tmp_path, [feed])[0]
    want = reference(model, feed)  # type: ignore[arg-type]
    np.testing.assert_allclose(got["loss"], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["log_prob"], want[1], rtol=1e-5, atol=1e-6)


def _scan_model(opset: int = 17) -> object:
    """Running sum over axis 1, scanned backwards; scan output = state * x per step."""
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
            helper.make_node("Mul", ["s_out", "x_t"], ["y_t"]),
        ],
        "body",
        [tensor_info("s_in", FLOAT, [2]), tensor_info("x_t", FLOAT, [2])],
        [tensor_info("s_out", FLOAT, [2]), tensor_info("y_t", FLOAT, [2])],
    )
    node = helper.make_node(
        "Scan",
        ["s0", "x"],
        ["s_final", "ys"],
        body=body,
        num_scan_inputs=1,
        scan_input_axes=[1],
        scan_input_directions=[1],
        scan_output_axes=[1],
    )
    return make_model(
        [node],
        [tensor_info("s0", FLOAT, [2]), tensor_info("x", FLOAT, [2, 5])],
        [tensor_info("s_final", FLOAT, [2]), tensor_info("ys", FLOAT, [2, 5])],
        opset=opset,
    )


def test_scan_is_unrolled(tmp_path: Path) -> None:
    model = _scan_model()
    result = import_model(model)
    assert result.report.ops_used["add"] == 5  # one body per step
    feed = {
        "s0": np.array([1.0, -2.0], dtype=np.float32),
        "x": np.arange(10, dtype=np.float32).reshape(2, 5) / 4,
    }
    got = run_imported(result, tmp_path, [feed])[0]
    # ONNX's reference has no reverse scan: the same loop in NumPy
    state, ys = feed["s0"].copy(), []
    for t in reversed(range(5)):
        state = state + feed["x"][:, t]
        ys.append(state * feed["x"][:, t])
    np.testing.assert_allclose(got["s_final"], state, rtol=1e-6)
    np.testing.assert_allclose(got["ys"], np.stack(ys, axis=1), rtol=1e-6)


def test_scan_of_opset_8_with_short_sequences_is_refused_naming_the_node() -> None:
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"])],
        "body",
        [tensor_info("s_in", FLOAT, [2]), tensor_info("x_t", FLOAT, [2])],
        [tensor_info("s_out", FLOAT, [2])],
    )
    node = helper.make_node(
        "Scan", ["lens", "s0", "x"], ["s_final"], name="scan8", body=body, num_scan_inputs=1
    )
    model = make_model(
        [node],
        [tensor_info("s0", FLOAT, [1, 2]), tensor_info("x", FLOAT, [1, 3, 2])],
        [tensor_info("s_final", FLOAT, [1, 2])],
        initializers={"lens": np.array([2], np.int32)},
        opset=8,
    )
    with pytest.raises(OnnxImportError, match=r"scan8.*sequence_lens shorter"):
        import_model(model)


@pytest.mark.parametrize(
    ("mode", "padding", "align"),
    [("linear", "reflection", 0), ("cubic", "border", 1), ("nearest", "zeros", 0)],
)
def test_grid_sample_far_outside_the_image(
    tmp_path: Path, mode: str, padding: str, align: int
) -> None:
    node = helper.make_node(
        "GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding, align_corners=align
    )
    model = make_model(
        [node],
        [tensor_info("x", FLOAT, [2, 3, 4, 5]), tensor_info("grid", FLOAT, [2, 3, 6, 2])],
        [tensor_info("y", FLOAT, [2, 3, 3, 6])],
        opset=22,
    )
    rng = np.random.default_rng(1)
    feed = {
        "x": rng.standard_normal((2, 3, 4, 5)).astype(np.float32),
        "grid": rng.uniform(-3.2, 3.2, (2, 3, 6, 2)).astype(np.float32),  # several bounces
    }
    got = run_imported(import_model(model), tmp_path, [feed])[0]
    want = reference(model, feed)  # type: ignore[arg-type]
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("parts", "n", "inverse", "onesided"),
    [(1, 6, 0, 1), (2, 12, 1, 0), (2, 9, 1, 1), (2, 5, 0, 0)],
)
def test_dft_with_a_length(tmp_path: Path, parts: int, n: int, inverse: int, onesided: int) -> None:
    """dft_length shorter or longer than the signal (truncated / zero-padded), axis 1."""
    node = helper.make_node("DFT", ["x", "n", "axis"], ["y"], inverse=inverse, onesided=onesided)
    model = make_model(
        [node],
        [tensor_info("x", FLOAT, [2, 8, 3, parts])],
        [tensor_info("y", FLOAT, [2, None, 3, None])],  # type: ignore[list-item]
        initializers={"n": np.array(n, np.int64), "axis": np.array(1, np.int64)},
        opset=20,
    )
    feed = {"x": np.random.default_rng(2).standard_normal((2, 8, 3, parts)).astype(np.float32)}
    got = run_imported(import_model(model), tmp_path, [feed])[0]
    want = reference(model, feed)  # type: ignore[arg-type]
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-4, atol=1e-5)


def _lstm_model(peepholes: bool = False, **attrs: object) -> object:
    hidden, inp = 3, 2
    rng = np.random.default_rng(3)
    extra = {"P": rng.standard_normal((1, 3 * hidden)).astype(np.float32)} if peepholes else {}
    node = helper.make_node(
        "LSTM",
        ["x", "W", "R", "B", "", "", "", "P"][: 8 if peepholes else 4],
        ["y", "h"],
        hidden_size=hidden,
        **attrs,
    )
    return make_model(
        [node],
        [tensor_info("x", FLOAT, [4, 1, inp])],
        [
            tensor_info("y", FLOAT, [4, 1, 1, hidden]),
            tensor_info("h", FLOAT, [1, 1, hidden]),  # (the reference computes no c output)
        ],
        initializers={
            "W": rng.standard_normal((1, 4 * hidden, inp)).astype(np.float32),
            "R": rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32),
            "B": rng.standard_normal((1, 8 * hidden)).astype(np.float32),
            **extra,
        },
    )


@pytest.mark.parametrize(
    ("attrs", "cells"), [({}, 4), ({"direction": "reverse"}, 4), ({"peepholes": True}, 0)]
)
def test_lstm_steps_are_registry_cells_when_they_fit(
    tmp_path: Path, attrs: dict[str, object], cells: int
) -> None:
    model = _lstm_model(**attrs)
    result = import_model(model)
    assert result.report.ops_used["lstm_cell"] == cells  # peepholes: written out
    feed = {"x": np.random.default_rng(4).standard_normal((4, 1, 2)).astype(np.float32)}
    got = run_imported(result, tmp_path, [feed])[0]
    if attrs.get("direction") == "reverse":  # ONNX's reference runs forward only: flip time
        y, h = reference(_lstm_model(), {"x": feed["x"][::-1].copy()})  # type: ignore[arg-type]
        want = [y[::-1], h]
    else:
        want = reference(model, feed)  # type: ignore[arg-type]
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["h"], want[1], rtol=1e-5, atol=1e-6)


def _loop_model(data_dependent: bool) -> object:
    """y <- y * 2 + i, three times (M = 3); with data_dependent the condition reads y."""
    nodes = [
        helper.make_node("Cast", ["i"], ["i_f"], to=FLOAT),
        helper.make_node("Mul", ["y_in", "two"], ["y2"]),
        helper.make_node("Add", ["y2", "i_f"], ["y_out"]),
    ]
    if data_dependent:
        nodes.append(helper.make_node("ReduceMax", ["y_out"], ["top"], keepdims=0))
        nodes.append(helper.make_node("Less", ["top", "ten"], ["c_out"]))
    else:
        nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
    body = helper.make_graph(
        nodes,
        "body",
        [
            tensor_info("i", INT64, []),
            helper.make_tensor_value_info("c_in", 9, []),
            tensor_info("y_in", FLOAT, [2]),
        ],
        [helper.make_tensor_value_info("c_out", 9, []), tensor_info("y_out", FLOAT, [2])],
    )
    loop = helper.make_node("Loop", ["M", "", "y0"], ["y"], name="loop", body=body)
    return make_model(
        [loop],
        [tensor_info("y0", FLOAT, [2])],
        [tensor_info("y", FLOAT, [2])],
        initializers={
            "M": np.array(3, np.int64),
            "two": np.array(2.0, np.float32),
            "ten": np.array(10.0, np.float32),
        },
    )


def test_counted_loop_is_unrolled(tmp_path: Path) -> None:
    model = _loop_model(data_dependent=False)
    result = import_model(model, loops=False)  # (else the 3 copies roll back into a DSL loop)
    assert result.report.ops_used["mul"] == 3
    feed = {"y0": np.array([1.0, -0.5], np.float32)}
    got = run_imported(result, tmp_path, [feed])[0]
    want = feed["y0"].copy()
    for i in range(3):  # (ONNX's reference skips a Loop whose condition input is absent)
        want = want * 2 + i
    np.testing.assert_allclose(got["y"], want, rtol=1e-6)


def test_loop_with_a_run_time_condition_is_refused() -> None:
    with pytest.raises(OnnxImportError, match=r"loop.*condition is computed at run time"):
        import_model(_loop_model(data_dependent=True))
