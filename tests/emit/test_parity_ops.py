"""A sample of the op conformance matrix (tests/ops/conformance_cases.py): many cases per
graph (one compile each), emitted C vs the simulator on the matrix's edge-value inputs,
compared with the matrix's own tolerance rules (exact for ints, bool and packed types).

Ternary dtypes (t2/t1) are stored unpacked (one int8 per element, like the simulator): every
ternary cell of the matrix runs in its own test, since the stride would sample only a few."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.emit import Plan, Synthesizer
from openinfer_jax.ir.nodes import Block, Graph, MemoryKind, Op, Return, VarDecl, VarRef
from openinfer_jax.oinf import ModelLoader, write_oinf
from openinfer_jax.ops import registry
from openinfer_jax.sim import Simulator
from tests.emit.harness import CC, build, read_tensor, run_driver
from tests.ops.conformance_cases import Case, assert_conforms, build_cases, edge_inputs

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")

TERNARY = {DType.T1, DType.T2}
CHUNKS = 3
STRIDE = 6  # every 6th case of the matrix: ~400 cases over all ops and dtypes
# -O0 keeps the build of a few thousand generated lines fast; the examples build at -O2.
FLAGS = ["-std=c99", "-O0", "-Wall", "-Wextra", "-Werror"]


def _sample() -> list[Case]:
    cases = [c for c in build_cases() if not TERNARY & set(c.dtypes)]
    return cases[::STRIDE]


def _ternary() -> list[Case]:
    return [c for c in build_cases() if TERNARY & set(c.dtypes)]


def run_cases(
    cases: list[Case], tmp_path: Path, synth: Synthesizer | None = None
) -> tuple[list[str], Plan]:
    """Emit `cases` as one graph (C target unless `synth` says otherwise), build and run it
    for one step, compare with the simulator: (the first line of each mismatch, the plan)."""
    graph, feeds, out_dtypes = _graph(cases)
    model = tmp_path / "empty.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={})
    outputs = [f"o{k}" for k in range(len(cases))]
    plan = (synth or Synthesizer("c")).synthesize(model, graph, name="prog", outputs=outputs)
    exe = build(plan, tmp_path / "c", flags=FLAGS)
    step = {f"i{k}_{j}": arr for k, inputs in enumerate(feeds) for j, arr in enumerate(inputs)}
    result = run_driver(exe, model, [step], tmp_path)
    assert result.returncode == 0, result.stderr
    failures = []
    with ModelLoader.open(model) as loader:
        ex = Simulator(loader, graph).make_executor()
        ex.insert(**step)
        ex.step()
        for k, case in enumerate(cases):
            want = np.asarray(ex.fetch(f"o{k}"))
            got = read_tensor(tmp_path / "out" / f"o{k}.0.bin", out_dtypes[k])
            try:
                assert_conforms(case, feeds[k], got.astype(want.dtype), want)
            except AssertionError as err:
                failures.append(str(err).splitlines()[0][:300])
    return failures, plan


def _graph(cases: list[Case]) -> tuple[Graph, list[list[np.ndarray]], list[DType]]:
    decls, nodes, feeds, out_dtypes = [], [], [], []
    for k, case in enumerate(cases):
        inputs = edge_inputs(case)
        opdef = registry.get(case.op)
        assert opdef is not None
        out_dtype, out_shape = opdef.infer(
            list(case.dtypes), [a.shape for a in inputs], case.params
        )
        refs = []
        for j, (dtype, arr) in enumerate(zip(case.dtypes, inputs)):
            decls.append(VarDecl(f"i{k}_{j}", MemoryKind.DYNAMIC, dtype, tuple(arr.shape)))
            refs.append(VarRef(f"i{k}_{j}"))
        decls.append(VarDecl(f"o{k}", MemoryKind.VOLATILE, out_dtype, tuple(out_shape)))
        nodes.append(Op(case.op, tuple(refs), tuple(case.params.items()), VarRef(f"o{k}")))
        feeds.append(inputs)
        out_dtypes.append(out_dtype)
    graph = Graph(tuple(decls), (Block("entry", (*nodes, Return())),))
    return graph, feeds, out_dtypes


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_conformance_sample_matches_simulator(chunk: int, tmp_path: Path) -> None:
    cases = _sample()[chunk::CHUNKS]
    failures, _ = run_cases(cases, tmp_path)
    assert not failures, f"{len(failures)} of {len(cases)} cases differ:\n" + "\n".join(
        failures[:40]
    )


def test_every_ternary_cell_matches_simulator(tmp_path: Path) -> None:
    """All t2/t1 cells of the matrix (abs, neg, mul, sign, eq/ne, is_neg, filter, fill and
    casts from t2/t1 to every dtype, saturating and wrapping) match the simulator exactly."""
    cases = _ternary()
    assert {c.op for c in cases} >= {"abs", "neg", "mul", "sign", "cast", "filter", "fill"}
    assert {DType.T1, DType.T2} <= {d for c in cases for d in c.dtypes}
    failures, _ = run_cases(cases, tmp_path)
    assert not failures, f"{len(failures)} of {len(cases)} cases differ:\n" + "\n".join(
        failures[:40]
    )


def test_clamp_bounds_outside_the_storage_range(tmp_path: Path) -> None:
    """Regression: integer clamp bounds beyond the dtype's range (clamp i1 min=1, u1 min=-2.5)
    are clipped to the range before clamping, as the reference does (found on the full matrix)."""
    cases = [
        c
        for c in build_cases()
        if c.op == "clamp" and c.dtypes[0].is_packed and not TERNARY & set(c.dtypes)
    ]
    assert len(cases) >= 6
    failures, _ = run_cases(cases, tmp_path)
    assert not failures, "\n".join(failures)
