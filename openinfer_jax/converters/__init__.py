"""Checkpoint converters: safetensors, flax msgpack, orbax and GGUF -> `.oinf`.

Library use::

    from openinfer_jax.converters import convert
    report = convert("model.safetensors", "model.oinf", dtype="f16", pattern="bert")

Command line: ``openinfer convert SRC -o OUT.oinf`` (see docs/converters.md).
"""

from openinfer_jax.converters.api import (
    FORMATS,
    convert,
    detect_format,
    open_checkpoint,
    plan_conversion,
)
from openinfer_jax.converters.checkpoint import Checkpoint, SourceTensor
from openinfer_jax.converters.naming import PATTERNS, RenameRule, parse_rule
from openinfer_jax.converters.plan import ConversionPlan, PlannedTensor, build_plan
from openinfer_jax.converters.write import ConversionReport, write_plan

__all__ = [
    "FORMATS",
    "PATTERNS",
    "Checkpoint",
    "ConversionPlan",
    "ConversionReport",
    "PlannedTensor",
    "RenameRule",
    "SourceTensor",
    "build_plan",
    "convert",
    "detect_format",
    "open_checkpoint",
    "parse_rule",
    "plan_conversion",
    "write_plan",
]
