"""cast with rounding_mode="nearest" rounds halves to even on the device, f64 included:
lavapipe's GLSL roundEven(double) rounds 1.5 and 3.5 down, so the kernel must not rely on it."""

from __future__ import annotations

import numpy as np
import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops import registry
from openinfer_jax.vk import VulkanBackend


@pytest.mark.parametrize("src", [DType.F32, DType.F64])
@pytest.mark.parametrize("dst", [DType.U8, DType.I32, DType.I64])
def test_cast_nearest_rounds_halves_to_even(backend: VulkanBackend, src: DType, dst: DType) -> None:
    x = np.array([0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, 4.5, 0.49999997, 1e15 + 0.5], src.numpy)
    if dst is DType.U8:
        x = np.abs(x[:-1])
    opdef = registry.get("cast")
    assert opdef is not None
    params = {"to": dst, "rounding_mode": "nearest"}
    want = np.asarray(opdef.reference(x, dtypes=[src], **params))
    got = backend.download(backend.run("cast", [backend.upload(x, src)], params, dst, x.shape))
    np.testing.assert_array_equal(got, want)
