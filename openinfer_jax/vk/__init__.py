"""The Vulkan backend (Kompute): device tensors and GLSL kernels generated per op x dtype.

The only package that imports `kp`, and only lazily: importing `openinfer_jax.vk` works
without Kompute; `VulkanBackend(...)` raises `BackendError` saying what to install.

    from openinfer_jax.vk import VulkanBackend, vulkan_available
    ok, why = vulkan_available()
    be = VulkanBackend()
    t = be.upload(np.arange(8, dtype=np.float32), DType.F32)
    y = be.run("add", [t, t], {}, DType.F32, (8,))
    be.download(y)
"""

from __future__ import annotations

from openinfer_jax.vk.backend import DeviceTensor, VulkanBackend, vulkan_available
from openinfer_jax.vk.capabilities import DeviceCapabilities, query_capabilities

__all__ = [
    "DeviceCapabilities",
    "DeviceTensor",
    "VulkanBackend",
    "query_capabilities",
    "vulkan_available",
]
