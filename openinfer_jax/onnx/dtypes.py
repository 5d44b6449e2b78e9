"""ONNX element types and the package's `DType`s."""

from __future__ import annotations

from openinfer_jax.core.dtypes import DType

__all__ = ["DTYPE_TO_ONNX", "ONNX_TO_DTYPE", "onnx_type_name"]

# TensorProto.DataType codes (onnx.proto3). Types without a DType here (string, complex) are
# reported as unsupported.
ONNX_TO_DTYPE: dict[int, DType] = {
    1: DType.F32,
    2: DType.U8,
    3: DType.I8,
    4: DType.U16,
    5: DType.I16,
    6: DType.I32,
    7: DType.I64,
    9: DType.BOOL,
    10: DType.F16,
    11: DType.F64,
    12: DType.U32,
    13: DType.U64,
    16: DType.BF16,
    17: DType.F8E4M3FN,
    18: DType.F8E4M3FNUZ,
    19: DType.F8,  # FLOAT8E5M2: the package's f8 is e5m2
    20: DType.F8E5M2FNUZ,
    21: DType.U4,
    22: DType.I4,
    23: DType.F4E2M1,
    24: DType.F8E8M0,
    25: DType.U2,
    26: DType.I2,
}

DTYPE_TO_ONNX: dict[DType, int] = {v: k for k, v in ONNX_TO_DTYPE.items()}

_NAMES = {
    0: "UNDEFINED", 1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16", 6: "INT32",
    7: "INT64", 8: "STRING", 9: "BOOL", 10: "FLOAT16", 11: "DOUBLE", 12: "UINT32", 13: "UINT64",
    14: "COMPLEX64", 15: "COMPLEX128", 16: "BFLOAT16", 17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ",
    19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1",
    24: "FLOAT8E8M0", 25: "UINT2", 26: "INT2",
}  # fmt: skip


def onnx_type_name(code: int) -> str:
    """The TensorProto name of an element type code (``FLOAT``, ``INT64``...)."""
    return _NAMES.get(code, f"type {code}")
