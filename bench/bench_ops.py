"""Op benchmark: registry JAX lowerings vs the same op written by hand in jax.numpy.

For matmul, add with a broadcast bias, softmax and layer_norm (the last two when the nn ops
are registered) at activation shapes 1×768, 128×768 and 768×3072, both sides are jitted and
timed on the same inputs, interleaved round by round so machine load hits both alike. The
figure is the median wall time per call; the ratio is lowering / hand-written (≈1.0 expected,
> 1.2 is a finding). matmul multiplies the activation by a [K, 768] weight. "same HLO" says
whether XLA's optimized HLO of the two is identical (then any gap is measurement noise).

    .venv/bin/python bench/bench_ops.py [--quick] [--repeat N]

Results also go to bench/results/ops.json.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from results_file import results_file  # bench/results_file.py
from rich.console import Console
from rich.table import Table

from openinfer_jax.ops import registry

HERE = Path(__file__).resolve().parent
FINDING_RATIO = 1.2
BUDGET_S = 2.0  # rough wall-time budget per side per case
SHAPES = ((1, 768), (128, 768), (768, 3072))
QUICK_SHAPES = ((1, 768), (128, 768))


def _softmax(x: Any) -> Any:
    shifted = x - jnp.max(x, axis=-1, keepdims=True)
    e = jnp.exp(shifted)
    return e / jnp.sum(e, axis=-1, keepdims=True)


def _layer_norm(x: Any, scale: Any, bias: Any) -> Any:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * scale + bias


# op name, params, inputs from the activation shape, hand-written baseline
CASES: list[tuple[str, dict[str, Any], Callable[[tuple[int, int]], list[tuple[int, ...]]], Callable[..., Any]]] = [
    # The lowering asks for full f32 precision (exact on accelerators that would otherwise use
    # bf16 passes), so the hand-written matmul asks for the same.
    ("matmul", {}, lambda s: [s, (s[1], 768)], functools.partial(jnp.matmul, precision="highest")),
    ("add", {}, lambda s: [s, (s[1],)], jnp.add),
    ("softmax", {"axis": -1}, lambda s: [s], _softmax),
    ("layer_norm", {"axis": -1, "epsilon": 1e-5}, lambda s: [s, (s[1],), (s[1],)], _layer_norm),
]  # fmt: skip


def optimized_hlo(fn: Callable[..., Any], args: list[Any]) -> str:
    """XLA's optimized HLO for `fn` without debug info and with neutral names."""
    text = jax.jit(fn).lower(*args).compile().as_text()
    text = re.sub(r", metadata=\{[^}]*\}", "", text)
    lines = text.splitlines()
    # Everything before the first computation is module name, file and stack-frame tables.
    start = next(i for i, line in enumerate(lines) if line.startswith(("%", "ENTRY")))
    body = "\n".join(lines[start:])
    # Instruction and parameter names follow the Python source; number them by first use.
    names: dict[str, str] = {}
    body = re.sub(r"%[\w.\-]+", lambda m: names.setdefault(m.group(0), f"%v{len(names)}"), body)
    return re.sub(r"([(,]\s*)[\w.\-]+: ", r"\1p: ", body)


def _time(fn: Callable[..., Any], args: list[Any]) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


def measure(name: str, params: dict[str, Any], shapes: list[tuple[int, ...]],
            baseline: Callable[..., Any], repeat: int) -> dict[str, Any]:  # fmt: skip
    """Median seconds per call for the lowering and the baseline, and their ratio."""
    op = registry.get(name)
    assert op is not None
    rng = np.random.default_rng(0)
    args = [jnp.asarray(rng.standard_normal(s, dtype=np.float32)) for s in shapes]
    ours = jax.jit(lambda *xs: op.lower_jax(*xs, **params))
    hand = jax.jit(baseline)
    got, want = np.asarray(ours(*args)), np.asarray(hand(*args))  # compiles both
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # Large cases get fewer rounds so the whole run stays within about a minute.
    rounds = max(5, min(repeat, int(BUDGET_S / max(_time(hand, args), 1e-6))))
    ours_times, hand_times = [], []
    for _ in range(rounds):  # interleaved rounds: load changes affect both sides
        ours_times.append(_time(ours, args))
        hand_times.append(_time(hand, args))
    ours_s, hand_s = statistics.median(ours_times), statistics.median(hand_times)
    lowering = lambda *xs: op.lower_jax(*xs, **params)  # noqa: E731
    same_hlo = optimized_hlo(lowering, args) == optimized_hlo(baseline, args)
    return {
        "op": name,
        "shape": "x".join(map(str, shapes[0])),
        "inputs": [list(s) for s in shapes],
        "lowering_us": ours_s * 1e6,
        "hand_written_us": hand_s * 1e6,
        "ratio": ours_s / hand_s,
        "min_ratio": min(ours_times) / min(hand_times),
        "rounds": rounds,
        "same_optimized_hlo": same_hlo,
        "over_threshold": ours_s / hand_s > FINDING_RATIO,
        # Identical optimized HLO runs the same machine code: a gap there is load noise.
        "finding": ours_s / hand_s > FINDING_RATIO and not same_hlo,
    }


def main(argv: list[str]) -> int:
    """Run the benchmark, print the table, write bench/results/ops.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, few rounds")
    parser.add_argument("--repeat", type=int, default=None, help="timed rounds per case")
    args = parser.parse_args(argv)
    repeat = args.repeat or (10 if args.quick else 40)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    rows, notes = [], []
    for name, params, make_inputs, baseline in CASES:
        if registry.get(name) is None:
            notes.append(f"{name}: not registered (the nn ops module is absent); skipped")
            continue
        for shape in shapes:
            rows.append(measure(name, params, make_inputs(shape), baseline, repeat))
    table = Table(
        title=f"op lowering vs hand-written jax.numpy (f32, jit, median of up to {repeat} interleaved rounds)"
    )
    for column in (
        "op",
        "shape",
        "lowering µs",
        "by hand µs",
        "ratio",
        "min ratio",
        "same HLO",
        "",
    ):
        table.add_column(column, justify="right" if "µs" in column or "ratio" in column else "left")
    for row in rows:
        table.add_row(
            row["op"], row["shape"], f"{row['lowering_us']:.1f}", f"{row['hand_written_us']:.1f}",
            f"{row['ratio']:.2f}", f"{row['min_ratio']:.2f}", "yes" if row["same_optimized_hlo"] else "NO",
            "FINDING" if row["finding"] else "noise" if row["over_threshold"] else "",
        )  # fmt: skip
    console = Console(highlight=False, width=max(120, Console().width))
    console.print(table)
    if any(row["over_threshold"] and row["same_optimized_hlo"] for row in rows):
        notes.append(
            "a ratio above the threshold with identical optimized HLO is timing noise "
            "(the machine is shared); compare the min ratio"
        )
    for note in notes:
        console.print(f"note: {note}")
    (HERE / "results").mkdir(exist_ok=True)
    result = {
        "quick": args.quick,
        "repeat": repeat,
        "device": str(jax.devices()[0]),
        "finding_ratio": FINDING_RATIO,
        "results": rows,
        "notes": notes,
    }
    results_file("ops.json", args.quick).write_text(
        json.dumps(result, indent=2) + "\n", encoding="utf-8"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
