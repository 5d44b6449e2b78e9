"""ONNX's node tests through the importer: import, run on a backend, compare.

onnx 1.22 ships its node test suite (onnx/backend/test/data/node: ``model.onnx`` and
``test_data_set_*/{input,output}_N.pb`` per test). Each test is imported with every graph
input dynamic; when the importer needs an input's value at import (a Reshape's shape, Slice
bounds), the test's value for that input is passed as a constant and the import retried,
so such tests check the folded program. Then the program runs on one backend and every
output is compared with ONNX's expected values.

Backends: ``cpu`` and ``numpy`` (simulator devices), ``vulkan`` (simulator device through
Kompute), ``c`` and ``c-vulkan`` (emitted C / emitted Vulkan, built with the system compiler
and run by the generated driver).

`python -m tests.onnx.conformance --write docs/onnx.md` runs every test on every backend
and regenerates the table (tests/onnx/test_conformance.py checks it is current);
`--backends c,vulkan --sample` records only the per-op sample the suite re-runs on the slow
backends (one passing test per op: about 20 minutes instead of an hour). `--jobs N` splits the
chosen tests over N processes (the whole suite on the emitted C takes minutes on 16 cores).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).with_name("conformance.json")

BACKENDS = ("cpu", "numpy", "vulkan", "c", "c-vulkan")
_EXPANDED = re.compile(r"_expanded(_ver\d+)?$")

# ONNX's backend tests use rtol=1e-3, atol=1e-7 by default; float16/bfloat16 results get
# their storage precision.
RTOL = 1e-3
ATOL = {np.dtype(np.float64): 1e-7, np.dtype(np.float32): 1e-6, np.dtype(np.float16): 1e-3}


def node_dir() -> Path:
    """Where the installed onnx keeps its node tests."""
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"


@dataclasses.dataclass(frozen=True)
class NodeTest:
    """One node test: its directory and the ONNX op it tests."""

    name: str
    path: Path
    op: str
    expanded: bool
    tensor_io: bool  # every graph input and output is a non-string tensor


@dataclasses.dataclass
class Outcome:
    """The result of one test on one backend: pass, fail, error or unsupported."""

    status: str
    detail: str = ""


def node_tests() -> list[NodeTest]:
    """Every node test, with the op it tests (an expanded test counts for its function op)."""
    import onnx

    root = node_dir()
    ops: dict[str, str] = {}
    out = []
    for path in sorted(root.iterdir()):
        base = _EXPANDED.sub("", path.name)
        if base not in ops:
            base_model = onnx.load(str(root / base / "model.onnx"), load_external_data=False)
            ops[base] = _tested_op(base_model)
        model = onnx.load(str(path / "model.onnx"), load_external_data=False)
        values = (*model.graph.input, *model.graph.output)
        tensor_io = all(
            v.type.WhichOneof("value") == "tensor_type" and v.type.tensor_type.elem_type != 8
            for v in values
        )
        out.append(NodeTest(path.name, path, ops[base], path.name != base, tensor_io))
    return out


def _tested_op(model: Any) -> str:
    nodes = [n for n in model.graph.node if n.op_type != "Constant"] or list(model.graph.node)
    domain = nodes[-1].domain
    op = nodes[-1].op_type
    return op if domain in ("", "ai.onnx") else f"{domain}.{op}"


def _datasets(path: Path) -> list[tuple[list[Any], list[Any]]]:
    """(inputs, outputs) TensorProtos of every test_data_set_N."""
    import onnx

    sets = []
    for ds in sorted(path.glob("test_data_set_*")):
        pair: list[list[Any]] = []
        for kind in ("input", "output"):
            files = sorted(ds.glob(f"{kind}_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
            protos = []
            for f in files:
                proto = onnx.TensorProto()
                proto.ParseFromString(f.read_bytes())
                protos.append(proto)
            pair.append(protos)
        sets.append((pair[0], pair[1]))
    return sets


@dataclasses.dataclass
class Prepared:
    """A test imported and written: the program, its files and the feeds per step."""

    test: NodeTest
    result: Any
    graph_path: Path
    model_path: Path
    feeds: list[dict[str, np.ndarray]]
    expected: list[dict[str, np.ndarray]]
    folded_inputs: tuple[str, ...]

    @property
    def folded(self) -> bool:
        """True when import computed every output (the program has no op step)."""
        return sum(self.result.report.ops_used.values()) == 0


def prepare(test: NodeTest, work: Path) -> Prepared | Outcome:
    """Import `test` into `work` (graph + .oinf); an Outcome when it cannot be imported."""
    import onnx

    from openinfer_jax.onnx import NeedsConstantError, OnnxImportError, import_model
    from openinfer_jax.onnx.arrays import from_tensor_proto, to_memory
    from openinfer_jax.onnx.naming import identifier

    model = onnx.load(str(test.path / "model.onnx"))
    for info in (*model.graph.input, *model.graph.output):
        if info.type.WhichOneof("value") != "tensor_type":
            return Outcome("unsupported", f"{info.name} is a {info.type.WhichOneof('value')}")
    sets = _datasets(test.path)
    if not sets:
        return Outcome("unsupported", "no test data")
    input_names = [
        i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}
    ]
    output_names = [o.name for o in model.graph.output]
    arrays = [[np.asarray(from_tensor_proto(p)) for p in ins] for ins, _ in sets]
    wants = [[np.asarray(from_tensor_proto(p)) for p in outs] for _, outs in sets]
    dims: dict[str, int] = {}
    for info, value in zip(model.graph.input, arrays[0], strict=False):
        for i, d in enumerate(info.type.tensor_type.shape.dim):
            if d.WhichOneof("value") != "dim_value" and i < value.ndim:
                label = d.dim_param if d.dim_param else f"{info.name}_{i}"
                dims.setdefault(identifier(label, "dim"), int(value.shape[i]))
    constants: dict[str, np.ndarray] = {}
    for _ in range(len(input_names) + 1):
        try:
            result = import_model(model, dims=dims, constants=constants)
            break
        except NeedsConstantError as err:
            if err.input_name in constants or len(sets) > 1:
                return Outcome("unsupported", err.reason)
            constants[err.input_name] = arrays[0][input_names.index(err.input_name)]
        except OnnxImportError as err:
            return Outcome("unsupported", str(err))
    else:  # pragma: no cover
        return Outcome("unsupported", "import did not converge")
    work.mkdir(parents=True, exist_ok=True)
    graph_path, model_path = work / "model.graph", work / "model.oinf"
    graph_path.write_text(result.text)
    result.write_oinf(model_path)
    try:
        result.check(graph_path, model_path)
    except OnnxImportError as err:
        return Outcome("error", f"import produced an invalid program: {err}")
    names_in, names_out = result.built.inputs, result.built.outputs
    feeds = [
        {
            names_in[n]: to_memory(a)
            for n, a in zip(input_names, values, strict=False)
            if n not in constants
        }
        for values in arrays
    ]
    expected = [
        {names_out[n]: to_memory(a) for n, a in zip(output_names, values, strict=True)}
        for values in wants
    ]
    return Prepared(test, result, graph_path, model_path, feeds, expected, tuple(constants))


def compare(name: str, got: np.ndarray, want: np.ndarray) -> str | None:
    """None if equal within tolerance, else what differs."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"{name}: shape {got.shape} != expected {want.shape}"
    if got.dtype != want.dtype:
        return f"{name}: dtype {got.dtype} != expected {want.dtype}"
    if got.dtype.kind in "fc" or got.dtype.name.startswith(("bfloat16", "float8", "float4")):
        g, w = got.astype(np.float64), want.astype(np.float64)
        atol = ATOL.get(got.dtype, 1e-2)
        rtol = RTOL if got.dtype.itemsize >= 4 else 1e-2
        same_nan = np.isnan(g) == np.isnan(w)
        with np.errstate(invalid="ignore"):  # inf - inf where both are the same infinity
            close = np.abs(g - w) <= atol + rtol * np.abs(w)
        ok = same_nan & (np.isnan(w) | close | (g == w))
        if not ok.all():
            bad = np.argwhere(~ok)[0]
            return (
                f"{name}: {int((~ok).sum())}/{ok.size} elements differ, e.g. at {tuple(bad)}: "
                f"{g[tuple(bad)]!r} != {w[tuple(bad)]!r}"
            )
        return None
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)[0] if got.ndim else ()
        return f"{name}: values differ, e.g. at {tuple(bad)}: {got[tuple(bad)]!r} != {want[tuple(bad)]!r}"
    return None


