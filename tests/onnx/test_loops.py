"""Repeated layers become one loop over prefix tables; results are unchanged."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from openinfer_jax.onnx import import_model
from tests.onnx.helpers import FLOAT, make_model, reference, run_imported, tensor_info

RNG = np.random.default_rng(3)


def residual_mlp(layers: int, dims: list[int] | None = None) -> tuple:
    """h = h + relu(h @ W_i + b_i), `layers` times; weights named layers.{i}.weight/bias."""
    dims = dims or [8] * layers
    nodes, inits = [], {}
    h = "x"
    for i in range(layers):
        w, b = f"layers.{i}.weight", f"layers.{i}.bias"
        inits[w] = (RNG.standard_normal((8, dims[i])) * 0.3).astype(np.float32)
        inits[b] = RNG.standard_normal(dims[i]).astype(np.float32)
        nodes += [
            helper.make_node("MatMul", [h, w], [f"/layers.{i}/mm"]),
            helper.make_node("Add", [f"/layers.{i}/mm", b], [f"/layers.{i}/lin"]),
            helper.make_node("Relu", [f"/layers.{i}/lin"], [f"/layers.{i}/act"]),
            helper.make_node("Add", [h, f"/layers.{i}/act"], [f"/layers.{i}/out"]),
        ]
        h = f"/layers.{i}/out"
    nodes.append(helper.make_node("Neg", [h], ["y"]))
    model = make_model(
        nodes, [tensor_info("x", FLOAT, [2, 8])], [tensor_info("y", FLOAT, [2, 8])], inits
    )
    return model


def test_layers_become_one_loop(tmp_path: Path) -> None:
    model = residual_mlp(5)
    result = import_model(model)
    text = result.text
    assert [(loop.count, loop.body_steps, loop.tables) for loop in result.report.loops] == [
        (5, 3, 2)
    ]
    assert "loop layers (l in 0..num_layers) {" in text
    assert 'weight_t(l): f32[8, 8] @pattern("layers.{l}.weight_t");' in text
    # The residual stream starts as a copy of the input and is carried in place.
    assert "transfer x >> layers_out;" in text
    assert "op linear(layers_out, weight_t[l], bias[l]) >> layers_mm;" in text
    assert "op add(layers_out, layers_act) >> layers_out;" in text
    assert result.built.sizevars["num_layers"] == 5
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    want = reference(model, {"x": x})[0]
    for device in ("cpu", "numpy"):
        got = run_imported(result, tmp_path / device, [{"x": x}], device)[0]["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_unrolled_on_request() -> None:
    result = import_model(residual_mlp(3), loops=False)
    assert result.report.loops == [] and "loop " not in result.text
    assert result.text.count("op linear(") == 3


def test_layers_of_different_shapes_stay_unrolled() -> None:
    nodes, inits = [], {}
    h = "x"
    for i, width in enumerate((8, 6, 4)):
        inits[f"w{i}"] = RNG.standard_normal(
            ((int(h != "x") and (8, 6)[i - 1]) or 8, width)
        ).astype(np.float32)
        nodes.append(helper.make_node("MatMul", [h, f"w{i}"], [f"h{i}"]))
        h = f"h{i}"
    model = make_model(
        nodes, [tensor_info("x", FLOAT, [2, 8])], [tensor_info(h, FLOAT, [2, 4])], inits
    )
    assert import_model(model).report.loops == []


def test_carried_value_read_after_overwrite_is_copied(tmp_path: Path) -> None:
    """a_i = relu(b_{i-1} @ W_i); b_i = a_{i-1} + a_i: the body needs last layer's `a` after
    writing this layer's, so the loop keeps a copy (transfer at the end of the body)."""
    nodes, inits = [], {}
    a, b = "x", "x"
    for i in range(4):
        inits[f"layers.{i}.w"] = (RNG.standard_normal((8, 8)) * 0.3).astype(np.float32)
        nodes += [
            helper.make_node("MatMul", [b, f"layers.{i}.w"], [f"m{i}"]),
            helper.make_node("Relu", [f"m{i}"], [f"a{i}"]),
            helper.make_node("Add", [a, f"a{i}"], [f"b{i}"]),
        ]
        a, b = f"a{i}", f"b{i}"
    nodes.append(helper.make_node("Mul", [a, b], ["y"]))
    model = make_model(
        nodes, [tensor_info("x", FLOAT, [2, 8])], [tensor_info("y", FLOAT, [2, 8])], inits
    )
    result = import_model(model)
    assert [loop.count for loop in result.report.loops] == [4]
    assert "transfer " in result.text
    x = RNG.standard_normal((2, 8)).astype(np.float32)
    got = run_imported(result, tmp_path, [{"x": x}], "numpy")[0]["y"]
    np.testing.assert_allclose(got, reference(model, {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layers", [2, 7])
def test_loop_text_parses_and_validates(tmp_path: Path, layers: int) -> None:
    result = import_model(residual_mlp(layers))
    result.save(tmp_path, "mlp")  # parses the written text and validates it against the .oinf
    assert (tmp_path / "mlp.graph").read_text() == result.text
