"""`Importer`: ONNX graph -> `Program`, node by node.

Each node is, in this order: dropped (Identity, inference Dropout), folded (every input is
known at import: run it with ONNX's reference), answered from shapes (Shape, Size on a
variable of known shape), or handed to its converter (converters/), which appends steps.
The importer keeps what the report needs: which ops became what, what was folded, dropped.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ir.nodes import Dim
from openinfer_jax.onnx.arrays import from_tensor_proto, to_memory
from openinfer_jax.onnx.context import NodeContext
from openinfer_jax.onnx.dtypes import ONNX_TO_DTYPE, onnx_type_name
from openinfer_jax.onnx.errors import OnnxImportError
from openinfer_jax.onnx.fold import NONDETERMINISTIC, fold_node
from openinfer_jax.onnx.naming import identifier
from openinfer_jax.onnx.program import Program
from openinfer_jax.onnx.values import Const, Role, Step, Tensor, Value

__all__ = ["MAX_OPSET", "ImportStats", "Importer"]

#: The newest default-domain opset the importer knows (onnx 1.22's).
MAX_OPSET = 27

# A fold whose result is this big, and much bigger than its inputs (an Expand or Tile of a
# small constant), is left to run time when the op has a converter.
_FOLD_LIMIT_BYTES = 64 << 20

_DEFAULT_DOMAINS = ("", "ai.onnx")
# Ops whose result depends only on their input's shape and dtype: folded even when the
# input is computed at run time.
_SHAPE_ONLY = frozenset({"Shape", "Size", "EyeLike"})


@dataclass
class ImportStats:
    """What happened to the nodes: counts per ONNX op type, folded and dropped node names."""

    converted: collections.Counter[str] = field(default_factory=collections.Counter)
    folded: collections.Counter[str] = field(default_factory=collections.Counter)
    dropped: collections.Counter[str] = field(default_factory=collections.Counter)
    fused: collections.Counter[str] = field(default_factory=collections.Counter)
    expanded: collections.Counter[str] = field(default_factory=collections.Counter)
    defaulted_dims: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class Importer:
    """Turns one ONNX `ModelProto` into a `Program` (call `run`).

    Args:
        model: the loaded ModelProto.
        dims: values for symbolic input dims (``{"batch": 1}``); unnamed ones default to 1.
        constants: graph inputs to fold as constants (name -> array).
        state: graph input -> graph output pairs that become one persistent variable.
        base_dir: directory of the model file (for external tensor data).
    """

    def __init__(
        self,
        model: Any,
        *,
        dims: Mapping[str, int] | None = None,
        constants: Mapping[str, Any] | None = None,
        state: Mapping[str, str] | None = None,
        base_dir: str = "",
    ) -> None:
        self.model = model
        self.graph = model.graph
        self.dims = dict(dims or {})
        self.constants = {k: np.asarray(v) for k, v in (constants or {}).items()}
        self.base_dir = base_dir
        self.state = dict(state or {})
        self.program = Program()
        self.values: dict[str, Value] = {}
        self.stats = ImportStats()
        self.opsets = _opsets(model)
        self.symbolic: dict[str, tuple[str | None, ...]] = {}
        self._producer: dict[int, Step] = {}
        self._input_names: dict[int, str] = {}
        self._named: set[int] = set()
        self._node_count = 0

    # ---- the whole model ----------------------------------------------------------------------
    def run(self) -> Program:
        """Convert every node; returns the program (outputs bound, dead steps pruned).

        Raises:
            OnnxImportError: the first node (or input/output) that cannot be imported.
        """
        from openinfer_jax.onnx import converters

        self._converters = converters.CONVERTERS
        self._symbolic_dims()
        self.initializers(self.graph)
        self._inputs()
        self.nodes(self._fused_nodes())
        self._outputs()
        self._state()
        dropped = self.program.prune()
        if dropped:
            self.stats.notes.append(f"{dropped} steps whose results nothing reads were removed")
        return self.program

    def initializers(self, graph: Any) -> None:
        """Read a graph's (or an inlined branch's) initializers as constants."""
        for proto in graph.initializer:
            try:
                array = from_tensor_proto(proto, self.base_dir)
            except Exception as err:
                raise OnnxImportError(
                    f"initializer {proto.name!r} ({onnx_type_name(proto.data_type)}) cannot be "
                    f"read: {err}"
                ) from None
            self.values[proto.name] = Const(
                to_memory(array), ONNX_TO_DTYPE.get(proto.data_type), proto.name
            )
        for sparse in graph.sparse_initializer:
            raise OnnxImportError(
                f"sparse initializer {sparse.values.name!r} is not supported; densify it first"
            )

    def _inputs(self) -> None:
        for info in self.graph.input:
            name = info.name
            if name in self.constants:
                self._constant_input(info)
                continue
            if name in self.values:  # an input with a default initializer: ONNX allows both
                self.stats.notes.append(
                    f"graph input {name!r} has an initializer; it is imported as that constant"
                )
                continue
            dtype, dims = self._input_type(info)
            shape = tuple(self._dim_value(d) for d in dims)
            tensor = Tensor(dtype, shape, name, Role.INPUT, dims=dims)
            self.program.inputs.append(tensor)
            self._input_names[id(tensor)] = name
            self.values[name] = tensor
        unknown = set(self.constants) - {i.name for i in self.graph.input}
        if unknown:
            raise OnnxImportError(
                f"constants given for {', '.join(sorted(unknown))}, which are not graph inputs "
                f"(inputs: {', '.join(i.name for i in self.graph.input) or 'none'})"
            )

    def _constant_input(self, info: Any) -> None:
        array = to_memory(self.constants[info.name])
        dtype, dims = self._input_type(info)
        want = np.dtype(dtype.numpy) if not dtype.is_packed else array.dtype
        if array.dtype != want:
            raise OnnxImportError(
                f"constant for input {info.name!r} has NumPy type {array.dtype}; the model "
                f"declares {dtype.short}"
            )
        for i, (got, dim) in enumerate(zip(array.shape, dims, strict=False)):
            if isinstance(dim, int) and dim != got:
                raise OnnxImportError(
                    f"constant for input {info.name!r} has shape {array.shape}; dim {i} must be {dim}"
                )
        self.values[info.name] = Const(array, dtype, info.name)

    def _input_type(self, info: Any) -> tuple[DType, tuple[Dim, ...]]:
        kind = info.type.WhichOneof("value")
        if kind != "tensor_type":
            raise OnnxImportError(
                f"graph input {info.name!r} is a {kind or 'untyped value'}; only tensors are "
                "supported"
            )
        ttype = info.type.tensor_type
        dtype = ONNX_TO_DTYPE.get(ttype.elem_type)
        if dtype is None:
            raise OnnxImportError(
                f"graph input {info.name!r} has element type {onnx_type_name(ttype.elem_type)}, "
                "which the package has no dtype for"
            )
        if not ttype.HasField("shape"):
            raise OnnxImportError(
                f"graph input {info.name!r} has no shape; give the model a shape (rank and dims)"
            )
        dims: list[Dim] = []
        for i, dim in enumerate(ttype.shape.dim):
            which = dim.WhichOneof("value")
            if which == "dim_value":
                dims.append(int(dim.dim_value))
            else:
                label = dim.dim_param if which == "dim_param" else f"{info.name}_{i}"
                dims.append(self._sizevar(identifier(label, "dim")))
        return dtype, tuple(dims)

    def _sizevar(self, name: str) -> str:
        if name not in self.program.sizevars:
            if name in self.dims:
                value = int(self.dims[name])
            else:
                value = 1
                self.stats.defaulted_dims[name] = 1
            if value < 1:
                raise OnnxImportError(f"dim {name}={value}: a size must be >= 1")
            self.program.sizevars[name] = value
        return name

    def _dim_value(self, dim: Dim) -> int:
        return dim if isinstance(dim, int) else self.program.sizevars[dim]

    def _symbolic_dims(self) -> None:
        """Dim names ONNX's shape inference gives intermediate values (``batch``, ``seq``)."""
        from onnx import shape_inference

        try:
            inferred = shape_inference.infer_shapes(self.model, data_prop=True)
        except Exception:  # inference is only used for nicer declarations
            return
        g = inferred.graph
        for info in (*g.value_info, *g.output):
            if info.type.WhichOneof("value") != "tensor_type":
                continue
            shape = info.type.tensor_type.shape
            self.symbolic[info.name] = tuple(
                identifier(d.dim_param, "dim") if d.WhichOneof("value") == "dim_param" else None
                for d in shape.dim
            )

    def _fused_nodes(self) -> list[Any]:
        from openinfer_jax.onnx.fusion import fuse

        constants = {n.output[0]: n for n in self.graph.node if n.op_type == "Constant"}

        def const_of(name: str) -> np.ndarray | None:
            value = self.values.get(name)
            if isinstance(value, Const):
                return value.array
            node = constants.get(name)
            if node is not None and node.attribute and node.attribute[0].name == "value":
                return from_tensor_proto(node.attribute[0].t)
            return None

        nodes, fused = fuse(self.graph.node, const_of, {o.name for o in self.graph.output})
        self.stats.fused.update(fused)
        self._name_anonymous(nodes)
        return nodes

    def _name_anonymous(self, nodes: list[Any]) -> None:
        """Initializers named like ``onnx::MatMul_123`` take their first reader's node path
        and input name (``/layers.0/query/MatMul`` input B -> ``layers.0.query.MatMul.B``)."""
        from onnx import defs

        from openinfer_jax.onnx.naming import is_anonymous

        todo = {k for k, v in self.values.items() if isinstance(v, Const) and is_anonymous(k)}
        for node in nodes:
            if not todo:
                break
            for i, name in enumerate(node.input):
                if name not in todo or not node.name:
                    continue
                todo.discard(name)
                try:
                    schema = defs.get_schema(node.op_type, self.opsets.get("", 1), node.domain)
                    label = schema.inputs[min(i, len(schema.inputs) - 1)].name
                except Exception:  # an op onnx does not know: its converter will say so
                    label = f"input{i}"
                value = self.values[name]
                assert isinstance(value, Const)
                value.hint = f"{node.name}/{label}"

    # ---- nodes ----------------------------------------------------------------------------------
    def nodes(self, nodes: Any) -> None:
        """Import a list of nodes in order (a graph's, or an inlined branch's)."""
        for node in nodes:
            self._node(node, self._node_count)
            self._node_count += 1

    def _node(self, node: Any, index: int) -> None:
        name = node.name or f"{node.op_type}_{index}"
        op_type = node.op_type
        for inp in node.input:
            if inp and inp not in self.values:
                raise OnnxImportError(
                    f"input {inp!r} is not produced by any earlier node, initializer or graph "
                    "input (the graph must be topologically sorted)",
                    node=name,
                    op=op_type,
                )
        if node.domain not in _DEFAULT_DOMAINS:
            # An op of another ONNX domain (ai.onnx.preview) imports when ONNX defines it as
            # a function of default-domain ops.
            other = NodeContext(self, node, name, self.opsets.get(node.domain, 1))
            if node.domain.startswith("ai.onnx.") and self._inline_function(other):
                return
            raise OnnxImportError(
                f"op domain {node.domain!r} is not supported (only the default ONNX domain, "
                "and ONNX's function ops of other ai.onnx domains)",
                node=name,
                op=op_type,
            )
        if "" not in self.opsets:
            raise OnnxImportError(
                "the model imports no version of the default ONNX opset", node=name, op=op_type
            )
        ctx = NodeContext(self, node, name, self.opsets[""])
        if self._drop(ctx):
            return
        if self._fold(ctx):
            return
        converter = self._converters.get(op_type)
        if converter is None:
            if self._inline_function(ctx):
                return
            raise OnnxImportError(_unsupported_reason(op_type), node=name, op=op_type)
        converter.check_attributes(ctx)
        converter.fn(ctx)
        for i, out in enumerate(node.output):
            if out and out not in self.values:
                raise OnnxImportError(
                    f"output {i} ({out!r}) is not supported by the importer", node=name, op=op_type
                )
        self.stats.converted[op_type] += 1

    def _inline_function(self, ctx: NodeContext) -> bool:
        """Import the function body ONNX defines for an op without converter (functions.py)."""
        from openinfer_jax.onnx.functions import function_body

        types = [self._type_proto(v) for v in ctx.values()]
        outer = self.opsets.get("")
        body = function_body(ctx.node, ctx.opset, types, f"{ctx.name}/", outer)
        if body is None:
            return False
        nodes, body_opset = body
        self.opsets[""] = body_opset  # the body's nodes mean what its opset says
        try:
            self.nodes(nodes)
        finally:
            if outer is None:
                del self.opsets[""]
            else:
                self.opsets[""] = outer
        for i, out in enumerate(ctx.node.output):
            if out and out not in self.values:
                raise ctx.error(f"output {i} ({out!r}) is not computed by the op's function body")
        self.stats.expanded[ctx.op_type] += 1
        return True

    @staticmethod
    def _type_proto(value: Value | None) -> Any:
        """An input's ONNX TypeProto (for context-dependent function bodies)."""
        if value is None:
            return None
        from onnx import helper

        from openinfer_jax.onnx.dtypes import DTYPE_TO_ONNX

        shape = value.array.shape if isinstance(value, Const) else value.shape
        code = DTYPE_TO_ONNX.get(value.dtype) if value.dtype is not None else None
        return helper.make_tensor_type_proto(code or 0, [int(d) for d in shape])

    def _drop(self, ctx: NodeContext) -> bool:
        """Identity and inference-mode Dropout pass their input through."""
        if ctx.op_type == "Identity" or (
            ctx.op_type == "Dropout" and not self._training_dropout(ctx)
        ):
            value = ctx.value(0)
            ctx.set_output(0, value)
            if ctx.op_type == "Dropout" and len(ctx.node.output) > 1 and ctx.node.output[1]:
                ctx.set_const(1, np.ones(ctx.shape(0), dtype=bool))
            self.stats.dropped[ctx.op_type] += 1
            return True
        return False

    def _training_dropout(self, ctx: NodeContext) -> bool:
        """True for a Dropout that drops (training mode with a ratio that may be above 0)."""
        if not ctx.has(2) or not bool(np.asarray(ctx.const(2, "training_mode")).item()):
            return False
        # ratio 0 keeps everything, in training mode too (an absent ratio means 0.5)
        return not ctx.has(1) or float(np.asarray(ctx.const(1, "the ratio")).item()) != 0.0

    def _fold(self, ctx: NodeContext) -> bool:
        """Evaluate a node whose inputs are all known at import, or a shape query."""
        if ctx.op_type in NONDETERMINISTIC:
            return False
        if any(attr.type in (attr.GRAPH, attr.GRAPHS) for attr in ctx.node.attribute):
            return False  # a subgraph may read outer values: its converter inlines it
        inputs = ctx.values()
        if ctx.op_type in _SHAPE_ONLY and isinstance(inputs[0], Tensor):
            zeros = np.zeros(inputs[0].shape, dtype=inputs[0].dtype.numpy)
            arrays: list[np.ndarray | None] = [zeros]
        elif all(v is None or isinstance(v, Const) for v in inputs):
            arrays = [v.array if isinstance(v, Const) else None for v in inputs]
        else:
            return False
        results = fold_node(ctx.node, _for_reference(arrays, inputs), self.opsets, ctx.name)
        big = sum(r.nbytes for r in results if r is not None)
        given = sum(a.nbytes for a in arrays if a is not None)
        if big > _FOLD_LIMIT_BYTES and big > 4 * given and ctx.op_type in self._converters:
            return False
        for i, result in enumerate(results):
            if result is not None:
                ctx.set_const(i, result)
        self.stats.folded[ctx.op_type] += 1
        return True

    # ---- values -----------------------------------------------------------------------------------
    def bind(self, name: str, value: Value) -> None:
        """Bind ONNX value `name`; a new variable gets the name and ONNX's symbolic dims."""
        if isinstance(value, Tensor) and value.role is Role.TEMP and id(value) not in self._named:
            self._named.add(id(value))  # the first ONNX name wins (Identity adds others)
            value.hint = name
            if value.dims is None:
                value.dims = self._declared_dims(name, value.shape)
        self.values[name] = value

    def _declared_dims(self, name: str, shape: tuple[int, ...]) -> tuple[Dim, ...] | None:
        symbolic = self.symbolic.get(name)
        if symbolic is None or len(symbolic) != len(shape):
            return None
        dims: list[Dim] = []
        for sym, size in zip(symbolic, shape, strict=True):
            if sym is not None and self.program.sizevars.get(sym) == size:
                dims.append(sym)
            else:
                dims.append(size)
        return tuple(dims) if any(isinstance(d, str) for d in dims) else None

    def input_source(self, value: Value) -> str | None:
        """The graph input a variable is computed from (itself, or through steps), or None."""
        if not self._producer or len(self._producer) != len(self.program.steps):
            self._producer = {id(s.output): s for s in self.program.steps}
        stack, seen = [value], set()
        while stack:
            t = stack.pop()
            if not isinstance(t, Tensor) or id(t) in seen:
                continue
            seen.add(id(t))
            if id(t) in self._input_names:
                return self._input_names[id(t)]
            step = self._producer.get(id(t))
            if step is not None:
                stack.extend(step.inputs)
        return None

    def _outputs(self) -> None:
        claimed: set[int] = set()
        for info in self.graph.output:
            name = info.name
            if name not in self.values:
                raise OnnxImportError(f"graph output {name!r} is produced by no node")
            value = self.values[name]
            if isinstance(value, Const):
                if value.dtype is None:
                    raise OnnxImportError(
                        f"graph output {name!r} has NumPy type {value.array.dtype}, which the "
                        "package has no dtype for"
                    )
                weight = self.program.constant(value.array, value.dtype, name + "_value")
                tensor = self.program.transfer(weight, hint=name, node="output")
            elif value.role is not Role.TEMP or id(value) in claimed:
                tensor = self.program.transfer(value, hint=name, node="output")
            else:
                tensor = value
                tensor.hint = name
            claimed.add(id(tensor))
            self.program.outputs.append((name, tensor))

    def _state(self) -> None:
        """Join the requested input/output pairs into persistent state."""
        from openinfer_jax.onnx.program import StatePair

        outputs = dict(self.program.outputs)
        inputs = {t.hint: t for t in self.program.inputs}
        for in_name, out_name in self.state.items():
            if in_name not in inputs:
                raise OnnxImportError(
                    f"state {in_name}={out_name}: {in_name!r} is not a graph input "
                    f"(inputs: {', '.join(inputs) or 'none'})"
                )
            if out_name not in outputs:
                raise OnnxImportError(
                    f"state {in_name}={out_name}: {out_name!r} is not a graph output "
                    f"(outputs: {', '.join(outputs) or 'none'})"
                )
            src, dst = inputs[in_name], outputs[out_name]
            if src.dtype is not dst.dtype or src.shape != dst.shape:
                raise OnnxImportError(
                    f"state {in_name}={out_name}: the input is {src.dtype.short}{list(src.shape)} "
                    f"but the output is {dst.dtype.short}{list(dst.shape)}; they must match"
                )
            self.program.state.append(StatePair(src, dst, in_name))


def _opsets(model: Any) -> dict[str, int]:
    opsets: dict[str, int] = {}
    for entry in model.opset_import:
        domain = "" if entry.domain in _DEFAULT_DOMAINS else entry.domain
        opsets[domain] = int(entry.version)
    if opsets.get("", 0) > MAX_OPSET:
        raise OnnxImportError(
            f"opset {opsets['']} is newer than the importer supports (up to {MAX_OPSET}); "
            "export with an older opset"
        )
    return opsets


def _for_reference(arrays: list[np.ndarray | None], inputs: list[Value | None]) -> list[Any]:
    """Arrays in the types ONNX's reference expects (int4 as ml_dtypes int4 etc.)."""
    out: list[Any] = []
    for array, value in zip(arrays, inputs, strict=True):
        if array is not None and isinstance(value, Const) and value.dtype in (DType.I4, DType.U4):
            import ml_dtypes

            array = array.astype(ml_dtypes.int4 if value.dtype is DType.I4 else ml_dtypes.uint4)
        out.append(array)
    return out


def _unsupported_reason(op_type: str) -> str:
    from openinfer_jax.onnx.support import unsupported_reason

    return unsupported_reason(op_type)