def run_simulator(prepared: Prepared, device: str) -> Outcome:
    """Run the program in the simulator on `device`, one step per data set."""
    from openinfer_jax.errors import OpenInferError
    from openinfer_jax.oinf import ModelLoader
    from openinfer_jax.sim import Simulator

    try:
        with ModelLoader.open(prepared.model_path) as model:
            ex = Simulator(model, prepared.result.graph, device=device).make_executor()
            for feed, want in zip(prepared.feeds, prepared.expected, strict=True):
                ex.insert(**feed)
                ex.step()
                for var, value in want.items():
                    problem = compare(var, ex.fetch(var), value)
                    if problem:
                        return Outcome("fail", problem)
    except OpenInferError as err:
        return Outcome("error", f"{type(err).__name__}: {err}"[:400])
    return Outcome("pass")


def run_emitted(prepared: Prepared, target: str, work: Path) -> Outcome:
    """Emit C (target ``c``) or Vulkan (``c-vulkan``), build, run the driver, compare."""
    from openinfer_jax.emit import Synthesizer
    from openinfer_jax.errors import OpenInferError
    from openinfer_jax.oinf import ModelLoader
    from tests.emit.harness import build, read_tensor, run_driver

    outputs = list(prepared.expected[0])
    try:
        with ModelLoader.open(prepared.model_path) as model:
            synth = Synthesizer("vulkan" if target == "c-vulkan" else "c")
            plan = synth.synthesize(model, prepared.result.graph, name="prog", outputs=outputs)
    except OpenInferError as err:
        return Outcome("error", f"{type(err).__name__}: {err}"[:400])
    work.mkdir(parents=True, exist_ok=True)
    try:
        exe = build(plan, work / "c")
    except AssertionError as err:
        return Outcome("error", f"build failed: {str(err)[:300]}")
    proc = run_driver(exe, prepared.model_path, prepared.feeds, work)
    if proc.returncode != 0:
        return Outcome("error", f"driver exit {proc.returncode}: {proc.stderr[-300:]}")
    dtypes = {v.name: v.dtype for v in prepared.result.graph.vars}
    from openinfer_jax.ir import infer_var_types

    types = infer_var_types(prepared.result.graph)
    for step, want in enumerate(prepared.expected):
        for var, value in want.items():
            dtype = dtypes.get(var) or types[var].dtype
            got = read_tensor(work / "out" / f"{var}.{step}.bin", dtype)
            problem = compare(
                var, got.reshape(value.shape) if got.size == value.size else got, value
            )
            if problem:
                return Outcome("fail", problem)
    return Outcome("pass")


