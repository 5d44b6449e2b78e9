"""Step rewrites after conversion: bias into linear, the attention chain, reshape chains."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from openinfer_jax.onnx import import_model
from tests.onnx.helpers import FLOAT, make_model, reference, run_imported, tensor_info

RNG = np.random.default_rng(11)


def attention_model(extra_output: bool = False):
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Div", ["scores", "root"], ["scaled"]),
        helper.make_node("Add", ["scaled", "mask"], ["biased"]),
        helper.make_node("Softmax", ["biased"], ["probs"], axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["y"]),
    ]
    shape = [1, 2, 4, 8]
    outputs = [tensor_info("y", FLOAT, shape)]
    if extra_output:
        outputs.append(tensor_info("scores", FLOAT, [1, 2, 4, 4]))
    inputs = [tensor_info(n, FLOAT, shape) for n in "qkv"] + [
        tensor_info("mask", FLOAT, [1, 1, 4, 4])
    ]
    return make_model(nodes, inputs, outputs, {"root": np.array(np.sqrt(8.0), np.float32)})


def _feeds() -> dict[str, np.ndarray]:
    out = {n: RNG.standard_normal((1, 2, 4, 8)).astype(np.float32) for n in "qkv"}
    mask = np.zeros((1, 1, 4, 4), np.float32)
    mask[..., 3] = -1e9
    out["mask"] = mask
    return out


@pytest.mark.parametrize("device", ["cpu", "numpy"])
def test_attention_chain_becomes_one_op(tmp_path: Path, device: str) -> None:
    model = attention_model()
    result = import_model(model)
    assert result.report.fused["attention"] == 1
    text = result.text
    # The k^T transpose is undone: attention reads k itself.
    assert "op attention(q, k, v, mask, scale=0.3535533" in text
    assert "softmax" not in text and "matmul" not in text and "transpose" not in text
    feeds = _feeds()
    got = run_imported(result, tmp_path, [feeds], device)[0]["y"]
    np.testing.assert_allclose(got, reference(model, feeds)[0], rtol=1e-5, atol=1e-6)


def test_chain_with_a_visible_middle_is_kept() -> None:
    result = import_model(attention_model(extra_output=True))
    assert "attention" not in result.report.fused
    assert "op softmax(" in result.text


def test_bias_add_goes_into_linear() -> None:
    w = RNG.standard_normal((6, 4)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["y"]),
    ]
    model = make_model(
        nodes,
        [tensor_info("x", FLOAT, [3, 6])],
        [tensor_info("y", FLOAT, [3, 4])],
        {"W": w, "b": b},
    )
    result = import_model(model)
    assert "op linear(x, W_t, b) >> y;" in result.text
    assert result.report.fused["linear+bias"] == 1


def test_reshape_chain_is_merged() -> None:
    nodes = [
        helper.make_node("Flatten", ["x"], ["f"], axis=1),
        helper.make_node("Unsqueeze", ["f", "ax"], ["y"]),
    ]
    model = make_model(
        nodes, [tensor_info("x", FLOAT, [2, 3, 4])], [tensor_info("y", FLOAT, [2, 1, 12])],
        {"ax": np.array([1], np.int64)},
    )  # fmt: skip
    result = import_model(model)
    assert (
        result.text.count("op reshape(") == 1
        and "op reshape(x, shape=[2, 1, 12]) >> y;" in result.text
    )
