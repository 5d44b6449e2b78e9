"""Parity harness: emit C for (model, graph), build it with the system compiler, run the
generated driver over several steps, and compare every output with the simulator.

Float tolerance (documented in docs/synthesis.md): rtol = atol = 1e-4 for f32 (the C kernels
accumulate in a different order than XLA and compute norms/attention in double), 1e-9 for
f64, and one unit of the storage format for f16/bf16/f8; integers and bool are exact.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.emit import Plan, Synthesizer
from openinfer_jax.emit.driver_run import CFLAGS as DRIVER_CFLAGS
from openinfer_jax.emit.driver_run import (  # noqa: F401 - write_tensor: for the tests
    build_command,
    read_tensor,
    write_inputs,
    write_tensor,
)
from openinfer_jax.oinf import ModelLoader
from openinfer_jax.sim import Simulator

CC = os.environ.get("CC", "cc")
CFLAGS = list(DRIVER_CFLAGS)

TOLERANCE: dict[DType, float] = {
    DType.F32: 1e-4,
    DType.F64: 1e-9,
    DType.F16: 2e-3,
    DType.BF16: 1.6e-2,
    DType.F8: 0.25,
}


def build(
    plan: Plan, out: Path, *, cc: str = CC, flags: Sequence[str] = CFLAGS, link: bool = True
) -> Path:
    """Emit `plan` into `out` and compile it (driver included); returns the executable (or object dir)."""
    plan.emit(out)
    command = build_command(plan, cc, flags)
    if not link:
        for src in [f for f in command if f.endswith(".c")]:
            subprocess.run(
                [cc, *flags, "-c", src, "-o", src[:-2] + ".o"],
                cwd=out,
                check=True,
                capture_output=True,
                text=True,
            )
        return out
    result = subprocess.run(command, cwd=out, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
    return out / "driver"


def run_driver(
    exe: Path, model: Path, steps: Sequence[Mapping[str, np.ndarray]], work: Path
) -> subprocess.CompletedProcess[str]:
    """Write the inputs of every step, run the driver, return the process result."""
    ins, outs = write_inputs(work, steps)
    return subprocess.run(
        [str(exe), str(model), str(len(steps)), str(ins), str(outs)], capture_output=True, text=True
    )


def assert_close(name: str, got: np.ndarray, want: np.ndarray, dtype: DType) -> None:
    """Exact for ints/bool, the documented tolerance for floats (NaN matches NaN)."""
    assert got.shape == want.shape, f"{name}: C shape {got.shape} != simulator shape {want.shape}"
    if dtype.is_float:
        tol = TOLERANCE[dtype]
        np.testing.assert_allclose(
            got.astype(np.float64),
            want.astype(np.float64),
            rtol=tol,
            atol=tol,
            equal_nan=True,
            err_msg=name,
        )
    else:
        np.testing.assert_array_equal(got, want, err_msg=name)


def parity(
    tmp: Path,
    model: Path,
    graph: Any,
    steps: Sequence[Mapping[str, np.ndarray]],
    *,
    outputs: Sequence[str] | None = None,
    arch: Any = "c",
    embed: bool = False,
    flags: Sequence[str] = CFLAGS,
) -> dict[str, Any]:
    """Emit, build (with `flags`), run both sides, compare every output of every step.

    Returns a summary: the plan, how many outputs were compared and the executable (the
    driver's outputs are under `tmp / "out"`)."""
    synth = Synthesizer(arch) if not isinstance(arch, Synthesizer) else arch
    plan = synth.synthesize(model, graph, name="prog", outputs=outputs, embed_weights=embed)
    exe = build(plan, tmp / "c", flags=flags)
    result = run_driver(exe, model, steps, tmp)
    assert result.returncode == 0, result.stderr
    with ModelLoader.open(model) as loader:
        sim = Simulator(loader, graph)
        ex = sim.make_executor()
        dtypes = {d.name: d.dtype for d in sim.graph.vars}
        compared = 0
        for s, feed in enumerate(steps):
            ex.insert(**{k: np.asarray(v) for k, v in feed.items()})
            ex.step()
            for var in plan.outputs:
                path = tmp / "out" / f"{var}.{s}.bin"
                assert path.exists(), f"driver wrote no {path.name}"
                try:
                    want = np.asarray(ex.fetch(var))
                except Exception:
                    continue
                dtype = dtypes.get(var) or _assign_dtype(sim.graph, var)
                assert_close(f"step {s} {var}", read_tensor(path, dtype), want, dtype)
                compared += 1
    return {"plan": plan, "compared": compared, "exe": exe}


def _assign_dtype(graph: Any, var: str) -> DType:
    from openinfer_jax.ir.nodes import Assign
    from openinfer_jax.ir.walk import walk

    for blk in graph.blocks:
        for node in walk(blk.nodes):
            if isinstance(node, Assign) and node.name == var:
                return node.dtype
    raise KeyError(var)