def run_test(test: NodeTest, backends: Sequence[str], work: Path) -> dict[str, Outcome]:
    """`test` on every backend in `backends` (one import)."""
    prepared = prepare(test, work)
    if isinstance(prepared, Outcome):
        return {b: prepared for b in backends}
    out: dict[str, Outcome] = {}
    for backend in backends:
        if backend in ("c", "c-vulkan"):
            outcome = run_emitted(prepared, backend, work / backend)
        else:
            outcome = run_simulator(prepared, backend)
        if outcome.status == "pass" and prepared.folded:
            outcome = Outcome("folded", "every output is computed at import")
        out[backend] = outcome
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run node tests (results merged into --results), optionally regenerate the docs table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--filter", default="", help="regex on test names")
    parser.add_argument("--results", type=Path, default=RESULTS, help="JSON results file")
    parser.add_argument("--write", type=Path, help="regenerate the table in this docs page")
    parser.add_argument(
        "--reuse", action="store_true", help="only rewrite the table from --results"
    )
    parser.add_argument(
        "--sample", action="store_true",
        help="per op, only the first test (name order) recorded as passing on cpu and numpy",
    )  # fmt: skip
    parser.add_argument(
        "--stale", action="store_true",
        help="only tests with no result for a backend, or whose cpu status changed since",
    )  # fmt: skip
    parser.add_argument(
        "--jobs", type=int, default=1,
        help="run the chosen tests in this many processes (results merged at the end)",
    )  # fmt: skip
    parser.add_argument("--shard", default="", help=argparse.SUPPRESS)  # K/N, set by --jobs
    args = parser.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    tests = [t for t in node_tests() if re.search(args.filter, t.name)]
    results: dict[str, dict[str, dict[str, str]]] = (
        json.loads(args.results.read_text()) if args.results.exists() else {}
    )
    if args.sample:
        tests = sample(tests, results)
    if args.stale:
        tests = [t for t in tests if _stale(results.get(t.name, {}), backends)]
    if args.shard:
        k, n = (int(v) for v in args.shard.split("/"))
        tests = tests[k::n]
    if args.jobs > 1 and not args.reuse:
        results.update(_run_jobs(args, tests))
        args.results.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    elif not args.reuse:
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            for i, test in enumerate(tests):
                outcomes = run_test(test, backends, Path(tmp) / test.name)
                entry = results.setdefault(test.name, {})
                entry.update({b: dataclasses.asdict(o) for b, o in outcomes.items()})
                cpu = entry.get("cpu", {}).get("status")
                for b in outcomes:  # what the cpu said when this backend was measured
                    if b != "cpu" and cpu is not None:
                        entry[b]["cpu_status"] = cpu
                line = " ".join(f"{b}={o.status}" for b, o in outcomes.items())
                print(f"[{i + 1}/{len(tests)}] {test.name}: {line}", flush=True)
        print(f"{len(tests)} tests in {time.perf_counter() - start:.0f} s")
        args.results.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    if args.write:
        from tests.onnx.table import splice

        every = node_tests()
        args.write.write_text(splice(args.write.read_text(), every, results, BACKENDS))
    return 0


