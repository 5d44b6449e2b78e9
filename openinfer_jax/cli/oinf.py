"""`openinfer verify FILE...` and `openinfer inspect FILE [--stats]`: check and show `.oinf` files."""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from openinfer_jax.oinf import Bitset, ModelLoader, verify_file
from openinfer_jax.oinf.entries import TensorInfo

__all__ = ["register", "run_inspect", "run_verify", "tensor_stats"]

_BARS = " ▁▂▃▄▅▆▇█"
_CHUNK = 1 << 20  # elements per step when computing stats, so huge tensors need little memory


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `verify` and `inspect` subcommands."""
    verify = subparsers.add_parser(
        "verify", help="check .oinf files against every rule of docs/oinf.md"
    )
    verify.add_argument("files", nargs="+", metavar="FILE")
    verify.set_defaults(handler=run_verify)
    inspect = subparsers.add_parser(
        "inspect", help="show the sizevars, metadata and tensors of a .oinf file"
    )
    inspect.add_argument("file", metavar="FILE")
    inspect.add_argument(
        "--stats", action="store_true", help="add min/max/mean and a histogram per tensor"
    )
    inspect.set_defaults(handler=run_inspect)


def run_verify(args: argparse.Namespace) -> int:
    """Print every violated rule of each file; exit status 0 only if all files are valid."""
    console = Console(highlight=False)
    status = 0
    for path in args.files:
        violations = verify_file(path)
        if not violations:
            console.print(f"[green]OK[/green] {path}")
            continue
        status = 1
        console.print(f"[red]INVALID[/red] {path}: {len(violations)} violation(s)")
        for violation in violations:
            console.print(f"  {violation}", markup=False)
    return status


def _preview(value: Any) -> str:
    if isinstance(value, np.ndarray):
        flat = value.reshape(-1)
        shown = ", ".join(str(v) for v in flat[:6].tolist())
        more = ", ..." if flat.size > 6 else ""
        return f"{value.dtype}{list(value.shape)} [{shown}{more}]"
    if isinstance(value, Bitset):
        return repr(value)
    if isinstance(value, str):
        return repr(value)
    return str(value)


def tensor_stats(array: np.ndarray, bins: int = 16) -> tuple[float, float, float, str]:
    """(min, max, mean, histogram bar string) of `array`, computed in chunks (NaN/inf ignored)."""
    flat = array.reshape(-1)
    lo, hi, total, count = math.inf, -math.inf, 0.0, 0
    for start in range(0, flat.size, _CHUNK):
        chunk = flat[start : start + _CHUNK].astype(np.float64)
        chunk = chunk[np.isfinite(chunk)]
        if chunk.size:
            lo, hi = min(lo, float(chunk.min())), max(hi, float(chunk.max()))
            total += float(chunk.sum())
            count += chunk.size
    if count == 0:
        return math.nan, math.nan, math.nan, ""
    counts = np.zeros(bins, dtype=np.int64)
    edges = (lo, hi if hi > lo else lo + 1.0)
    for start in range(0, flat.size, _CHUNK):
        chunk = flat[start : start + _CHUNK].astype(np.float64)
        counts += np.histogram(chunk[np.isfinite(chunk)], bins=bins, range=edges)[0]
    peak = counts.max()
    bars = "".join(_BARS[math.ceil(c / peak * (len(_BARS) - 1))] for c in counts)
    return lo, hi, total / count, bars


def _shape(info: TensorInfo) -> str:
    return "[" + ", ".join(str(d) for d in info.shape) + "]"


def run_inspect(args: argparse.Namespace) -> int:
    """Print rich tables of a file's header facts, sizevars, metadata and tensors."""
    console = Console()
    with ModelLoader.open(args.file) as model:
        total = sum(t.data_nbytes for t in model.tensors.values())
        console.print(
            f"[bold]{args.file}[/bold]: .oinf version {model.version}, {len(model.sizevars)} sizevars, "
            f"{len(model.metadata)} metadata, {len(model.tensors)} tensors, {total:,} data bytes"
        )
        sizevars = Table(title="sizevars")
        sizevars.add_column("name")
        sizevars.add_column("value", justify="right")
        for name, value in model.sizevars.items():
            sizevars.add_row(name, str(value))
        console.print(sizevars)
        metadata = Table(title="metadata")
        for column in ("key", "type", "bytes", "value"):
            metadata.add_column(column)
        for key, value in model.metadata.items():
            info = model.metadata_info[key]
            metadata.add_row(key, info.value_type.short, str(info.nbytes), _preview(value))
        console.print(metadata)
        tensors = Table(title="tensors")
        for column in ("name", "dtype", "shape", "bytes", "offset", "quant"):
            tensors.add_column(column, justify="right" if column in ("bytes", "offset") else "left")
        for name, info in model.tensors.items():
            tensors.add_row(
                name,
                info.dtype.short,
                _shape(info),
                f"{info.data_nbytes:,}" if info.has_data else "no data",
                str(info.data_offset) if info.has_data else "-",
                info.quant.describe() if info.quant else "-",
            )
        console.print(tensors)
        if args.stats:
            stats = Table(title="tensor statistics (finite values)")
            for column in ("name", "min", "max", "mean", "histogram"):
                stats.add_column(
                    column, justify="left" if column in ("name", "histogram") else "right"
                )
            for name, info in model.tensors.items():
                if info.has_data:
                    lo, hi, mean, bars = tensor_stats(model.tensor(name))
                    stats.add_row(name, f"{lo:.6g}", f"{hi:.6g}", f"{mean:.6g}", bars)
            console.print(stats)
    return 0
