"""Rich rendering for conversions: the dry-run plan, the progress bar, the summary table."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from openinfer_jax.converters.plan import ConversionPlan, PlannedTensor
from openinfer_jax.converters.write import ConversionReport, ProgressHook

__all__ = ["plan_table", "progress_bar", "quant_error_table", "summary_table"]

# The error table lists the tensors with the largest relative error first, at most this many.
ERROR_ROWS = 16


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:,.2f} MiB"


def plan_table(plan: ConversionPlan) -> Table:
    """The dry-run listing: source -> destination, dtype, shape, bytes, for every tensor."""
    table = Table(title=f"plan: {plan.checkpoint.path} ({plan.checkpoint.format})")
    for column, justify in (("source", "left"), ("->", "center"), ("name", "left"), ("stored", "left"),
                            ("dtype", "left"), ("shape", "left"), ("bytes", "right")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for t in plan.tensors:
        arrow = "T" if t.transpose else ""
        shape = "[" + ", ".join(map(str, t.shape)) + "]"
        table.add_row(
            t.source.name, arrow, t.name, t.source.stored_as, t.kind, shape, f"{t.nbytes:,}"
        )
    table.caption = (
        f"{len(plan.tensors)} tensors, {_mib(plan.nbytes)}; {len(plan.sizevars)} sizevars, "
        f"{len(plan.metadata)} metadata entries; {len(plan.skipped)} skipped; T = transposed"
    )
    return table


def summary_table(report: ConversionReport) -> Table:
    """The table printed after a conversion."""
    table = Table(title="conversion summary", show_header=False)
    table.add_column("what")
    table.add_column("value")
    sizevars = ", ".join(f"{k}={v}" for k, v in report.sizevars.items()) or "-"
    dtypes = ", ".join(f"{k}: {v}" for k, v in sorted(report.dtype_counts.items()))
    rows = (
        ("source", f"{report.source} ({report.format})"),
        ("output", str(report.output)),
        ("tensors", f"{report.tensors} ({dtypes})"),
        ("sizevars", sizevars),
        ("metadata entries", str(report.metadata_keys)),
        ("source tensor bytes", _mib(report.source_bytes)),
        ("output tensor bytes", _mib(report.tensor_bytes)),
        ("file size", _mib(report.file_bytes)),
        ("time", f"{report.seconds:.2f} s ({report.mb_per_s:,.1f} MB/s)"),
    )
    for what, value in rows:
        table.add_row(what, value)
    return table


def quant_error_table(report: ConversionReport) -> Table | None:
    """Per-tensor quantization error (max |error|, rms error, rms error / rms value), worst first.

    None when the conversion quantized nothing itself (packed GGUF tensors are exact).
    """
    errors = report.quant_errors
    if not errors:
        return None
    table = Table(title="quantization error (vs the source floats)")
    for column, justify in (("tensor", "left"), ("max |err|", "right"), ("rms err", "right"),
                            ("rms err / rms", "right")):  # fmt: skip
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    ranked = sorted(errors.items(), key=lambda item: -item[1].relative_rms)
    for name, err in ranked[:ERROR_ROWS]:
        table.add_row(name, f"{err.max_abs:.3g}", f"{err.rms:.3g}", f"{err.relative_rms:.2%}")
    mean = sum(e.relative_rms for e in errors.values()) / len(errors)
    worst = max(e.max_abs for e in errors.values())
    table.caption = (
        f"{len(errors)} tensors quantized; mean rms err / rms {mean:.2%}, largest |err| {worst:.3g}"
        + (
            f"; {len(errors) - ERROR_ROWS} more in ConversionReport.quant_errors"
            if len(errors) > ERROR_ROWS
            else ""
        )
    )
    return table


@contextmanager
def progress_bar(plan: ConversionPlan, console: Console) -> Iterator[ProgressHook]:
    """A rich progress bar over bytes and tensors; yields the hook that `write_plan` calls."""
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TextColumn("{task.fields[done]}/{task.fields[total_tensors]} tensors"),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[current]}"),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(
            "converting", total=plan.nbytes, done=0, total_tensors=len(plan.tensors), current=""
        )

        def hook(tensor: PlannedTensor, nbytes: int, count: int) -> None:
            progress.update(task, completed=nbytes, done=count, current=tensor.name)

        yield hook
