"""The exception hierarchy: every error a user can cause is an `OpenInferError`.

Each subclass names the layer that found the problem. Messages name the place
(file offset and field, DSL line:column, block/node) and say what to change.
"""

from __future__ import annotations

__all__ = [
    "ArchitectureError",
    "BackendError",
    "ConversionError",
    "DslSyntaxError",
    "GenerationError",
    "GraphValidationError",
    "OinfFormatError",
    "OpenInferError",
    "ShardingError",
    "SimulationError",
    "SynthesisError",
    "TokenizerError",
]


class OpenInferError(Exception):
    """Base class of every error this package raises for a user mistake."""


class OinfFormatError(OpenInferError):
    """A `.oinf` file (or the data given to the writer) breaks a rule of docs/oinf.md.

    `offset` is the byte offset of the offending field when reading a file, else None;
    `field` names the field (for example ``"tensor[3].data_offset"``).
    """

    def __init__(
        self, message: str, *, offset: int | None = None, field: str | None = None
    ) -> None:
        self.offset = offset
        self.field = field
        where = []
        if field is not None:
            where.append(field)
        if offset is not None:
            where.append(f"at offset {offset} (0x{offset:x})")
        prefix = (" ".join(where) + ": ") if where else ""
        super().__init__(prefix + message)


class DslSyntaxError(OpenInferError):
    """DSL text (or a Python builder call) that does not follow the grammar.

    `loc` is the `SourceLoc` of the offending token or call when known, else None.
    """

    loc: object | None = None


class GraphValidationError(OpenInferError):
    """A well-formed graph that breaks a semantic rule (types, shapes, memory kinds, control flow).

    `loc` is the `SourceLoc` of the offending declaration or node when known, else None.
    """

    loc: object | None = None


class SimulationError(OpenInferError):
    """A failure while the simulator runs a step; persistent state is left as before the step."""


class BackendError(OpenInferError):
    """A device backend (Vulkan/Kompute) is missing, lacks a capability, or failed."""


class SynthesisError(OpenInferError):
    """The synthesizer cannot express a graph for the requested target."""


class ConversionError(OpenInferError):
    """A checkpoint could not be converted to `.oinf`."""


class ShardingError(OpenInferError):
    """A sharding plan does not fit the mesh or the graph's variables."""


class ArchitectureError(OpenInferError):
    """A model does not fit a graph builder of `openinfer_jax.models` (a missing or mismatched
    tensor or sizevar, named in the message)."""


class TokenizerError(OpenInferError):
    """No tokenizer can be built from a model's metadata or a tokenizer file."""


class GenerationError(OpenInferError):
    """Text generation cannot run as asked (a prompt longer than the cache, bad sampling settings)."""
