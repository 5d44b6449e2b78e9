"""bitcast: each element's bits reread as another type of the same width (ONNX BitCast), on
the JAX lowering, the NumPy reference and the simulator's cpu and numpy devices."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops import registry
from tests.ops.op_backends import run_everywhere

HOST = ("jax", "reference", "cpu", "numpy")
CASES = [
    (np.array([[1.0, -2.0], [0.5, math.nan]], np.float32), DType.F32, DType.I32),
    (np.array([-1, 7, -(2**63)], np.int64), DType.I64, DType.F64),
    (np.array([-1, 127, -128], np.int8), DType.I8, DType.U8),
    (np.array([65535, 1], np.uint16), DType.U16, DType.F16),
    (np.array([True, False]), DType.BOOL, DType.U8),
    (np.array(3.5, np.float32), DType.F32, DType.U32),  # 0-d stays 0-d
]


@pytest.mark.parametrize(("x", "src", "dst"), CASES, ids=lambda v: getattr(v, "short", None))
def test_bits_are_kept(x: np.ndarray, src: DType, dst: DType, tmp_path: Path) -> None:
    want = x.astype(np.uint8) if src is DType.BOOL else x
    want = np.array(want, order="C").view(dst.numpy)
    for backend, got in run_everywhere("bitcast", [x], [src], {"to": dst}, tmp_path, HOST).items():
        got = np.asarray(got)
        assert got.dtype == dst.numpy and got.shape == x.shape, backend
        assert got.tobytes() == want.tobytes(), (backend, got, want)


def test_widths_must_match() -> None:
    opdef = registry.get("bitcast")
    assert opdef is not None
    with pytest.raises(registry.OpCheckError, match=r"bitcast: f32 is 32 bits and i64 64"):
        opdef.infer([DType.F32], [(2,)], {"to": DType.I64})


@pytest.mark.parametrize(("src", "dst"), [(DType.F32, DType.I32), (DType.U8, DType.BOOL)])
def test_emitted_c_keeps_the_bits(src: DType, dst: DType, tmp_path: Path) -> None:
    x = (
        np.array([1.0, -2.0, 0.5, 3.0], np.float32)
        if src is DType.F32
        else np.array([0, 1, 2, 255], np.uint8)
    )
    got = np.asarray(run_everywhere("bitcast", [x], [src], {"to": dst}, tmp_path, ("c",))["c"])
    want = x.view(np.int32) if dst is DType.I32 else x != 0
    assert got.dtype == want.dtype and np.array_equal(got, want)
