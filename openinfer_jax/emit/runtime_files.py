"""The fixed C runtime copied into every emitted program (oi_runtime.h / oi_runtime.c)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

__all__ = ["RUNTIME_DIR", "runtime_files", "vulkan_files"]

RUNTIME_DIR = Path(__file__).with_name("runtime")


@cache
def runtime_files() -> dict[str, str]:
    """File name -> text of the runtime sources, in name order."""
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(RUNTIME_DIR.glob("oi_runtime.*"))}


@cache
def vulkan_files() -> dict[str, str]:
    """File name -> text of the Vulkan host runtime (oi_vulkan.h / oi_vulkan.c)."""
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(RUNTIME_DIR.glob("oi_vulkan.*"))}
