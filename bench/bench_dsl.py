"""DSL benchmark: parse, print, JSON round trip and validate a 48-layer decode graph.

The graph is one decode step of a 48-layer transformer, unrolled (one block of ~41 nodes
per layer: RMSNorm, QKV projections with bias, RoPE, KV-cache write and read, attention,
gated MLP, residuals, a dep and a barrier), about 2,000 nodes. The same program is
generated from one table both as `graph{}` text and through the Python builder (when
openinfer_jax.trace.builder exists), and the two IRs are checked equal.

Figures (median ms per graph) and ratios against a baseline measured in the same run:
`json.loads` of the same graph's JSON text (the C-accelerated stdlib reader doing the
least work any reader can). Target: parse + validate < 100 ms.

    .venv/bin/python bench/bench_dsl.py [--quick] [--layers N] [--repeat N]

Results also go to bench/results/dsl.json.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from results_file import results_file  # bench/results_file.py
from rich.console import Console
from rich.table import Table

from openinfer_jax.ir import Graph, format_graph, from_json, to_json
from openinfer_jax.trace import parse

HERE = Path(__file__).resolve().parent
TARGET_MS = 100.0

# Model sizes (ints, so validation can infer every shape without a model file).
D, H, DH, F = 512, 8, 64, 1536

# Per-layer tensors: name -> dims; declared once as prefix tables `name(l) @pattern`.
LAYER_TENSORS: dict[str, tuple[int, ...]] = {
    "ln1": (D,), "ln2": (D,),
    "wq": (D, D), "wk": (D, D), "wv": (D, D), "wo": (D, D),
    "bq": (D,), "bk": (D,), "bv": (D,), "bo": (D,),
    "w_gate": (D, F), "w_up": (D, F), "w_down": (F, D),
    "b_gate": (F,), "b_up": (F,), "b_down": (D,),
    "rs_attn": (D,), "rs_mlp": (D,),
}  # fmt: skip

# Temporaries assigned once in the entry block: name -> (dtype, dims).
TEMPS: dict[str, tuple[str, tuple[int, ...]]] = {
    "h": ("f32", (1, D)), "a": ("f32", (1, D)), "a16": ("f16", (1, D)),
    "q": ("f32", (1, D)), "k": ("f32", (1, D)), "v": ("f32", (1, D)),
    "qh": ("f32", (H, 1, DH)), "kr": ("f32", (H, 1, DH)), "kh": ("f32", (H, DH)), "vh": ("f32", (H, DH)),
    "ks": ("f32", (1, H, DH)), "vs": ("f32", (1, H, DH)), "kt": ("f32", (H, 1, DH)), "vt": ("f32", (H, 1, DH)),
    "o": ("f32", (H, 1, DH)), "o2": ("f32", (1, D)), "g": ("f32", (1, F)), "u": ("f32", (1, F)),
    "ok": ("bool", (1, D)),
}  # fmt: skip

# One layer, as data. Operands: "name" or ("table", "L") for the layer's prefix entry.
# ("op", name, inputs, params, output) | ("write", src, table) | ("read", table, dst)
# | ("dep", after, before) | ("barrier",)
LAYER: list[tuple[Any, ...]] = [
    ("op", "rms_norm", ["h", ("ln1", "L")], {}, "a"),
    ("op", "matmul", ["a", ("wq", "L")], {}, "q"),
    ("op", "add", ["q", ("bq", "L")], {}, "q"),
    ("op", "matmul", ["a", ("wk", "L")], {}, "k"),
    ("op", "add", ["k", ("bk", "L")], {}, "k"),
    ("op", "matmul", ["a", ("wv", "L")], {}, "v"),
    ("op", "add", ["v", ("bv", "L")], {}, "v"),
    ("op", "reshape", ["q"], {"shape": (H, 1, DH)}, "qh"),
    ("op", "reshape", ["k"], {"shape": (H, 1, DH)}, "kr"),
    ("op", "rope", ["qh", "pos"], {"theta": 10000.0}, "qh"),
    ("op", "rope", ["kr", "pos"], {"theta": 10000.0}, "kr"),
    ("op", "reshape", ["kr"], {"shape": (H, DH)}, "kh"),
    ("op", "reshape", ["v"], {"shape": (H, DH)}, "vh"),
    ("dep", "rope", "cache.write"),
    ("write", "kh", "K"),
    ("write", "vh", "V"),
    ("read", "K", "ks"),
    ("read", "V", "vs"),
    ("op", "transpose", ["ks"], {"perm": (1, 0, 2)}, "kt"),
    ("op", "transpose", ["vs"], {"perm": (1, 0, 2)}, "vt"),
    ("op", "attention", ["qh", "kt", "vt"], {"scale": 0.125}, "o"),
    ("op", "reshape", ["o"], {"shape": (1, D)}, "o2"),
    ("op", "matmul", ["o2", ("wo", "L")], {}, "a"),
    ("op", "add", ["a", ("bo", "L")], {}, "a"),
    ("op", "mul", ["a", ("rs_attn", "L")], {}, "a"),
    ("op", "add", ["h", "a"], {}, "h"),
    ("op", "rms_norm", ["h", ("ln2", "L")], {}, "a"),
    ("op", "cast", ["a"], {"to": "f16"}, "a16"),
    ("op", "cast", ["a16"], {"to": "f32"}, "a"),
    ("op", "matmul", ["a", ("w_gate", "L")], {}, "g"),
    ("op", "add", ["g", ("b_gate", "L")], {}, "g"),
    ("op", "matmul", ["a", ("w_up", "L")], {}, "u"),
    ("op", "add", ["u", ("b_up", "L")], {}, "u"),
    ("op", "silu", ["g"], {}, "g"),
    ("op", "mul", ["g", "u"], {}, "g"),
    ("op", "matmul", ["g", ("w_down", "L")], {}, "a"),
    ("op", "add", ["a", ("b_down", "L")], {}, "a"),
    ("op", "mul", ["a", ("rs_mlp", "L")], {}, "a"),
    ("op", "add", ["h", "a"], {}, "h"),
    ("op", "is_finite", ["h"], {}, "ok"),
    ("barrier",),
]


def _dims(dims: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, dims)) + "]"


def _text_value(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return repr(value) if isinstance(value, float) else str(value)


def graph_text(layers: int) -> str:
    """The decode step as `graph{}` text."""
    out = [
        "graph {",
        "  dynamic {",
        f"    x: f32[1, {D}];",
        "    pos: i32[1];",
        "  }",
        "  volatile {",
    ]
    out += [
        f'    {n}(l): f32{_dims(d)} @pattern("layers.{{l}}.{n}");' for n, d in LAYER_TENSORS.items()
    ]
    out += ["  }", "  persistent {", "    step: i32 @init(0);",
            f"    K(l, t): f32[{H}, {DH}] @table;", f"    V(l, t): f32[{H}, {DH}] @table;", "  }",
            "  block entry {"]  # fmt: skip
    out += [f"    assign {n}: {dt}{_dims(d)};" for n, (dt, d) in TEMPS.items()]
    out.append("    transfer x >> h;")
    for layer in range(layers):
        for step in LAYER:
            kind = step[0]
            if kind == "op":
                _, name, inputs, params, output = step
                args = [f"{i[0]}[{layer}]" if isinstance(i, tuple) else i for i in inputs]
                args += [f"{k}={_text_value(v)}" for k, v in params.items()]
                out.append(f"    op {name}({', '.join(args)}) >> {output};")
            elif kind == "write":
                out.append(f"    cache.write {step[1]} >> {step[2]}[{layer}, step];")
            elif kind == "read":
                out.append(f"    cache.read {step[1]}[{layer}, ..] >> {step[2]};")
            elif kind == "dep":
                out.append(f"    dep after({step[1]}) before({step[2]});")
            else:
                out.append("    barrier;")
    out += ["    cache.increment step;", "    return;", "  }", "}"]
    return "\n".join(out) + "\n"


def build_with_builder(layers: int) -> Graph:
    """The same decode step through the Python builder (openinfer_jax.trace.builder)."""
    from openinfer_jax.trace.builder import GraphBuilder

    g = GraphBuilder()
    x = g.dynamic("x", "f32", 1, D)
    pos = g.dynamic("pos", "i32", 1)
    tables = {
        n: g.volatile(n, "f32", *d, index="l", pattern=f"layers.{{l}}.{n}")
        for n, d in LAYER_TENSORS.items()
    }
    step_var = g.persistent("step", "i32", init=0)
    caches = {n: g.persistent(n, "f32", H, DH, index=("l", "t"), table=True) for n in ("K", "V")}
    with g.block("entry") as b:
        temps = {n: b.assign(n, dt, *d) for n, (dt, d) in TEMPS.items()}
        temps["pos"] = pos
        b.transfer(x) >> temps["h"]
        for layer in range(layers):
            for step in LAYER:
                kind = step[0]
                if kind == "op":
                    _, name, inputs, params, output = step
                    args = [
                        tables[i[0]][layer] if isinstance(i, tuple) else temps[i] for i in inputs
                    ]
                    b.op(name, *args, **params) >> temps[output]
                elif kind == "write":
                    b.cache.write(temps[step[1]]) >> caches[step[2]][layer, step_var]
                elif kind == "read":
                    b.cache.read(caches[step[1]][layer, :]) >> temps[step[2]]
                elif kind == "dep":
                    b.dep(step[1], step[2])
                else:
                    b.barrier()
        b.cache.increment(step_var)
        b.return_()
    return g.build()


def _median_ms(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median (wall ms, CPU ms) of `repeat` calls after one warm-up call.

    CPU time (process_time; the code is single-threaded) is reported beside wall time
    because the benchmark machine is often shared: wall time then includes waiting.
    """
    fn()  # warm-up (imports, caches)
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        cpus.append((time.process_time() - cpu) * 1000.0)
        walls.append((time.perf_counter() - wall) * 1000.0)
    return statistics.median(walls), statistics.median(cpus)


