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
"""

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import (
    BackendError,
    ConversionError,
    DslSyntaxError,
    GraphValidationError,
    OinfFormatError,
    OpenInferError,
    ShardingError,
    SimulationError,
    SynthesisError,
)
from openinfer_jax.emit import DeviceArch, MemoryPlan, Plan, Synthesizer, VkReport, load_arch
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
from openinfer_jax.ops import OpCheckError, OpDef, ParamKind, ParamSpec, registry
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
from openinfer_jax.trace import GraphBuilder, parse, parse_file
from openinfer_jax.vk import DeviceTensor, VulkanBackend, vulkan_available

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "Bitset",
    "ConversionError",
    "DType",
    "DeviceArch",
    "DeviceTensor",
    "DslSyntaxError",
    "Executor",
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
    "ShardingError",
    "SimulationError",
    "Simulator",
    "StepEvent",
    "SynthesisError",
    "Synthesizer",
    "TensorInfo",
    "TensorSpec",
    "TraceEvent",
    "UnknownNameError",
    "VkReport",
    "VulkanBackend",
    "__version__",
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
