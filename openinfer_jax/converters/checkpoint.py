"""The common description of a checkpoint that every reader produces.

A reader (safetensors, flax, GGUF) never loads tensor data up front: it lists each tensor's
name, dtype and shape with a `load` callable that produces the array when the writer asks
for it, so a conversion holds at most one tensor in memory at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.oinf.blockquant import BlockLayout
from openinfer_jax.oinf.quantized import QuantizedTensor

__all__ = ["Checkpoint", "SourceTensor"]


@dataclass(frozen=True)
class SourceTensor:
    """One tensor of a checkpoint, loaded on demand.

    `dtype` and `shape` describe the array that `load()` returns (for GGUF quantized
    tensors: the dequantized array). `stored_as` names the on-disk encoding (``"F32"``,
    ``"Q4_1"``) and `stored_nbytes` its size, used for throughput figures; `origin` names
    the file the tensor comes from, for error messages. A source stored in a block scheme
    `.oinf` has (GGUF Q8_0/Q4_0/Q4_1) also gives its `block` layout and `load_block`, which
    returns the packed planes without dequantizing.
    """

    name: str
    dtype: DType
    shape: tuple[int, ...]
    load: Callable[[], np.ndarray]
    origin: str
    stored_as: str
    stored_nbytes: int
    block: BlockLayout | None = None
    load_block: Callable[[], QuantizedTensor] | None = None

    @property
    def numel(self) -> int:
        """Number of elements (1 for a scalar)."""
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass
class Checkpoint:
    """A checkpoint opened for conversion: lazy tensors plus sizevars and typed metadata.

    `metadata` values follow the `.oinf` writer contract (int, float, bool, str, np.ndarray,
    or a ``(value, DType)`` pair). `notes` records decisions a user may want to know about
    (skipped config entries, un-permuted GGUF rows). `closers` release open files/mmaps.
    """

    format: str
    path: Path
    tensors: list[SourceTensor]
    sizevars: dict[str, int] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        """Release the files this checkpoint holds open (idempotent)."""
        while self.closers:
            self.closers.pop()()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def stored_nbytes(self) -> int:
        """Total on-disk bytes of all tensors in the source."""
        return sum(t.stored_nbytes for t in self.tensors)
