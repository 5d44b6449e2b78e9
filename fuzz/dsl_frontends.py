"""atheris target: the `graph{}` text parser and the graph JSON reader on arbitrary text.

Each either returns a Graph (which then validates or raises GraphValidationError, prints
back as text that parses to the same graph, and round-trips through JSON) or raises
DslSyntaxError. Any other exception is a finding. Run through fuzz/run.py.
"""

from __future__ import annotations

import contextlib
import sys

import atheris

# Only our package is instrumented: coverage of NumPy/JAX internals would slow every run.
with atheris.instrument_imports(include=["openinfer_jax"]):
    from openinfer_jax.errors import DslSyntaxError, GraphValidationError
    from openinfer_jax.ir.serialize import from_json_text, to_json_text
    from openinfer_jax.ir.validate import validate
    from openinfer_jax.trace import parse


def _check(graph: object) -> None:
    with contextlib.suppress(GraphValidationError):
        validate(graph)  # type: ignore[arg-type]
    text = str(graph)
    if parse(text) != graph:
        raise AssertionError(f"printed graph parses to another graph:\n{text}")
    if from_json_text(to_json_text(graph)) != graph:  # type: ignore[arg-type]
        raise AssertionError("graph changed through JSON")


def test_one_input(data: bytes) -> None:
    """One fuzz input: the first byte picks the frontend, the rest is the text."""
    if not data:
        return
    text = data[1:].decode("utf-8", "replace")
    reader = from_json_text if data[0] & 1 else parse
    try:
        graph = reader(text)
    except DslSyntaxError:
        return
    _check(graph)


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
