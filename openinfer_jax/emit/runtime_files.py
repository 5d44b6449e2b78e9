"""The fixed C runtime copied into emitted programs: oi_runtime.h / oi_runtime.c always; the
header-only dense kernels (oi_gemm.h with oi_vec.h and oi_parallel.h) when the program uses
them, plus oi_pool.h (the POSIX thread pool) only when it was synthesized for more than one
thread, so a single-threaded program contains no pthread code."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from pathlib import Path

__all__ = ["RUNTIME_DIR", "included_headers", "kernel_files", "runtime_files", "vulkan_files"]

RUNTIME_DIR = Path(__file__).with_name("runtime")

# What each kernel header includes from the runtime (besides oi_runtime.h).
_HEADER_DEPS = {
    "oi_gemm.h": ("oi_parallel.h", "oi_vec.h"),
    "oi_attention.h": ("oi_gemm.h", "oi_parallel.h", "oi_vec.h"),
    "oi_conv.h": ("oi_gemm.h", "oi_parallel.h", "oi_vec.h"),
    "oi_quant.h": ("oi_parallel.h",),
}


@cache
def runtime_files() -> dict[str, str]:
    """File name -> text of the runtime sources, in name order."""
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(RUNTIME_DIR.glob("oi_runtime.*"))}


def included_headers(headers: Iterable[str]) -> set[str]:
    """The kernel headers `headers` name and those they include."""
    names = set()
    for header in headers:
        names.add(header)
        names.update(_HEADER_DEPS.get(header, ()))
    return names


def kernel_files(headers: Iterable[str], threads: int) -> dict[str, str]:
    """File name -> text of the kernel headers a program includes and what they include
    (oi_pool.h only when `threads` > 1)."""
    names = included_headers(headers)
    if names and threads > 1:
        names.add("oi_pool.h")
    return {n: (RUNTIME_DIR / n).read_text(encoding="utf-8") for n in sorted(names)}


@cache
def vulkan_files() -> dict[str, str]:
    """File name -> text of the Vulkan host runtime (oi_vulkan.h / oi_vulkan.c)."""
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(RUNTIME_DIR.glob("oi_vulkan.*"))}
