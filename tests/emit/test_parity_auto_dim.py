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
    from openinfer_jax.core.errors import SynthesisError

    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={})
    with pytest.raises(SynthesisError, match=r"cache table 'A': index 'i' is unbounded"):
        Synthesizer("c").synthesize(model, GRAPH, name="prog")


ATOMIC = """
graph {
  dynamic { x: f32[2, 3]; lo: i32; }
  volatile { a: f32[2, 3]; z: f32[1, 3]; }
  persistent { step: i32 @init(0); A(i, j): f32[2, 3] @auto_dim(i, j); }
  block entry {
    cache.increment step;
    cache.read A[step, step] >> a;
    op add(a, a) >> a;
    cache.write a >> A[step, step];
    cache.write x >> A[0..2, 0..3];
    cache.read A[lo..1, 0..3] >> z;
    return;
  }
}
"""

MAIN = r"""
#include "prog.h"
#include <stdio.h>
static void dump(void) {
    float a[256]; int nd, i; int64_t d[OI_MAX_DIMS], n = 1;
    oi_fetch_A(a, 256, &nd, d);
    for (i = 0; i < nd; i++) n *= d[i];
    for (i = 0; i < nd; i++) printf("%lld,", (long long)d[i]);
    printf(":");
    for (i = 0; i < n; i++) printf("%g,", a[i]);
    printf("\n");
}
int main(int argc, char **argv) {
    int s, rc;
    int32_t lows[4] = {0, 0, 5, 0};
    (void)argc;
    if (oi_init(argv[1])) return 2;
    for (s = 0; s < 4; s++) {
        float x[6];
        int64_t dx[2] = {2, 3};
        int k;
        for (k = 0; k < 6; k++) x[k] = (float)(10 * s + k);
        rc = oi_insert_x(x, 2, dx);
        if (!rc) rc = oi_insert_lo(&lows[s], 0, NULL);
        if (!rc) rc = oi_step();
        printf("rc=%d ", rc);
        dump();
    }
    oi_free();
    return 0;
}
"""


def test_a_failed_step_leaves_auto_dim_tables_as_they_were(tmp_path: Path) -> None:
    """Step 2 grows A, overwrites entries and then fails (slice 5..1): C restores the counts
    and every overwritten row like the simulator, and step 3 continues from there."""
    import contextlib
    import subprocess

    from openinfer_jax.core.errors import SimulationError
    from openinfer_jax.oinf import ModelLoader
    from openinfer_jax.sim import Simulator
    from tests.emit.harness import CFLAGS

    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={})
    arch = test_arch(cache_capacity={"A": {"i": 6, "j": 6}})
    out = Synthesizer(arch).synthesize(model, ATOMIC, name="prog").emit(tmp_path / "c")
    (out / "main.c").write_text(MAIN)
    cmd = [CC, *CFLAGS, "main.c", "prog.c", "oi_runtime.c", "-lm", "-o", "prog"]
    subprocess.run(cmd, cwd=out, check=True)
    lines = subprocess.run(
        [str(out / "prog"), str(model)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == ["rc=0", "rc=0", "rc=7", "rc=0"]
    want = []
    with ModelLoader.open(model) as loader:
        ex = Simulator(loader, ATOMIC).make_executor()
        for s, lo in enumerate((0, 0, 5, 0)):
            x = (10 * s + np.arange(6, dtype=np.float32)).reshape(2, 3)
            ex.insert(x=x, lo=np.int32(lo))
            with contextlib.suppress(SimulationError):  # step 2 fails, as in the C program
                ex.step()
            table = np.asarray(ex.fetch("A"))
            dims = "".join(f"{d}," for d in table.shape)
            want.append(dims + ":" + "".join(f"{float(v):g}," for v in table.reshape(-1)))
    assert [line.split(" ", 1)[1] for line in lines] == want
    assert lines[1].split(" ", 1)[1] == lines[2].split(" ", 1)[1]  # the failed step changed nothing
