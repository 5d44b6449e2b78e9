"""Synthesizer benchmark: step time of the emitted C vs the simulator (XLA CPU), and code size.

Workloads (random weights in generated .oinf files, graphs in graph{} text / the builder):
1. mlp: examples/mlp.py's graph at B=64, I=256, H=512, O=64.
2. encoder: a MiniLM-shaped encoder (6 layers, d=384, 12 heads, FFN 1536, 64 tokens; fused
   per-layer weights in prefix tables; matmul, attention, layer_norm, gelu).
3. decode: examples/kv_cache_decode.py's GPT-2-shaped decode step (4 layers, d=256), 48 steps
   of a growing KV cache.

C: the emitted program built with `cc -O3 -march=native` (one thread), timed by its driver
(mean CPU time of oi_step). Simulator: median time of `Executor.step()` plus fetching the
output (XLA dispatches asynchronously) over the same steps (the median skips the steps that
compile), XLA restricted to one thread and the process pinned to one CPU unless
`--xla-threads all`. Ratio = C / simulator
(< 1: the C is faster). Code size: lines of the emitted sources and bytes of the stripped binary.

Vulkan (mlp and decode; `--no-vulkan` skips it): the same program emitted for the Vulkan
target, built with `-O3 -march=native -lvulkan` and timed by its driver in WALL time (the GPU's
work runs outside this process's CPU time), on the first Vulkan device (lavapipe here, pinned
to the same one CPU); with the queue submissions per step (each a submit + wait) and how many
op nodes run on the GPU. Ratios VK/C and VK/sim.

`--quick` shrinks every workload. Results: bench/results/emit.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from results_file import results_file  # bench/results_file.py

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _configure_xla(threads: str) -> None:
    # Must run before jax is imported: one XLA thread makes the comparison one core vs one core.
    # XLA's CPU runtime still starts helper threads, so the process (and the C driver it
    # launches) is also pinned to one CPU where the OS allows it.
    if threads == "1" and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    if threads == "1":
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen=false".strip()


def _encoder_graph(layers: int, seq: int, d: int, heads: int, ffn: int) -> str:
    hd = d // heads
    tables = "\n".join(
        f'    {name}(l): f32[{dims}] @pattern("enc.{{l}}.{name}");'
        for name, dims in (("wqkv", "D, 3*D"), ("bqkv", "3*D"), ("wo", "D, D"), ("bo", "D"), ("g1", "D"),
                           ("b1", "D"), ("wi", "D, F"), ("bi", "F"), ("wf", "F, D"), ("bf", "D"), ("g2", "D"),
                           ("b2", "D"))
    )  # fmt: skip
    return f"""
