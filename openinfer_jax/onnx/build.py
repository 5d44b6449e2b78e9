"""`Program` -> graph IR and `.oinf` contents: names, declarations, one op per line.

Naming: every variable is named after its ONNX value (sanitized, unique); graph inputs and
outputs are named first so they keep their ONNX names whenever those are identifiers.
Weights are `constant` variables linked to a `.oinf` tensor of the sanitized initializer
name (`@ref` when the two spellings differ); 0-d constants are written inline as `@init`.
Every computed value is an `assign` at the top of the entry block, then the steps follow
in ONNX order (loops, when the loop pass found repeated layers, see `loops`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ir.nodes import (
    Assign,
    Block,
    CacheAccess,
    CacheRead,
    CacheWrite,
    Graph,
    MemoryKind,
    Node,
    Op,
    Return,
    Transfer,
    VarDecl,
    VarRef,
)
from openinfer_jax.onnx.loops import LoopItem
from openinfer_jax.onnx.naming import Namer, identifier, tensor_name
from openinfer_jax.onnx.program import Program
from openinfer_jax.onnx.values import TRANSFER, Role, Step, Tensor

__all__ = ["BuiltModel", "build", "step_node"]


@dataclass
class BuiltModel:
    """The program as IR plus what the `.oinf` holds.

    `tensors` maps `.oinf` tensor names to (dtype, array in the in-memory representation);
    `names` maps each variable (by id) to its DSL name; `io` maps ONNX input/output names
    to DSL names.
    """

    graph: Graph
    tensors: dict[str, tuple[DType, np.ndarray]]
    sizevars: dict[str, int]
    names: dict[int, str]
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)


def build(program: Program, items: Sequence[Step | LoopItem] | None = None) -> BuiltModel:
    """Name every variable and lay out declarations and the entry block.

    `items` is the step list with repeated layers folded into `LoopItem`s (default: the
    program's steps as they are).
    """
    items = list(program.steps) if items is None else list(items)
    namer = Namer(program.sizevars)
    tensor_namer = Namer()
    names: dict[int, str] = {}
    state_inputs = {id(p.input): p for p in program.state}

    def name_of(t: Tensor) -> str:
        if id(t) not in names:
            names[id(t)] = namer.take(identifier(t.hint))
        return names[id(t)]

    for pair in program.state:
        names[id(pair.input)] = namer.take(identifier(pair.input.hint))
    inputs = {t.hint: name_of(t) for t in program.inputs if id(t) not in state_inputs}
    outputs = {onnx_name: name_of(t) for onnx_name, t in program.outputs}
    sizevars = dict(program.sizevars)
    for item in items:
        if isinstance(item, LoopItem):
            item.name_tables(namer, tensor_namer)
            if item.bound:
                sizevars[item.bound] = item.count

    decls: list[VarDecl] = []
    tensors: dict[str, tuple[DType, np.ndarray]] = {}
    state_decls: list[VarDecl] = []
    for pair in program.state:
        pair.name = namer.take(identifier(pair.name + "_state"))
        state_decls.append(
            VarDecl(pair.name, MemoryKind.PERSISTENT, pair.input.dtype, pair.input.declared_dims)
        )
    for t in program.inputs:
        if id(t) in state_inputs:
            continue
        decls.append(VarDecl(name_of(t), MemoryKind.DYNAMIC, t.dtype, t.declared_dims))
    temps: list[Tensor] = [p.input for p in program.state]
    seen: set[int] = {id(t) for t in program.inputs} | {id(t) for t in temps}
    loop_decls: list[VarDecl] = []
    for item in items:
        if isinstance(item, LoopItem):
            loop_decls.extend(item.table_decls())
            tensors.update(item.table_tensors())
            variables = item.variables()
        else:
            variables = [*item.inputs, item.output]
        for t in variables:
            if id(t) in seen or (isinstance(item, LoopItem) and item.is_table_entry(t)):
                continue
            seen.add(id(t))
            if t.role is Role.WEIGHT:
                name = name_of(t)
                stored = tensor_namer.take(tensor_name(t.hint))
                assert t.data is not None
                tensors[stored] = (t.dtype, t.data)
                ref = None if stored == name else stored
                decls.append(VarDecl(name, MemoryKind.CONSTANT, t.dtype, t.shape, ref=ref))
            elif t.role is Role.SCALAR:
                assert t.data is not None
                decls.append(VarDecl(name_of(t), MemoryKind.CONSTANT, t.dtype, (), init=_scalar(t)))
            elif t.role is Role.TEMP:
                temps.append(t)
    for _, t in program.outputs:
        if id(t) not in seen and t.role is Role.TEMP:
            seen.add(id(t))
            temps.append(t)

    body: list[Node] = [Assign(name_of(t), t.dtype, t.declared_dims) for t in temps]
    for pair in program.state:
        body.append(CacheRead(CacheAccess(pair.name), VarRef(name_of(pair.input))))
    for item in items:
        if isinstance(item, LoopItem):
            body.extend(item.node(name_of))
        else:
            body.append(step_node(item, name_of))
    for pair in program.state:
        body.append(CacheWrite(VarRef(name_of(pair.output)), CacheAccess(pair.name)))
    body.append(Return())
    graph = Graph(vars=(*decls, *loop_decls, *state_decls), blocks=(Block("entry", tuple(body)),))
    return BuiltModel(graph, tensors, sizevars, names, inputs, outputs)


def step_node(step: Step, name_of: Any, refs: dict[int, VarRef] | None = None) -> Node:
    """One step as an IR node; `refs` overrides how some variables are referenced (table
    entries inside a loop)."""

    def ref(t: Tensor) -> VarRef:
        if refs is not None and id(t) in refs:
            return refs[id(t)]
        return VarRef(name_of(t))

    if step.op == TRANSFER:
        return Transfer(ref(step.inputs[0]), ref(step.output))
    return Op(step.op, tuple(ref(t) for t in step.inputs), step.params, ref(step.output))


def _scalar(t: Tensor) -> bool | int | float:
    assert t.data is not None
    value = np.asarray(t.data).item()
    if t.dtype is DType.BOOL:
        return bool(value)
    if t.dtype.is_float:
        return float(value)
    return int(value)
