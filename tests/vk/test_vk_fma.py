"""fma on the device agrees with the registry's reference (a*b + c computed in f64) where a
product of two finite f32 values overflows f32 and the addend is infinite: drivers need not
fuse GLSL's fma(), so an unfused -inf + inf must not leak out as NaN."""

from __future__ import annotations

import numpy as np
import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops import registry
from openinfer_jax.vk import VulkanBackend


@pytest.mark.parametrize("dtype", [DType.F32, DType.F16, DType.BF16, DType.F64])
def test_fma_with_an_infinite_addend_matches_the_reference(
    backend: VulkanBackend, dtype: DType
) -> None:
    big = float(np.finfo(np.float32).max) if dtype is not DType.F64 else 1.7e308
    if dtype is DType.F16:
        big = 65504.0
    a = np.array([-big, 2.0, -big, big, np.nan, np.inf, 0.0], dtype.numpy)
    b = np.array([1000.0, 3.0, 1000.0, 10.0, 1.0, 0.0, 5.0], dtype.numpy)
    c = np.array([np.inf, 1.0, -np.inf, -np.inf, np.inf, np.inf, -np.inf], dtype.numpy)
    opdef = registry.get("fma")
    assert opdef is not None
    want = np.asarray(opdef.reference(a, b, c, dtypes=[dtype] * 3)).astype(np.float64)
    tensors = [backend.upload(x, dtype) for x in (a, b, c)]
    got = backend.download(backend.run("fma", tensors, {}, dtype, a.shape)).astype(np.float64)
    np.testing.assert_array_equal(got, want)
