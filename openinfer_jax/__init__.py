"""OpenInfer-JAX: explicit inference loops for edge devices.

The public API, re-exported here (see README.md and docs/):

- `.oinf` model packages: `OinfWriter`, `write_oinf`, `ModelLoader`, `verify_file`, `DType`, ...
- the graph DSL: `parse`, `parse_file` (graph{} text), `GraphBuilder` (Python), `Graph`,
  `format_graph`, `to_json` / `from_json`, `validate`
- the simulator: `Simulator`, `Executor`, `TraceEvent`, trace export
- code generation: `Synthesizer`, `Plan`, `load_arch` (C and Vulkan targets)
- Vulkan: `VulkanBackend`, `vulkan_available` (kp is imported lazily)
- ops: `registry` (every op's declaration), `OpDef`, `OpCheckError`
- errors: `OpenInferError` and one subclass per layer

Importing this package is cheap and changes nothing global: each name is imported from its
module on first use (PEP 562), so `import openinfer_jax` does not import JAX, and
`openinfer_jax.oinf` never does.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names, for type checkers and editors
    from openinfer_jax.core.dtypes import DType
    from openinfer_jax.core.errors import (
        ArchitectureError,
        BackendError,
        ConversionError,
        DslSyntaxError,
        GenerationError,
        GraphValidationError,
        OinfFormatError,
        OpenInferError,
        ShardingError,
        SimulationError,
        SynthesisError,
        TokenizerError,
    )
    from openinfer_jax.emit import (
        DeviceArch,
        MemoryPlan,
        Plan,
        Synthesizer,
        VkReport,
        load_arch,
    )
    from openinfer_jax.generate import Generator, SamplingConfig
    from openinfer_jax.ir import (
        Graph,
        check,
        format_graph,
        from_json,
        from_json_text,
        infer_var_types,
        to_json,
        to_json_text,
        validate,
    )
    from openinfer_jax.models import build_graph
    from openinfer_jax.oinf import (
        Bitset,
        ModelLoader,
        OinfWriter,
        QuantParams,
        QuantScale,
        QuantZeroPoint,
        TensorInfo,
        TensorSpec,
        UnknownNameError,
        verify_file,
        write_oinf,
    )
    from openinfer_jax.ops import (
        OpCheckError,
        OpDef,
        ParamKind,
        ParamSpec,
        registry,
    )
    from openinfer_jax.sim import (
        Executor,
        Simulator,
        StepEvent,
        TraceEvent,
        device_mesh,
        sharding_scope,
        write_chrome_trace,
        write_trace_json,
    )
    from openinfer_jax.trace import (
        GraphBuilder,
        parse,
        parse_file,
    )
    from openinfer_jax.vk import (
        DeviceTensor,
        VulkanBackend,
        vulkan_available,
    )

__version__ = "0.1.0"

# Public name -> the module that defines it (tests/test_package.py checks it matches the
# TYPE_CHECKING imports above and `__all__`).
_EXPORTS: dict[str, str] = {
    "DType": "openinfer_jax.core.dtypes",
    "ArchitectureError": "openinfer_jax.core.errors",
    "BackendError": "openinfer_jax.core.errors",
    "GenerationError": "openinfer_jax.core.errors",
    "TokenizerError": "openinfer_jax.core.errors",
    "Generator": "openinfer_jax.generate",
    "SamplingConfig": "openinfer_jax.generate",
    "build_graph": "openinfer_jax.models",
    "ConversionError": "openinfer_jax.core.errors",
    "DslSyntaxError": "openinfer_jax.core.errors",
    "GraphValidationError": "openinfer_jax.core.errors",
    "OinfFormatError": "openinfer_jax.core.errors",
    "OpenInferError": "openinfer_jax.core.errors",
    "ShardingError": "openinfer_jax.core.errors",
    "SimulationError": "openinfer_jax.core.errors",
    "SynthesisError": "openinfer_jax.core.errors",
    "DeviceArch": "openinfer_jax.emit",
    "MemoryPlan": "openinfer_jax.emit",
    "Plan": "openinfer_jax.emit",
    "Synthesizer": "openinfer_jax.emit",
    "VkReport": "openinfer_jax.emit",
    "load_arch": "openinfer_jax.emit",
    "Graph": "openinfer_jax.ir",
    "check": "openinfer_jax.ir",
    "format_graph": "openinfer_jax.ir",
    "from_json": "openinfer_jax.ir",
    "from_json_text": "openinfer_jax.ir",
    "infer_var_types": "openinfer_jax.ir",
    "to_json": "openinfer_jax.ir",
    "to_json_text": "openinfer_jax.ir",
    "validate": "openinfer_jax.ir",
    "Bitset": "openinfer_jax.oinf",
    "ModelLoader": "openinfer_jax.oinf",
    "OinfWriter": "openinfer_jax.oinf",
    "QuantParams": "openinfer_jax.oinf",
    "QuantScale": "openinfer_jax.oinf",
    "QuantZeroPoint": "openinfer_jax.oinf",
    "TensorInfo": "openinfer_jax.oinf",
    "TensorSpec": "openinfer_jax.oinf",
    "UnknownNameError": "openinfer_jax.oinf",
    "verify_file": "openinfer_jax.oinf",
    "write_oinf": "openinfer_jax.oinf",
    "OpCheckError": "openinfer_jax.ops",
    "OpDef": "openinfer_jax.ops",
    "ParamKind": "openinfer_jax.ops",
    "ParamSpec": "openinfer_jax.ops",
    "registry": "openinfer_jax.ops",
    "Executor": "openinfer_jax.sim",
    "Simulator": "openinfer_jax.sim",
    "StepEvent": "openinfer_jax.sim",
    "TraceEvent": "openinfer_jax.sim",
    "device_mesh": "openinfer_jax.sim",
    "sharding_scope": "openinfer_jax.sim",
    "write_chrome_trace": "openinfer_jax.sim",
    "write_trace_json": "openinfer_jax.sim",
    "GraphBuilder": "openinfer_jax.trace",
    "parse": "openinfer_jax.trace",
    "parse_file": "openinfer_jax.trace",
    "DeviceTensor": "openinfer_jax.vk",
    "VulkanBackend": "openinfer_jax.vk",
    "vulkan_available": "openinfer_jax.vk",
}

# Subpackages reachable as attributes (`openinfer_jax.ir.validate`) without importing them first.
_SUBPACKAGES = frozenset(
    {
        "converters",
        "core",
        "emit",
        "errors",
        "generate",
        "ir",
        "models",
        "oinf",
        "onnx",
        "ops",
        "sim",
        "trace",
        "vk",
    }
)

__all__ = [
    "ArchitectureError",
    "BackendError",
    "Bitset",
    "ConversionError",
    "DType",
    "DeviceArch",
    "DeviceTensor",
    "DslSyntaxError",
    "Executor",
    "GenerationError",
    "Generator",
    "Graph",
    "GraphBuilder",
    "GraphValidationError",
    "MemoryPlan",
    "ModelLoader",
    "OinfFormatError",
    "OinfWriter",
    "OpCheckError",
    "OpDef",
    "OpenInferError",
    "ParamKind",
    "ParamSpec",
    "Plan",
    "QuantParams",
    "QuantScale",
    "QuantZeroPoint",
    "SamplingConfig",
    "ShardingError",
    "SimulationError",
    "Simulator",
    "StepEvent",
    "SynthesisError",
    "Synthesizer",
    "TensorInfo",
    "TensorSpec",
    "TokenizerError",
    "TraceEvent",
    "UnknownNameError",
    "VkReport",
    "VulkanBackend",
    "__version__",
    "build_graph",
    "check",
    "device_mesh",
    "format_graph",
    "from_json",
    "from_json_text",
    "infer_var_types",
    "load_arch",
    "parse",
    "parse_file",
    "registry",
    "sharding_scope",
    "to_json",
    "to_json_text",
    "validate",
    "verify_file",
    "vulkan_available",
    "write_chrome_trace",
    "write_oinf",
    "write_trace_json",
]


def __getattr__(name: str) -> Any:
    """Import a public name (or a subpackage) on first access and keep it as a module global."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | _SUBPACKAGES)
