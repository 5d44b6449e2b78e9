"""atheris target: the Python `.oinf` reader on arbitrary bytes.

Whatever the bytes, `ModelLoader.from_buffer` either opens them (and then every tensor and
metadata value reads) or raises `OinfFormatError`; `verify_buffer` agrees on validity.
Any other exception, or a disagreement, is a finding. Run through fuzz/run.py.
"""

from __future__ import annotations

import contextlib
import sys

import atheris

# Only our package is instrumented: coverage of NumPy/JAX internals would slow every run.
with atheris.instrument_imports(include=["openinfer_jax"]):
    from openinfer_jax.errors import OinfFormatError
    from openinfer_jax.oinf import ModelLoader, verify_buffer


def test_one_input(data: bytes) -> None:
    """One fuzz input (see the module docstring)."""
    violations = verify_buffer(data)
    try:
        model = ModelLoader.from_buffer(data)
    except OinfFormatError:
        if not violations:
            raise AssertionError("strict reader rejected a file verify_buffer accepts") from None
        return
    if violations:
        raise AssertionError(f"strict reader accepted a file verify_buffer rejects: {violations}")
    for key in model.metadata_info:
        with contextlib.suppress(OinfFormatError):  # an empty shape NumPy cannot hold
            model.metadata[key]
    for name, info in model.tensors.items():
        if info.has_data:
            with contextlib.suppress(OinfFormatError):
                model.tensor(name)
            model.tensor_bytes(name)
    model.close()


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
