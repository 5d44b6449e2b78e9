"""`openinfer_jax.onnx`: the program text, folding, naming, and results against ONNX's reference."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from openinfer_jax.onnx import import_model, import_onnx
from openinfer_jax.trace import parse
from tests.onnx.helpers import FLOAT, INT64, make_model, reference, run_imported, tensor_info

RNG = np.random.default_rng(7)


def mlp_with_shape_ops() -> tuple:
    """x[batch, 8] -> MatMul -> Relu -> Reshape(Shape-derived) -> Identity -> Dropout -> y."""
    w = RNG.standard_normal((8, 8)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "/layer.0/W"], ["/layer.0/MatMul_output_0"], name="mm"),
        helper.make_node("Relu", ["/layer.0/MatMul_output_0"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("Constant", [], ["zero"], value=helper.make_tensor("z", INT64, [1], [0])),
        helper.make_node("Gather", ["s", "zero"], ["b"], name="gather_batch"),
        helper.make_node("Constant", [], ["eight"], value=helper.make_tensor("e", INT64, [1], [8])),
        helper.make_node("Concat", ["b", "eight"], ["target"], axis=0, name="concat_shape"),
        helper.make_node("Reshape", ["r", "target"], ["rr"], name="reshape"),
        helper.make_node("Identity", ["rr"], ["i"], name="identity"),
        helper.make_node("Dropout", ["i"], ["y"], name="dropout"),
    ]
    model = make_model(
        nodes, [tensor_info("x", FLOAT, ["batch", 8])], [tensor_info("y", FLOAT, ["batch", 8])],
        {"/layer.0/W": w},
    )  # fmt: skip
    return model, w


def test_program_text_is_readable_and_valid(tmp_path: Path) -> None:
    model, _ = mlp_with_shape_ops()
    result = import_model(model, dims={"batch": 3})
    text = result.text
    # Sizevars stay symbolic in declarations; the weight is referenced by a sanitized name.
    assert "x: f32[batch, 8];" in text
    # A constant MatMul weight is stored transposed for linear ([out, in]).
    assert 'layer_0_W_t: f32[8, 8] @ref("layer.0.W_t");' in text
    assert "op linear(x, layer_0_W_t) >> layer_0_MatMul;" in text
    assert "op relu(layer_0_MatMul) >> y;" in text
    assert text.count(" op ") == 2  # shape ops folded, Identity/Dropout dropped
    assert parse(text) == result.graph
    report = result.report
    assert report.folded == {"Shape": 1, "Constant": 2, "Gather": 1, "Concat": 1}
    assert report.dropped == {"Identity": 1, "Dropout": 1}
    assert report.sizevars == {"batch": 3}
    assert report.ops_used == {"linear": 1, "relu": 1}


@pytest.mark.parametrize("device", ["cpu", "numpy"])
def test_results_match_reference(tmp_path: Path, device: str) -> None:
    model, _ = mlp_with_shape_ops()
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    result = import_model(model, dims={"batch": 3})
    got = run_imported(result, tmp_path, [{"x": x}], device)[0]["y"]
    np.testing.assert_allclose(got, reference(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_files_written_and_validated(tmp_path: Path) -> None:
    from openinfer_jax.oinf import ModelLoader

    model, w = mlp_with_shape_ops()
    src = tmp_path / "mlp.onnx"
    src.write_bytes(model.SerializeToString())
    report = import_onnx(src, tmp_path / "out", dims={"batch": 2})
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "mlp.graph", "mlp.oinf", "mlp.report.txt",
    ]  # fmt: skip
    with ModelLoader.open(tmp_path / "out" / "mlp.oinf") as m:
        assert m.sizevars == {"batch": 2}
        np.testing.assert_array_equal(np.asarray(m.tensor("layer.0.W_t")), w.T)
        assert m.metadata["onnx.outputs"] == '{"y": "y"}'
    assert "folded at import: Constant 2" in report.format()
    assert "dropped: Dropout 1, Identity 1" in (tmp_path / "out" / "mlp.report.txt").read_text()


def test_names_are_sanitized_and_unique() -> None:
    nodes = [
        helper.make_node("Relu", ["in:0"], ["a/b.c"]),
        helper.make_node("Neg", ["a/b.c"], ["a_b_c"]),
        helper.make_node("Abs", ["a_b_c"], ["1out"]),
    ]
    model = make_model(nodes, [tensor_info("in:0", FLOAT, [4])], [tensor_info("1out", FLOAT, [4])])
    result = import_model(model)
    assert result.built.inputs == {"in:0": "in_0"}
    assert result.built.outputs == {"1out": "v1out"}
    text = result.text
    assert "op relu(in_0) >> a_b_c;" in text and "op neg(a_b_c) >> a_b_c_2;" in text


def test_constant_subgraph_is_folded_into_one_weight() -> None:
    w = RNG.standard_normal((4, 6)).astype(np.float32)
    nodes = [
        helper.make_node("Transpose", ["W"], ["Wt"], perm=[1, 0]),
        helper.make_node("Mul", ["Wt", "two"], ["W2"]),
        helper.make_node("MatMul", ["x", "W2"], ["y"]),
    ]
    model = make_model(
        nodes, [tensor_info("x", FLOAT, [2, 6])], [tensor_info("y", FLOAT, [2, 4])],
        {"W": w, "two": np.array(2.0, np.float32)},
    )  # fmt: skip
    result = import_model(model)
    assert result.report.folded == {"Transpose": 1, "Mul": 1}
    ((_, stored),) = result.built.tensors.values()
    np.testing.assert_array_equal(stored, 2 * w)  # 2 * W^T, stored [out, in] for linear


def test_scalar_constants_are_inline_inits(tmp_path: Path) -> None:
    nodes = [helper.make_node("Add", ["x", "half"], ["y"])]
    model = make_model(
        nodes, [tensor_info("x", FLOAT, [3])], [tensor_info("y", FLOAT, [3])],
        {"half": np.array(0.5, np.float32)},
    )  # fmt: skip
    result = import_model(model)
    assert "half: f32 @init(0.5);" in result.text
    assert result.built.tensors == {}
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(run_imported(result, tmp_path, [{"x": x}])[0]["y"], x + 0.5)


def test_output_that_is_an_input_or_constant_is_copied(tmp_path: Path) -> None:
    nodes = [
        helper.make_node("Identity", ["x"], ["same"]),
        helper.make_node("Shape", ["x"], ["shape"]),
    ]
    model = make_model(
        nodes, [tensor_info("x", FLOAT, [2, 5])],
        [tensor_info("same", FLOAT, [2, 5]), tensor_info("shape", INT64, [2])],
    )  # fmt: skip
    result = import_model(model)
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    out = run_imported(result, tmp_path, [{"x": x}], "numpy")[0]
    np.testing.assert_array_equal(out["same"], x)
    np.testing.assert_array_equal(out["shape"], [2, 5])


def test_broadcast_comparison_made_explicit(tmp_path: Path) -> None:
    nodes = [helper.make_node("Less", ["x", "y"], ["z"])]
    model = make_model(
        nodes, [tensor_info("x", FLOAT, [3, 1]), tensor_info("y", FLOAT, [1, 4])],
        [helper.make_tensor_value_info("z", 9, [3, 4])],
    )  # fmt: skip
    result = import_model(model)
    x = RNG.standard_normal((3, 1)).astype(np.float32)
    y = RNG.standard_normal((1, 4)).astype(np.float32)
    for device in ("cpu", "numpy"):
        out = run_imported(result, tmp_path / device, [{"x": x, "y": y}], device)[0]["z"]
        np.testing.assert_array_equal(out, x < y)
