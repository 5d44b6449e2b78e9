"""The trace you can diff: an emitted program built with -DOI_TRACE writes per-node summaries
in the simulator's trace schema; `openinfer trace-diff` names the first node that differs.

Checked: every example graph's C trace agrees with the simulator's (loops, branches,
consumers, cache reads); a deliberately wrong kernel (the add kernel patched in the emitted
source before building) is named with its step, block, node index, text, line:column and
loop index; without OI_TRACE the program contains no trace code at all."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.cli import main
from openinfer_jax.emit import Synthesizer
from openinfer_jax.errors import SimulationError
from openinfer_jax.oinf import ModelLoader
from openinfer_jax.sim import Simulator, write_trace_json
from openinfer_jax.sim.summaries import compare_traces, first_difference, load_trace, summarize
from tests.emit.cases import CASES, Case
from tests.emit.harness import CC, CFLAGS, build, write_tensor
from tests.emit.test_vulkan import HAVE_VULKAN

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")


def _sim_trace(case, path: Path) -> Path:
    with ModelLoader.open(case.model) as model:
        ex = Simulator(model, case.graph).with_trace(summaries=True).make_executor()
        for feed in case.steps:
            ex.insert(**feed)
            ex.step()
        write_trace_json(ex.trace(), path)
    return path


def _c_trace(case, tmp: Path, target: str = "c", patch=None, outputs=None) -> Path:
    synth = Synthesizer(case.arch)
    if target == "vulkan":
        synth = synth.with_target("vulkan")
    plan = synth.synthesize(case.model, case.graph, name="prog", outputs=outputs)
    out = tmp / "c"
    if patch is not None:
        plan.emit(out)
        source = out / "prog.c"
        source.write_text(patch(source.read_text()))
        plan = None
    exe = _build(plan, out, target)
    ins = tmp / "in"
    ins.mkdir()
    (tmp / "out").mkdir()
    for s, feed in enumerate(case.steps):
        for var, value in feed.items():
            write_tensor(ins / f"{var}.{s}.bin", np.asarray(value))
    trace = tmp / "c.json"
    env = {**os.environ, "OI_TRACE_FILE": str(trace)}
    argv = [str(exe), str(case.model), str(len(case.steps)), str(ins), str(tmp / "out")]
    run = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    return trace


def _build(plan, out: Path, target: str) -> Path:
    flags = [*CFLAGS, "-DOI_TRACE"]
    if plan is not None:
        return build(plan, out, flags=flags)
    sources = ["prog.c", "oi_runtime.c", "prog_driver.c"]
    libs = ["-lm"] if target == "c" else ["-lvulkan", "-lm"]
    if target == "vulkan":
        sources.append("oi_vulkan.c")
    result = subprocess.run(
        [CC, *flags, *sources, *libs, "-o", "driver"], cwd=out, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return out / "driver"


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_example_traces_like_the_simulator(name: str, tmp_path: Path, capsys) -> None:
    case = CASES[name](tmp_path)
    c_trace = _c_trace(case, tmp_path)
    sim_trace = _sim_trace(case, tmp_path / "sim.json")
    assert main(["trace-diff", str(sim_trace), str(c_trace)]) == 0
    count = int(re.search(r"no difference: (\d+) node outputs agree", capsys.readouterr().out)[1])
    events = load_trace(c_trace)
    assert count == len(events) > 0  # the C program traced every node the simulator did
    assert {ev["device"] for ev in events} == {"c"}


def _break_add(source: str) -> str:
    """The add kernel's first output element gets +1 after every call (a wrong kernel)."""
    head = re.search(r"^static (?:\w+ )*int (k\d+_add_f32)\((.*)\) \{$", source, re.M)
    assert head is not None, "no f32 add kernel in the program"
    name, params = head[1], head[2]
    args = ", ".join(p.split("*")[-1].strip() for p in params.split(","))
    wrapper = (
        f"static int {name}({params}) {{\n"
        f"    int rc = {name}_real({args});\n"
        "    if (!rc && oi_numel(o) > 0) ((float *)o->data)[0] += 1.0f;\n"
        "    return rc;\n"
        "}\n"
    )
    start = head.start()
    end = source.index("\n}\n", start) + 3
    kernel = source[start:end].replace(f"int {name}(", f"int {name}_real(", 1)
    return source[:start] + kernel + "\n" + wrapper + source[end:]


def test_a_wrong_kernel_is_named(tmp_path: Path, capsys) -> None:
    case = CASES["kv_cache_decode"](tmp_path)
    c_trace = _c_trace(case, tmp_path, patch=_break_add)
    sim_trace = _sim_trace(case, tmp_path / "sim.json")
    assert main(["trace-diff", str(sim_trace), str(c_trace)]) == 1
    out = capsys.readouterr().out
    # The first add of the program: the bias of layer 0's qkv projection, in step 0.
    assert out.startswith(
        "first difference: step 0, block entry, node 21 `op add(qkv, b_qkv[l]) >> qkv` at 48:7 (l=0)"
    ), out
    assert "qkv f32[1, 96]:" in out and "rtol = atol = 0.0001" in out
    # A looser tolerance does not hide a difference of 1.
    assert main(["trace-diff", str(sim_trace), str(c_trace), "--tol", "f32=0.01"]) == 1


