"""Value summaries in trace events, and the first difference between two traces.

A summary describes one output of one node in a few numbers that two implementations can
compare without storing tensors: element counts, NaN/inf counts, min/max/sum/L1 over the
finite elements, a position-weighted sum (so a permutation or a shifted window changes it),
and for integer and bool values an exact checksum. The simulator writes them with
``Simulator.with_trace(summaries=True)``; emitted C built with ``-DOI_TRACE`` writes the same
fields (`openinfer_jax/emit/runtime/oi_runtime.c`, ``oi_trace_node``) with the same formulas.

`first_difference` walks the simulator's events in order and returns the first node whose
output differs from the other trace beyond the tolerance of its dtype (`TOLERANCE`; every
element within ``atol + rtol * |value|`` keeps every summary within its bound, so a
difference is never reported for values that agree element by element).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import SimulationError

__all__ = [
    "TOLERANCE",
    "Comparison",
    "Difference",
    "compare_traces",
    "first_difference",
    "load_trace",
    "summarize",
]

#: Default float tolerance per dtype (rtol = atol); integers, bool and packed types are exact.
#: The same figures as the C target's parity tests (docs/synthesis.md).
TOLERANCE: dict[str, float] = {"f32": 1e-4, "f64": 1e-9, "f16": 2e-3, "bf16": 1.6e-2, "f8": 0.25}

_WEIGHT_MUL = 2654435761  # Knuth's multiplicative hash: weights look random along the array


def _weights(n: int) -> np.ndarray:
    """The position weights of `wsum`: ((i * 2654435761) mod 2**32) / 2**32 - 0.5."""
    idx = np.arange(n, dtype=np.uint64)
    return ((idx * np.uint64(_WEIGHT_MUL)) % np.uint64(1 << 32)).astype(np.float64) / 2**32 - 0.5


def summarize(value: Any, dtype: DType) -> dict[str, Any]:
    """The summary of one value (a host array in the dtype's in-memory NumPy type)."""
    arr = np.asarray(value)
    flat = arr.reshape(-1)
    out: dict[str, Any] = {"shape": [int(d) for d in arr.shape], "dtype": dtype.short}
    out["numel"] = int(flat.size)
    if dtype.is_float:
        x = flat.astype(np.float64)
        finite = np.isfinite(x)
        out["nan"] = int(np.isnan(x).sum())
        out["inf"] = int(np.isinf(x).sum())
        xf = np.where(finite, x, 0.0)
        w = _weights(flat.size)
    else:
        x = flat.astype(np.int64)
        finite = np.ones(flat.size, bool)
        out["nan"] = out["inf"] = 0
        xf = x.astype(np.float64)
        w = _weights(flat.size)
        odd = np.arange(flat.size, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        with np.errstate(over="ignore"):
            check = int((x.astype(np.uint64) * odd).sum(dtype=np.uint64))
        out["checksum"] = f"{check:016x}"
    out["min"] = float(x[finite].min()) if finite.any() else None
    out["max"] = float(x[finite].max()) if finite.any() else None
    out["sum"] = float(xf.sum())
    out["l1"] = float(np.abs(xf).sum())
    out["wsum"] = float((w * xf).sum())
    return out


@dataclass(frozen=True)
class Difference:
    """The first node whose outputs differ: its event (a dict of the simulator's trace) and
    what differs (or why the other trace has no matching event)."""

    event: Mapping[str, Any]
    reason: str

    def describe(self) -> str:
        """Two lines: the node (step, block, index, DSL text and location, loop indices), and
        what differs."""
        ev = self.event
        scope = ", ".join(f"{k}={v}" for k, v in sorted(ev.get("scope", {}).items()))
        loc = f" at {ev['node_loc']}" if ev.get("node_loc") else ""
        head = (
            f"step {ev['step']}, block {ev['block_name']}, node {ev['node_index']} "
            f"`{ev['node_desc']}`{loc}" + (f" ({scope})" if scope else "")
        )
        return f"first difference: {head}\n  {self.reason}"


def load_trace(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Events from a trace file: a JSON list (`write_trace_json`) or JSON lines (the C trace).

    Raises:
        SimulationError: an unreadable file or one that holds neither form, naming the line.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise SimulationError(f"cannot read trace {p}: {err}") from None
    if text.lstrip().startswith("["):
        try:
            events = json.loads(text)
        except json.JSONDecodeError as err:
            raise SimulationError(f"{p}: not a JSON trace ({err})") from None
    else:
        events = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise SimulationError(
                    f"{p}:{n}: not a JSON trace event ({err.msg}); a trace is a JSON list or one "
                    "event per line"
                ) from None
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise SimulationError(f"{p}: a trace is a list of event objects")
    return events


def _key(ev: Mapping[str, Any]) -> tuple[Any, ...]:
    scope = tuple(sorted((str(k), int(v)) for k, v in ev.get("scope", {}).items()))
    return int(ev.get("step", 0)), int(ev["node_index"]), scope


def _indexed(events: Iterable[Mapping[str, Any]]) -> dict[tuple[Any, ...], Mapping[str, Any]]:
    """Events with summaries by (step, node, loop indices, occurrence)."""
    out: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    seen: dict[tuple[Any, ...], int] = {}
    for ev in events:
        if not ev.get("output_summaries"):
            continue
        key = _key(ev)
        seen[key] = seen.get(key, 0) + 1
        out[(*key, seen[key])] = ev
    return out


def _close(a: float | None, b: float | None, bound: float) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= bound


def compare_summary(
    want: Mapping[str, Any], got: Mapping[str, Any], tolerance: Mapping[str, float]
) -> str | None:
    """Why `got` differs from `want` (both summaries of one output), or None."""
    for field in ("dtype", "shape", "numel", "nan", "inf", "checksum"):
        if want.get(field) != got.get(field):
            return f"{field} {got.get(field)} vs {want.get(field)}"
    tol = tolerance.get(str(want["dtype"]), 0.0)
    n, l1 = float(want["numel"]), float(want.get("l1") or 0.0)
    for field in ("min", "max"):
        a, b = want.get(field), got.get(field)
        bound = 0.0 if a is None else tol + tol * abs(a)
        if not _close(a, b, bound):
            return f"{field} {b} vs {a}"
    # Sums of values each within atol + rtol*|v| are within atol*n + rtol*L1 (weights <= 1/2).
    bound = tol * (n + l1) * (1 + 1e-9) + 1e-12 * l1
    for field in ("sum", "l1", "wsum"):
        a, b = want.get(field), got.get(field)
        if not _close(a, b, bound):
            return f"{field} {b} vs {a} (bound {bound:.3g})"
    return None


@dataclass(frozen=True)
class Comparison:
    """The result of comparing two traces: the first difference (None when they agree), how
    many node outputs were compared, and the nodes the other trace never records (an emitted
    program does not trace the nodes its passes fused or folded away): (index, text)."""

    difference: Difference | None
    compared: int
    untraced: tuple[tuple[int, str], ...] = ()


def compare_traces(
    reference: list[dict[str, Any]],
    other: list[dict[str, Any]],
    tolerance: Mapping[str, float] | None = None,
) -> Comparison:
    """Walk the events of `reference` (the simulator's trace) that carry summaries, in order,
    and find the first whose outputs differ in `other` beyond `tolerance` (dtype -> rtol =
    atol; default `TOLERANCE`), or which `other` lacks although it traces that node at other
    steps or loop indices (it stopped or took another path). Nodes `other` never traces are
    skipped and listed.

    Raises:
        SimulationError: `reference` has no summaries (record it with
            ``Simulator.with_trace(summaries=True)`` / ``openinfer run --trace-summaries``).
    """
    tol = {**TOLERANCE, **(tolerance or {})}
    theirs = _indexed(other)
    mine = _indexed(reference)
    if not mine:
        raise SimulationError(
            "the reference trace has no output summaries; record it with "
            "Simulator.with_trace(summaries=True) (openinfer run --trace-summaries)"
        )
    traced = {key[1] for key in theirs}
    untraced: dict[int, str] = {}
    compared = 0
    for key, ev in mine.items():
        if key[1] not in traced:
            untraced.setdefault(key[1], str(ev.get("node_desc", "")))
            continue
        got = theirs.get(key)
        diff = (
            Difference(ev, "the other trace has no event for this node here (did it stop?)")
            if got is None
            else _output_difference(ev, got, tol)
        )
        if diff is not None:
            return Comparison(diff, compared, tuple(sorted(untraced.items())))
        compared += 1
    return Comparison(None, compared, tuple(sorted(untraced.items())))


def _output_difference(
    ev: Mapping[str, Any], got: Mapping[str, Any], tol: Mapping[str, float]
) -> Difference | None:
    if len(ev["output_summaries"]) != len(got["output_summaries"]):
        return Difference(ev, "the two traces summarize a different number of outputs")
    for k, (want_s, got_s) in enumerate(zip(ev["output_summaries"], got["output_summaries"])):
        why = compare_summary(want_s, got_s, tol)
        if why is not None:
            name = ev["output"][k] if k < len(ev.get("output", [])) else f"output {k}"
            limit = tol.get(str(want_s["dtype"]))
            rule = "exact" if not limit else f"rtol = atol = {limit:g}"
            return Difference(
                ev,
                f"{name} {want_s['dtype']}{want_s['shape']}: {why} (other vs reference; {rule})",
            )
    return None


def first_difference(
    reference: list[dict[str, Any]],
    other: list[dict[str, Any]],
    tolerance: Mapping[str, float] | None = None,
) -> Difference | None:
    """`compare_traces(...).difference`: the first node whose outputs differ, or None."""
    return compare_traces(reference, other, tolerance).difference


def finite_or_none(value: float) -> float | None:
    """A float for JSON: None for NaN/inf."""
    return value if math.isfinite(value) else None