def _count_nodes(graph: Graph) -> int:
    return sum(len(b.nodes) for b in graph.blocks)


def main(argv: list[str]) -> int:
    """Run the benchmark; print a table and write bench/results/dsl.json."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="4 layers, 3 repeats")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=None)
    args = ap.parse_args(argv)
    layers = args.layers or (4 if args.quick else 48)
    repeat = args.repeat or (3 if args.quick else 15)

    text = graph_text(layers)
    graph = parse(text)
    nodes = _count_nodes(graph)
    json_text = json.dumps(to_json(graph))
    rows: list[tuple[str, tuple[float, float] | None, str]] = []

    baseline_times = _median_ms(lambda: json.loads(json_text), repeat)
    baseline = baseline_times[1]
    rows.append(("baseline: json.loads of the graph JSON", baseline_times, ""))
    rows.append(("parse (graph{} text -> IR)", _median_ms(lambda: parse(text), repeat), ""))
    rows.append(("format_graph (IR -> text)", _median_ms(lambda: format_graph(graph), repeat), ""))
    rows.append(("to_json + json.dumps + json.loads + from_json",
                 _median_ms(lambda: from_json(json.loads(json.dumps(to_json(graph)))), repeat), ""))  # fmt: skip

    validate: Callable[..., None] | None = None
    if importlib.util.find_spec("openinfer_jax.ir.validate") is not None:
        from openinfer_jax.ir.validate import validate as validate_fn

        validate = validate_fn
    if validate is None:
        rows.append(("parse + validate", None, "openinfer_jax.ir.validate not present"))
    else:
        note = ""
        try:
            validate(graph)
        except Exception as err:  # report, do not hide: the figure then times a failing check
            note = f"validate raised {type(err).__name__}: {str(err).splitlines()[0][:80]}"
        rows.append(("validate (IR)", _median_ms(lambda: _try(validate, graph), repeat), note))
        rows.append(
            ("parse + validate", _median_ms(lambda: _try(validate, parse(text)), repeat), note)
        )

    if importlib.util.find_spec("openinfer_jax.trace.builder") is None:
        rows.append(("Python builder", None, "openinfer_jax.trace.builder not present"))
    else:
        built = build_with_builder(layers)
        note = "equal IR to the text form" if built == graph else "IR DIFFERS from the text form"
        rows.append(
            ("Python builder (build)", _median_ms(lambda: build_with_builder(layers), repeat), note)
        )
        if validate is not None:
            rows.append(("Python builder + validate",
                         _median_ms(lambda: _try(validate, build_with_builder(layers)), repeat), note))  # fmt: skip

    table = Table(
        title=f"DSL: {layers}-layer decode graph, {nodes} nodes, {len(text) / 1024:.0f} KiB text, median of {repeat}"
    )
    table.add_column("operation")
    table.add_column("wall ms", justify="right")
    table.add_column("CPU ms", justify="right")
    table.add_column("CPU x json.loads", justify="right")
    table.add_column("k nodes/s (CPU)", justify="right")
    table.add_column("note")
    results = []
    for name, times, note in rows:
        if times is None:
            table.add_row(name, "-", "-", "-", "-", note)
            results.append(
                {
                    "operation": name,
                    "wall_ms": None,
                    "cpu_ms": None,
                    "cpu_ratio_vs_json_loads": None,
                    "note": note,
                }
            )
            continue
        wall, cpu = times
        table.add_row(
            name, f"{wall:.1f}", f"{cpu:.1f}", f"{cpu / baseline:.1f}", f"{nodes / cpu:.0f}", note
        )
        results.append(
            {
                "operation": name,
                "wall_ms": wall,
                "cpu_ms": cpu,
                "cpu_ratio_vs_json_loads": cpu / baseline,
                "note": note,
            }
        )
    console = Console(width=130)
    console.print(table)
    pv = next(
        (r for r in results if r["operation"] == "parse + validate" and r["cpu_ms"] is not None),
        None,
    )
    if pv is not None:
        for label in ("cpu_ms", "wall_ms"):
            ms = pv[label]
            verdict = "meets" if ms < TARGET_MS else "MISSES"
            console.print(
                f"parse + validate ({label[:-3]}): {ms:.1f} ms = {ms / TARGET_MS:.2f} x the "
                f"{TARGET_MS:.0f} ms target ({verdict} it)"
            )
    out = {"layers": layers, "nodes": nodes, "text_bytes": len(text), "repeat": repeat, "target_ms": TARGET_MS,
           "baseline_ms": baseline, "results": results}  # fmt: skip
    results_file("dsl.json", args.quick).write_text(
        json.dumps(out, indent=2) + "\n", encoding="utf-8"
    )
    return 0


def _try(validate: Callable[..., None], graph: Graph) -> None:
    # Timed either way; main() reports a failure once in the table.
    with contextlib.suppress(Exception):
        validate(graph)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
