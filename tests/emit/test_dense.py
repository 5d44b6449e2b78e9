"""The runtime's f32 kernels against the simulator: GEMM/GEMV (emit/runtime/oi_gemm.h)
behind linear and matmul (GEMV by rows of W, GEMV by rows of B, packed GEMM with edge tiles,
K and N blocking made small by the device JSON, batched matmul, 1-D operands, a right
operand broadcast over the batch, bias) and attention (oi_attention.h: the decode path's
online softmax over several key blocks with grouped-query heads, keys cut into ranges
merged at the end, dims off the vector width, the tiled path with query
blocks, float and bool masks, causal, a row that sees no key), built single-threaded and
with the thread pool, where 1 and 2 threads must give bit-identical outputs; the device
JSON's thread and blocking keys are checked."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openinfer_jax.emit import Synthesizer
from openinfer_jax.errors import SynthesisError
from openinfer_jax.oinf import write_oinf
from tests.emit.cases import test_arch
from tests.emit.harness import CC, parity, run_driver

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")

# Rows 1..3 take GEMV, 4+ the packed GEMM; 37 columns leave an edge panel, K = 70 spans
# three K blocks of 32 and N = 150 three column blocks of 64 with the small blocking below.
# 25 and 30 columns leave panels of one vector and more (AVX2: 9 = a vector and a lone
# column, 14; AVX-512: 25, 30; 4 lanes: 1, 6), as 49 pixels leave 17 columns with AVX-512.
GRAPH = """
graph {
  dynamic {
    x1: f32[1, 70]; x3: f32[3, 70]; x9: f32[9, 70]; x2: f32[2, 7, 70]; xv: f32[70];
    bb: f32[2, 70, 37]; bm: f32[70, 150]; x100: f32[100, 70];
  }
  constant { w: f32[37, 70]; wb: f32[37]; wide: f32[150, 70]; bc: f32[70, 150]; w25: f32[25, 70]; b30: f32[70, 30]; }
  volatile {
    l1: f32[1, 37]; l3: f32[3, 37]; l9: f32[9, 37]; l2: f32[2, 7, 37]; lw: f32[9, 150];
    m1: f32[1, 150]; m9: f32[9, 150]; mb: f32[2, 7, 37]; mv: f32[150]; ms: f32[2, 7, 150];
    mc: f32[9, 150]; l25: f32[9, 25]; m30: f32[9, 30]; l100: f32[100, 37];
  }
  block entry {
    op linear(x1, w, wb) >> l1;
    op linear(x3, w) >> l3;
    op linear(x9, w, wb) >> l9;
    op linear(x2, w, wb) >> l2;
    op linear(x9, wide) >> lw;
    op matmul(x1, bm) >> m1;
    op matmul(x9, bm) >> m9;
    op matmul(x2, bb) >> mb;
    op matmul(xv, bm) >> mv;
    op matmul(x2, bm) >> ms;
    op matmul(x9, bc) >> mc;
    op linear(x9, w25) >> l25;
    op matmul(x9, b30) >> m30;
    op linear(x100, w, wb) >> l100;
    return;
  }
}
"""
OUTPUTS = ["l1", "l3", "l9", "l2", "lw", "m1", "m9", "mb", "mv", "ms", "mc", "l25", "m30", "l100"]


Shapes = dict[str, tuple[int, ...]]


def _random_model(
    tmp: Path, seed: int, weights: Shapes, feeds: Shapes
) -> tuple[Path, list[dict[str, np.ndarray]]]:
    """`tmp/m.oinf` holding standard-normal f32 `weights`, and two steps of standard-normal
    f32 inputs `feeds` (drawn in that order from one generator seeded `seed`)."""
    rng = np.random.default_rng(seed)

    def f32(shape: tuple[int, ...]) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    model = tmp / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={k: f32(v) for k, v in weights.items()})
    return model, [{k: f32(v) for k, v in feeds.items()} for _ in range(2)]


def _model(tmp: Path) -> tuple[Path, list[dict[str, np.ndarray]]]:
    weights = {"w": (37, 70), "wb": (37,), "wide": (150, 70), "bc": (70, 150), "w25": (25, 70),
               "b30": (70, 30)}  # fmt: skip
    feeds = {"x1": (1, 70), "x3": (3, 70), "x9": (9, 70), "x2": (2, 7, 70), "xv": (70,),
             "bb": (2, 70, 37), "bm": (70, 150), "x100": (100, 70)}  # fmt: skip
    return _random_model(tmp, 5, weights, feeds)


ATTENTION = """
graph {
  dynamic {
    q1: f32[1, 6, 1, 16]; k1: f32[1, 2, 150, 16]; v1: f32[1, 2, 150, 16]; mf: f32[150];
    q3: f32[6, 3, 16];
    q: f32[2, 4, 30, 8]; k: f32[2, 2, 40, 8]; v: f32[2, 2, 40, 12]; mb: bool[2, 1, 30, 40];
    q5: f32[1, 9, 2, 19]; k5: f32[1, 3, 700, 19]; v5: f32[1, 3, 700, 20]; m5: f32[700];
    q6: f32[1, 6, 1, 64]; k6: f32[1, 2, 520, 64]; v6: f32[1, 2, 520, 64];
  }
  volatile {
    d1: f32[1, 6, 1, 16]; d2: f32[6, 3, 16]; d3: f32[6, 3, 16];
    t1: f32[2, 4, 30, 12]; t2: f32[2, 4, 30, 12]; t3: f32[2, 4, 30, 12];
    d5: f32[1, 9, 2, 20]; d6: f32[1, 9, 2, 20]; d7: f32[1, 6, 1, 64];
  }
  block entry {
    assign k3: f32[2, 150, 16];
    assign v3: f32[2, 150, 16];
    op reshape(k1, shape=[2, 150, 16]) >> k3;
    op reshape(v1, shape=[2, 150, 16]) >> v3;
    op attention(q1, k1, v1, mf, scale=0.3) >> d1;
    op attention(q3, k3, v3, causal=true) >> d2;
    op attention(q3, k3, v3) >> d3;
    op attention(q, k, v, mb) >> t1;
    op attention(q, k, v, causal=true) >> t2;
    op attention(q, k, v, mb, causal=true) >> t3;
    op attention(q5, k5, v5, causal=true) >> d5;
    op attention(q5, k5, v5, m5) >> d6;
    op attention(q6, k6, v6) >> d7;
    return;
  }
}
"""
ATTENTION_OUTPUTS = ["d1", "d2", "d3", "t1", "t2", "t3", "d5", "d6", "d7"]


def _attention_model(tmp: Path) -> tuple[Path, list[dict[str, np.ndarray]]]:
    rng = np.random.default_rng(8)

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    model = tmp / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={})
    mask = np.where(rng.random(150) < 0.2, -1e9, 0.0).astype(np.float32)
    hidden = rng.random((2, 1, 30, 40)) < 0.7
    hidden[1, 0, 4, :] = False  # a query that sees no key: zeros
    steps = [
        {
            "q1": f32(1, 6, 1, 16),
            "k1": f32(1, 2, 150, 16),
            "v1": f32(1, 2, 150, 16),
            "mf": mask,
            "q3": f32(6, 3, 16),
            "q": f32(2, 4, 30, 8),
            "k": f32(2, 2, 40, 8),
            "v": f32(2, 2, 40, 12),
            "mb": hidden,
            # decode shapes: query heads sharing K/V heads, keys cut into several ranges
            "q5": f32(1, 9, 2, 19),
            "k5": f32(1, 3, 700, 19),
            "v5": f32(1, 3, 700, 20),
            "m5": np.where(rng.random(700) < 0.3, -1e9, 0.0).astype(np.float32),
            "q6": f32(1, 6, 1, 64),
            "k6": f32(1, 2, 520, 64),
            "v6": f32(1, 2, 520, 64),
        }
        for _ in range(2)
    ]
    return model, steps


CONV = """
graph {
  dynamic { img: f32[2, 3, 17, 15]; sig: f32[2, 4, 33]; big: f32[1, 3, 38, 41]; sq: f32[1, 40, 7, 7]; }
  constant {
    ws: f32[8, 3, 3, 3]; bs: f32[8]; wd: f32[8, 1, 5, 5]; bd: f32[8]; wp: f32[12, 8, 1, 1];
    wg: f32[6, 4, 3, 3]; w1: f32[6, 2, 3]; b1: f32[6]; wd3: f32[8, 1, 3, 3]; wq: f32[14, 40, 1, 1]; bq: f32[14];
    wr: f32[48, 40, 1, 1]; wr3: f32[48, 8, 3, 3];
  }
  volatile {
    c1: f32[2, 8, 9, 8]; c2: f32[2, 8, 5, 4]; c3: f32[2, 12, 5, 4]; c4: f32[2, 6, 5, 2];
    c5: f32[2, 6, 17]; c6: f32[2, 8, 9, 8]; c7: f32[2, 8, 7, 5]; c8: f32[1, 8, 19, 21];
    c9: f32[1, 8, 19, 21]; c10: f32[1, 14, 7, 7]; c11: f32[1, 48, 7, 7]; c12: f32[2, 48, 5, 4];
  }
  block entry {
    op conv2d(img, ws, bs, strides=[2, 2], pads=[1, 1, 1, 1]) >> c1;
    op conv2d(c1, wd, bd, strides=[2, 2], pads=[2, 2, 2, 2], groups=8) >> c2;
    op conv2d(c2, wp) >> c3;
    op conv2d(c2, wg, pads=[1, 0, 1, 2], dilations=[1, 2], groups=2) >> c4;
    op conv1d(sig, w1, b1, strides=[2], pads=[1, 1], groups=2) >> c5;
    op conv2d(c1, wd3, pads=[1, 1, 1, 1], groups=8) >> c6;
    op conv2d(c1, wd3, dilations=[1, 2], pads=[0, 1, 0, 0], groups=8) >> c7;
    op conv2d(big, ws, bs, strides=[2, 2], pads=[1, 1, 1, 1]) >> c8;
    op conv2d(c8, wd, bd, pads=[2, 2, 2, 2], groups=8) >> c9;
    op conv2d(sq, wq, bq) >> c10;
    op conv2d(sq, wr) >> c11;
    op conv2d(c2, wr3, pads=[1, 1, 1, 1]) >> c12;
    return;
  }
}
"""
CONV_OUTPUTS = ["c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8", "c9", "c10", "c11", "c12"]


def _conv_model(tmp_path: Path) -> tuple[Path, list[dict[str, np.ndarray]]]:
    shapes = {"ws": (8, 3, 3, 3), "bs": (8,), "wd": (8, 1, 5, 5), "bd": (8,),
              "wp": (12, 8, 1, 1), "wg": (6, 4, 3, 3), "w1": (6, 2, 3), "b1": (6,),
              "wd3": (8, 1, 3, 3), "wq": (14, 40, 1, 1), "bq": (14,), "wr": (48, 40, 1, 1),
              "wr3": (48, 8, 3, 3)}  # fmt: skip
    feeds = {"img": (2, 3, 17, 15), "sig": (2, 4, 33), "big": (1, 3, 38, 41), "sq": (1, 40, 7, 7)}
    return _random_model(tmp_path, 11, shapes, feeds)


def test_convolutions_match_simulator(tmp_path: Path) -> None:
    """Direct kernel (depthwise; few taps: c1, c4, c8), GEMM (c3 1x1, c5 conv1d; c10: 49
    pixels, a last single column, K over two blocks; c11 and c12: many channels over few
    pixels, which threads split by rows, B packed once for both: a plain matrix, and an
    im2col one)."""
    model, steps = _conv_model(tmp_path)
    arch = _arch(threads=2, **SMALL_BLOCKS)
    result = parity(tmp_path, model, CONV, steps, outputs=CONV_OUTPUTS, arch=arch)
    assert result["compared"] == 2 * len(CONV_OUTPUTS)
    assert "oi_conv.h" in result["plan"].files


FUSED = """
graph {
  dynamic { x: f32[5, 8]; h: f32[5, 6]; img: f32[1, 2, 6, 6]; }
  constant { w: f32[6, 8]; b: f32[6]; u: f32[6, 8]; cw: f32[4, 2, 3, 3]; cb: f32[4]; dw: f32[4, 1, 3, 3]; }
  volatile { y: f32[5, 6]; g: f32[5, 6]; c: f32[1, 4, 6, 6]; d: f32[1, 4, 6, 6]; m: bool[5, 6]; }
  block entry {
    assign t: f32[5, 6];
    assign s: f32[5, 6];
    op linear(x, w, b) >> t;
    op gelu(t) >> t;
    op add(h, t) >> y;
    op linear(x, w) >> g;
    op silu(g) >> g;
    op linear(x, u) >> s;
    op mul(g, s) >> g;
    op conv2d(img, cw, cb, pads=[1, 1, 1, 1]) >> c;
    op clamp(c, min=0.0, max=6.0) >> c;
    op conv2d(c, dw, pads=[1, 1, 1, 1], groups=4) >> d;
    op add(d, c) >> d;
    op linear(x, u) >> s;
    op gt(s, h) >> m;
    return;
  }
}
"""


def test_fused_epilogues_match_simulator(tmp_path: Path) -> None:
    rng = np.random.default_rng(12)

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    shapes = {
        "w": (6, 8),
        "b": (6,),
        "u": (6, 8),
        "cw": (4, 2, 3, 3),
        "cb": (4,),
        "dw": (4, 1, 3, 3),
    }
    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={k: f32(*v) for k, v in shapes.items()})
    steps = [{"x": f32(5, 8), "h": f32(5, 6), "img": f32(1, 2, 6, 6)}]
    outputs = ["y", "g", "c", "d", "m"]
    result = parity(tmp_path, model, FUSED, steps, outputs=outputs, arch=_arch())
    fused = [line for line in result["plan"].passes.fused if "epilogue" in line]
    # gelu + add into the first linear, silu, the mul into the linear of s, clamp into the
    # conv, the residual add into the depthwise conv; gt writes a bool: not fused
    assert [line.split(" into ")[0] for line in fused] == [
        "fused `gelu`, `add`",
        "fused `silu`",
        "fused `mul`",
        "fused `clamp`",
        "fused `add`",
    ]
    # the clamp (in place, constant bounds) runs in the conv kernel's registers: no callback
    prog = result["plan"].files["prog.c"]
    assert prog.count("_fused_epi(const void") == 4
    assert prog.count("a.act = act;") == 1


# Each kernel path with an in-place clamp the kernel applies as it stores (`act`): the direct
# kernel (RGB stem; depthwise 5x5 stride 2, 3x3 stride 1 with an odd width and rows left
# over, 5x5 on a 7x7 image), the GEMM (1x1 on 49 pixels: edge panels and a single column,
# K over two blocks; K = 5), GEMV (one row), a clamp followed by a residual add (kernel clamp,
# then the epilogue), a clamp that writes elsewhere (an epilogue statement), one bound only.
ACT = """
graph {
  dynamic { img: f32[1, 3, 17, 15]; big: f32[1, 5, 30, 29]; sq: f32[1, 40, 7, 7]; x1: f32[1, 70]; x9: f32[9, 70]; h9: f32[9, 37]; }
  constant {
    ws: f32[8, 3, 3, 3]; bs: f32[8]; wd5: f32[5, 1, 5, 5]; bd5: f32[5]; wd3: f32[5, 1, 3, 3];
    w7: f32[40, 1, 5, 5]; wq: f32[14, 40, 1, 1]; bq: f32[14]; wp: f32[9, 5, 1, 1]; w: f32[37, 70]; wb: f32[37];
  }
  volatile {
    a1: f32[1, 8, 9, 8]; a2: f32[1, 5, 15, 15]; a3: f32[1, 5, 30, 29]; a4: f32[1, 40, 7, 7];
    a5: f32[1, 14, 7, 7]; a6: f32[1, 9, 30, 29]; l1: f32[1, 37]; l9: f32[9, 37]; u9: f32[9, 37];
  }
  block entry {
    assign t9: f32[9, 37];
    op conv2d(img, ws, bs, strides=[2, 2], pads=[1, 1, 1, 1]) >> a1;
    op clamp(a1, min=0.0, max=6.0) >> a1;
    op conv2d(big, wd5, bd5, strides=[2, 2], pads=[2, 2, 2, 2], groups=5) >> a2;
    op clamp(a2, min=-0.5, max=0.25) >> a2;
    op conv2d(big, wd3, pads=[1, 1, 1, 1], groups=5) >> a3;
    op clamp(a3, max=0.5) >> a3;
    op conv2d(sq, w7, pads=[2, 2, 2, 2], groups=40) >> a4;
    op clamp(a4, min=0.0, max=1.0) >> a4;
    op conv2d(sq, wq, bq) >> a5;
    op clamp(a5, min=0.0, max=2.0) >> a5;
    op conv2d(a3, wp) >> a6;
    op clamp(a6, min=-1.0) >> a6;
    op linear(x1, w, wb) >> l1;
    op clamp(l1, min=0.0, max=1.5) >> l1;
    op linear(x9, w, wb) >> l9;
    op clamp(l9, min=0.0, max=1.5) >> l9;
    op add(l9, h9) >> l9;
    op linear(x9, w) >> t9;
    op clamp(t9, min=0.0, max=1.0) >> u9;
    return;
  }
}
"""
ACT_OUTPUTS = ["a1", "a2", "a3", "a4", "a5", "a6", "l1", "l9", "u9"]


def _act_model(tmp_path: Path) -> tuple[Path, list[dict[str, np.ndarray]]]:
    shapes = {"ws": (8, 3, 3, 3), "bs": (8,), "wd5": (5, 1, 5, 5), "bd5": (5,), "wd3": (5, 1, 3, 3),
              "w7": (40, 1, 5, 5), "wq": (14, 40, 1, 1), "bq": (14,), "wp": (9, 5, 1, 1),
              "w": (37, 70), "wb": (37,)}  # fmt: skip
    feeds = {"img": (1, 3, 17, 15), "big": (1, 5, 30, 29), "sq": (1, 40, 7, 7), "x1": (1, 70),
             "x9": (9, 70), "h9": (9, 37)}  # fmt: skip
    return _random_model(tmp_path, 13, shapes, feeds)


def test_kernel_clamps_match_simulator(tmp_path: Path) -> None:
    model, steps = _act_model(tmp_path)
    result = parity(tmp_path, model, ACT, steps, outputs=ACT_OUTPUTS, arch=_arch(**SMALL_BLOCKS))
    assert result["compared"] == 2 * len(ACT_OUTPUTS)
    prog = result["plan"].files["prog.c"]
    # eight clamps in the kernels (l9's then feeds its add's epilogue); u9's stays a statement
    assert prog.count(".act = act;") == 8
    assert prog.count("_fused_epi(const void") == 2
    assert "oi_nan_clamp_float(v, 0.0f, 1.0f)" in prog


def test_prefer_fusion_refuses_what_would_change_results(tmp_path: Path) -> None:
    model = tmp_path / "m.oinf"
    rng = np.random.default_rng(0)
    write_oinf(model, sizevars={}, metadata={}, tensors={
        "w": rng.standard_normal((6, 8)).astype(np.float32)})  # fmt: skip
    graph = """
