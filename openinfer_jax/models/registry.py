"""The architecture table behind `build_graph` and `openinfer run/emit --arch NAME`."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from openinfer_jax.core.errors import ArchitectureError
from openinfer_jax.ir import Graph
from openinfer_jax.models.bert import bert_encoder
from openinfer_jax.models.llama import llama_decoder
from openinfer_jax.oinf import ModelLoader

__all__ = [
    "ARCHITECTURES",
    "Architecture",
    "architecture_names",
    "build_graph",
    "detect_architecture",
]


@dataclass(frozen=True)
class Architecture:
    """A graph builder, the keyword options it takes, and the `model_type` values it serves."""

    name: str
    build: Callable[..., Graph]
    options: tuple[str, ...]
    model_types: tuple[str, ...]
    summary: str


ARCHITECTURES: dict[str, Architecture] = {
    "llama": Architecture(
        "llama", llama_decoder, ("chunk", "context", "kv_dtype"), ("llama", "mistral"),
        "decoder with GQA, rope, a K/V cache and chunked prefill (SmolLM2, Llama)",
    ),
    "bert": Architecture(
        "bert", bert_encoder, ("batch", "seq"), ("bert",),
        "encoder with mean pooling and L2-normalized sentence embeddings (MiniLM)",
    ),
}  # fmt: skip


def architecture_names() -> list[str]:
    """The names `--arch` accepts."""
    return sorted(ARCHITECTURES)


def detect_architecture(model: ModelLoader) -> str | None:
    """The architecture a model's ``model_type`` metadata names, if one is known."""
    model_type = str(model.metadata.get("model_type", ""))
    for arch in ARCHITECTURES.values():
        if model_type in arch.model_types:
            return arch.name
    return None


def build_graph(
    model: ModelLoader | str | os.PathLike[str], arch: str | None = None, **options: Any
) -> Graph:
    """The graph of architecture `arch` (default: detected from the model) for `model`.

    `options` are the builder's keywords (llama: ``chunk``, ``context``, ``kv_dtype``; bert:
    ``batch``, ``seq``); None values are left out.

    Raises:
        ArchitectureError: unknown architecture or option, an architecture that cannot be
            detected, or a model that does not fit it (names the tensor or sizevar).
    """
    if not isinstance(model, ModelLoader):
        with ModelLoader.open(model) as loader:
            return build_graph(loader, arch, **options)
    name = arch or detect_architecture(model)
    if name is None:
        raise ArchitectureError(
            f"{model.path}: cannot tell the architecture from model_type="
            f"{model.metadata.get('model_type')!r}; pass one of {', '.join(architecture_names())}"
        )
    if name not in ARCHITECTURES:
        raise ArchitectureError(
            f"unknown architecture {name!r}; known: {', '.join(architecture_names())}"
        )
    spec = ARCHITECTURES[name]
    given = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(given) - set(spec.options))
    if unknown:
        raise ArchitectureError(
            f"--arch {name} takes the options {', '.join(spec.options)}, not {', '.join(unknown)}"
        )
    try:
        return spec.build(model, **given)
    except ArchitectureError as err:
        detected = detect_architecture(model)
        if detected is None or detected == name:
            raise
        raise ArchitectureError(
            f"{err} (the model's model_type={model.metadata.get('model_type')!r} suggests "
            f"--arch {detected})"
        ) from None