@pytest.mark.skipif(not HAVE_VULKAN, reason="no libvulkan")
def test_the_vulkan_target_traces_like_the_simulator(tmp_path: Path, capsys) -> None:
    if not shutil.which("glslc"):
        pytest.skip("glslc missing")
    case = CASES["kv_cache_decode"](tmp_path)
    c_trace = _c_trace(case, tmp_path, target="vulkan")
    assert main(["trace-diff", str(_sim_trace(case, tmp_path / "sim.json")), str(c_trace)]) == 0
    assert "no difference: 156 node outputs agree" in capsys.readouterr().out


def test_nodes_the_passes_rewrote_are_skipped_and_the_rest_compared(tmp_path: Path, capsys) -> None:
    """The emitted program runs the graph after the passes (transposes folded into linear,
    bias adds fused, elementwise epilogues): nodes it keeps are traced under the simulator's
    numbering of the graph as written, a node a pass made under the number of the node whose
    output it writes, and the nodes with no value in memory are listed as not traced."""
    from tests.passes.test_fold import LAYERED, _model

    model = _model(tmp_path)
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    case = Case(LAYERED, model, [{"x": x}, {"x": -x}])
    plan = Synthesizer("c").synthesize(model, LAYERED, name="prog", outputs=["h", "y"])
    assert plan.passes.folded and plan.passes.fused  # the passes did rewrite the graph
    c_trace = _c_trace(case, tmp_path, outputs=["h", "y"])
    sim_trace = _sim_trace(case, tmp_path / "sim.json")
    assert main(["trace-diff", str(sim_trace), str(c_trace)]) == 0
    out = capsys.readouterr().out
    assert "not in the other trace (fused or folded by its passes?):" in out
    untraced = out.splitlines()[0]
    # The transpose is gone; the linear that absorbed matmul(h, wt) and the bias add is traced
    # as the add (whose output it writes); add(y, z) runs inside an epilogue (no memory).
    assert "6 `op transpose(W[l], perm=[1, 0]) >> wt`" in untraced
    assert "7 `op matmul(h, wt) >> y`" in untraced
    assert "add(y, B[l])" not in untraced and "tanh" not in untraced
    assert re.search(r"no difference: [1-9]\d* node outputs agree", out)


def test_without_oi_trace_nothing_is_compiled(tmp_path: Path) -> None:
    case = CASES["kv_cache_decode"](tmp_path)
    out = (
        Synthesizer(case.arch).synthesize(case.model, case.graph, name="prog").emit(tmp_path / "c")
    )
    for src in ("prog.c", "oi_runtime.c"):
        pre = subprocess.run(
            [CC, "-std=c99", "-E", src], cwd=out, capture_output=True, text=True, check=True
        ).stdout
        assert "oi_trace" not in pre and "OI_TRACE" not in pre, src
    traced = subprocess.run(
        [CC, "-std=c99", "-E", "-DOI_TRACE", "prog.c"], cwd=out, capture_output=True, text=True
    ).stdout
    assert traced.count("oi_trace_node(&oi_trace_sites[") > 10


def test_summaries_and_tolerances() -> None:
    from openinfer_jax.core.dtypes import DType

    x = np.array([[1.0, -2.0], [np.nan, np.inf]], np.float32)
    s = summarize(x, DType.F32)
    assert (s["numel"], s["nan"], s["inf"], s["min"], s["max"], s["sum"]) == (4, 1, 1, -2, 1, -1)
    i = summarize(np.array([3, -1], np.int8), DType.I8)
    assert i["checksum"] == f"{(3 * 1 + (-1 % 2**64) * 3) % 2**64:016x}"
    perm = summarize(x[::-1], DType.F32)  # same values, other order: the weighted sum differs
    assert perm["sum"] == s["sum"] and perm["wsum"] != s["wsum"]
    ev = {"step": 0, "node_index": 1, "block_name": "entry", "node_desc": "op", "output": ["y"]}
    base = [{**ev, "output_summaries": [summarize(np.ones(100, np.float32), DType.F32)]}]
    near = [{**ev, "output_summaries": [summarize(np.full(100, 1.00005, np.float32), DType.F32)]}]
    far = [{**ev, "output_summaries": [summarize(np.full(100, 1.001, np.float32), DType.F32)]}]
    assert first_difference(base, near) is None
    diff = first_difference(base, far)
    assert diff is not None and "y f32[100]: min 1.00100" in diff.reason
    assert first_difference(base, far, {"f32": 1e-2}) is None
    later = [{**base[0], "step": 1}]  # the node is traced, but not at this step: it stopped
    assert "no event for this node here" in first_difference(base, later).reason
    skipped = compare_traces(base, [])  # never traced at all: skipped and listed
    assert skipped.difference is None and skipped.untraced == ((1, "op"),)
    with pytest.raises(SimulationError, match="no output summaries"):
        first_difference([ev], base)


def test_trace_diff_rejects_bad_input(tmp_path: Path, capsys) -> None:
    good = tmp_path / "a.json"
    good.write_text(json.dumps([{"step": 0, "node_index": 0, "output_summaries": []}]))
    bad = tmp_path / "b.json"
    bad.write_text('{"step": 0}\nnot json\n')
    assert main(["trace-diff", str(good), str(bad)]) == 1
    assert f"{bad}:2: not a JSON trace event" in capsys.readouterr().err
    assert main(["trace-diff", str(good), str(good), "--tol", "f33=1"]) == 1
    assert "--tol 'f33=1': expected DTYPE=TOL" in capsys.readouterr().err
    assert main(["trace-diff", str(good), str(good)]) == 1
    assert "no output summaries" in capsys.readouterr().err
