"""Shared pytest configuration: keep JAX on the CPU and compiling quickly; the converted
real models.

JAX's 64-bit mode is left at its default (off), as a user has it: the simulator scopes it to
its own calls (sim/precision.py), and the suite checks that this is enough.
"""

import os
from pathlib import Path

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Tests compile from scratch (hermetic, no files left in ~/.cache); the compile-cache tests
# turn it on for their own directory.
os.environ.setdefault("OPENINFER_COMPILE_CACHE", "0")
# XLA's CPU backend runs LLVM at -O0 in the tests (set before jax starts; subprocesses inherit
# it). The suite's programs are small and run a few times, so LLVM's optimisation passes were
# a large part of its CPU time (a SmolLM2 generate test: 62 -> 36 CPU s). XLA's own HLO passes
# (fusion, layouts, algebraic rewrites) still run; the results the tests check are the same.
# Benchmarks and users keep XLA's default. A level already given in XLA_FLAGS is kept.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    ).strip()

# ---- the packaged real models, converted once per session (per xdist worker) ------------------
# Converting SmolLM2 takes 5-8 CPU seconds; every test that needs a converted model takes it
# from here (read-only) instead of converting its own copy. A test of the conversion itself
# still calls `convert` with the options it checks.


def _convert_once(
    factory: pytest.TempPathFactory, name: str, source: object, **options: object
) -> Path:
    from openinfer_jax.converters import convert

    out = factory.mktemp(name) / f"{name}.oinf"
    convert(source, out, **options)
    return out


@pytest.fixture(scope="session")
def minilm_oinf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """all-MiniLM-L6-v2 converted with the bert preset (its tokenizer.json kept as metadata)."""
    from tests.real_models import MINILM_DIR, MINILM_MISSING

    if MINILM_DIR is None:
        pytest.skip(MINILM_MISSING)
    return _convert_once(tmp_path_factory, "minilm", MINILM_DIR, pattern="bert")


@pytest.fixture(scope="session")
def smollm_oinf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M (Q4_1 GGUF) converted with the llama preset, weights as f32."""
    from tests.real_models import SMOLLM_GGUF, SMOLLM_MISSING

    if SMOLLM_GGUF is None:
        pytest.skip(SMOLLM_MISSING)
    return _convert_once(tmp_path_factory, "smollm2", SMOLLM_GGUF, pattern="llama", dtype="f32")


@pytest.fixture(scope="session")
def smollm_packed_oinf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M converted with the llama preset, its Q4_1/Q8_0 blocks kept packed."""
    from tests.real_models import SMOLLM_GGUF, SMOLLM_MISSING

    if SMOLLM_GGUF is None:
        pytest.skip(SMOLLM_MISSING)
    return _convert_once(tmp_path_factory, "smollm2_packed", SMOLLM_GGUF, pattern="llama")
