"""The op library: one registry (`registry`) and the modules that declare ops into it.

Importing this package imports every op module, so `registry` is complete afterwards.
64-bit JAX types are enabled here because i64/u64/f64 ops must be exact.
"""

from __future__ import annotations

import importlib.util

import jax

jax.config.update("jax_enable_x64", True)

# Op modules register on import (the registry sorts by name, so the order fixes nothing).
from openinfer_jax.ops import (  # noqa: E402, F401
    arith,
    bitwise,
    cast,
    compare,
    filtering,
    numerical,
    reduce,
    registry,
    rounding,
    statistics,
)
from openinfer_jax.ops.registry import OpCheckError, OpDef, ParamKind, ParamSpec  # noqa: E402

# The model-building ops live in nn.py, written by another helper; import it once it exists.
if importlib.util.find_spec(f"{__name__}.nn") is not None:
    importlib.import_module(f"{__name__}.nn")

__all__ = ["OpCheckError", "OpDef", "ParamKind", "ParamSpec", "registry"]
