"""Names: ONNX value names as DSL identifiers and `.oinf` tensor names, made unique."""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["Namer", "identifier", "is_anonymous", "tensor_name"]

_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]+")
_NOT_TENSOR = re.compile(r"[^A-Za-z0-9._-]+")
# torch.onnx.export names a node's first output "<node path>_output_0"; the node path alone
# already says which value it is.
_OUTPUT_SUFFIX = re.compile(r"_output_0$")


def _collapse_path(text: str) -> str:
    """torch's node paths repeat each module name: ``/blocks/blocks.0/Conv`` -> ``blocks.0/Conv``."""
    parts = text.split("/")
    kept = [
        p
        for i, p in enumerate(parts)
        if not (i + 1 < len(parts) and p and parts[i + 1].startswith(p + "."))
    ]
    return "/".join(kept)


def identifier(text: str, default: str = "v") -> str:
    """`text` as a DSL name: other characters become `_`, a leading digit gets a `v` prefix.

    ``/layers.0/attn/MatMul_output_0`` -> ``layers_0_attn_MatMul``.
    """
    name = _NOT_IDENT.sub("_", _collapse_path(text)).strip("_")
    name = re.sub(r"_+", "_", name)
    name = _OUTPUT_SUFFIX.sub("", name) or name
    if not name:
        name = default
    if name[0].isdigit():
        name = default + name
    return name


def tensor_name(text: str, default: str = "t") -> str:
    """`text` as a `.oinf` tensor name (``[A-Za-z0-9._-]+``): path separators become dots,
    other characters `_` (``/layers.0/q/MatMul/B`` -> ``layers.0.q.MatMul.B``)."""
    text = _collapse_path(text).replace("::", ".").replace("/", ".")
    name = _NOT_TENSOR.sub("_", text).strip("._")
    name = re.sub(r"\.{2,}", ".", name)
    return name or default


def is_anonymous(name: str) -> bool:
    """True for initializer names that say nothing (``onnx::MatMul_123``, ``456``)."""
    return "::" in name or name.isdigit() or not name


class Namer:
    """Hands out unique names: the first request for a base gets it, later ones `_2`, `_3`..."""

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self.taken: set[str] = set(reserved)

    def take(self, base: str) -> str:
        """A name not handed out before, `base` itself if still free."""
        name, n = base, 2
        while name in self.taken:
            name = f"{base}_{n}"
            n += 1
        self.taken.add(name)
        return name
