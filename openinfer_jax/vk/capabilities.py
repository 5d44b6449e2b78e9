"""What a Vulkan device can do: features and limits, read from the Vulkan loader.

Kompute's Python binding (`kp`) reports only a device name and work-group limits, and
nothing about shader features. Whether a device has 64-bit integers, doubles or halves
decides which kernels may run on it (the original fell back to the CPU for i64/u64
without ``shaderInt64`` and for f64 without ``shaderFloat64``), so this module asks the
Vulkan loader directly through `ctypes`: it creates a throw-away instance, reads
``VkPhysicalDeviceProperties`` / ``VkPhysicalDeviceFeatures`` (and the Vulkan 1.2 and
subgroup structures where the device has them) and destroys the instance again.

Only the leading fields of ``VkPhysicalDeviceLimits`` are declared (up to the compute
work-group limits); the structures are read into buffers larger than the real
structures, so the fields after them never need to be spelled out.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass, field
from typing import Any

from openinfer_jax.core.errors import BackendError

__all__ = ["DeviceCapabilities", "load_vulkan_library", "query_capabilities"]

_VK_SUCCESS = 0
_STYPE_APPLICATION_INFO = 0
_STYPE_INSTANCE_CREATE_INFO = 1
_STYPE_PHYSICAL_DEVICE_FEATURES_2 = 1000059000
_STYPE_PHYSICAL_DEVICE_PROPERTIES_2 = 1000059001
_STYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES = 1000094000
_STYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES = 51


def _api_version(major: int, minor: int) -> int:
    return (major << 22) | (minor << 12)


# Index of each VkBool32 in VkPhysicalDeviceFeatures (vulkan_core.h field order).
_FEATURE_INDEX = {"shader_float64": 39, "shader_int64": 40, "shader_int16": 41}
_N_FEATURES = 55
# Index of each VkBool32 after sType/pNext in VkPhysicalDeviceVulkan12Features.
_VK12_FEATURE_INDEX = {"storage_buffer_8bit": 2, "shader_float16": 7, "shader_int8": 8}
_N_VK12_FEATURES = 47

# The leading fields of VkPhysicalDeviceLimits, in header order (u32 unless noted).
_LIMIT_FIELDS_BEFORE_GRANULARITY = [
    "maxImageDimension1D",
    "maxImageDimension2D",
    "maxImageDimension3D",
    "maxImageDimensionCube",
    "maxImageArrayLayers",
    "maxTexelBufferElements",
    "maxUniformBufferRange",
    "maxStorageBufferRange",
    "maxPushConstantsSize",
    "maxMemoryAllocationCount",
    "maxSamplerAllocationCount",
]
_LIMIT_FIELDS_AFTER_SPARSE = [
    "maxBoundDescriptorSets",
    "maxPerStageDescriptorSamplers",
    "maxPerStageDescriptorUniformBuffers",
    "maxPerStageDescriptorStorageBuffers",
    "maxPerStageDescriptorSampledImages",
    "maxPerStageDescriptorStorageImages",
    "maxPerStageDescriptorInputAttachments",
    "maxPerStageResources",
    "maxDescriptorSetSamplers",
    "maxDescriptorSetUniformBuffers",
    "maxDescriptorSetUniformBuffersDynamic",
    "maxDescriptorSetStorageBuffers",
    "maxDescriptorSetStorageBuffersDynamic",
    "maxDescriptorSetSampledImages",
    "maxDescriptorSetStorageImages",
    "maxDescriptorSetInputAttachments",
    "maxVertexInputAttributes",
    "maxVertexInputBindings",
    "maxVertexInputAttributeOffset",
    "maxVertexInputBindingStride",
    "maxVertexOutputComponents",
    "maxTessellationGenerationLevel",
    "maxTessellationPatchSize",
    "maxTessellationControlPerVertexInputComponents",
    "maxTessellationControlPerVertexOutputComponents",
    "maxTessellationControlPerPatchOutputComponents",
    "maxTessellationControlTotalOutputComponents",
    "maxTessellationEvaluationInputComponents",
    "maxTessellationEvaluationOutputComponents",
    "maxGeometryShaderInvocations",
    "maxGeometryInputComponents",
    "maxGeometryOutputComponents",
    "maxGeometryOutputVertices",
    "maxGeometryTotalOutputComponents",
    "maxFragmentInputComponents",
    "maxFragmentOutputAttachments",
    "maxFragmentDualSrcAttachments",
    "maxFragmentCombinedOutputResources",
    "maxComputeSharedMemorySize",
]

_u32 = ctypes.c_uint32
_u64 = ctypes.c_uint64


class _LimitsPrefix(ctypes.Structure):
    _fields_ = (
        [(n, _u32) for n in _LIMIT_FIELDS_BEFORE_GRANULARITY]
        + [("bufferImageGranularity", _u64), ("sparseAddressSpaceSize", _u64)]
        + [(n, _u32) for n in _LIMIT_FIELDS_AFTER_SPARSE]
        + [
            ("maxComputeWorkGroupCount", _u32 * 3),
            ("maxComputeWorkGroupInvocations", _u32),
            ("maxComputeWorkGroupSize", _u32 * 3),
        ]
    )


class _PropertiesPrefix(ctypes.Structure):
    _fields_ = [
        ("apiVersion", _u32),
        ("driverVersion", _u32),
        ("vendorID", _u32),
        ("deviceID", _u32),
        ("deviceType", _u32),
        ("deviceName", ctypes.c_char * 256),
        ("pipelineCacheUUID", ctypes.c_uint8 * 16),
        ("limits", _LimitsPrefix),
    ]


class _ApplicationInfo(ctypes.Structure):
    _fields_ = [
        ("sType", _u32),
        ("pNext", ctypes.c_void_p),
        ("pApplicationName", ctypes.c_char_p),
        ("applicationVersion", _u32),
        ("pEngineName", ctypes.c_char_p),
        ("engineVersion", _u32),
        ("apiVersion", _u32),
    ]


class _InstanceCreateInfo(ctypes.Structure):
    _fields_ = [
        ("sType", _u32),
        ("pNext", ctypes.c_void_p),
        ("flags", _u32),
        ("pApplicationInfo", ctypes.POINTER(_ApplicationInfo)),
        ("enabledLayerCount", _u32),
        ("ppEnabledLayerNames", ctypes.c_void_p),
        ("enabledExtensionCount", _u32),
        ("ppEnabledExtensionNames", ctypes.c_void_p),
    ]


class _ChainedStruct(ctypes.Structure):
    """sType + pNext + up to 64 u32 payload words: large enough for every struct read here."""

    _fields_ = [("sType", _u32), ("pNext", ctypes.c_void_p), ("words", _u32 * 64)]


_VENDORS = {
    0x1002: "AMD",
    0x1010: "ImgTec",
    0x10DE: "NVIDIA",
    0x13B5: "ARM",
    0x5143: "Qualcomm",
    0x8086: "Intel",
    0x10005: "Mesa",
}
_DEVICE_TYPES = {0: "other", 1: "integrated_gpu", 2: "discrete_gpu", 3: "virtual_gpu", 4: "cpu"}


@dataclass(frozen=True)
class DeviceCapabilities:
    """Features and limits of one Vulkan physical device.

    `features` maps ``shader_int64``, ``shader_float64``, ``shader_float16``,
    ``shader_int16``, ``shader_int8``, ``storage_buffer_8bit`` and ``subgroup`` to bools;
    `limits` holds the compute limits kernels are sized against.
    """

    index: int
    device_name: str
    vendor: str
    vendor_id: int
    device_type: str
    api_version: str
    limits: dict[str, Any] = field(default_factory=dict)
    features: dict[str, bool] = field(default_factory=dict)
    subgroup_size: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The capabilities as plain data (what `VulkanBackend.properties` returns)."""
        return {
            "device_index": self.index,
            "device_name": self.device_name,
            "vendor": self.vendor,
            "vendor_id": self.vendor_id,
            "device_type": self.device_type,
            "api_version": self.api_version,
            "limits": dict(self.limits),
            "features": dict(self.features),
            "subgroup_size": self.subgroup_size,
        }


