"""Helpers for the importer tests: build small ONNX models, run them both ways."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from openinfer_jax.onnx import ImportResult


def tensor_info(name: str, dtype: int, dims: Sequence[int | str]) -> onnx.ValueInfoProto:
    """A graph input/output declaration."""
    return helper.make_tensor_value_info(name, dtype, list(dims))


def make_model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    initializers: Mapping[str, np.ndarray] | None = None,
    opset: int = 17,
) -> onnx.ModelProto:
    """A checked ModelProto of one graph."""
    graph = helper.make_graph(
        list(nodes),
        "g",
        list(inputs),
        list(outputs),
        [numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def reference(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """ONNX's reference evaluator on `model`."""
    from onnx.reference import ReferenceEvaluator

    return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, dict(feeds))]


def run_imported(
    result: ImportResult,
    work: Path,
    feeds: Sequence[Mapping[str, np.ndarray]],
    device: str = "cpu",
) -> list[dict[str, np.ndarray]]:
    """Write the import to `work`, run one step per feed dict, fetch every output."""
    from openinfer_jax.oinf import ModelLoader
    from openinfer_jax.sim import Simulator

    work.mkdir(parents=True, exist_ok=True)
    result.write_oinf(work / "model.oinf")
    out = []
    with ModelLoader.open(work / "model.oinf") as model:
        ex = Simulator(model, result.text, device=device).make_executor()
        for feed in feeds:
            ex.insert(**{result.built.inputs[k]: v for k, v in feed.items()})
            ex.step()
            out.append({k: np.asarray(ex.fetch(v)) for k, v in result.built.outputs.items()})
    return out


FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
