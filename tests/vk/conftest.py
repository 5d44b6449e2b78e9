"""Fixtures of the Vulkan tests: one backend per session (compiled pipelines are reused).

Tests marked `vulkan` skip only when `vulkan_available()` says no (with its reason); on
CI, Mesa lavapipe provides a real Vulkan device on the CPU, so they run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from openinfer_jax.vk import VulkanBackend, vulkan_available


def vulkan_marks() -> list[pytest.MarkDecorator]:
    """`pytestmark` of a module whose every test needs a Vulkan device: marked `vulkan`,
    skipped with `vulkan_available()`'s reason when there is none."""
    ok, reason = vulkan_available()
    return [pytest.mark.vulkan, pytest.mark.skipif(not ok, reason=f"no Vulkan device: {reason}")]


def new_backend() -> VulkanBackend:
    """A new Vulkan backend (skips the test when no Vulkan device is usable)."""
    ok, reason = vulkan_available()
    if not ok:
        pytest.skip(f"Vulkan unavailable: {reason}")
    return VulkanBackend()


@pytest.fixture(scope="session")
def backend() -> VulkanBackend:
    """The session's Vulkan backend (skips the test when no Vulkan device is usable)."""
    return new_backend()


@pytest.fixture()
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty SPIR-V cache directory for tests that check compilation itself."""
    from openinfer_jax.vk import compiler

    monkeypatch.setenv("OPENINFER_VK_CACHE", str(tmp_path))
    monkeypatch.setattr(compiler, "_memory", {})
    return tmp_path
