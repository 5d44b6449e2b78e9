"""Ternary dtypes (t2: -1/0/+1, t1: -1/+1) in C vs the simulator, over several steps.

Model tensors are stored packed in the `.oinf` file (the C loader unpacks them to one int8
per element, like the simulator); dynamic inputs are inserted unpacked. Every op the registry
accepts for t2/t1 beyond the conformance matrix's (test_parity_ops.py runs those) is used
here: the movement ops, where, and ternary model weights feeding arithmetic and casts.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.oinf import DType, OinfWriter
from tests.emit.harness import CC, parity

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")

GRAPH = """
graph {
  dynamic { x: t2[2, 3]; s: t1[2, 3]; ids: i32[4]; gi: i64[2]; cond: bool[2, 3]; }
  constant { W: t2[2, 3]; S: t1[2, 3]; E: t2[5, 3]; }
  volatile {
    m: t2[2, 3]; ms: t1[2, 3]; a: t2[2, 3]; n1: t1[2, 3]; sg: i8[2, 3];
    c: t2[2, 6]; c1: t1[4, 3]; e: t2[4, 3]; g: t2[2, 2]; pc: t2[2, 5]; pr: t1[2, 6];
    pe: t2[4, 3]; t: t2[3, 2]; r: t1[3, 2]; sl: t2[2, 2]; w: t2[2, 3]; cf: f32[2, 3];
    ci: i1[2, 3]; q: bool[2, 3]; f: t1[2, 3]; neg: bool[2, 3]; fl: t2[2, 3]; acc: t2[2, 3];
  }
  block entry {
    op mul(x, W) >> m;
    op mul(s, S) >> ms;
    op abs(x) >> a;
    op neg(s) >> n1;
    op sign(x) >> sg;
    op concat(x, W, axis=1) >> c;
    op concat(s, S, axis=0) >> c1;
    op embedding(E, ids) >> e;
    op gather(x, gi, axis=1) >> g;
    op pad(x, pads=[1, 1], axes=[1], value=-1) >> pc;
    op pad(s, pads=[1, 2], axes=[1], mode="reflect") >> pr;
    op pad(x, pads=[1, 0, 1, 0], mode="edge") >> pe;
    op transpose(x, perm=[1, 0]) >> t;
    op reshape(s, shape=[3, 2]) >> r;
    op slice(x, starts=[1], ends=[3], axes=[1]) >> sl;
    op where(cond, x, W) >> w;
    op cast(x, to=f32) >> cf;
    op cast(s, to=i1) >> ci;
    op eq(x, W) >> q;
    op fill(s, value=-1) >> f;
    op is_neg(x) >> neg;
    op filter(cond, W, x) >> fl;
    op mul(m, x) >> acc;
    op neg(acc) >> acc;
    return;
  }
}
"""

OUTPUTS = ["m", "ms", "a", "n1", "sg", "c", "c1", "e", "g", "pc", "pr", "pe", "t", "r", "sl",
           "w", "cf", "ci", "q", "f", "neg", "fl", "acc"]  # fmt: skip


def test_ternary_ops_and_packed_weights_match_simulator(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    model = tmp_path / "m.oinf"
    with OinfWriter(model, overwrite=True) as writer:
        writer.add_tensor("W", rng.integers(-1, 2, (2, 3)).astype(np.int8), dtype=DType.T2)
        writer.add_tensor("S", rng.choice([-1, 1], (2, 3)).astype(np.int8), dtype=DType.T1)
        writer.add_tensor("E", rng.integers(-1, 2, (5, 3)).astype(np.int8), dtype=DType.T2)
    steps = [
        {
            "x": rng.integers(-1, 2, (2, 3)).astype(np.int8),
            "s": rng.choice([-1, 1], (2, 3)).astype(np.int8),
            "ids": rng.integers(-7, 7, 4).astype(np.int32),
            "gi": rng.integers(-3, 3, 2).astype(np.int64),
            "cond": rng.integers(0, 2, (2, 3)).astype(bool),
        }
        for _ in range(3)
    ]
    result = parity(tmp_path, model, GRAPH, steps, outputs=OUTPUTS)
    assert result["compared"] == 3 * len(OUTPUTS)
