"""Run one op call on every backend, for the tests of single ops.

`run_everywhere` builds a one-node graph for the call and returns the output of: the op's
JAX lowering (``jax``), its NumPy reference (``reference``), the simulator on XLA CPU
(``cpu``) and on its NumPy interpreter (``numpy``), the simulator on the Vulkan device
(``vulkan``, lavapipe here; every node of the call, after composite expansion, must run on
the device, not fall back to the CPU) and the emitted C program (``c``, built with the
system compiler). Tests compare each with a NumPy formula of their own.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.emit import Synthesizer
from openinfer_jax.ir.nodes import Block, Graph, MemoryKind, Op, Return, VarDecl, VarRef
from openinfer_jax.oinf import ModelLoader, write_oinf
from openinfer_jax.ops import registry
from openinfer_jax.sim import Simulator
from openinfer_jax.vk import vulkan_available
from tests.emit.harness import CC, build, read_tensor, run_driver

BACKENDS = ("jax", "reference", "cpu", "numpy", "vulkan", "c")


def one_op_graph(
    op: str, dtypes: Sequence[DType], shapes: Sequence[tuple[int, ...]], params: Mapping[str, Any]
) -> tuple[Graph, DType]:
    """``op(i0, i1, ...) >> out`` over dynamic inputs; returns the graph and out's dtype."""
    opdef = registry.get(op)
    assert opdef is not None, op
    out_dtype, out_shape = opdef.infer(list(dtypes), [tuple(s) for s in shapes], dict(params))
    decls = [VarDecl(f"i{k}", MemoryKind.DYNAMIC, d, tuple(s))
             for k, (d, s) in enumerate(zip(dtypes, shapes))]  # fmt: skip
    decls.append(VarDecl("out", MemoryKind.VOLATILE, out_dtype, tuple(out_shape)))
    node = Op(op, tuple(VarRef(f"i{k}") for k in range(len(dtypes))), tuple(params.items()),
              VarRef("out"))  # fmt: skip
    return Graph(tuple(decls), (Block("entry", (node, Return())),)), out_dtype


def _simulate(model: Path, graph: Graph, feed: dict[str, np.ndarray], device: str) -> np.ndarray:
    with ModelLoader.open(model) as loader:
        sim = Simulator(loader, graph, device=device)
        if device == "vulkan":
            sim.with_trace()
        ex = sim.make_executor()
        ex.insert(**feed)
        ex.step()
        if device == "vulkan":
            fallbacks = [(e.node_desc, w) for e in ex.trace() for w in e.warnings
                         if e.kind == "OpExecute" and w.startswith("vulkan")]  # fmt: skip
            assert not fallbacks, f"nodes fell back to the CPU: {fallbacks}"
        return np.asarray(ex.fetch("out"))


def run_everywhere(
    op: str,
    arrays: Sequence[np.ndarray],
    dtypes: Sequence[DType],
    params: Mapping[str, Any],
    tmp_path: Path,
    backends: Sequence[str] = BACKENDS,
) -> dict[str, np.ndarray]:
    """The output of ``op(*arrays, **params)`` on each of `backends` (see the module doc)."""
    opdef = registry.get(op)
    assert opdef is not None, op
    graph, out_dtype = one_op_graph(op, dtypes, [a.shape for a in arrays], params)
    feed = {f"i{k}": np.asarray(a) for k, a in enumerate(arrays)}
    model = tmp_path / "empty.oinf"
    if not model.exists():
        write_oinf(model, sizevars={}, metadata={}, tensors={})
    out: dict[str, np.ndarray] = {}
    for name in backends:
        if name == "jax":
            out[name] = np.asarray(opdef.lower_jax(*arrays, dtypes=list(dtypes), **params))
        elif name == "reference":
            out[name] = np.asarray(opdef.reference(*arrays, dtypes=list(dtypes), **params))
        elif name in ("cpu", "numpy"):
            out[name] = _simulate(model, graph, feed, name)
        elif name == "vulkan":
            ok, reason = vulkan_available()
            if not ok:
                pytest.skip(f"Vulkan unavailable: {reason}")
            out[name] = _simulate(model, graph, feed, "vulkan")
        elif name == "c":
            if shutil.which(CC) is None:
                pytest.skip("no C compiler")
            work = tmp_path / f"c_{len(list(tmp_path.iterdir()))}"
            work.mkdir()
            plan = Synthesizer("c").synthesize(model, graph, name="prog", outputs=["out"])
            exe = build(plan, work / "build")
            result = run_driver(exe, model, [feed], work)
            assert result.returncode == 0, result.stderr
            out[name] = read_tensor(work / "out" / "out.0.bin", out_dtype)
        else:
            raise ValueError(f"unknown backend {name!r}")
    return out


def assert_all_close(
    results: Mapping[str, np.ndarray], want: np.ndarray, dtype: DType, rtol: float, atol: float
) -> None:
    """Every backend's result equals `want` (NaN where it is NaN) within the tolerances."""
    for name, got in results.items():
        assert got.shape == want.shape, f"{name}: shape {got.shape} != {want.shape}"
        np.testing.assert_allclose(
            np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol,
            equal_nan=True, err_msg=f"{name} ({dtype.short})",
        )  # fmt: skip
