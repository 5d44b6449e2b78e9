"""Optional dependencies of the readers: a missing one is a `ConversionError` naming the extra.

GGUF needs `gguf`, flax msgpack needs `flax` (and `msgpack`), orbax needs `orbax-checkpoint`;
none is installed by a plain ``pip install openinfer-jax``. Without this, converting such a
checkpoint would end in a raw ModuleNotFoundError traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from openinfer_jax.core.errors import ConversionError

__all__ = ["import_extra"]


def import_extra(module: str, extra: str, purpose: str) -> ModuleType:
    """Import `module`, which the package's optional dependency group `extra` provides.

    Raises:
        ConversionError: when it is not installed, naming ``pip install 'openinfer-jax[extra]'``.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        missing = err.name or module
        raise ConversionError(
            f"{purpose} needs the Python package {missing!r}, which is not installed; "
            f"install it with: pip install 'openinfer-jax[{extra}]'"
        ) from None
