"""OpenInfer-JAX: explicit inference loops for edge devices.

Public API (see README.md and docs/):
- `.oinf` model packages: `write_oinf`, `OinfWriter`, `ModelLoader`, `DType`
- errors: `OpenInferError` and its subclasses
"""

from openinfer_jax.errors import (
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
from openinfer_jax.oinf.dtypes import DType

__version__ = "0.1.0"

__all__ = [
    "BackendError",
    "ConversionError",
    "DType",
    "DslSyntaxError",
    "GraphValidationError",
    "OinfFormatError",
    "OpenInferError",
    "ShardingError",
    "SimulationError",
    "SynthesisError",
    "__version__",
]
