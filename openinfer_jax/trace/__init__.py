"""The DSL frontends: the `graph{}` text parser (and the Python builder) producing IR.

``parse(text)`` / ``parse_file(path)`` read `graph{}` text (docs/dsl.md).
"""

from __future__ import annotations

from openinfer_jax.trace.parser import parse, parse_file

__all__ = ["parse", "parse_file"]

# ---- Python builder exports (openinfer_jax/trace/builder.py, owned by the builder helper) ----
# The lead adds the builder's public names here, e.g.:
#   from openinfer_jax.trace.builder import ...
#   __all__ += [...]
# ---- end of builder exports ----