def load_vulkan_library() -> ctypes.CDLL:
    """Open the Vulkan loader (libvulkan.so.1).

    Raises:
        BackendError: if no Vulkan loader is installed.
    """
    for name in ("libvulkan.so.1", ctypes.util.find_library("vulkan"), "libvulkan.so"):
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise BackendError(
        "no Vulkan loader (libvulkan.so.1) found; install it, e.g. `apt-get install "
        "libvulkan1 mesa-vulkan-drivers` (Mesa lavapipe runs Vulkan on the CPU)"
    )


def _check(result: int, what: str) -> None:
    if result != _VK_SUCCESS:
        raise BackendError(
            f"{what} failed with VkResult {result}; check that a Vulkan driver (ICD) is "
            "installed, e.g. `apt-get install mesa-vulkan-drivers`, or set VK_DRIVER_FILES"
        )


def _version_string(v: int) -> str:
    return f"{(v >> 22) & 0x7F}.{(v >> 12) & 0x3FF}.{v & 0xFFF}"


def query_capabilities(device_index: int = 0) -> DeviceCapabilities:
    """Read the features and limits of physical device `device_index` from the loader.

    The device order is the loader's enumeration order, which is also the order
    Kompute uses for ``kp.Manager(device_index)``.

    Raises:
        BackendError: without a loader, without a device, or for an index out of range.
    """
    lib = load_vulkan_library()
    app = _ApplicationInfo(
        _STYPE_APPLICATION_INFO, None, b"openinfer-jax", 1, b"openinfer-jax", 1,
        _api_version(1, 2),
    )  # fmt: skip
    create = _InstanceCreateInfo(
        _STYPE_INSTANCE_CREATE_INFO, None, 0, ctypes.pointer(app), 0, None, 0, None
    )
    instance = ctypes.c_void_p()
    lib.vkCreateInstance.restype = ctypes.c_int32
    _check(lib.vkCreateInstance(ctypes.byref(create), None, ctypes.byref(instance)),
           "vkCreateInstance")  # fmt: skip
    try:
        count = _u32(0)
        lib.vkEnumeratePhysicalDevices.restype = ctypes.c_int32
        _check(lib.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None),
               "vkEnumeratePhysicalDevices")  # fmt: skip
        if count.value == 0:
            raise BackendError(
                "the Vulkan loader found no device; install a driver, e.g. "
                "`apt-get install mesa-vulkan-drivers` for lavapipe (CPU)"
            )
        if not 0 <= device_index < count.value:
            raise BackendError(
                f"Vulkan device index {device_index} is out of range: "
                f"{count.value} device(s) present, use 0..{count.value - 1}"
            )
        handles = (ctypes.c_void_p * count.value)()
        _check(lib.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), handles),
               "vkEnumeratePhysicalDevices")  # fmt: skip
        return _read_device(lib, ctypes.c_void_p(handles[device_index]), device_index)
    finally:
        lib.vkDestroyInstance(instance, None)


