"""Import an example script (examples/ is not a package) as a module, for the tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(relative: str) -> ModuleType:
    """Load examples/<relative> as a module."""
    spec = importlib.util.spec_from_file_location(relative.replace("/", "_").removesuffix(".py"), EXAMPLES / relative)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
