"""The public home of the exception hierarchy (documented as `openinfer_jax.errors`).

The classes are defined in `openinfer_jax.core.errors`; code inside the package imports them
from there (tests/test_layering.py checks it), users may import them from here or from
`openinfer_jax` itself.
"""

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

__all__ = [
    "ArchitectureError",
    "BackendError",
    "ConversionError",
    "DslSyntaxError",
    "GenerationError",
    "GraphValidationError",
    "OinfFormatError",
    "OpenInferError",
    "ShardingError",
    "SimulationError",
    "SynthesisError",
    "TokenizerError",
]
