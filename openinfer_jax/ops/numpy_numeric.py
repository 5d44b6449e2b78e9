"""Storage rules for the NumPy references, written independently of the JAX lowerings.

The references compute integers exactly as Python ints (object arrays) and reduce them into
the storage range with a modulo at the end, so integer wrapping is checked against plain
arithmetic. Floats compute in f32 for f8/bf16/f16 (ml_dtypes storage) and natively otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from openinfer_jax.core.dtypes import DType

__all__ = ["exact", "floats", "pack_ints", "per_element", "ref_values", "store_ref", "wrap_int"]


def exact(x: np.ndarray) -> np.ndarray:
    """Integer or bool array as an object array of Python ints (exact arithmetic)."""
    arr = np.asarray(x)
    out = np.empty(arr.size, dtype=object)
    out[:] = [int(v) for v in arr.reshape(-1).tolist()]
    return out.reshape(arr.shape)


def floats(x: np.ndarray, dtype: DType) -> np.ndarray:
    """Float array in the type the reference computes in (f32 for floats narrower than f32)."""
    if dtype.is_float and dtype not in (DType.F32, DType.F64):
        return np.asarray(x).astype(np.float32)
    return np.asarray(x).astype(dtype.numpy)


def ref_values(x: np.ndarray, dtype: DType) -> np.ndarray:
    """An input in the reference's compute representation: exact ints, floats, or bools."""
    if dtype is DType.BOOL:
        return np.asarray(x).astype(bool)
    if dtype.is_int:
        return exact(x)
    return floats(x, dtype)


def wrap_int(value: int, dtype: DType) -> int:
    """An exact integer reduced into `dtype`'s range: modulo 2**bits, offset by the minimum."""
    low, high = dtype.value_range()
    if dtype in (DType.T1, DType.T2):
        return max(low, min(high, value))
    span = high - low + 1
    return (value - low) % span + low


def pack_ints(values: Any, dtype: DType) -> np.ndarray:
    """Exact integer values (any array-like) wrapped and stored in `dtype`'s representation."""
    arr = np.asarray(values, dtype=object)
    flat = [wrap_int(int(v), dtype) for v in arr.reshape(-1).tolist()]
    return np.array(flat, dtype=dtype.numpy).reshape(arr.shape)


def store_ref(y: Any, dtype: DType) -> np.ndarray:
    """Reference results `y` converted to the in-memory representation of `dtype`."""
    arr = np.asarray(y)
    if dtype is DType.BOOL:
        return arr.astype(bool)
    if dtype.is_int:
        return pack_ints(arr, dtype)
    with np.errstate(all="ignore"):
        return arr.astype(dtype.numpy)


def per_element(fn: Callable[..., Any], *arrays: np.ndarray) -> np.ndarray:
    """`fn` applied to each element (NumPy broadcasting), as an object array of its results."""
    return np.asarray(np.frompyfunc(fn, len(arrays), 1)(*arrays), dtype=object)
