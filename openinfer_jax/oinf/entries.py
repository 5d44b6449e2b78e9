"""What the tables of a `.oinf` file describe: `TensorInfo` and `MetadataInfo` records."""

from __future__ import annotations

from typing import NamedTuple

from openinfer_jax.core.dtypes import DType
from openinfer_jax.oinf.blockquant import BlockQuant
from openinfer_jax.oinf.quant import QuantParams

__all__ = ["MetadataInfo", "TensorInfo"]


class TensorInfo(NamedTuple):
    """One tensor-table entry: name, dtype, shape, whether it has data, quant, and where its bytes are.

    A NamedTuple (immutable, cheap to build: opening a model creates one per tensor).
    `data_offset`/`data_nbytes` are 0 for a tensor declared without data.
    """

    name: str
    dtype: DType
    shape: tuple[int, ...]
    has_data: bool
    quant: QuantParams | BlockQuant | None
    data_offset: int
    data_nbytes: int

    @property
    def block(self) -> BlockQuant | None:
        """The per-block quantization of a block-quantized tensor (q8_0/q4_0/q4_1), else None."""
        return self.quant if isinstance(self.quant, BlockQuant) else None

    @property
    def numel(self) -> int:
        """Number of elements (1 for a scalar)."""
        n = 1
        for d in self.shape:
            n *= d
        return n


class MetadataInfo(NamedTuple):
    """One metadata-table entry: key, value type and where its payload is."""

    key: str
    value_type: DType
    offset: int
    nbytes: int