graph {{
  dynamic {{ x: f32[S, D]; }}
  volatile {{
{tables}
  }}
  constant {{ num_layers: u32; }}
  block entry {{
    assign h: f32[S, D];
    assign qkv: f32[S, 3*D];
    assign q: f32[S, D];
    assign k: f32[S, D];
    assign v: f32[S, D];
    assign q3: f32[S, {heads}, {hd}];
    assign k3: f32[S, {heads}, {hd}];
    assign v3: f32[S, {heads}, {hd}];
    assign qh: f32[{heads}, S, {hd}];
    assign kh: f32[{heads}, S, {hd}];
    assign vh: f32[{heads}, S, {hd}];
    assign oh: f32[{heads}, S, {hd}];
    assign o3: f32[S, {heads}, {hd}];
    assign a: f32[S, D];
    assign f: f32[S, F];
    transfer x >> h;
    loop layers (l in 0..num_layers) {{
      op matmul(h, wqkv[l]) >> qkv;
      op add(qkv, bqkv[l]) >> qkv;
      op slice(qkv, starts=[0], ends=[{d}], axes=[1]) >> q;
      op slice(qkv, starts=[{d}], ends=[{2 * d}], axes=[1]) >> k;
      op slice(qkv, starts=[{2 * d}], ends=[{3 * d}], axes=[1]) >> v;
      op reshape(q, shape=[{seq}, {heads}, {hd}]) >> q3;
      op reshape(k, shape=[{seq}, {heads}, {hd}]) >> k3;
      op reshape(v, shape=[{seq}, {heads}, {hd}]) >> v3;
      op transpose(q3, perm=[1, 0, 2]) >> qh;
      op transpose(k3, perm=[1, 0, 2]) >> kh;
      op transpose(v3, perm=[1, 0, 2]) >> vh;
      op attention(qh, kh, vh, scale={1.0 / math.sqrt(hd)!r}) >> oh;
      op transpose(oh, perm=[1, 0, 2]) >> o3;
      op reshape(o3, shape=[{seq}, {d}]) >> a;
      op matmul(a, wo[l]) >> a;
      op add(a, bo[l]) >> a;
      op add(h, a) >> h;
      op layer_norm(h, g1[l], b1[l], epsilon=1e-12) >> h;
      op matmul(h, wi[l]) >> f;
      op add(f, bi[l]) >> f;
      op gelu(f) >> f;
      op matmul(f, wf[l]) >> a;
      op add(a, bf[l]) >> a;
      op add(h, a) >> h;
      op layer_norm(h, g2[l], b2[l], epsilon=1e-12) >> h;
    }}
    return;
  }}
}}
"""


def _write_encoder(path: Path, layers: int, seq: int, d: int, ffn: int, rng: Any) -> None:
    import numpy as np

    from openinfer_jax.oinf import OinfWriter

    shapes = {"wqkv": (d, 3 * d), "bqkv": (3 * d,), "wo": (d, d), "bo": (d,), "g1": (d,), "b1": (d,),
              "wi": (d, ffn), "bi": (ffn,), "wf": (ffn, d), "bf": (d,), "g2": (d,), "b2": (d,)}  # fmt: skip
    with OinfWriter(path, overwrite=True) as w:
        for name, value in (("S", seq), ("D", d), ("F", ffn)):
            w.add_sizevar(name, value)
        w.add_metadata("num_layers", layers)
        for layer in range(layers):
            for name, shape in shapes.items():
                scale = 0.05 if len(shape) == 2 else 0.02
                data = rng.standard_normal(shape).astype(np.float32) * scale
                if name.startswith("g"):
                    data = (1.0 + data).astype(np.float32)
                w.add_tensor(f"enc.{layer}.{name}", data)


def _workloads(quick: bool, tmp: Path) -> list[dict[str, Any]]:
    import numpy as np

    sys.path.insert(0, str(ROOT / "examples"))
    import kv_cache_decode
    import mlp

    from openinfer_jax.oinf import write_oinf

    rng = np.random.default_rng(0)
    out = []
    b, i, h, o = (16, 64, 128, 16) if quick else (64, 256, 512, 64)
    path = tmp / "mlp.oinf"
    write_oinf(path, sizevars={"B": b, "I": i, "H": h, "O": o}, metadata={}, tensors={
        "w1": rng.standard_normal((i, h)).astype(np.float32) * 0.1, "b1": np.zeros(h, np.float32),
        "w2": rng.standard_normal((h, o)).astype(np.float32) * 0.1, "b2": np.zeros(o, np.float32)})  # fmt: skip
    out.append({"name": "mlp", "model": path, "graph": mlp.build_graph(), "feed": {"x": rng.standard_normal((b, i)).astype(np.float32)},
                "steps": 20 if quick else 50, "arch": "c", "fetch": "y", "grows": False, "shape": f"B={b} I={i} H={h} O={o}"})  # fmt: skip
    layers, seq, d, heads, ffn = (2, 16, 128, 4, 512) if quick else (6, 64, 384, 12, 1536)
    path = tmp / "encoder.oinf"
    _write_encoder(path, layers, seq, d, ffn, rng)
    out.append({"name": "encoder", "model": path, "graph": _encoder_graph(layers, seq, d, heads, ffn),
                "feed": {"x": rng.standard_normal((seq, d)).astype(np.float32)}, "steps": 5 if quick else 10, "fetch": "h",
                "arch": "c", "grows": False, "shape": f"{layers} layers d={d} heads={heads} tokens={seq}"})  # fmt: skip
    cfg = (
        kv_cache_decode.Config(layers=2, d=64, heads=4)
        if quick
        else kv_cache_decode.Config(layers=4, d=256, heads=4)
    )
    path = tmp / "decode.oinf"
    kv_cache_decode.write_model(path, cfg)
    steps = 16 if quick else 48
    arch = json.loads((ROOT / "openinfer_jax" / "emit" / "devices" / "cortex_a53.json").read_text())
    # +1: the driver runs one untimed warm-up step before the timed ones.
    arch["cache_capacity"] = {
        "K": {"l": cfg.layers, "t": steps + 1},
        "V": {"l": cfg.layers, "t": steps + 1},
    }
    arch["memory"]["global_bytes"] = 1 << 34
    out.append({"name": "decode", "model": path, "graph": kv_cache_decode.graph_text(cfg),
                "feed": {"x": rng.standard_normal((1, cfg.d)).astype(np.float32)}, "steps": steps, "arch": arch, "fetch": "y",
                "grows": True, "shape": f"{cfg.layers} layers d={cfg.d}, {steps} tokens"})  # fmt: skip
    return out


def _c_side(work: dict[str, Any], tmp: Path) -> dict[str, Any]:
    from openinfer_jax.emit import Synthesizer

    sys.path.insert(0, str(ROOT))
    import numpy as np

    plan = Synthesizer(work["arch"]).synthesize(
        work["model"], work["graph"], name="prog", outputs=[]
    )
    out = plan.emit(tmp / f"{work['name']}_c")
    sources = ["prog.c", "oi_runtime.c", "prog_driver.c"]
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-std=c99", "-O3", "-march=native", "-Wall", "-Wextra", "-Werror", *sources, "-lm", "-o", "driver"],
                   cwd=out, check=True)  # fmt: skip
    subprocess.run(["strip", "driver"], cwd=out, check=False)
    ins = tmp / f"{work['name']}_in"
    ins.mkdir(exist_ok=True)
    for var, value in work["feed"].items():
        arr = np.ascontiguousarray(value)
        with open(ins / f"{var}.0.bin", "wb") as fh:
            fh.write(
                np.int32(arr.ndim).tobytes()
                + np.asarray(arr.shape, np.int64).tobytes()
                + arr.tobytes()
            )
    # Growing workloads start from an empty cache: no plain steps, only the timed repeats.
    result = subprocess.run([str(out / "driver"), str(work["model"]), "0", str(ins), str(tmp), str(work["steps"])],
                            capture_output=True, text=True, check=True)  # fmt: skip
    ns = float(result.stdout.split()[-1])
    lines = sum(text.count("\n") for text in plan.files.values())
    return {"ms": ns / 1e6, "lines": lines, "binary_bytes": (out / "driver").stat().st_size,
            "arena_bytes": plan.arena_bytes, "buffer_bytes": plan.buffer_bytes, "kernels": plan.kernels}  # fmt: skip


VULKAN_WORKLOADS = ("mlp", "decode")


def _vk_side(work: dict[str, Any], tmp: Path) -> dict[str, Any] | None:
    """The Vulkan target's wall-clock step time, submits per step, GPU/host op nodes; None
    when no Vulkan toolchain (libvulkan, glslc) is there."""
    import ctypes.util
    import shutil

    from openinfer_jax.emit import Synthesizer

    have_spirv = shutil.which("glslc") or os.environ.get("OPENINFER_VK_CACHE")  # a filled cache
    if ctypes.util.find_library("vulkan") is None or not have_spirv:
        return None
    plan = (
        Synthesizer(work["arch"])
        .with_target("vulkan")
        .synthesize(work["model"], work["graph"], name="prog", outputs=[])
    )
    out = plan.emit(tmp / f"{work['name']}_vk")
    sources = ["prog.c", "oi_runtime.c", "oi_vulkan.c", "prog_driver.c"]
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-std=c99", "-O3", "-march=native", "-Wall", "-Wextra", "-Werror", *sources, "-lvulkan", "-lm",
                    "-o", "driver"], cwd=out, check=True)  # fmt: skip
    ins = tmp / f"{work['name']}_in"
    for step in (1, 2):  # the counted run below takes 3 steps of the same input
        (ins / f"{next(iter(work['feed']))}.{step}.bin").write_bytes(
            (ins / f"{next(iter(work['feed']))}.0.bin").read_bytes()
        )
    timed = subprocess.run([str(out / "driver"), str(work["model"]), "0", str(ins), str(tmp), str(work["steps"])],
                           capture_output=True, text=True, check=True)  # fmt: skip
    # A fresh run of a few plain steps reports the submissions and dispatches per step.
    counted = subprocess.run([str(out / "driver"), str(work["model"]), "3", str(ins), str(tmp / "vk_out")],
                             capture_output=True, text=True, check=False)  # fmt: skip
    stats = dict(
        line.split(" ", 1) for line in counted.stdout.splitlines() if line.startswith("vk_")
    )
    report = plan.vulkan
    assert report is not None
    return {"ms": float(timed.stdout.split()[-1]) / 1e6, "device": stats.get("vk_device", "?"),
            "submits_per_step": float(stats.get("vk_submits_per_step", "nan")),
            "dispatches_per_step": float(stats.get("vk_dispatches_per_step", "nan")),
            "gpu_nodes": report.gpu, "host_nodes": len(report.host)}  # fmt: skip


def _sim_side(work: dict[str, Any]) -> float:
    """Median step time of one executor over `steps` steps (compiles land in the first steps
    and at cache-bucket boundaries; the median is the steady state, like the C figure)."""
    import statistics

    from openinfer_jax.oinf import ModelLoader
    from openinfer_jax.sim import Simulator

    with ModelLoader.open(work["model"]) as loader:
        ex = Simulator(loader, work["graph"]).make_executor()
        times = []
        for _ in range(work["steps"]):
            ex.insert(**work["feed"])
            start = time.perf_counter()
            ex.step()
            ex.fetch(work["fetch"])  # XLA dispatch is asynchronous: wait for the result
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the table, write bench/results/emit.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small workloads")
    parser.add_argument(
        "--xla-threads", choices=("1", "all"), default="1", help="XLA intra-op threads (default 1)"
    )
    parser.add_argument("--no-vulkan", action="store_true", help="skip the Vulkan target rows")
    args = parser.parse_args(argv)
    _configure_xla(args.xla_threads)
    from rich.console import Console
    from rich.table import Table

    rows: list[dict[str, Any]] = []
    vk_rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for work in _workloads(args.quick, tmp):
            c = _c_side(work, tmp)
            sim_ms = _sim_side(work)
            rows.append({"workload": work["name"], "shape": work["shape"], "c_ms": c["ms"], "sim_ms": sim_ms,
                         "ratio_c_over_sim": c["ms"] / sim_ms, **{k: v for k, v in c.items() if k != "ms"}})  # fmt: skip
            vk = None
            if not args.no_vulkan and work["name"] in VULKAN_WORKLOADS:
                vk = _vk_side(work, tmp)
            if vk is not None:
                vk_rows.append({"workload": work["name"], "shape": work["shape"], "vk_ms": vk["ms"], "c_ms": c["ms"],
                                "sim_ms": sim_ms, "ratio_vk_over_c": vk["ms"] / c["ms"],
                                "ratio_vk_over_sim": vk["ms"] / sim_ms, **{k: v for k, v in vk.items() if k != "ms"}})  # fmt: skip
    table = Table(
        title=f"emitted C (-O3 -march=native, 1 thread) vs simulator (XLA CPU, {args.xla_threads} thread(s))"
    )
    for col in (
        "workload",
        "shape",
        "C ms/step",
        "sim ms/step",
        "C/sim",
        "lines",
        "binary",
        "arena/buffers",
    ):
        table.add_column(col, justify="left" if col in ("workload", "shape") else "right")
    for r in rows:
        table.add_row(r["workload"], r["shape"], f"{r['c_ms']:.3f}", f"{r['sim_ms']:.3f}", f"{r['ratio_c_over_sim']:.2f}x",
                      str(r["lines"]), f"{r['binary_bytes'] // 1024} KiB",
                      f"{r['arena_bytes'] // 1024}/{r['buffer_bytes'] // 1024} KiB")  # fmt: skip
    Console(width=160).print(table)
    if vk_rows:
        vt = Table(
            title=f"emitted Vulkan on {vk_rows[0]['device']} (wall time, pinned to 1 CPU) vs emitted C and the simulator"
        )
        for col in ("workload", "shape", "VK ms/step", "C ms/step", "sim ms/step", "VK/C", "VK/sim",
                    "submits/step", "dispatches/step", "GPU/host op nodes"):  # fmt: skip
            vt.add_column(col, justify="left" if col in ("workload", "shape") else "right")
        for r in vk_rows:
            vt.add_row(r["workload"], r["shape"], f"{r['vk_ms']:.3f}", f"{r['c_ms']:.3f}", f"{r['sim_ms']:.3f}",
                       f"{r['ratio_vk_over_c']:.2f}x", f"{r['ratio_vk_over_sim']:.2f}x", f"{r['submits_per_step']:.1f}",
                       f"{r['dispatches_per_step']:.1f}", f"{r['gpu_nodes']}/{r['host_nodes']}")  # fmt: skip
        Console(width=160).print(vt)
    payload = {
        "quick": args.quick,
        "xla_threads": args.xla_threads,
        "rows": rows,
        "vulkan_rows": vk_rows,
    }
    results_file("emit.json", args.quick).write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
