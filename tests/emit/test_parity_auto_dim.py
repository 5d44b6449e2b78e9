"""`@auto_dim` cache tables in C vs the simulator over several steps (docs/semantics.md).

`A(i, j): f32[2, 3] @auto_dim(i, j)` is one matrix of shape [2 + n_i, 3 + n_j]: a scalar
index grows its count and selects the whole grown extent, a slice selects a range of it.
`C(l, t): f32[2, 3] @table @auto_dim(t)` mixes a table axis with an auto one. Storage is
preallocated to the capacity from the device JSON; a growth past it is OI_ERR_CACHE_FULL.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.emit import Synthesizer
from openinfer_jax.oinf import write_oinf
from tests.emit.cases import test_arch
from tests.emit.harness import CC, build, parity, run_driver

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")

GRAPH = """
graph {
  dynamic { x: f32[2, 3]; }
  volatile { a: f32[2, 3]; b: f32[2, 3]; s1: f32[2, 3]; c: f32[2, 3]; w: f32[1, 2, 3]; }
  persistent {
    step: i32 @init(0);
    A(i, j): f32[2, 3] @auto_dim(i, j);
    C(l, t): f32[2, 3] @table @auto_dim(t);
  }
  block entry {
    cache.read A[step, step] >> a;
    op add(a, a) >> a;
    cache.write a >> A[step, step];
    cache.read A[0..2, 1..4] >> s1;
    op add(s1, x) >> s1;
    cache.write s1 >> A[0..2, 1..4];
    cache.read A[-1, ..] >> b;
    cache.write x >> C[step, 0..2];
    cache.read C[step, step] >> c;
    cache.read C[.., 1..3] >> w;
    cache.increment step;
    return;
  }
}
"""

CAPACITY = {"A": {"i": 6, "j": 5}, "C": {"l": 4, "t": 4}}


def test_auto_dim_tables_match_simulator(tmp_path: Path) -> None:
    rng = np.random.default_rng(31)
    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={})
    steps = [{"x": rng.standard_normal((2, 3)).astype(np.float32)} for _ in range(4)]
    outputs = ["a", "b", "s1", "c", "w", "A", "C", "step"]
    arch = test_arch(cache_capacity=CAPACITY)
    result = parity(tmp_path, model, GRAPH, steps, outputs=outputs, arch=arch)
    assert result["compared"] == 4 * len(outputs)
    header = result["plan"].files["prog.h"]
    assert "#define OI_BOUND_A 64" in header  # (2 + 6) x (3 + 5) at capacity
    assert "#define OI_BOUND_C 72" in header  # 4 x (2 + 4) x 3


def test_growth_past_the_capacity_is_cache_full(tmp_path: Path) -> None:
    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={})
    arch = test_arch(cache_capacity={"A": {"i": 2, "j": 8}, "C": 8})
    plan = Synthesizer(arch).synthesize(model, GRAPH, name="prog", outputs=["b"])
    x = np.ones((2, 3), np.float32)
    result = run_driver(build(plan, tmp_path / "c"), model, [{"x": x}] * 3, tmp_path)
    assert result.returncode == 1
    assert "step 2: a cache table is full" in result.stderr
    assert "cache table A: index 2 exceeds the capacity 2 of axis 0" in result.stderr
    assert (tmp_path / "out" / "b.1.bin").exists()


def test_auto_dim_axis_without_capacity_is_named(tmp_path: Path) -> None:
    from openinfer_jax.errors import SynthesisError

    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={})
    with pytest.raises(SynthesisError, match=r"cache table 'A': index 'i' is unbounded"):
        Synthesizer("c").synthesize(model, GRAPH, name="prog")
