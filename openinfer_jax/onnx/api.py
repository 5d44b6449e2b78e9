"""The library entry points: `import_model` (in memory) and `import_onnx` (files)."""

from __future__ import annotations

import collections
import json
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from openinfer_jax.ir.nodes import Graph, Node, Op
from openinfer_jax.ir.walk import walk
from openinfer_jax.onnx.build import BuiltModel, build
from openinfer_jax.onnx.errors import OnnxImportError
from openinfer_jax.onnx.importer import Importer
from openinfer_jax.onnx.loops import LoopItem, roll_loops
from openinfer_jax.onnx.peephole import optimize
from openinfer_jax.onnx.report import ImportReport, LoopSummary

__all__ = ["ImportResult", "import_model", "import_onnx", "load_model"]


def load_model(src: Any) -> tuple[Any, str, str]:
    """(ModelProto, directory for external data, label) from a path, bytes or a ModelProto.

    Raises:
        OnnxImportError: the file is missing or does not parse as an ONNX model.
    """
    try:
        import onnx
    except ImportError:  # pragma: no cover - the onnx extra is part of make setup
        raise OnnxImportError(
            "the onnx package is not installed (pip install 'openinfer-jax[onnx]')"
        ) from None
    if isinstance(src, onnx.ModelProto):
        return src, "", src.graph.name or "model"
    if isinstance(src, (bytes, bytearray)):
        try:
            return onnx.load_from_string(bytes(src)), "", "model"
        except Exception as err:
            raise OnnxImportError(f"the bytes do not parse as an ONNX model: {err}") from None
    path = Path(src)
    if not path.is_file():
        raise OnnxImportError(f"{path}: no such file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as err:
        raise OnnxImportError(f"{path} does not parse as an ONNX model: {err}") from None
    if not model.HasField("graph"):
        raise OnnxImportError(f"{path} holds no graph (not an ONNX model file?)")
    try:
        from onnx.external_data_helper import load_external_data_for_model

        load_external_data_for_model(model, str(path.parent))
    except Exception as err:
        raise OnnxImportError(f"{path}: external tensor data cannot be read: {err}") from None
    return model, str(path.parent), str(path)


@dataclass
class ImportResult:
    """An imported model in memory: the program and what its `.oinf` holds.

    `text` is the graph{} text written to ``NAME.graph``; `metadata` goes into the `.oinf`
    with the tensors and sizevars of `built`.
    """

    built: BuiltModel
    report: ImportReport
    header: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def graph(self) -> Graph:
        """The program's IR."""
        return self.built.graph

    @property
    def text(self) -> str:
        """The program as graph{} text, with a header comment."""
        return self.header + str(self.built.graph)

    def write_oinf(self, path: str | os.PathLike[str]) -> Path:
        """Write the `.oinf` (weights, sizevars, metadata) atomically to `path`."""
        from openinfer_jax.oinf import OinfWriter

        with OinfWriter(path) as writer:
            for name, value in sorted(self.built.sizevars.items()):
                writer.add_sizevar(name, value)
            for key, value in self.metadata.items():
                writer.add_metadata(key, value)
            for name, (dtype, array) in self.built.tensors.items():
                writer.add_tensor(name, np.asarray(array), dtype=dtype)
        return Path(path)

    def save(
        self, out_dir: str | os.PathLike[str], name: str = "model", *, force: bool = False
    ) -> list[Path]:
        """Write ``NAME.graph``, ``NAME.oinf`` and ``NAME.report.txt`` into `out_dir`.

        The files are written and checked in a temporary directory first (the graph text
        parses back, and validates against the written `.oinf`), then moved into place, so
        a failure leaves `out_dir` as it was.

        Raises:
            OnnxImportError: a destination file exists (without `force`), `out_dir` is a
                file, or the program does not validate (a bug in the importer: the message
                says what the validator found).
        """
        out = Path(out_dir)
        if out.exists() and not out.is_dir():
            raise OnnxImportError(f"{out} exists and is not a directory")
        names = [f"{name}.graph", f"{name}.oinf", f"{name}.report.txt"]
        targets = [out / n for n in names]
        existing = [t for t in targets if t.exists()]
        if existing and not force:
            raise OnnxImportError(
                f"{', '.join(str(t) for t in existing)} exists; pass --force to overwrite"
            )
        parent = out if out.is_dir() else out.parent
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".import-", dir=parent))
        try:
            graph_path, oinf_path, report_path = (tmp / n for n in names)
            graph_path.write_text(self.text)
            self.write_oinf(oinf_path)
            self.check(graph_path, oinf_path)
            self.report.files = targets[:2]
            report_path.write_text(self.report.format() + "\n")
            out.mkdir(parents=True, exist_ok=True)
            for src, dst in zip((graph_path, oinf_path, report_path), targets, strict=True):
                os.replace(src, dst)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return targets

    def check(self, graph_path: Path, oinf_path: Path) -> None:
        """Parse the written text and validate it against the written `.oinf`.

        Raises:
            OnnxImportError: either check fails (names what the validator found).
        """
        from openinfer_jax.core.errors import OpenInferError
        from openinfer_jax.ir import validate
        from openinfer_jax.oinf import ModelLoader
        from openinfer_jax.trace import parse_file

        try:
            graph = parse_file(graph_path)
            with ModelLoader.open(oinf_path) as model:
                validate(graph, model)
        except OpenInferError as err:
            raise OnnxImportError(f"the imported program does not validate: {err}") from None


