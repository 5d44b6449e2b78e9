"""Bad input: every problem is a SynthesisError naming the place and the limit, raised before
any file exists; the emitted C reports run-time problems as error codes with a message."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.core.errors import DslSyntaxError, SynthesisError
from openinfer_jax.emit import Plan, Synthesizer
from openinfer_jax.emit.memory import MemoryPlan
from openinfer_jax.oinf import write_oinf
from tests.emit.cases import CASES, test_arch
from tests.emit.harness import CC, build, run_driver

needs_cc = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")


# ---- device JSON ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda a: a.pop("limits"), "missing section 'limits'"),
        (
            lambda a: a["limits"].pop("max_workgroup_size"),
            "missing field limits.max_workgroup_size",
        ),
        (
            lambda a: a["memory"].update(global_bytes=-1),
            "memory.global_bytes must be a non-negative int",
        ),
        (lambda a: a["device"].update(api="cuda"), 'device.api must be "c" or "vulkan"'),
        (lambda a: a["features"].update(fp16="yes"), "features.fp16 must be true or false"),
        (lambda a: a.update(extra=1), "unknown top-level key 'extra'"),
        (lambda a: a.update(cache_capacity=0), "cache_capacity: must be >= 1"),
        (
            lambda a: a.update(cache_capacity={"K": {"t": "x"}}),
            "cache_capacity.K.t: must be an int >= 1",
        ),
    ],
)
def test_device_json_errors_name_the_field(mutate, message: str) -> None:
    arch = json.loads(json.dumps(test_arch()))
    mutate(arch)
    with pytest.raises(
        SynthesisError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")
    ):
        Synthesizer.from_arch(arch)


def test_device_json_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    with pytest.raises(SynthesisError, match=r"bad\.json:1:3: not valid JSON"):
        Synthesizer.from_arch(bad)
    with pytest.raises(SynthesisError, match=r"cannot read device architecture missing\.json"):
        Synthesizer.from_arch(tmp_path / "missing.json")
    devices = Path(__file__).resolve().parents[2] / "devices"
    for path in sorted(devices.glob("*.json")):
        assert Synthesizer.from_arch(path).arch.name


# ---- graphs the C target cannot bound or express ------------------------------------------------
def test_unbounded_table_names_table_and_axis(tmp_path: Path) -> None:
    case = CASES["cache_window_slice"](tmp_path)
    out = tmp_path / "never"
    with pytest.raises(
        SynthesisError,
        match=r"cache table 'A': index 't' is unbounded.*@fixed\(t=N\).*cache_capacity",
    ):
        Synthesizer("c").synthesize(case.model, case.graph).emit(out)
    assert not out.exists()


def test_inexpressible_node_is_named(tmp_path: Path) -> None:
    """A cache slice is bounded by its capacity; an op whose operands agree only at some
    run-time length cannot be bounded (the simulator runs it while the lengths agree)."""
    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={})
    graph = """
