"""Vulkan kernels for block-quantized weights (vk/quant_kernels.py): every op that takes one, every
scheme, against the NumPy reference on the dequantized values; the weight stays packed on the
device; the simulator's device="vulkan" runs the quantized nodes there."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.core.blocks import BlockScheme
from openinfer_jax.core.dtypes import DType
from openinfer_jax.oinf import OinfWriter, quantize
from openinfer_jax.ops import registry
from openinfer_jax.ops.quantized import QuantizedArray
from openinfer_jax.sim import Simulator
from openinfer_jax.vk import VulkanBackend
from openinfer_jax.vk.quant_kernels import DeviceQuantized

SCHEMES = [s.value for s in BlockScheme]


def _weight(scheme: str, shape: tuple[int, int], block: int, scale_dtype: DType) -> QuantizedArray:
    rng = np.random.default_rng(hash((scheme, shape, block)) % 2**32)
    qt = quantize(rng.standard_normal(shape), scheme, block, scale_dtype)
    return QuantizedArray.from_planes(qt.layout, qt.shape, qt.quants, qt.scales, qt.offsets)


@pytest.mark.parametrize(("block", "scale_dtype"), [(32, DType.F16), (16, DType.F32)])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_ops_on_the_device(
    backend: VulkanBackend, scheme: str, block: int, scale_dtype: DType
) -> None:
    rng = np.random.default_rng(3)
    w = _weight(scheme, (24, 64), block, scale_dtype)
    dev = backend.upload_quantized(w)
    assert isinstance(dev, DeviceQuantized)
    assert dev.codes.dtype is w.layout.data_dtype and dev.codes.nbytes <= w.quants.nbytes + 4
    x = rng.standard_normal((3, 64)).astype(np.float32)
    bias = rng.standard_normal(24).astype(np.float32)
    b = rng.standard_normal((64, 5)).astype(np.float32)
    a = rng.standard_normal((2, 24)).astype(np.float32)
    ids = np.array([[2, 23], [-1, 40]], np.int32)
    cases = [
        ("linear", [x, w], [x, dev], {}),
        ("linear", [x, w, bias], [x, dev, bias], {}),
        ("matmul", [w, b], [dev, b], {}),
        ("matmul", [a, w], [a, dev], {}),
        ("embedding", [w, ids], [dev, ids], {}),
        ("gather", [w, ids], [dev, ids], {"axis": 0}),
    ]
    for op, host_args, device_args, params in cases:
        opdef = registry.get(op)
        want = opdef.reference(*host_args, **params)
        tensors = [
            t if isinstance(t, DeviceQuantized) else backend.upload(t, _dtype(t))
            for t in device_args
        ]
        assert (
            backend.supports(
                op,
                [DType.F32] * len(tensors),
                params,
                [isinstance(t, DeviceQuantized) for t in tensors],
            )
            is True
        )
        out = backend.run(op, tensors, params, DType.F32, want.shape)
        got = backend.download(out)
        np.testing.assert_allclose(
            got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()), err_msg=op
        )


def _dtype(array: np.ndarray) -> DType:
    return DType.I32 if array.dtype == np.int32 else DType.F32


def test_unsupported_forms_name_the_reason(backend: VulkanBackend) -> None:
    assert "axis 0 only" in str(
        backend.supports("gather", [DType.F32, DType.I32], {"axis": 1}, [True, False])
    )
    assert "no Vulkan kernel for a block-quantized input 0" in str(
        backend.supports("linear", [DType.F32] * 2, {}, [True, False])
    )


PROGRAM = """
graph {
  dynamic { ids: i32[1]; }
  constant { W: q4_1[32, 64]; E: q8_0[10, 64]; L(l): q4_0[64, 64] @pattern("L.{l}"); }
  volatile { h: f32[1, 64]; g: f32[1, 64]; y: f32[1, 32]; }
  block entry {
    op embedding(E, ids) >> h;
    loop layers (l in 0..3) {
      op linear(h, L[l]) >> g;
      op tanh(g) >> h;
    }
    op linear(h, W) >> y;
    return;
  }
}
"""


def test_simulator_runs_quantized_nodes_on_vulkan(backend: VulkanBackend, tmp_path: Path) -> None:
    del backend  # the fixture skips the test without a device
    rng = np.random.default_rng(0)
    model = tmp_path / "m.oinf"
    with OinfWriter(model) as w:
        w.add_tensor("W", quantize(rng.standard_normal((32, 64)), "q4_1"))
        w.add_tensor("E", quantize(rng.standard_normal((10, 64)), "q8_0"))
        for i in range(3):
            w.add_tensor(f"L.{i}", quantize(rng.standard_normal((64, 64)) * 0.2, "q4_0"))
    results = {}
    for device in ("vulkan", "cpu"):
        sim = Simulator(model, PROGRAM, device=device).with_trace()
        ex = sim.make_executor()
        ex.insert(ids=np.array([4], np.int32))
        ex.step()
        results[device] = np.asarray(ex.fetch("y"))
        if device == "vulkan":
            ops = [e for e in ex.trace() if getattr(e, "op_name", None)]
            assert ops and not any(
                "ran on XLA CPU" in (getattr(e, "warning", "") or "") for e in ops
            )
            assert ex.stats["vk_uploads"] >= 1
    np.testing.assert_allclose(results["vulkan"], results["cpu"], rtol=1e-5, atol=1e-4)
