"""The op library: one registry (`registry`) and the modules that declare ops into it.

Importing this package imports every op module, so `registry` is complete afterwards.
It changes no JAX setting: the simulator scopes JAX's 64-bit mode to its own calls
(`openinfer_jax.sim.precision`), so i64/u64/f64 ops are exact there.
"""

from __future__ import annotations

# Op modules register on import (the registry sorts by name, so the order fixes nothing);
# nn holds the model-building ops (softmax, layer_norm, attention, ...), pointwise the
# activations declared only by their expression trees, layers the composite ops.
from openinfer_jax.ops import (  # noqa: F401
    arith,
    bitwise,
    cast,
    compare,
    filtering,
    layers,
    nn,
    numerical,
    pointwise,
    reduce,
    registry,
    rounding,
    statistics,
)
from openinfer_jax.ops.registry import OpCheckError, OpDef, ParamKind, ParamSpec

__all__ = ["OpCheckError", "OpDef", "ParamKind", "ParamSpec", "registry"]
