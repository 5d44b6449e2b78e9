"""Build an emitted program with its generated driver, and run it on NumPy arrays.

The driver (`<name>_driver.c`, docs/synthesis.md) replays files: ``driver MODEL STEPS IN_DIR
OUT_DIR`` reads ``IN_DIR/<input>.<step>.bin`` and writes ``OUT_DIR/<output>.<step>.bin``,
each an int32 ndim, int64 dims and the raw elements. `write_tensor`/`read_tensor` are that
format; `build_driver` compiles the emitted files with the system compiler; `run_driver`
writes the inputs of every step, runs the driver and reads every output back.
`openinfer run --target c` uses these, so an emitted program runs on `.npy` inputs without
writing the file format by hand.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import SynthesisError
from openinfer_jax.emit.plan import Plan

__all__ = [
    "CFLAGS",
    "build_command",
    "build_driver",
    "read_tensor",
    "run_driver",
    "write_inputs",
    "write_tensor",
]

CFLAGS = ("-std=c99", "-O2", "-Wall", "-Wextra", "-Werror")


def build_command(plan: Plan, cc: str, flags: Sequence[str] = CFLAGS) -> list[str]:
    """The compiler command (run in the emitted directory) that links `plan`'s driver."""
    sources = [f"{plan.name}.c", "oi_runtime.c", f"{plan.name}_driver.c"]
    sources += [f for f in plan.files if f.endswith("_weights.c")]
    libs = ["-lm"]
    if "oi_pool.h" in plan.files:  # synthesized for several threads
        libs.insert(0, "-pthread")
    if plan.target == "vulkan":
        sources.append("oi_vulkan.c")
        libs.insert(0, "-lvulkan")
    return [cc, *flags, *sources, *libs, "-o", "driver"]


def build_driver(
    plan: Plan, directory: Path, *, cc: str | None = None, flags: Sequence[str] = CFLAGS
) -> Path:
    """Emit `plan` into `directory` (as `Plan.emit`) and compile its driver; the executable.

    Raises:
        SynthesisError: no C compiler (`CC` or ``cc``), or the build failed (its output).
    """
    cc = cc or os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        raise SynthesisError(
            f"building the emitted program needs a C compiler; {cc!r} was not found (set CC)"
        )
    plan.emit(directory, force=True)
    command = build_command(plan, cc, flags)
    done = subprocess.run(command, cwd=directory, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SynthesisError(
            f"building the emitted program failed ({' '.join(command)}):\n{done.stderr[-3000:]}"
        )
    return Path(directory) / "driver"


def write_tensor(path: Path, array: np.ndarray) -> None:
    """Write `array` in the driver's file format: int32 ndim, int64 dims, raw elements."""
    arr = np.asarray(array)  # ascontiguousarray would turn a 0-d scalar into shape (1,)
    with open(path, "wb") as fh:
        fh.write(np.int32(arr.ndim).tobytes())
        fh.write(np.asarray(arr.shape, np.int64).tobytes())
        fh.write(arr.tobytes(order="C"))


def read_tensor(path: Path, dtype: DType) -> np.ndarray:
    """Read a driver output file back as an array of `dtype`'s in-memory NumPy type."""
    raw = Path(path).read_bytes()
    ndim = int(np.frombuffer(raw[:4], np.int32)[0])
    dims = tuple(int(d) for d in np.frombuffer(raw[4 : 4 + 8 * ndim], np.int64))
    data = np.frombuffer(raw[4 + 8 * ndim :], dtype.numpy)
    return data.reshape(dims)


def write_inputs(work: Path, steps: Sequence[Mapping[str, np.ndarray]]) -> tuple[Path, Path]:
    """Fresh ``work/in`` (holding ``<var>.<step>.bin`` of every step) and empty ``work/out``."""
    ins, outs = Path(work) / "in", Path(work) / "out"
    for d in (ins, outs):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    for s, feed in enumerate(steps):
        for var, value in feed.items():
            write_tensor(ins / f"{var}.{s}.bin", np.asarray(value))
    return ins, outs


def run_driver(
    exe: Path,
    model: Path,
    steps: Sequence[Mapping[str, np.ndarray]],
    work: Path,
    outputs: Mapping[str, DType],
) -> list[dict[str, np.ndarray]]:
    """Run `exe` for ``len(steps)`` steps, inserting ``steps[i]`` before step i; the
    `outputs` of every step (arrays must already have their inputs' declared dtypes).

    Raises:
        SynthesisError: the driver failed (its exit code and message, e.g. an input of the
            wrong shape, named by the program's own checks).
    """
    ins, outs = write_inputs(work, steps)
    done = subprocess.run(
        [str(exe), str(model), str(len(steps)), str(ins), str(outs)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SynthesisError(
            f"the emitted program failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}"
        )
    return [
        {name: read_tensor(outs / f"{name}.{s}.bin", dtype) for name, dtype in outputs.items()}
        for s in range(len(steps))
    ]
