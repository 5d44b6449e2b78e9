"""ONNX tensors and NumPy arrays in the package's in-memory representation."""

from __future__ import annotations

from typing import Any

import numpy as np

from openinfer_jax.core.dtypes import DType, dtype_from_numpy

__all__ = ["array_dtype", "from_tensor_proto", "to_memory"]

_NARROW_INTS = {
    "int4": (DType.I4, np.int8), "uint4": (DType.U4, np.uint8),
    "int2": (DType.I2, np.int8), "uint2": (DType.U2, np.uint8),
}  # fmt: skip


def array_dtype(array: np.ndarray) -> DType | None:
    """The DType of an array (ml_dtypes int4/uint4/int2/uint2 count as i4/u4/i2/u2), None if
    it has none."""
    name = array.dtype.name
    if name in _NARROW_INTS:
        return _NARROW_INTS[name][0]
    try:
        return dtype_from_numpy(array.dtype)
    except (TypeError, ValueError, KeyError):
        return None


def to_memory(array: np.ndarray) -> np.ndarray:
    """`array` in the simulator's representation (int4/uint4/int2/uint2 unpacked into
    int8/uint8)."""
    name = array.dtype.name
    if name in _NARROW_INTS:
        return np.asarray(array).astype(_NARROW_INTS[name][1])
    return np.asarray(array)


def from_tensor_proto(proto: Any, base_dir: str = "") -> np.ndarray:
    """A TensorProto's value as a NumPy array (external data read from `base_dir`)."""
    from onnx import numpy_helper

    return np.asarray(numpy_helper.to_array(proto, base_dir))
