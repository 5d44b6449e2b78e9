"""`NodeContext`: what a converter sees of one ONNX node, and how it adds steps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ir.nodes import ParamValue
from openinfer_jax.onnx.arrays import array_dtype, to_memory
from openinfer_jax.onnx.errors import NeedsConstantError, OnnxImportError
from openinfer_jax.onnx.values import Const, Role, Tensor, Value
from openinfer_jax.ops.registry import OpCheckError

if TYPE_CHECKING:
    from openinfer_jax.onnx.importer import Importer

__all__ = ["NodeContext"]


class NodeContext:
    """One ONNX node during import: its inputs, attributes and opset, and the step writer.

    Inputs are `Value`s: a `Const` (known at import: initializer or folded) or a `Tensor`
    (a program variable). A converter reads them, appends steps with `emit`, and binds each
    ONNX output with `set_output`.
    """

    def __init__(self, importer: Importer, node: Any, name: str, opset: int) -> None:
        self.importer = importer
        self.node = node
        self.name = name
        self.op_type: str = node.op_type
        self.opset = opset
        self.program = importer.program
        self._attrs: dict[str, Any] | None = None

    # ---- errors -----------------------------------------------------------------------------
    def error(self, message: str) -> OnnxImportError:
        """An `OnnxImportError` naming this node (raise it)."""
        return OnnxImportError(message, node=self.name, op=self.op_type)

    # ---- inputs -----------------------------------------------------------------------------
    @property
    def input_count(self) -> int:
        """Number of input slots, trailing empty ones excluded."""
        names = list(self.node.input)
        while names and not names[-1]:
            names.pop()
        return len(names)

    def has(self, index: int) -> bool:
        """True if input `index` is given (not absent and not the empty name)."""
        return index < len(self.node.input) and bool(self.node.input[index])

    def value(self, index: int) -> Value:
        """Input `index` as a Const or Tensor."""
        if not self.has(index):
            raise self.error(f"input {index} is required")
        return self.importer.values[self.node.input[index]]

    def values(self) -> list[Value | None]:
        """Every input slot (None for absent ones)."""
        return [self.value(i) if self.has(i) else None for i in range(len(self.node.input))]

    def is_const(self, index: int) -> bool:
        """True if input `index` is given and known at import time."""
        return self.has(index) and isinstance(self.value(index), Const)

    def const(self, index: int, what: str) -> np.ndarray:
        """The value of input `index`, which must be known at import (`what` says why).

        Raises:
            NeedsConstantError: it is (or depends on) a graph input; the message says how to
                fold it. OnnxImportError: it is computed at run time from other values.
        """
        value = self.value(index)
        if isinstance(value, Const):
            return value.array
        name = self.node.input[index]
        source = self.importer.input_source(value)
        if source is not None:
            raise NeedsConstantError(
                f"{what} (input {index}, {name!r}) must be known at import, but it comes "
                f"from graph input {source!r}; pass its value (--const {source}=FILE.npy)",
                input_name=source,
                node=self.name,
                op=self.op_type,
            )
        raise self.error(
            f"{what} (input {index}, {name!r}) must be known at import, but it is computed "
            "at run time; only shapes and constants can be folded"
        )

    def tensor(self, index: int) -> Tensor:
        """Input `index` as a program variable (a constant becomes a weight)."""
        return self.as_tensor(self.value(index), self.node.input[index])

    def as_tensor(self, value: Value, hint: str | None = None) -> Tensor:
        """`value` as a program variable (a constant becomes a weight, made once)."""
        if isinstance(value, Tensor):
            return value
        if value.tensor is None:
            if value.dtype is None:
                raise self.error(
                    f"constant {value.hint!r} of NumPy type {value.array.dtype} has no "
                    "package dtype"
                )
            value.tensor = self.program.constant(value.array, value.dtype, hint or value.hint)
        return value.tensor

    def dtype(self, index: int) -> DType:
        """The dtype of input `index`."""
        value = self.value(index)
        if value.dtype is None:
            raise self.error(f"input {index} has a type the package cannot represent")
        return value.dtype

    def shape(self, index: int) -> tuple[int, ...]:
        """The (concrete) shape of input `index`."""
        value = self.value(index)
        if isinstance(value, Const):
            return tuple(int(d) for d in value.array.shape)
        return value.shape

    # ---- attributes ---------------------------------------------------------------------------
    @property
    def attrs(self) -> dict[str, Any]:
        """The node's attributes as Python values (strings decoded, tensors as arrays)."""
        if self._attrs is None:
            from onnx import helper

            from openinfer_jax.onnx.arrays import from_tensor_proto

            out: dict[str, Any] = {}
            for attr in self.node.attribute:
                if attr.ref_attr_name:
                    raise self.error(f"attribute {attr.name} refers to a function attribute")
                value = helper.get_attribute_value(attr)
                if attr.type == attr.FLOAT:
                    value = _f32(value)
                elif attr.type == attr.FLOATS:
                    value = [_f32(v) for v in value]
                if isinstance(value, bytes):
                    value = value.decode("utf-8", "replace")
                elif isinstance(value, list) and value and isinstance(value[0], bytes):
                    value = [v.decode("utf-8", "replace") for v in value]
                elif type(value).__name__ == "TensorProto":
                    value = to_memory(from_tensor_proto(value))
                out[attr.name] = value
            self._attrs = out
        return self._attrs

    def attr(self, name: str, default: Any = None) -> Any:
        """Attribute `name`, or `default` when absent."""
        return self.attrs.get(name, default)

    # ---- writing steps --------------------------------------------------------------------------
    def hint(self, index: int = 0, suffix: str = "") -> str:
        """A name hint: output `index`'s ONNX name, with `_suffix` for intermediate steps."""
        base = self.node.output[index] if index < len(self.node.output) else self.name
        base = base or self.name
        if not suffix:
            return base
        if base.endswith("_output_0"):  # torch's value names; the node path says enough
            base = base[: -len("_output_0")]
        return f"{base}_{suffix}"

    def emit(
        self, op: str, inputs: Sequence[Tensor | Value], hint: str | None = None, **params: Any
    ) -> Tensor:
        """Append one op step; its output variable is returned.

        Params whose value is None are left out (the op's default applies).

        Raises:
            OnnxImportError: the op registry rejects the inputs or params (names the node).
        """
        tensors = [self.as_tensor(v) for v in inputs]
        pairs: list[tuple[str, ParamValue]] = [
            (k, _param(v)) for k, v in params.items() if v is not None and not _default(op, k, v)
        ]
        try:
            return self.program.op(op, tensors, pairs, hint=hint or self.hint(), node=self.name)
        except OpCheckError as err:
            raise self.error(f"cannot express as {op}: {err}") from None

    def constant(self, array: Any, dtype: DType | None = None, hint: str | None = None) -> Tensor:
        """A program constant (weight, or @init scalar for a 0-d value)."""
        arr = np.asarray(array) if dtype is None else np.asarray(array, dtype=dtype.numpy)
        dt = dtype or array_dtype(arr)
        if dt is None:
            raise self.error(f"constant of NumPy type {arr.dtype} has no package dtype")
        return self.program.constant(to_memory(arr), dt, hint or self.hint(0, "const"))

    def set_output(self, index: int, value: Value) -> None:
        """Bind ONNX output `index` to `value` (skipped when the output slot is unnamed)."""
        if index < len(self.node.output) and self.node.output[index]:
            self.importer.bind(self.node.output[index], value)

    def set_const(self, index: int, array: np.ndarray) -> None:
        """Bind ONNX output `index` to a value known at import."""
        arr = to_memory(np.asarray(array))
        hint = self.hint(index)
        self.set_output(index, Const(arr, array_dtype(np.asarray(array)), hint))

    def is_input(self, tensor: Tensor) -> bool:
        """True if `tensor` is a graph input (the host inserts it)."""
        return tensor.role is Role.INPUT


def _f32(value: float) -> float:
    """An ONNX float attribute (an f32) as the shortest decimal that reads back as it."""
    return float(str(np.float32(value))) if np.isfinite(value) else float(value)


def _default(op: str, name: str, value: Any) -> bool:
    """True if `value` is what op `op` assumes for param `name` anyway (left out of the text)."""
    from openinfer_jax.ops import registry

    opdef = registry.get(op)
    spec = opdef.params.get(name) if opdef is not None else None
    if spec is None or spec.default is None or isinstance(value, (list, tuple, np.ndarray)):
        return False
    return type(value) is type(spec.default) and value == spec.default


def _param(value: Any) -> ParamValue:
    """A Python/NumPy value as an IR param value (lists become tuples, NumPy scalars plain)."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return tuple(_param(v) for v in value)  # type: ignore[return-value]
    if isinstance(value, np.generic):
        return value.item()  # type: ignore[no-any-return]
    return value  # type: ignore[no-any-return]