def _run_jobs(
    args: argparse.Namespace, tests: Sequence[NodeTest]
) -> dict[str, dict[str, dict[str, str]]]:
    """The chosen tests split over `args.jobs` child processes of this module (the same
    selection, every jobs-th test each so slow ops spread); their entries, merged."""
    import subprocess

    selection = ["--backends", args.backends, "--filter", args.filter]
    selection += ["--sample"] * args.sample + ["--stale"] * args.stale
    start = time.perf_counter()
    merged: dict[str, dict[str, dict[str, str]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        for k in range(args.jobs):
            shard = Path(tmp) / f"shard{k}.json"
            if args.results.exists():  # the same base: same selection, cpu statuses
                shard.write_text(args.results.read_text())
            cmd = [sys.executable, "-m", "tests.onnx.conformance", *selection,
                   "--shard", f"{k}/{args.jobs}", "--results", str(shard)]  # fmt: skip
            log = (Path(tmp) / f"shard{k}.log").open("w")
            procs.append((subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log))
        for k, (proc, log) in enumerate(procs):
            proc.wait()
            log.close()
            if proc.returncode != 0:
                tail = (Path(tmp) / f"shard{k}.log").read_text()[-2000:]
                raise SystemExit(f"shard {k}/{args.jobs} failed (exit {proc.returncode}):\n{tail}")
        for k in range(args.jobs):  # each shard's own tests (the rest is the base copy)
            shard_results = json.loads((Path(tmp) / f"shard{k}.json").read_text())
            merged.update({t.name: shard_results[t.name] for t in tests[k :: args.jobs]})
    print(f"{len(tests)} tests in {time.perf_counter() - start:.0f} s over {args.jobs} processes")
    return merged


def sample(tests: Sequence[NodeTest], results: dict[str, Any]) -> list[NodeTest]:
    """Per ONNX op, the first test in name order whose recorded cpu and numpy results pass
    (the sample the slow backends run: `--backends c,vulkan --sample`)."""
    chosen: dict[str, NodeTest] = {}
    for test in sorted(tests, key=lambda t: t.name):
        recorded = results.get(test.name, {})
        if test.op not in chosen and all(
            recorded.get(b, {}).get("status") == "pass" for b in ("cpu", "numpy")
        ):
            chosen[test.op] = test
    return sorted(chosen.values(), key=lambda t: t.name)


def _stale(recorded: dict[str, dict[str, str]], backends: Sequence[str]) -> bool:
    """True if a backend has no result, or one taken when the cpu status was another."""
    cpu = recorded.get("cpu", {}).get("status")
    return any(b not in recorded or recorded[b].get("cpu_status", cpu) != cpu for b in backends)


if __name__ == "__main__":
    sys.exit(main())
