"""ONNX op converters: one function per ONNX op (or family), registered by op type.

A converter reads a `NodeContext` (inputs, attributes, opset), appends steps with
``ctx.emit`` and binds the node's outputs with ``ctx.set_output``. It declares the
attributes it understands; any other attribute on a node is an import error naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from openinfer_jax.onnx.context import NodeContext

__all__ = ["CONVERTERS", "Converter", "converter"]


@dataclass(frozen=True)
class Converter:
    """How one ONNX op type becomes steps.

    `attrs` lists the attributes the converter reads; `becomes` says what it turns into
    (the docs' table shows it).
    """

    op_type: str
    fn: Callable[[NodeContext], None]
    attrs: frozenset[str]
    becomes: str

    def check_attributes(self, ctx: NodeContext) -> None:
        """Raise `OnnxImportError` for an attribute this converter does not understand."""
        for name in ctx.attrs:
            if name not in self.attrs:
                known = ", ".join(sorted(self.attrs)) or "none"
                raise ctx.error(f"attribute {name} is not supported (supported: {known})")


CONVERTERS: dict[str, Converter] = {}


def converter(
    *op_types: str, attrs: Iterable[str] = (), becomes: str = ""
) -> Callable[[Callable[[NodeContext], None]], Callable[[NodeContext], None]]:
    """Register the decorated function as the converter of `op_types`."""

    def register(fn: Callable[[NodeContext], None]) -> Callable[[NodeContext], None]:
        for op_type in op_types:
            if op_type in CONVERTERS:
                raise ValueError(f"ONNX op {op_type} has two converters")
            CONVERTERS[op_type] = Converter(op_type, fn, frozenset(attrs), becomes)
        return fn

    return register


# Registration happens on import of each module.
from openinfer_jax.onnx.converters import (  # noqa: E402, F401
    attention,
    elementwise,
    indexing,
    movement,
    nn,
    numeric,
    placement,
    quant,
    recurrent,
    reduce,
    resize,
    sample,
    scan,
    spectral,
)