def _read_device(lib: ctypes.CDLL, phys: ctypes.c_void_p, index: int) -> DeviceCapabilities:
    # Buffers larger than the real structures: only their prefixes are declared.
    raw_props = ctypes.create_string_buffer(4096)
    lib.vkGetPhysicalDeviceProperties(phys, raw_props)
    props = _PropertiesPrefix.from_buffer(raw_props)
    raw_features = (_u32 * 64)()
    lib.vkGetPhysicalDeviceFeatures(phys, raw_features)
    features = {name: bool(raw_features[i]) for name, i in _FEATURE_INDEX.items()}
    features.update({name: False for name in _VK12_FEATURE_INDEX})
    subgroup_size = 0
    if props.apiVersion >= _api_version(1, 2):
        vk12 = _ChainedStruct(_STYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES, None)
        features2 = _ChainedStruct(_STYPE_PHYSICAL_DEVICE_FEATURES_2, ctypes.addressof(vk12))
        lib.vkGetPhysicalDeviceFeatures2(phys, ctypes.byref(features2))
        features.update({n: bool(vk12.words[i]) for n, i in _VK12_FEATURE_INDEX.items()})
    if props.apiVersion >= _api_version(1, 1):
        subgroup = _ChainedStruct(_STYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES, None)
        raw_props2 = ctypes.create_string_buffer(4096)
        header = _ChainedStruct.from_buffer(raw_props2)
        header.sType = _STYPE_PHYSICAL_DEVICE_PROPERTIES_2
        header.pNext = ctypes.addressof(subgroup)
        lib.vkGetPhysicalDeviceProperties2(phys, raw_props2)
        subgroup_size = int(subgroup.words[0])
    features["subgroup"] = subgroup_size > 0
    lim = props.limits
    limits = {
        "max_storage_buffer_range": int(lim.maxStorageBufferRange),
        "max_push_constants_size": int(lim.maxPushConstantsSize),
        "max_compute_shared_memory_size": int(lim.maxComputeSharedMemorySize),
        "max_compute_work_group_count": tuple(int(x) for x in lim.maxComputeWorkGroupCount),
        "max_compute_work_group_invocations": int(lim.maxComputeWorkGroupInvocations),
        "max_compute_work_group_size": tuple(int(x) for x in lim.maxComputeWorkGroupSize),
        "max_bound_descriptor_sets": int(lim.maxBoundDescriptorSets),
        "max_per_stage_storage_buffers": int(lim.maxPerStageDescriptorStorageBuffers),
    }
    return DeviceCapabilities(
        index=index,
        device_name=props.deviceName.decode("utf-8", "replace"),
        vendor=_VENDORS.get(int(props.vendorID), f"0x{int(props.vendorID):04x}"),
        vendor_id=int(props.vendorID),
        device_type=_DEVICE_TYPES.get(int(props.deviceType), "other"),
        api_version=_version_string(int(props.apiVersion)),
        limits=limits,
        features=features,
        subgroup_size=subgroup_size,
    )
