"""The op library: one registry (`registry`) and the modules that declare ops into it.

Importing this package imports every op module, so `registry` is complete afterwards.
64-bit JAX types are enabled here because i64/u64/f64 ops must be exact.
"""

from __future__ import annotations

import jax

jax.config.update("jax_enable_x64", True)

# Op modules register on import (the registry sorts by name, so the order fixes nothing);
# nn holds the model-building ops (softmax, layer_norm, attention, ...), pointwise the
# activations declared only by their expression trees, layers the composite ops.
from openinfer_jax.ops import (  # noqa: E402, F401
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
from openinfer_jax.ops.registry import OpCheckError, OpDef, ParamKind, ParamSpec  # noqa: E402

__all__ = ["OpCheckError", "OpDef", "ParamKind", "ParamSpec", "registry"]
