"""Reading an architecture's hyperparameters from a `.oinf` and checking its tensors.

The converter stores sizes as sizevars under their Hugging Face names (from `config.json`,
or mapped from GGUF metadata: ``llama.block_count`` -> ``num_hidden_layers``) and the
remaining settings as metadata (``rms_norm_eps``, ``rope_theta``, ``layer_norm_eps``). The
builders read them here, so one builder serves a model converted from safetensors, flax or
GGUF. `require_tensors` compares the tensors a builder will read with the file, so a model
of another architecture fails with the name of the first missing or mismatched tensor
instead of a graph validation message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import ArchitectureError
from openinfer_jax.oinf import ModelLoader

__all__ = ["metadata_float", "require_tensors", "sizevar", "weight_type"]


def _source(model: ModelLoader) -> str:
    return str(getattr(model, "path", None) or "the model")


def sizevar(model: ModelLoader, name: str, arch: str, default: int | None = None) -> int:
    """The sizevar `name`, or `default`.

    Raises:
        ArchitectureError: when it is missing and there is no default (names the sizevar and
            how to add it).
    """
    if name in model.sizevars:
        return int(model.sizevars[name])
    if default is not None:
        return default
    raise ArchitectureError(
        f"{_source(model)}: --arch {arch} needs the sizevar {name!r}, which the model does not "
        f"have (it has {', '.join(sorted(model.sizevars)) or 'none'}); convert from a checkpoint "
        f"with a config.json, or add it with `openinfer convert ... --sizevar {name}=N`"
    )


def metadata_float(model: ModelLoader, names: Iterable[str], default: float) -> float:
    """The first of the metadata keys `names` that the model has, as a float, else `default`."""
    for name in names:
        if name in model.metadata:
            return float(model.metadata[name])
    return default


def weight_type(model: ModelLoader, name: str) -> str:
    """How a graph declares tensor `name`: its dtype (``f32``) or, for a block-quantized
    tensor, its scheme (``q4_1``; docs/dsl.md, block-quantized weights)."""
    info = model.tensors[name]
    block = getattr(info, "block", None)
    return str(block.scheme) if block is not None else info.dtype.short


def require_tensors(
    model: ModelLoader,
    arch: str,
    expected: Mapping[str, tuple[int, ...]],
    *,
    hint: str,
    quantized: bool = False,
) -> DType:
    """Check that every tensor in `expected` exists with that shape and one float dtype.

    Returns the dtype the tensors share (f32, f16 or bf16), which the graph declares. With
    `quantized`, block-quantized tensors (q8_0/q4_0/q4_1) are accepted: their values are f32,
    so the others must be f32 too (the builder declares them with `weight_type`).

    Raises:
        ArchitectureError: naming the first missing tensor, a wrong shape, or a dtype that
            differs from the others; `hint` says how to convert the model for `arch`.
    """
    dtype: DType | None = None
    first = ""
    for name, shape in expected.items():
        info = model.tensors.get(name)
        if info is None:
            raise ArchitectureError(
                f"{_source(model)} does not match --arch {arch}: tensor {name!r} is missing; {hint}"
            )
        block = getattr(info, "block", None)
        if block is not None and not quantized:
            raise ArchitectureError(
                f"{_source(model)}: tensor {name!r} is block-quantized ({block.layout.scheme}); "
                f"--arch {arch} reads float weights: convert with --dtype f32 (or f16, bf16)"
            )
        if tuple(info.shape) != tuple(shape):
            raise ArchitectureError(
                f"{_source(model)} does not match --arch {arch}: tensor {name!r} has shape "
                f"{list(info.shape)}, expected {list(shape)} from the model's sizevars"
            )
        value_dtype = DType.F32 if block is not None else info.dtype
        if dtype is None:
            dtype, first = value_dtype, name
            if not dtype.is_float or dtype.is_packed:
                raise ArchitectureError(
                    f"{_source(model)}: tensor {name!r} is {dtype.short}; --arch {arch} needs "
                    "floating weights (convert with --dtype f32, f16 or bf16)"
                )
        elif value_dtype is not dtype:
            raise ArchitectureError(
                f"{_source(model)}: tensor {name!r} is {weight_type(model, name)} but {first!r} is "
                f"{dtype.short}; convert with --dtype {dtype.short} so all weights share one dtype"
            )
    assert dtype is not None, "expected at least one tensor"
    return dtype


def describe(values: Mapping[str, Any]) -> str:
    """``key=value, ...`` for messages and graph headers."""
    return ", ".join(f"{k}={v}" for k, v in values.items())