graph {
  dynamic { x: f32[5, 8]; h: f32[5, 6]; }
  constant { w: f32[6, 8]; }
  volatile { m: bool[5, 6]; }
  block entry {
    assign s: f32[5, 6];
    op linear(x, w) >> s;
    op gt(s, h) >> m;
    return;
  }
}
"""
    with pytest.raises(SynthesisError, match=r"`op gt\(s, h\) >> m;` at .* cannot be fused into"):
        Synthesizer(_arch(prefer_fusion=True)).synthesize(model, graph, outputs=["m"])
    Synthesizer(_arch()).synthesize(model, graph, outputs=["m"])  # not asked: left unfused


VIEWS = """
graph {
  dynamic {
    xq: f32[2, 5, 12]; xk: f32[2, 5, 12]; xv: f32[2, 5, 12]; mask: f32[2, 1, 1, 5];
    q: f32[4, 1, 4]; kn: f32[1, 2, 4]; vn: f32[1, 2, 4];
  }
  constant { one: i32 @init(1); }
  persistent {
    step: i32 @init(0);
    K(t): f32[2, 4] @table @fixed(t=8);
    V(t): f32[2, 4] @table @fixed(t=8);
  }
  volatile { y: f32[2, 5, 12]; z: f32[1, 16]; }
  block entry {
    assign q4: f32[2, 5, 3, 4];
    assign k4: f32[2, 5, 3, 4];
    assign v4: f32[2, 5, 3, 4];
    assign qh: f32[2, 3, 5, 4];
    assign kh: f32[2, 3, 5, 4];
    assign vh: f32[2, 3, 5, 4];
    assign oh: f32[2, 3, 5, 4];
    assign o4: f32[2, 5, 3, 4];
    assign pos: i32;
    assign end: i32;
    assign ks: f32[1, 2, 4];
    assign vs: f32[1, 2, 4];
    assign kt: f32[2, 1, 4];
    assign vt: f32[2, 1, 4];
    assign o: f32[4, 1, 4];
    assign o3: f32[1, 4, 4];
    op reshape(xq, shape=[2, 5, 3, 4]) >> q4;
    op reshape(xk, shape=[2, 5, 3, 4]) >> k4;
    op reshape(xv, shape=[2, 5, 3, 4]) >> v4;
    op transpose(q4, perm=[0, 2, 1, 3]) >> qh;
    op transpose(k4, perm=[0, 2, 1, 3]) >> kh;
    op transpose(v4, perm=[0, 2, 1, 3]) >> vh;
    op attention(qh, kh, vh, mask) >> oh;
    op transpose(oh, perm=[0, 2, 1, 3]) >> o4;
    op reshape(o4, shape=[2, 5, 12]) >> y;
    cache.read step >> pos;
    op add(pos, one) >> end;
    cache.write kn >> K[step..end];
    cache.write vn >> V[step..end];
    cache.read K[0..end] >> ks;
    cache.read V[0..end] >> vs;
    op transpose(ks, perm=[1, 0, 2]) >> kt;
    op transpose(vs, perm=[1, 0, 2]) >> vt;
    op attention(q, kt, vt, causal=true) >> o;
    op transpose(o, perm=[1, 0, 2]) >> o3;
    op reshape(o3, shape=[1, 16]) >> z;
    cache.increment step;
    return;
  }
}
"""


def test_attention_reads_and_writes_in_place(tmp_path: Path) -> None:
    rng = np.random.default_rng(13)

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={})
    mask = np.zeros((2, 1, 1, 5), np.float32)
    mask[1, ..., 3:] = -1e9
    steps = [
        {
            "xq": f32(2, 5, 12),
            "xk": f32(2, 5, 12),
            "xv": f32(2, 5, 12),
            "mask": mask,
            "q": f32(4, 1, 4),
            "kn": f32(1, 2, 4),
            "vn": f32(1, 2, 4),
        }
        for _ in range(3)
    ]
    result = parity(tmp_path, model, VIEWS, steps, outputs=["y", "z"], arch=_arch())
    assert result["compared"] == 6
    lines = [line for line in result["plan"].passes.fused if "in place" in line]
    assert len(lines) == 2
    # every reshape and transpose around the two attentions is gone from the program
    assert "_transpose_" not in result["plan"].files["prog.c"]
    assert "_reshape_" not in result["plan"].files["prog.c"]
    # the decode attention reads the K/V cache entries in place
    assert result["plan"].files["prog.c"].count("oi_table_view(") == 2


# The K/V entries an attention reads are not contiguous in the table's storage here (two
# batch rows of a partly filled position axis; one slot of an inner index axis), so
# oi_table_view copies them into the fallback buffer instead of pointing into the table.
SCATTERED_VIEWS = """
graph {
  dynamic {
    q: f32[2, 4, 1, 4]; qs: f32[4, 1, 4]; kn: f32[2, 1, 2, 4]; vn: f32[2, 1, 2, 4];
    sn: f32[1, 2, 4]; sv: f32[1, 2, 4];
  }
  constant { one: i32 @init(1); }
  persistent {
    step: i32 @init(0);
    K(b, t): f32[2, 4] @table @fixed(b=2, t=8);
    V(b, t): f32[2, 4] @table @fixed(b=2, t=8);
    S(t, u): f32[2, 4] @table @fixed(t=8, u=3);
  }
  volatile { o: f32[2, 4, 1, 4]; os: f32[4, 1, 4]; }
  block entry {
    assign pos: i32;
    assign end: i32;
    assign ks: f32[2, 1, 2, 4];
    assign vs: f32[2, 1, 2, 4];
    assign kt: f32[2, 2, 1, 4];
    assign vt: f32[2, 2, 1, 4];
    assign ss: f32[1, 2, 4];
    assign st: f32[2, 1, 4];
    assign sw: f32[1, 2, 4];
    assign swt: f32[2, 1, 4];
    cache.read step >> pos;
    op add(pos, one) >> end;
    cache.write kn >> K[0..2, step..end];
    cache.write vn >> V[0..2, step..end];
    cache.write sn >> S[step..end, 1];
    cache.write sv >> S[step..end, 0];
    cache.read K[0..2, 0..end] >> ks;
    cache.read V[0..2, 0..end] >> vs;
    cache.read S[0..end, 1] >> ss;
    cache.read S[0..end, 0] >> sw;
    op transpose(ks, perm=[0, 2, 1, 3]) >> kt;
    op transpose(vs, perm=[0, 2, 1, 3]) >> vt;
    op transpose(ss, perm=[1, 0, 2]) >> st;
    op transpose(sw, perm=[1, 0, 2]) >> swt;
    op attention(q, kt, vt, causal=true) >> o;
    op attention(qs, st, swt) >> os;
    cache.increment step;
    return;
  }
}
"""


def test_attention_views_of_scattered_cache_entries_are_copies(tmp_path: Path) -> None:
    rng = np.random.default_rng(17)

    def f32(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    model = tmp_path / "m.oinf"
    write_oinf(model, sizevars={}, metadata={}, tensors={})
    steps = [
        {
            "q": f32(2, 4, 1, 4),
            "qs": f32(4, 1, 4),
            "kn": f32(2, 1, 2, 4),
            "vn": f32(2, 1, 2, 4),
            "sn": f32(1, 2, 4),
            "sv": f32(1, 2, 4),
        }
        for _ in range(4)
    ]
    result = parity(tmp_path, model, SCATTERED_VIEWS, steps, outputs=["o", "os"], arch=_arch())
    assert result["compared"] == 8
    # the four reads go through oi_table_view (absorbed into the attentions), which copies
    assert result["plan"].files["prog.c"].count("oi_table_view(") == 4
    assert "_transpose_" not in result["plan"].files["prog.c"]


def _arch(**prefs: Any) -> dict[str, Any]:
    arch = test_arch()
    return {**arch, "preferences": {**arch["preferences"], **prefs}}


SMALL_BLOCKS = {"gemm_block": {"kc": 32, "nc": 64}}


@pytest.mark.parametrize("prepack", [True, False])
def test_gemm_paths_match_simulator(tmp_path: Path, prepack: bool) -> None:
    model, steps = _model(tmp_path)
    arch = _arch(prepack_weights=prepack, **SMALL_BLOCKS)
    result = parity(tmp_path, model, GRAPH, steps, outputs=OUTPUTS, arch=arch)
    assert result["compared"] == 2 * len(OUTPUTS)
    files = result["plan"].files
    assert "oi_gemm.h" in files and "oi_pool.h" not in files
    assert "pthread_" not in "".join(files.values())  # threads: 1 emits no thread code
    assert "#define OI_KC 32" in files["prog.c"] and "#define OI_NC 64" in files["prog.c"]
    # the model weights w, wide (linear) and bc (matmul) are packed once when asked
    assert ("oi_gemm_prepacked(" in files["prog.c"]) == prepack


ROWS = """
graph {
  dynamic { x: f32[6, 10, 40]; img: f32[2, 24, 5, 7]; }
  constant { g: f32[40]; b: f32[40]; }
  volatile {
    ln: f32[6, 10, 40]; rms: f32[6, 10, 40]; sm: f32[6, 10, 40]; ls: f32[6, 10, 40];
    s1: f32[6, 10, 40]; gp: f32[2, 24, 1, 1];
  }
  block entry {
    op layer_norm(x, g, b, axis=2, epsilon=0.00001) >> ln;
    op rms_norm(x, g, axis=2) >> rms;
    op softmax(x, axis=-1) >> sm;
    op log_softmax(x, axis=-1) >> ls;
    op softmax(x, axis=1) >> s1;
    op global_average_pool(img) >> gp;
    return;
  }
}
"""
ROWS_OUTPUTS = ["ln", "rms", "sm", "ls", "s1", "gp"]


def _rows_model(tmp_path: Path) -> tuple[Path, list[dict[str, np.ndarray]]]:
    """Norms, softmaxes and a global average pool: kernels that split rows over threads."""
    return _random_model(tmp_path, 5, {"g": (40,), "b": (40,)}, {"x": (6, 10, 40), "img": (2, 24, 5, 7)})


@pytest.mark.parametrize("threads", [1, 2])
def test_row_kernels_match_simulator(tmp_path: Path, threads: int) -> None:
    """Norms, softmaxes and the global average pool inline (one thread: no thread code) and
    as row tasks of the pool (two threads)."""
    model, steps = _rows_model(tmp_path)
    result = parity(tmp_path, model, ROWS, steps, outputs=ROWS_OUTPUTS, arch=_arch(threads=threads))
    assert result["compared"] == 2 * len(ROWS_OUTPUTS)
    files = result["plan"].files
    assert ("oi_pool.h" in files) == (threads > 1)
    assert ("oi_parallel_work(" in files["prog.c"]) == (threads > 1)


@pytest.mark.parametrize("which", ["gemm", "attention", "conv", "rows", "act", "gemm-native", "conv-native"])
def test_one_and_two_threads_are_bit_identical(tmp_path: Path, monkeypatch, which: str) -> None:
    which, _, native = which.partition("-")
    if which == "act":
        (model, steps), graph, outputs = _act_model(tmp_path), ACT, ACT_OUTPUTS
    elif which == "gemm":
        (model, steps), graph, outputs = _model(tmp_path), GRAPH, OUTPUTS
    elif which == "rows":
        (model, steps), graph, outputs = _rows_model(tmp_path), ROWS, ROWS_OUTPUTS
    elif which == "conv":
        (model, steps), graph, outputs = _conv_model(tmp_path), CONV, CONV_OUTPUTS
    else:
        (model, steps), graph, outputs = _attention_model(tmp_path), ATTENTION, ATTENTION_OUTPUTS
    arch = _arch(threads=2, **SMALL_BLOCKS)
    # the products here are small: split them anyway (OI_PARALLEL_MIN_WORK=0). OI_THREADS is
    # read when the program runs, so one build serves both thread counts; the two-thread run
    # is also compared with the simulator.
    flags = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-DOI_PARALLEL_MIN_WORK=0"]
    if native:  # the host's vectors (NATIVE_BUILDS): AVX-512's twelve-row GEMM tiles
        flags += NATIVE_BUILDS["native"]
    monkeypatch.setenv("OI_THREADS", "2")
    result = parity(tmp_path, model, graph, steps, outputs=outputs, arch=arch, flags=flags)
    assert "oi_pool.h" in result["plan"].files
    _assert_one_thread_gives_the_same(result, model, steps, tmp_path, monkeypatch, len(outputs))


def _assert_one_thread_gives_the_same(
    result: dict[str, Any], model: Path, steps: list[dict[str, np.ndarray]], tmp_path: Path,
    monkeypatch: Any, n_outputs: int,
) -> None:  # fmt: skip
    """The program `parity` ran with OI_THREADS=2 (outputs under tmp_path/out), run again with
    one thread: every output file byte for byte the same."""
    monkeypatch.setenv("OI_THREADS", "1")
    run = run_driver(result["exe"], model, steps, tmp_path / "run1")
    assert run.returncode == 0, run.stderr
    outs = {
        threads: {p.name: p.read_bytes() for p in sorted((where / "out").iterdir())}
        for threads, where in (("1", tmp_path / "run1"), ("2", tmp_path))
    }
    assert outs["1"] == outs["2"] and len(outs["1"]) == 2 * n_outputs


def test_attention_paths_match_simulator(tmp_path: Path) -> None:
    model, steps = _attention_model(tmp_path)
    outputs = ATTENTION_OUTPUTS
    result = parity(tmp_path, model, ATTENTION, steps, outputs=outputs, arch=_arch())
    assert result["compared"] == 2 * len(outputs)
    assert "oi_attention.h" in result["plan"].files


@pytest.mark.parametrize(
    ("prefs", "limits", "message"),
    [
        (
            {"threads": 8},
            {"max_threads": 4},
            "preferences.threads is 8 but limits.max_threads is 4",
        ),
        ({"threads": 65}, {}, "the C runtime supports at most 64"),
        ({"threads": 0}, {}, "preferences.threads must be an int >= 1"),
        ({"gemm_block": {"kc": 64, "nc": 100}}, {}, "gemm_block.nc must be a multiple of 32"),
        ({"gemm_block": {"mc": 4}}, {}, "preferences.gemm_block must be"),
        ({"gemv_max_rows": True}, {}, "preferences.gemv_max_rows must be an int >= 1"),
        ({"prepack_weights": "yes"}, {}, "preferences.prepack_weights must be true or false"),
    ],
)
def test_device_json_thread_and_block_errors(prefs: Any, limits: Any, message: str) -> None:
    arch = _arch(**prefs)
    arch["limits"] = {**arch["limits"], **limits}
    with pytest.raises(SynthesisError, match=message):
        Synthesizer(arch)


def _host_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.partition(":")[2].split())


# The suite's default build takes the baseline ISA (4 lanes with x86-64's SSE); the kernels'
# lane-sum trees and register tiles differ per vector width, so build them as a user would
# (-march=native: 16 lanes on AVX-512, 8 on AVX2) and, on an AVX-512 host, with 8 lanes too.
NATIVE_BUILDS = {"native": ["-O3", "-march=native"]}
if "avx512f" in _host_flags():
    NATIVE_BUILDS["native-avx2"] = ["-O3", "-march=native", "-mno-avx512f"]


@pytest.mark.parametrize("build", sorted(NATIVE_BUILDS))
def test_kernels_built_for_the_host_match_simulator(tmp_path: Path, build: str) -> None:
    flags = ["-std=c99", "-Wall", "-Wextra", "-Werror", *NATIVE_BUILDS[build]]
    for name, make, graph, outputs in (
        ("attention", _attention_model, ATTENTION, ATTENTION_OUTPUTS),
        ("gemm", _model, GRAPH, OUTPUTS),
        ("conv", _conv_model, CONV, CONV_OUTPUTS),
    ):
        where = tmp_path / name
        where.mkdir()
        model, steps = make(where)
        result = parity(where, model, graph, steps, outputs=outputs, arch=_arch(**SMALL_BLOCKS),
                        flags=flags)  # fmt: skip
        assert result["compared"] == 2 * len(outputs)


# Depthwise convolutions for oi_conv.h's channel-blocked kernel: 37 channels (blocks of 16 or
# 8 lanes and a short last block; two images, so the last block of the last image ends the
# tensor), 3x3 stride 1 with a fused clamp, 5x5 stride 2 with asymmetric pads, a 5x5 kernel
# on a 3x4 plane (narrower than the kernel), rows over several bands (the ring of input rows
# wraps) with a residual add as the epilogue, 3x3 stride 2 in bands, and the general kernel:
# dilation, a 7x7 kernel with strides (1, 2), conv1d with stride 2, rows of 3 outputs.
BLOCKED = """
graph {
  dynamic {
    p: f32[2, 37, 9, 9]; q: f32[1, 21, 15, 13]; n: f32[1, 19, 3, 4]; t: f32[1, 40, 30, 20];
    u: f32[1, 24, 41, 30]; s: f32[2, 18, 33]; v: f32[1, 20, 5, 5];
  }
  constant {
    w3: f32[37, 1, 3, 3]; b3: f32[37]; w5: f32[21, 1, 5, 5]; b5: f32[21]; wn: f32[19, 1, 5, 5];
    wt: f32[40, 1, 3, 3]; wu: f32[24, 1, 3, 3]; bu: f32[24]; wd: f32[37, 1, 3, 3]; w7: f32[21, 1, 7, 7];
    w1: f32[18, 1, 5]; b1: f32[18]; wv: f32[20, 1, 3, 3];
  }
  volatile {
    d1: f32[2, 37, 9, 9]; d2: f32[1, 21, 7, 6]; d3: f32[1, 19, 3, 4]; d4: f32[1, 40, 30, 20];
    d5: f32[1, 24, 20, 15]; d6: f32[2, 37, 9, 9]; d7: f32[1, 21, 15, 7]; d8: f32[2, 18, 16];
    d9: f32[1, 20, 3, 3];
  }
  block entry {
    op conv2d(p, w3, b3, pads=[1, 1, 1, 1], groups=37) >> d1;
    op clamp(d1, min=0.0, max=6.0) >> d1;
    op conv2d(q, w5, b5, strides=[2, 2], pads=[2, 1, 1, 2], groups=21) >> d2;
    op conv2d(n, wn, pads=[2, 2, 2, 2], groups=19) >> d3;
    op conv2d(t, wt, pads=[1, 1, 1, 1], groups=40) >> d4;
    op add(d4, t) >> d4;
    op conv2d(u, wu, bu, strides=[2, 2], pads=[0, 1, 1, 0], groups=24) >> d5;
    op conv2d(p, wd, dilations=[2, 2], pads=[2, 2, 2, 2], groups=37) >> d6;
    op conv2d(q, w7, strides=[1, 2], pads=[3, 3, 3, 3], groups=21) >> d7;
    op conv1d(s, w1, b1, strides=[2], pads=[2, 1], groups=18) >> d8;
    op conv2d(v, wv, strides=[2, 2], pads=[1, 1, 1, 1], groups=20) >> d9;
    return;
  }
}
"""
BLOCKED_OUTPUTS = ["d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8", "d9"]


def _blocked_model(tmp_path: Path) -> tuple[Path, list[dict[str, np.ndarray]]]:
    shapes = {"w3": (37, 1, 3, 3), "b3": (37,), "w5": (21, 1, 5, 5), "b5": (21,), "wn": (19, 1, 5, 5),
              "wt": (40, 1, 3, 3), "wu": (24, 1, 3, 3), "bu": (24,), "wd": (37, 1, 3, 3),
              "w7": (21, 1, 7, 7), "w1": (18, 1, 5), "b1": (18,), "wv": (20, 1, 3, 3)}  # fmt: skip
    feeds = {"p": (2, 37, 9, 9), "q": (1, 21, 15, 13), "n": (1, 19, 3, 4), "t": (1, 40, 30, 20),
             "u": (1, 24, 41, 30), "s": (2, 18, 33), "v": (1, 20, 5, 5)}  # fmt: skip
    return _random_model(tmp_path, 14, shapes, feeds)


# The blocked kernel forced on (OI_DW_BLOCKED=1) in the suite's baseline build (4 lanes),
# with the portable vectors, and in the host's native builds; "native" also with the
# shape rule deciding (blocked and planar kernels side by side).
BLOCKED_BUILDS = {
    "baseline": ["-DOI_DW_BLOCKED=1"],
    "portable": ["-DOI_DW_BLOCKED=1", "-DOI_PORTABLE_VECTORS"],
    "rule-native": NATIVE_BUILDS["native"],
    **{name: ["-DOI_DW_BLOCKED=1", *flags] for name, flags in NATIVE_BUILDS.items()},
}


@pytest.mark.parametrize("build", sorted(BLOCKED_BUILDS))
def test_blocked_depthwise_matches_simulator_at_one_and_two_threads(
    tmp_path: Path, monkeypatch, build: str
) -> None:
    """The channel-blocked depthwise kernel against the simulator at two threads, and the
    one-thread run bit-identical to it (threads split whole blocks of channels)."""
    model, steps = _blocked_model(tmp_path)
    flags = ["-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-DOI_PARALLEL_MIN_WORK=0"]
    monkeypatch.setenv("OI_THREADS", "2")
    result = parity(tmp_path, model, BLOCKED, steps, outputs=BLOCKED_OUTPUTS, arch=_arch(threads=2),
                    flags=[*flags, *BLOCKED_BUILDS[build]])  # fmt: skip
    assert result["compared"] == 2 * len(BLOCKED_OUTPUTS)
    prog = result["plan"].files["prog.c"]
    assert prog.count(".act = act;") == 1 and prog.count("_fused_epi(const void") == 1
    _assert_one_thread_gives_the_same(result, model, steps, tmp_path, monkeypatch, len(BLOCKED_OUTPUTS))
