"""Storage rules for the JAX lowerings: widen to the compute type, narrow back to storage.

Every JAX lowering computes in `registry.compute_dtype` (f32 for f8/bf16/f16, i32 for packed
integers) and stores through `store`, which rounds floats to nearest even and wraps integers
to the storage type's bit width (two's complement for signed packed types).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ops.registry import compute_dtype

__all__ = ["store", "wide_int_dtype", "widen", "wrap_packed"]


def widen(x: Any, dtype: DType) -> Any:
    """`x` (in-memory representation of `dtype`) converted to its compute type."""
    return jnp.asarray(x).astype(compute_dtype(dtype).numpy)


def wrap_packed(y: Any, dtype: DType) -> Any:
    """Integer values `y` wrapped into a packed type's range (same array dtype as `y`)."""
    if dtype in (DType.T1, DType.T2):
        # Ternary types are only produced by ops closed over {-1, 0, 1}; clip guards the rest.
        return jnp.clip(y, -1, 1)
    modulus = 1 << dtype.bits
    if dtype.is_signed_int:
        half = modulus >> 1
        return ((y + half) & (modulus - 1)) - half
    return y & (modulus - 1)


def store(y: Any, dtype: DType) -> Any:
    """Compute-type values `y` converted to the in-memory representation of `dtype`.

    Floats round to nearest even (XLA's conversion); integers wrap (XLA's conversion
    truncates bits); packed types wrap to their bit width and are held in int8/uint8.
    """
    y = jnp.asarray(y)
    if dtype.is_packed:
        if jnp.issubdtype(y.dtype, jnp.floating):
            raise TypeError("packed results must be computed as integers")
        return wrap_packed(y.astype(jnp.int32), dtype).astype(dtype.numpy)
    return y.astype(dtype.numpy)


def wide_int_dtype(dtype: DType) -> Any:
    """The 64-bit integer type of the same signedness (used for exact integer accumulation)."""
    if dtype is DType.BOOL or dtype.is_unsigned_int:
        return jnp.uint64
    return jnp.int64
