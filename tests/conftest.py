"""Shared pytest configuration: keep JAX on the CPU with 64-bit types available."""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_ENABLE_X64", "1")
# Tests compile from scratch (hermetic, no files left in ~/.cache); the compile-cache tests
# turn it on for their own directory.
os.environ.setdefault("OPENINFER_COMPILE_CACHE", "0")
