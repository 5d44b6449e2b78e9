"""Sentence embeddings from text (`Embedder`, `openinfer embed`) on the packaged MiniLM,
against sentence-transformers' reference embeddings (tests/fixtures/references)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.cli import main
from openinfer_jax.core.errors import ArchitectureError, GenerationError
from openinfer_jax.generate import Embedder
from tests.models.tiny import write_tiny_llama

REFERENCES = Path(__file__).resolve().parents[1] / "fixtures" / "references"


def test_texts_embed_like_sentence_transformers(minilm_oinf: Path) -> None:
    ref = np.load(REFERENCES / "minilm.npz")
    sentences = json.loads((REFERENCES / "manifest.json").read_text())["minilm"]["sentences"]
    with Embedder(minilm_oinf) as embedder:
        ids, mask = embedder.encode(sentences)
        got = embedder.embed(sentences)
    # the model's own tokenizer.json gives the reference's ids ([CLS] ... [SEP], zero padded)
    np.testing.assert_array_equal(ids, ref["input_ids"])
    np.testing.assert_array_equal(mask, ref["attention_mask"])
    assert got.shape == ref["embeddings"].shape and got.dtype == np.float32
    cosine = (got * ref["embeddings"]).sum(-1) / np.linalg.norm(got, axis=-1)
    assert cosine.min() >= 0.9999


def test_cli_prints_similarities_and_saves(
    minilm_oinf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "emb.npy"
    texts = ["The cat sits on the mat.", "A feline is resting on a rug.", "Stocks fell."]
    assert main(["embed", str(minilm_oinf), *texts, "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "[0] 9 tokens: The cat sits on the mat." in text
    assert "embeddings: 3 x 384 (unit length)" in text
    vectors = np.load(out)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    sims = vectors @ vectors.T
    assert sims[0, 1] > sims[0, 2] + 0.3  # the paraphrase is the closer one
    assert f"{sims[0, 1]:+.4f}" in text


def test_too_long_text_is_refused(minilm_oinf: Path) -> None:
    with Embedder(minilm_oinf) as embedder, pytest.raises(GenerationError, match="at most 512"):
        embedder.encode(["word " * 600])


def test_a_decoder_model_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tiny = write_tiny_llama(tmp_path / "tiny.oinf")
    with pytest.raises(ArchitectureError, match=r"bert needs the sizevar .type_vocab_size."):
        Embedder(tiny)
    assert main(["embed", str(tiny), "hello"]) == 1
    assert "type_vocab_size" in capsys.readouterr().err
