"""The importer's errors: every problem with an ONNX file is an `OnnxImportError`."""

from __future__ import annotations

from openinfer_jax.core.errors import ConversionError

__all__ = ["NeedsConstantError", "OnnxImportError"]


class OnnxImportError(ConversionError):
    """An ONNX model that cannot be imported: unreadable, an unsupported op or attribute,
    an opset newer than supported, or a shape that cannot be folded.

    `node` and `op` name the ONNX node and its op type when the problem is one node's
    (both None for file-level problems). The message starts with them, so the CLI's one
    line says where to look: ``node 'Conv_3' (Conv): attribute auto_pad=...``.
    """

    def __init__(self, message: str, *, node: str | None = None, op: str | None = None) -> None:
        self.node = node
        self.op = op
        self.reason = message
        where = ""
        if node is not None:
            where = f"node {node!r}" + (f" ({op})" if op else "") + ": "
        elif op is not None:
            where = f"{op}: "
        super().__init__(where + message)


class NeedsConstantError(OnnxImportError):
    """A node needs the value of a graph input at import time (a Reshape's shape, Slice
    bounds...). `input_name` is that graph input: pass its value with ``constants=``
    (``--const NAME=FILE.npy``) to fold it.
    """

    def __init__(self, message: str, *, input_name: str, node: str, op: str) -> None:
        self.input_name = input_name
        super().__init__(message, node=node, op=op)
