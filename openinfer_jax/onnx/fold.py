"""Constant folding: run one ONNX node on values known at import, with ONNX's reference.

The ONNX package's `onnx.reference` evaluator is the specification in executable form, so a
folded node gives exactly the value the ONNX spec defines (shape arithmetic, `Range`,
`ConstantOfShape`, a transposed weight...).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from openinfer_jax.onnx.errors import OnnxImportError

__all__ = ["NONDETERMINISTIC", "fold_node"]

#: Ops whose result is random: never folded (and not supported).
NONDETERMINISTIC = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
     "Multinomial"}
)  # fmt: skip


def fold_node(
    node: Any, inputs: Sequence[np.ndarray | None], opsets: dict[str, int], name: str
) -> list[np.ndarray]:
    """The outputs of `node` given its input values (None for absent inputs).

    Raises:
        OnnxImportError: the reference evaluator has no implementation or fails (names the
            node).
    """
    from onnx.reference import ReferenceEvaluator

    feeds = {n: v for n, v in zip(node.input, inputs, strict=False) if n and v is not None}
    try:
        try:
            results = ReferenceEvaluator(node, opsets=dict(opsets)).run(None, feeds)
            return [np.asarray(r) if r is not None else None for r in results]  # type: ignore[misc]
        except Exception:
            # Given a bare node the evaluator runs the op's newest version; an older model's
            # node (an opset-11 Unsqueeze with `axes`) needs the version of its opset.
            return _at_opset(node, feeds, opsets)
    except Exception as err:  # the reference raises plain exceptions of many kinds
        raise OnnxImportError(
            f"cannot fold this node on its constant inputs: {type(err).__name__}: {err}",
            node=name,
            op=node.op_type,
        ) from None


def _at_opset(node: Any, feeds: dict[str, np.ndarray], opsets: dict[str, int]) -> list[Any]:
    """`node` run as a one-node graph, at the model's opsets (results per output slot)."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    graph = helper.make_graph(
        [node],
        "fold",
        [helper.make_empty_tensor_value_info(n) for n in feeds],
        [helper.make_empty_tensor_value_info(n) for n in node.output if n],
    )
    results = ReferenceEvaluator(graph, opsets=dict(opsets)).run(None, feeds)
    named = iter(results)  # the graph's outputs: the node's named ones, in order
    out: list[np.ndarray | None] = []
    for name_out in node.output:
        value = next(named) if name_out else None
        out.append(np.asarray(value) if value is not None else None)
    return out  # type: ignore[return-value]
