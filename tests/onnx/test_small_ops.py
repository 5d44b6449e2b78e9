"""Small converters: Det by cofactors, reductions over an empty axis, Dropout with ratio 0 in
training mode, and the ops refused because their output length depends on the data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from openinfer_jax.onnx import OnnxImportError, import_model
from tests.onnx.helpers import FLOAT, INT64, make_model, run_imported, tensor_info


@pytest.mark.parametrize("shape", [(2, 3, 3), (1, 1), (4, 2, 2)])
def test_det_matches_numpy(shape: tuple[int, ...], tmp_path: Path) -> None:
    node = helper.make_node("Det", ["x"], ["y"])
    model = make_model(
        [node], [tensor_info("x", FLOAT, shape)], [tensor_info("y", FLOAT, shape[:-2])]
    )
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    got = run_imported(import_model(model), tmp_path, [{"x": x}])[0]["y"]
    np.testing.assert_allclose(got, np.linalg.det(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_det_of_a_large_matrix_is_refused_with_the_reason() -> None:
    node = helper.make_node("Det", ["x"], ["y"])
    model = make_model([node], [tensor_info("x", FLOAT, (4, 4))], [tensor_info("y", FLOAT, ())])
    with pytest.raises(OnnxImportError, match=r"Det of shape \(4, 4\) is not supported"):
        import_model(model)


@pytest.mark.parametrize(("op", "value"), [("ReduceMax", -np.inf), ("ReduceMin", np.inf)])
def test_reducing_an_empty_axis_gives_the_identity(op: str, value: float, tmp_path: Path) -> None:
    node = helper.make_node(op, ["x"], ["y"], axes=[1], keepdims=0)
    model = make_model(
        [node], [tensor_info("x", FLOAT, (2, 0, 3))], [tensor_info("y", FLOAT, (2, 3))]
    )
    got = run_imported(import_model(model), tmp_path, [{"x": np.zeros((2, 0, 3), np.float32)}])
    assert np.array_equal(got[0]["y"], np.full((2, 3), value, np.float32))


def test_training_dropout_with_ratio_zero_passes_through() -> None:
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y"])
    ratio, training = np.array(0.0, np.float32), np.array(True)
    model = make_model([node], [tensor_info("x", FLOAT, (3,))], [tensor_info("y", FLOAT, (3,))],
                       initializers={"r": ratio, "t": training}, opset=13)  # fmt: skip
    assert import_model(model).report.dropped == {"Dropout": 1}
    model = make_model([node], [tensor_info("x", FLOAT, (3,))], [tensor_info("y", FLOAT, (3,))],
                       initializers={"r": np.array(0.5, np.float32), "t": training}, opset=13)  # fmt: skip
    with pytest.raises(OnnxImportError, match="training-mode Dropout"):
        import_model(model)


@pytest.mark.parametrize("op", ["Unique", "NonZero"])
def test_data_dependent_lengths_are_refused_with_the_reason(op: str) -> None:
    node = helper.make_node(op, ["x"], ["y"])
    model = make_model([node], [tensor_info("x", FLOAT, (4,))], [tensor_info("y", INT64, ["n"])])
    with pytest.raises(OnnxImportError, match="depends on the data, and program shapes are static"):
        import_model(model)


def test_reverse_sequence_with_lengths_at_run_time(tmp_path: Path) -> None:
    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=1, time_axis=0)
    model = make_model(
        [node],
        [tensor_info("x", FLOAT, (4, 3, 2)), tensor_info("lens", INT64, (3,))],
        [tensor_info("y", FLOAT, (4, 3, 2))],
    )
    x = np.arange(24, dtype=np.float32).reshape(4, 3, 2)
    lens = np.array([4, 1, 2], np.int64)
    want = x.copy()
    for b, n in enumerate(lens):
        want[:n, b] = x[:n, b][::-1]
    got = run_imported(import_model(model), tmp_path, [{"x": x, "lens": lens}])
    assert np.array_equal(got[0]["y"], want)
