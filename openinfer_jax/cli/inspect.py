"""`openinfer inspect FILE [--stats] [--full] [--json]`: show what a `.oinf` file holds.

Like gguf-dump: header facts, sizevars, metadata and the tensor list. Long metadata values
(a tokenizer's 49,152 tokens, its merges, a chat template) are summarized as a count and
their first items unless `--full` is given. `--json` prints one JSON document for scripts.
When stdout is not a terminal nothing is cut to the terminal width (tensor names stay whole
in `| grep`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from openinfer_jax.core.errors import OinfFormatError
from openinfer_jax.oinf import Bitset, ModelLoader
from openinfer_jax.oinf.entries import TensorInfo

__all__ = ["SUMMARY_ITEMS", "describe_model", "register", "run_inspect", "tensor_stats"]

# How many items of a long array (or characters of a long string) the summary shows.
SUMMARY_ITEMS = 6
_SUMMARY_CHARS = 120

_BARS = " ▁▂▃▄▅▆▇█"
_CHUNK = 1 << 20  # elements per step when computing stats, so huge tensors need little memory


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `inspect` subcommand."""
    parser = subparsers.add_parser(
        "inspect", help="show the sizevars, metadata and tensors of a .oinf file"
    )
    parser.add_argument("file", metavar="FILE")
    parser.add_argument(
        "--stats", action="store_true", help="add min/max/mean and a histogram per tensor"
    )
    parser.add_argument(
        "--full", action="store_true", help="print long metadata arrays and strings whole"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(handler=run_inspect)


def _text_of(value: np.ndarray) -> str | None:
    """The text a u8 array holds (the converter stores non-ASCII strings as UTF-8 bytes)."""
    if value.dtype != np.uint8 or value.ndim != 1:
        return None
    try:
        text = value.tobytes().decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text.isprintable() or "\n" in text else None


def _string_list(value: str) -> list[Any] | None:
    """The list a JSON-encoded string array holds (GGUF token/merge arrays), else None."""
    if not value.startswith("["):
        return None
    try:
        items = json.loads(value)
    except json.JSONDecodeError:
        return None
    return items if isinstance(items, list) else None


def _short_text(text: str, full: bool) -> str:
    if full or len(text) <= _SUMMARY_CHARS:
        return repr(text)
    return f"{text[:_SUMMARY_CHARS]!r}... ({len(text):,} chars)"


def _preview(value: Any, full: bool) -> str:
    """One line (or the whole value with `full`) describing a metadata value."""
    if isinstance(value, np.ndarray):
        text = _text_of(value)
        if text is not None:
            return f"utf-8 text, {value.size:,} bytes: {_short_text(text, full)}"
        flat = value.reshape(-1)
        shown = flat if full else flat[:SUMMARY_ITEMS]
        more = "" if shown.size == flat.size else f", ... ({flat.size:,} values)"
        return (
            f"{value.dtype}{list(value.shape)} [{', '.join(str(v) for v in shown.tolist())}{more}]"
        )
    if isinstance(value, Bitset):
        return repr(value)
    if isinstance(value, _Unreadable):
        return str(value)
    if isinstance(value, str):
        items = _string_list(value)
        if items is not None and len(items) > SUMMARY_ITEMS:
            shown = items if full else items[:SUMMARY_ITEMS]
            more = "" if full else ", ..."
            body = ", ".join(json.dumps(v, ensure_ascii=False) for v in shown)
            return f"string array of {len(items):,} (JSON): [{body}{more}]"
        return _short_text(value, full)
    return str(value)


def _json_value(value: Any, full: bool) -> Any:
    """A metadata value as JSON; long arrays become {count, first} unless `full`."""
    if isinstance(value, np.ndarray):
        text = _text_of(value)
        if text is not None:
            return text
        items = value.reshape(-1).tolist()
    elif isinstance(value, Bitset):
        items = [bool(b) for b in value]
    elif isinstance(value, _Unreadable):
        return str(value)
    elif isinstance(value, str):
        parsed = _string_list(value)
        if parsed is None:
            return value
        items = parsed
    elif isinstance(value, float) and not math.isfinite(value):
        return str(value)
    else:
        return value.item() if isinstance(value, np.generic) else value
    if full or len(items) <= SUMMARY_ITEMS:
        return items
    return {"count": len(items), "first": items[:SUMMARY_ITEMS]}


class _Unreadable(str):
    """Shown for a valid metadata value NumPy cannot hold (an empty array with huge dims)."""


def _metadata_items(model: ModelLoader) -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for key in model.metadata_info:
        try:
            items.append((key, model.metadata[key]))
        except OinfFormatError as err:
            items.append((key, _Unreadable(f"(not readable here: {err})")))
    return items


def _tensor_json(info: TensorInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "dtype": info.dtype.short,
        "shape": list(info.shape),
        "bytes": info.data_nbytes if info.has_data else None,
        "offset": info.data_offset if info.has_data else None,
        "quant": info.quant.describe() if info.quant else None,
    }


def describe_model(model: ModelLoader, *, full: bool = False) -> dict[str, Any]:
    """A JSON-ready description of an open model (what `openinfer inspect --json` prints)."""
    return {
        "version": model.version,
        "data_bytes": sum(t.data_nbytes for t in model.tensors.values()),
        "sizevars": dict(model.sizevars),
        "metadata": {
            key: {
                "type": model.metadata_info[key].value_type.short,
                "bytes": model.metadata_info[key].nbytes,
                "value": _json_value(value, full),
            }
            for key, value in _metadata_items(model)
        },
        "tensors": [_tensor_json(info) for info in model.tensors.values()],
    }


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


class _PipeConsole(Console):
    """A rich console whose closed pipe (`| head`) ends the command quietly with status 0
    (rich's own handler exits with 1); the CLI's BrokenPipeError handler does the rest."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def _console() -> Console:
    """A console that never cuts lines when the output is a pipe or a file."""
    console = _PipeConsole(highlight=False)
    if not console.is_terminal:
        console = _PipeConsole(highlight=False, width=1 << 16, soft_wrap=True)
    return console


def run_inspect(args: argparse.Namespace) -> int:
    """Print the file's header facts, sizevars, metadata and tensors (tables or JSON)."""
    with ModelLoader.open(args.file) as model:
        if args.json:
            document = {"file": str(args.file), **describe_model(model, full=args.full)}
            if args.stats:
                for entry in document["tensors"]:
                    if entry["bytes"]:  # no data, or 0 elements: no statistics
                        lo, hi, mean, _ = tensor_stats(model.tensor(entry["name"]))
                        entry["stats"] = {"min": lo, "max": hi, "mean": mean}
            json.dump(document, sys.stdout, indent=1, allow_nan=True)
            sys.stdout.write("\n")
            return 0
        _print_tables(model, args, _console())
    return 0


def _print_tables(model: ModelLoader, args: argparse.Namespace, console: Console) -> None:
    total = sum(t.data_nbytes for t in model.tensors.values())
    console.print(
        f"[bold]{args.file}[/bold]: .oinf version {model.version}, {len(model.sizevars)} sizevars, "
        f"{len(model.metadata)} metadata, {len(model.tensors)} tensors, {total:,} data bytes"
    )
    sizevars = Table(title="sizevars")
    sizevars.add_column("name", no_wrap=True)
    sizevars.add_column("value", justify="right")
    for name, value in model.sizevars.items():
        sizevars.add_row(name, str(value))
    console.print(sizevars)
    metadata = Table(title="metadata")
    metadata.add_column("key", no_wrap=True)
    for column in ("type", "bytes", "value"):
        metadata.add_column(column)
    for key, value in _metadata_items(model):
        info = model.metadata_info[key]
        metadata.add_row(
            key, info.value_type.short, f"{info.nbytes:,}", Text(_preview(value, args.full))
        )
    console.print(metadata)
    tensors = Table(title="tensors")
    for column in ("name", "dtype", "shape", "bytes", "offset", "quant"):
        tensors.add_column(
            column,
            justify="right" if column in ("bytes", "offset") else "left",
            no_wrap=column == "name",
        )
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
                column,
                justify="left" if column in ("name", "histogram") else "right",
                no_wrap=column == "name",
            )
        for name, info in model.tensors.items():
            if info.has_data and info.numel > 0:
                lo, hi, mean, bars = tensor_stats(model.tensor(name))
                stats.add_row(name, f"{lo:.6g}", f"{hi:.6g}", f"{mean:.6g}", bars)
        console.print(stats)
