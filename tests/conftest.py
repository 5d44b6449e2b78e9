"""Shared pytest configuration: keep JAX on the CPU with 64-bit types available."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_ENABLE_X64", "1")
