"""Atomic steps in the emitted C: a step that fails part-way (here a cache slice out of range,
after a counter increment, an overwrite of an existing entry and an append) leaves persistent
state exactly as before the step, like the simulator; the next step continues from there."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.core.errors import SimulationError
from openinfer_jax.emit import Synthesizer
from openinfer_jax.oinf import ModelLoader, write_oinf
from openinfer_jax.sim import Simulator
from tests.emit.cases import test_arch
from tests.emit.harness import CC, CFLAGS

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")

GRAPH = """
graph {
  dynamic { x: f32[D]; lo: i32; }
  volatile { w: f32[2, D]; }
  persistent { count: i32 @init(0); A(t): f32[D] @table; }
  block entry {
    cache.increment count;
    cache.write x >> A[0];
    cache.write x >> A[count];
    cache.read A[lo..count] >> w;
    return;
  }
}
"""

MAIN = r"""
#include "prog.h"
#include <stdio.h>
static int run(float v, int lo) {
    float x[4] = {v, v + 1, v + 2, v + 3};
    int64_t dx[1] = {4};
    int32_t l = lo;
    int rc = oi_insert_x(x, 1, dx);
    if (!rc) rc = oi_insert_lo(&l, 0, NULL);
    if (!rc) rc = oi_step();
    return rc;
}
static void dump(const char *tag) {
    int32_t c; float a[64]; int nd, i; int64_t d[OI_MAX_DIMS], n = 1;
    oi_fetch_count(&c, 1, &nd, d);
    oi_fetch_A(a, 64, &nd, d);
    for (i = 0; i < nd; i++) n *= d[i];
    printf("%s count=%d A=", tag, (int)c);
    for (i = 0; i < n; i++) printf("%g,", a[i]);
    printf("\n");
}
int main(int argc, char **argv) {
    int rc;
    (void)argc;
    if (oi_init(argv[1])) return 2;
    rc = run(1.0f, 0); printf("step1 rc=%d\n", rc); dump("after1");
    rc = run(10.0f, 99); printf("step2 rc=%d %s\n", rc, rc ? oi_last_error() : ""); dump("after2");
    rc = run(20.0f, 0); printf("step3 rc=%d\n", rc); dump("after3");
    oi_free();
    return 0;
}
"""


def _sim_states(model: Path) -> list[str]:
    out = []
    with ModelLoader.open(model) as loader:
        ex = Simulator(loader, GRAPH).make_executor()
        for v, lo in ((1.0, 0), (10.0, 99), (20.0, 0)):
            x = np.arange(4, dtype=np.float32) + np.float32(v)
            ex.insert(x=x, lo=np.int32(lo))
            with contextlib.suppress(SimulationError):  # step 2 fails, as in the C program
                ex.step()
            flat = ",".join(f"{float(a):g}" for a in np.asarray(ex.fetch("A")).reshape(-1))
            out.append(f"count={int(ex.fetch('count'))} A={flat},")
    return out


def test_failed_step_restores_persistent_state(tmp_path: Path) -> None:
    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={"D": 4}, metadata={}, tensors={})
    plan = Synthesizer(test_arch(cache_capacity=8)).synthesize(model, GRAPH, name="prog")
    out = plan.emit(tmp_path / "c")
    (out / "main.c").write_text(MAIN)
    subprocess.run(
        [CC, *CFLAGS, "main.c", "prog.c", "oi_runtime.c", "-lm", "-o", "prog"], cwd=out, check=True
    )
    lines = subprocess.run(
        [str(out / "prog"), str(model)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert lines[0] == "step1 rc=0"
    assert (
        lines[2].startswith("step2 rc=7 ") and "slice resolved to 99..2 is out of range" in lines[2]
    )
    assert lines[4] == "step3 rc=0"
    c_states = [lines[1], lines[3], lines[5]]
    sim = _sim_states(model)
    assert [s.split(" ", 1)[1] for s in c_states] == sim
    assert (
        c_states[0].split(" ", 1)[1] == c_states[1].split(" ", 1)[1]
    )  # the failed step changed nothing
