"""`Program`: the imported model as a flat list of steps over variables, before naming.

Converters append steps through `Program.op`, which infers each output's dtype and shape
with the op registry (so a converter cannot produce a step the validator would reject
without the importer noticing, at the node that caused it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ir.nodes import ParamValue
from openinfer_jax.onnx.values import TRANSFER, Role, Step, Tensor

__all__ = ["Program", "StatePair", "dedupe_key"]

# Constants up to this many elements are shared between nodes when equal (a `1.0` used by
# forty nodes is one variable); bigger ones are compared by identity only.
_DEDUPE_ELEMENTS = 4096


def dedupe_key(array: np.ndarray, dtype: DType) -> tuple[object, ...] | None:
    """A key equal for equal small constants (None for big ones)."""
    if array.size > _DEDUPE_ELEMENTS:
        return None
    return (dtype, array.shape, np.ascontiguousarray(array).tobytes())


@dataclass
class StatePair:
    """A graph input and output joined into one persistent variable (``--state in=out``)."""

    input: Tensor
    output: Tensor
    name: str


@dataclass
class Program:
    """Inputs, outputs and steps of an imported model (variables not yet named)."""

    inputs: list[Tensor] = field(default_factory=list)
    outputs: list[tuple[str, Tensor]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    sizevars: dict[str, int] = field(default_factory=dict)
    state: list[StatePair] = field(default_factory=list)
    _shared: dict[tuple[object, ...], Tensor] = field(default_factory=dict)

    # ---- variables -------------------------------------------------------------------------
    def constant(self, array: np.ndarray, dtype: DType, hint: str) -> Tensor:
        """A weight (or, for a 0-d value, an @init scalar) holding `array`; equal small
        constants share one variable."""
        key = dedupe_key(array, dtype)
        if key is not None and key in self._shared:
            return self._shared[key]
        role = Role.SCALAR if array.ndim == 0 and _init_exact(array, dtype) else Role.WEIGHT
        tensor = Tensor(dtype, tuple(int(d) for d in array.shape), hint, role, data=array)
        if key is not None:
            self._shared[key] = tensor
        return tensor

    # ---- steps -----------------------------------------------------------------------------
    def op(
        self,
        op: str,
        inputs: Sequence[Tensor],
        params: Iterable[tuple[str, ParamValue]],
        *,
        hint: str,
        node: str,
    ) -> Tensor:
        """Append ``op name(inputs, params) >> new`` and return the new variable.

        Raises:
            OpCheckError: the registry rejects the inputs or params (the caller names the node).
        """
        from openinfer_jax.ops import registry

        opdef = registry.get(op)
        if opdef is None:  # a converter naming an op that is not registered: a bug here
            raise AssertionError(f"converter emitted unknown op {op!r}")
        params = tuple(params)
        dtype, shape = opdef.infer(
            [t.dtype for t in inputs], [t.shape for t in inputs], dict(params)
        )
        out = Tensor(dtype, tuple(int(d) for d in shape), hint, Role.TEMP)
        self.steps.append(Step(op, tuple(inputs), params, out, node))
        return out

    def transfer(self, src: Tensor, *, hint: str, node: str) -> Tensor:
        """Append ``transfer src >> new`` (a copy under a new name) and return the new variable."""
        out = Tensor(src.dtype, src.shape, hint, Role.TEMP, dims=src.dims)
        self.steps.append(Step(TRANSFER, (src,), (), out, node))
        return out

    # ---- whole-program passes -------------------------------------------------------------
    def prune(self) -> int:
        """Drop steps whose results nothing reads (and no output or state needs); returns
        how many were dropped."""
        live: set[int] = {id(t) for _, t in self.outputs}
        live |= {id(p.output) for p in self.state}
        kept: list[Step] = []
        for step in reversed(self.steps):
            if id(step.output) in live:
                kept.append(step)
                live |= {id(t) for t in step.inputs}
        dropped = len(self.steps) - len(kept)
        self.steps = kept[::-1]
        return dropped

    def variables(self) -> list[Tensor]:
        """Every variable the program uses, in first-use order (inputs first)."""
        seen: dict[int, Tensor] = {id(t): t for t in self.inputs}
        for step in self.steps:
            for t in (*step.inputs, step.output):
                seen.setdefault(id(t), t)
        for _, t in self.outputs:
            seen.setdefault(id(t), t)
        return list(seen.values())


def _init_exact(array: np.ndarray, dtype: DType) -> bool:
    """True if a 0-d value prints as an @init literal that reads back as the same value."""
    if dtype.is_packed or (dtype.is_float and dtype.bits < 16):
        return False
    value = array.item()
    if dtype.is_float:
        value = float(value)
        return math.isnan(value) or math.isinf(value) or float(repr(value)) == value
    return True
