"""Shared pytest configuration: keep JAX on the CPU.

JAX's 64-bit mode is left at its default (off), as a user has it: the simulator scopes it to
its own calls (sim/precision.py), and the suite checks that this is enough.
"""

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Tests compile from scratch (hermetic, no files left in ~/.cache); the compile-cache tests
# turn it on for their own directory.
os.environ.setdefault("OPENINFER_COMPILE_CACHE", "0")