graph {
  dynamic { x: f32[2]; three: f32[3, 2]; n: i32; }
  volatile { w: f32[3, 2]; y: f32[3, 2]; }
  persistent { A(t): f32[2] @table @fixed(t=8); }
  block entry {
    cache.write x >> A[n];
    cache.read A[0..n] >> w;
    op add(w, three) >> y;
    return;
  }
}
"""
    with pytest.raises(
        SynthesisError,
        match=r"block entry node `op add\(w, three\) >> y` at 9:5: with every cache slice at its "
        r"capacity the op does not type-check",
    ):
        Synthesizer("c").synthesize(model, graph)


def test_memory_limit_of_the_device(tmp_path: Path) -> None:
    case = CASES["mlp"](tmp_path)
    arch = test_arch(memory={"global_bytes": 1024, "shared_bytes_per_sm": 0, "l2_bytes": 0})
    with pytest.raises(
        SynthesisError,
        match=r"needs an arena of \d+ bytes; device 'test-cpu' has memory.global_bytes=1024",
    ):
        Synthesizer(arch).synthesize(case.model, case.graph)


def test_graph_that_does_not_validate(tmp_path: Path) -> None:
    case = CASES["minimal"](tmp_path)
    with pytest.raises(SynthesisError, match="does not validate against the model"):
        Synthesizer("c").synthesize(
            case.model, "graph { dynamic { x: f32[Q]; } block entry { return; } }"
        )


def test_missing_graph_file_is_a_dsl_error(tmp_path: Path) -> None:
    # The emitter loads graphs through trace.load_graph like the simulator; before, a missing
    # file came out of the simulator's loader as a SimulationError.
    case = CASES["minimal"](tmp_path)
    with pytest.raises(DslSyntaxError, match=r"missing\.graph: cannot read the graph file"):
        Synthesizer("c").synthesize(case.model, tmp_path / "missing.graph")


def test_unknown_output_and_bad_name(tmp_path: Path) -> None:
    case = CASES["minimal"](tmp_path)
    with pytest.raises(SynthesisError, match="output 'nope' is not a variable"):
        Synthesizer("c").synthesize(case.model, case.graph, outputs=["nope"])
    with pytest.raises(SynthesisError, match="must be a C identifier"):
        Synthesizer("c").synthesize(case.model, case.graph, name="my-model")
    with pytest.raises(SynthesisError, match="unknown target 'cuda'"):
        Synthesizer("cuda")


# ---- atomic emit ---------------------------------------------------------------------------------
def test_failed_emit_leaves_nothing(tmp_path: Path) -> None:
    plan = Plan("c", "p", {"a.c": "int a;\n", "sub/b.c": "int b;\n"}, MemoryPlan(), 0, ())
    with pytest.raises(SynthesisError, match="cannot emit into"):
        plan.emit(tmp_path / "out")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SynthesisError, match="parent directory"):
        plan.emit(tmp_path / "no" / "such" / "dir")


def test_emit_fills_an_existing_empty_directory(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.mkdir()
    Plan("c", "p", {"a.c": "int a;\n"}, MemoryPlan(), 0, ()).emit(target)
    assert sorted(p.name for p in target.iterdir()) == [".openinfer-emit", "a.c"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# ---- run-time error codes of the emitted program ----------------------------------------------
@needs_cc
def test_cache_overflow_is_an_error_code(tmp_path: Path) -> None:
    case = CASES["cache_window_slice"](tmp_path)
    plan = Synthesizer(test_arch(cache_capacity=3)).synthesize(case.model, case.graph, name="prog")
    exe = build(plan, tmp_path / "c")
    result = run_driver(exe, case.model, case.steps, tmp_path)
    assert result.returncode == 1
    assert "step 3: a cache table is full" in result.stderr
    assert "cache table A: index 3 exceeds the capacity 3" in result.stderr
    assert (tmp_path / "out" / "avg.2.bin").exists()  # the first three steps ran


@needs_cc
def test_model_mismatch_and_bad_files_at_init(tmp_path: Path) -> None:
    case = CASES["minimal"](tmp_path)
    plan = Synthesizer("c").synthesize(case.model, case.graph, name="prog")
    exe = build(plan, tmp_path / "c")
    other = tmp_path / "other.oinf"
    write_oinf(other, sizevars={"B": 32}, metadata={}, tensors={"a": np.zeros(32, np.float32)})
    result = run_driver(exe, other, case.steps, tmp_path)
    assert (
        result.returncode == 1
        and "model sizevar B differs from the synthesized value 64" in result.stderr
    )
    garbage = tmp_path / "garbage.oinf"
    garbage.write_bytes(b"GGUF" + bytes(100))
    result = run_driver(exe, garbage, case.steps, tmp_path)
    assert result.returncode == 1 and "invalid .oinf file: R2 violated" in result.stderr
    wrong = [{"x": np.zeros(63, np.float32)}]
    result = run_driver(exe, case.model, wrong, tmp_path)
    assert result.returncode == 1 and "insert x: dim 0 is 63, expected 64" in result.stderr


def test_packaged_device_by_name() -> None:
    from openinfer_jax.emit.device import load_arch, packaged_arch_names

    assert {"cortex-a53", "ada-mock"} <= set(packaged_arch_names())
    assert load_arch("cortex-a53").name == load_arch("cortex_a53").name
    assert "Cortex-A53" in load_arch("cortex-a53").name
    with pytest.raises(SynthesisError, match=r"packaged device name .*cortex-a53"):
        load_arch("cortex-a99")
