"""What an ONNX value becomes during import: a folded constant or a program variable."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ir.nodes import Dim, ParamValue

__all__ = ["TRANSFER", "Const", "Role", "Step", "Tensor", "Value"]


class Role(enum.Enum):
    """Where a program variable's value comes from."""

    INPUT = "input"  # dynamic: inserted by the host before each step
    WEIGHT = "weight"  # a model tensor in the .oinf
    SCALAR = "scalar"  # a 0-d constant written in the program as @init(value)
    TEMP = "temp"  # computed by a step


@dataclass(eq=False)
class Tensor:
    """One variable of the imported program (compared by identity).

    `hint` is the name it should get (an ONNX value or initializer name, sanitized later);
    `dims` are the dims to declare (sizevar names where the ONNX model names the dim, else
    the ints of `shape`), None meaning `shape`. `data` holds a weight's or scalar's value.
    """

    dtype: DType
    shape: tuple[int, ...]
    hint: str
    role: Role
    data: np.ndarray | None = None
    dims: tuple[Dim, ...] | None = None

    @property
    def declared_dims(self) -> tuple[Dim, ...]:
        """The dims written in the declaration."""
        return self.dims if self.dims is not None else self.shape


@dataclass(eq=False)
class Const:
    """A value known at import time (an initializer, a folded node, a shape).

    `dtype` is None for values that have no package dtype (strings, complex numbers): they
    may feed folding but no program variable. `tensor` caches the weight made from it.
    """

    array: np.ndarray
    dtype: DType | None
    hint: str
    tensor: Tensor | None = None


Value = Const | Tensor

#: The `op` of a `Step` that is a `transfer` node rather than an op.
TRANSFER = "transfer"


@dataclass(eq=False)
class Step:
    """One line of the program: ``op name(inputs, params) >> output;`` (or a transfer).

    `node` names the ONNX node it came from (for the report and error messages).
    """

    op: str
    inputs: tuple[Tensor, ...]
    params: tuple[tuple[str, ParamValue], ...]
    output: Tensor
    node: str
