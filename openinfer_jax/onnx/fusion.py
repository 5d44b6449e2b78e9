"""Patterns of exported graphs rewritten into one node before import.

Exporters spell some functions as several primitive nodes; the program reads better (and
runs faster) as the one op. Today: GELU written with Erf (torch's default ``gelu``):
``x * 0.5 * (1 + erf(x / sqrt(2)))`` in its usual orders becomes one ``Gelu`` node.
Intermediate values must have no other reader and must not be graph outputs.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["fuse"]

ConstOf = Callable[[str], "np.ndarray | None"]


def _scalar(const_of: ConstOf, name: str, value: float, rel: float = 1e-4) -> bool:
    array = const_of(name)
    if array is None or array.size != 1 or array.dtype.kind != "f":
        return False
    return abs(float(array.reshape(-1)[0]) - value) <= rel * abs(value)


class _Graph:
    """Producers and consumers of the node list being rewritten."""

    def __init__(self, nodes: Sequence[Any], outputs: set[str]) -> None:
        self.nodes = list(nodes)
        self.outputs = outputs
        self.producer = {o: n for n in self.nodes for o in n.output if o}
        self.readers: dict[str, list[Any]] = collections.defaultdict(list)
        for n in self.nodes:
            for i in n.input:
                if i:
                    self.readers[i].append(n)

    def only_reader(self, value: str) -> Any | None:
        """The single node reading `value` (None if several, none, or it is a graph output)."""
        readers = self.readers.get(value, [])
        if len(readers) != 1 or value in self.outputs:
            return None
        return readers[0]

    @staticmethod
    def other(node: Any, value: str) -> str | None:
        """The other input of a binary node that reads `value`."""
        if len(node.input) != 2:
            return None
        if node.input[0] == value:
            return node.input[1]
        if node.input[1] == value:
            return node.input[0]
        return None


def _match_gelu(g: _Graph, erf: Any, const_of: ConstOf) -> tuple[str, str, list[Any]] | None:
    """(x, y, nodes) of the GELU around one Erf node, or None."""
    scaled = g.producer.get(erf.input[0])
    if scaled is None or g.only_reader(scaled.output[0]) is not erf:
        return None
    if scaled.op_type == "Div" and _scalar(const_of, scaled.input[1], math.sqrt(2)):
        x = scaled.input[0]
    elif scaled.op_type == "Mul":
        x = next(
            (
                scaled.input[1 - i]
                for i in range(2)
                if _scalar(const_of, scaled.input[i], 1 / math.sqrt(2))
            ),
            None,
        )
        if x is None:
            return None
    else:
        return None
    add = g.only_reader(erf.output[0])
    if (
        add is None
        or add.op_type != "Add"
        or not _scalar(const_of, g.other(add, erf.output[0]) or "", 1.0)
    ):
        return None
    mul = g.only_reader(add.output[0])
    if mul is None or mul.op_type != "Mul":
        return None
    partner = g.other(mul, add.output[0])
    if partner == x:  # x * (1 + erf) * 0.5
        half = g.only_reader(mul.output[0])
        if (
            half is None
            or half.op_type != "Mul"
            or not _scalar(const_of, g.other(half, mul.output[0]) or "", 0.5)
        ):
            return None
        return x, half.output[0], [scaled, erf, add, mul, half]
    pre = g.producer.get(partner or "")
    if pre is not None and pre.op_type == "Mul" and g.only_reader(pre.output[0]) is mul:
        other = g.other(pre, x)  # (x * 0.5) * (1 + erf)
        if other is not None and _scalar(const_of, other, 0.5):
            return x, mul.output[0], [pre, scaled, erf, add, mul]
    return None


def fuse(
    nodes: Sequence[Any], const_of: ConstOf, outputs: set[str]
) -> tuple[list[Any], collections.Counter[str]]:
    """The node list with known patterns replaced, and how many of each were fused."""
    from onnx import helper

    g = _Graph(nodes, outputs)
    replaced: dict[int, Any] = {}  # id(last node of a match) -> new node
    dropped: set[int] = set()
    counts: collections.Counter[str] = collections.Counter()
    for node in g.nodes:
        if node.op_type != "Erf" or id(node) in dropped:
            continue
        match = _match_gelu(g, node, const_of)
        if match is None:
            continue
        x, y, parts = match
        if any(id(p) in dropped for p in parts):
            continue
        last = max(parts, key=lambda p: g.nodes.index(p))
        name = (
            node.name.rsplit("/", 1)[0] + "/Gelu"
            if "/" in node.name
            else (node.name or "gelu") + "_gelu"
        )
        replaced[id(last)] = helper.make_node("Gelu", [x], [y], name=name)
        dropped.update(id(p) for p in parts)
        counts["Gelu"] += 1
    out = []
    for node in g.nodes:
        if id(node) in replaced:
            out.append(replaced[id(node)])
        elif id(node) not in dropped:
            out.append(node)
    return out, counts