def import_model(
    src: Any,
    *,
    dims: Mapping[str, int] | None = None,
    constants: Mapping[str, Any] | None = None,
    state: Mapping[str, str] | None = None,
    loops: bool = True,
) -> ImportResult:
    """Import an ONNX model (path, bytes or ModelProto) into a program, in memory.

    Args:
        dims: values for symbolic input dims (``{"batch": 1}``); others default to 1.
        constants: graph inputs to fold as constants (name -> array).
        state: graph input -> graph output pairs kept as persistent state
            (``{"h_in": "h_out"}``): the step reads the state, and writes the output back.
        loops: fold repeated layers into loops over prefix tables.

    Raises:
        OnnxImportError: the file does not parse, an op, attribute, type or opset is not
            supported, or a shape cannot be folded; the message names the node and op.
    """
    start = time.perf_counter()
    model, base_dir, label = load_model(src)
    importer = Importer(model, dims=dims, constants=constants, state=state, base_dir=base_dir)
    program = importer.run()
    importer.stats.fused.update(optimize(program))
    items = roll_loops(program) if loops else list(program.steps)
    built = build(program, items)
    stats = importer.stats
    report = ImportReport(
        source=label,
        nodes=len(model.graph.node),
        opset=importer.opsets.get("", 0),
        converted=stats.converted,
        folded=stats.folded,
        dropped=stats.dropped,
        fused=stats.fused,
        expanded=stats.expanded,
        ops_used=_op_counts(built.graph.blocks[0].nodes),
        loops=[
            LoopSummary(i.name, i.count, len(i.body), len(i.tables))
            for i in items
            if isinstance(i, LoopItem)
        ],
        sizevars=dict(built.sizevars),
        defaulted_dims=dict(stats.defaulted_dims),
        inputs=built.inputs,
        outputs=built.outputs,
        state={p.input.hint: p.name for p in program.state},
        weights=len(built.tensors),
        weight_bytes=sum(int(a.nbytes) for _, a in built.tensors.values()),
        notes=list(stats.notes),
    )
    header = (
        f"// Imported from {Path(label).name} (ONNX opset {report.opset}) by openinfer import.\n"
        f"// inputs: {', '.join(built.inputs.values()) or 'none'}; "
        f"outputs: {', '.join(built.outputs.values()) or 'none'}\n"
    )
    metadata = {
        "onnx.inputs": json.dumps(built.inputs),
        "onnx.outputs": json.dumps(built.outputs),
        "onnx.opset": report.opset,
    }
    if model.producer_name:
        metadata["onnx.producer"] = json.dumps(model.producer_name, ensure_ascii=True)[1:-1]
    result = ImportResult(built, report, header, metadata)
    report.graph_lines = result.text.count("\n")
    report.seconds = time.perf_counter() - start
    return result


def import_onnx(
    src: Any,
    out_dir: str | os.PathLike[str],
    *,
    name: str | None = None,
    dims: Mapping[str, int] | None = None,
    constants: Mapping[str, Any] | None = None,
    state: Mapping[str, str] | None = None,
    loops: bool = True,
    force: bool = False,
) -> ImportReport:
    """Import an ONNX model and write ``NAME.graph``, ``NAME.oinf`` and ``NAME.report.txt``.

    `name` defaults to the source file's stem (``model.onnx`` -> ``model``). Nothing is
    written unless the whole import succeeds and the program validates.

    Raises:
        OnnxImportError: as `import_model`, or for the destination (see `ImportResult.save`).
    """
    start = time.perf_counter()
    result = import_model(src, dims=dims, constants=constants, state=state, loops=loops)
    stem = name or (Path(src).stem if isinstance(src, (str, os.PathLike)) else "model")
    result.save(out_dir, stem, force=force)
    result.report.seconds = time.perf_counter() - start
    return result.report


def _op_counts(nodes: tuple[Node, ...]) -> collections.Counter[str]:
    return collections.Counter(node.op for node in walk(nodes) if isinstance(node, Op))
