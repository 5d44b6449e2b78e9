"""The `.oinf` model package: dtypes, writer, lazy mmap reader and verifier (spec: docs/oinf.md)."""

from openinfer_jax.core.dtypes import (
    FLOAT_DTYPES,
    PACKED_DTYPES,
    SIGNED_DTYPES,
    UNSIGNED_DTYPES,
    DType,
    dtype_from_name,
    dtype_from_numpy,
    pack,
    packed_nbytes,
    unpack,
)
from openinfer_jax.oinf.bitset import Bitset
from openinfer_jax.oinf.blockquant import BlockLayout, BlockQuant, BlockScheme
from openinfer_jax.oinf.checks import Violation
from openinfer_jax.oinf.entries import MetadataInfo, TensorInfo
from openinfer_jax.oinf.quant import QuantMode, QuantParams, QuantScale, QuantScheme, QuantZeroPoint
from openinfer_jax.oinf.quantized import QuantizedTensor, quantize
from openinfer_jax.oinf.reader import ModelLoader, UnknownNameError
from openinfer_jax.oinf.spec import RULES
from openinfer_jax.oinf.verify import verify_buffer, verify_file
from openinfer_jax.oinf.writer import OinfWriter, TensorSpec, write_oinf

__all__ = [
    "FLOAT_DTYPES",
    "PACKED_DTYPES",
    "RULES",
    "SIGNED_DTYPES",
    "UNSIGNED_DTYPES",
    "Bitset",
    "BlockLayout",
    "BlockQuant",
    "BlockScheme",
    "DType",
    "MetadataInfo",
    "ModelLoader",
    "OinfWriter",
    "QuantMode",
    "QuantParams",
    "QuantScale",
    "QuantScheme",
    "QuantZeroPoint",
    "QuantizedTensor",
    "TensorInfo",
    "TensorSpec",
    "UnknownNameError",
    "Violation",
    "dtype_from_name",
    "dtype_from_numpy",
    "pack",
    "packed_nbytes",
    "quantize",
    "unpack",
    "verify_buffer",
    "verify_file",
    "write_oinf",
]
