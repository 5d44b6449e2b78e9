"""Execute a conversion plan: stream every tensor into a `.oinf` file, atomically.

The `.oinf` writer calls one loader per tensor at close time, so at most one tensor is in
memory; a failure anywhere (a loader, a cast, the disk) leaves no file at the destination.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from openinfer_jax.converters.plan import ConversionPlan, PlannedTensor
from openinfer_jax.converters.quantization import QuantError
from openinfer_jax.core.errors import ConversionError, OinfFormatError
from openinfer_jax.oinf import OinfWriter, QuantizedTensor

__all__ = ["ConversionReport", "ProgressHook", "check_destination", "write_plan"]

# Called after each tensor is produced: (tensor, bytes written so far, tensors done so far).
ProgressHook = Callable[[PlannedTensor, int, int], None]


@dataclass
class ConversionReport:
    """What a conversion did, with the figures the summary table shows."""

    source: Path
    output: Path
    format: str
    tensors: int
    sizevars: dict[str, int]
    metadata_keys: int
    source_bytes: int
    tensor_bytes: int
    file_bytes: int
    seconds: float
    dtype_counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    quant_errors: dict[str, QuantError] = field(default_factory=dict)

    @property
    def mb_per_s(self) -> float:
        """Throughput in MB/s (10^6 bytes) of tensor bytes written."""
        return self.tensor_bytes / 1e6 / self.seconds if self.seconds > 0 else float("inf")


def check_destination(output: Path, *, force: bool) -> None:
    """Check that `output` can receive the `.oinf` file (done before any work starts).

    Raises:
        ConversionError: if `output` is a directory, its directory is missing, or it exists
            and `force` is False.
    """
    if output.is_dir():
        raise ConversionError(
            f"{output} is a directory; give a file name such as {output / 'model.oinf'}"
        )
    if not output.parent.is_dir():
        raise ConversionError(f"{output.parent} does not exist; create the directory first")
    if output.exists() and not force:
        raise ConversionError(f"{output} exists; pass --force (force=True) to replace it")


def write_plan(
    plan: ConversionPlan,
    output: str | Path,
    *,
    force: bool = False,
    on_tensor: ProgressHook | None = None,
) -> ConversionReport:
    """Write `plan` to `output` as a version-2 `.oinf` file.

    Raises:
        ConversionError: if `output` exists and `force` is False, is a directory, or any
            tensor cannot be read or converted; nothing is left at `output` then.
    """
    output = Path(output)
    check_destination(output, force=force)
    start = time.perf_counter()
    progress = {"bytes": 0, "tensors": 0}
    errors: dict[str, QuantError] = {}

    def loader_for(tensor: PlannedTensor) -> Callable[[], np.ndarray | QuantizedTensor]:
        def load() -> np.ndarray | QuantizedTensor:
            array: np.ndarray | QuantizedTensor
            if tensor.layout is not None:
                array, error = tensor.load_quantized()
                if error is not None:
                    errors[tensor.name] = error
            else:
                array = tensor.load()
            progress["bytes"] += tensor.nbytes
            progress["tensors"] += 1
            if on_tensor is not None:
                on_tensor(tensor, progress["bytes"], progress["tensors"])
            return array

        return load

    try:
        with OinfWriter(output, version=2, overwrite=force) as writer:
            for name, value in plan.sizevars.items():
                writer.add_sizevar(name, value)
            for key, meta in plan.metadata.items():
                writer.add_metadata(key, meta)
            for tensor in plan.tensors:
                writer.add_tensor(
                    tensor.name, dtype=tensor.dtype, shape=tensor.shape, loader=loader_for(tensor),
                    block=tensor.layout,
                )  # fmt: skip
    except OinfFormatError as err:
        raise ConversionError(f"writing {output}: {err}") from None
    counts: dict[str, int] = {}
    for tensor in plan.tensors:
        counts[tensor.kind] = counts.get(tensor.kind, 0) + 1
    return ConversionReport(
        source=plan.checkpoint.path, output=output, format=plan.checkpoint.format,
        tensors=len(plan.tensors), sizevars=dict(plan.sizevars), metadata_keys=len(plan.metadata),
        source_bytes=sum(t.source.stored_nbytes for t in plan.tensors), tensor_bytes=plan.nbytes,
        file_bytes=output.stat().st_size, seconds=time.perf_counter() - start,
        dtype_counts=counts, notes=list(plan.notes), quant_errors=errors,
    )  # fmt: skip
