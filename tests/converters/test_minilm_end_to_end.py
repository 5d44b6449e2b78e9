"""MiniLM end to end: convert, run the DSL encoder (examples/minilm/encoder.py) in the simulator,
and compare sentence embeddings with sentence-transformers (fixture, and live when installed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.converters import convert
from tests.converters.example_loader import load_example

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = ROOT / "tests" / "fixtures" / "references"


@pytest.fixture(scope="module")
def dsl_embeddings(minilm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    out = tmp_path_factory.mktemp("minilm") / "minilm.oinf"
    convert(minilm_dir, out, pattern="bert")
    sentences = json.loads((REFERENCES / "manifest.json").read_text())["minilm"]["sentences"]
    return load_example("minilm/encoder.py").embed(out, sentences)


@pytest.mark.slow
def test_dsl_encoder_matches_reference_fixture(dsl_embeddings: np.ndarray) -> None:
    ref = np.load(REFERENCES / "minilm.npz")["embeddings"]
    cosine = (
        (dsl_embeddings * ref).sum(-1)
        / np.linalg.norm(dsl_embeddings, axis=-1)
        / np.linalg.norm(ref, axis=-1)
    )
    assert cosine.min() >= 0.9999, cosine
    np.testing.assert_allclose(np.linalg.norm(dsl_embeddings, axis=-1), 1.0, atol=1e-5)


@pytest.mark.slow
def test_dsl_encoder_matches_live_sentence_transformers(
    minilm_dir: Path, dsl_embeddings: np.ndarray
) -> None:
    st = pytest.importorskip(
        "sentence_transformers", reason="live reference needs sentence-transformers"
    )
    sentences = json.loads((REFERENCES / "manifest.json").read_text())["minilm"]["sentences"]
    live = st.SentenceTransformer(str(minilm_dir), device="cpu").encode(
        sentences, normalize_embeddings=True
    )
    assert ((dsl_embeddings * live).sum(-1)).min() >= 0.9999


def test_a_known_architecture_without_its_preset_gets_a_note(minilm_dir: Path) -> None:
    from openinfer_jax.converters import plan_conversion

    hint = "a bert checkpoint converted without --pattern keeps the source's tensor names"
    plan = plan_conversion(minilm_dir)
    try:
        assert any(hint in note and "--pattern bert" in note for note in plan.notes)
    finally:
        plan.checkpoint.close()
    plan = plan_conversion(minilm_dir, pattern="bert")
    try:
        assert not any(hint in note for note in plan.notes)
    finally:
        plan.checkpoint.close()
