"""SmolLM2 end to end: GGUF -> .oinf, the DSL decode step (examples/smollm2/decoder.py) with its
persistent K/V cache in the simulator, greedy tokens and logits vs transformers (fixture)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.converters.example_loader import load_example

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = ROOT / "tests" / "fixtures" / "references"


@pytest.mark.slow
def test_dsl_decoder_greedy_tokens_and_logits(smollm_oinf: Path) -> None:
    """`smollm_oinf` is the GGUF converted with pattern="llama", dtype="f32" (tests/conftest.py)."""
    example = load_example("smollm2/decoder.py")
    out = smollm_oinf
    ref = np.load(REFERENCES / "smollm2.npz")
    steps = 3  # the example runs all 32 steps x 3 prompts; a few steps keep the suite short
    decoder = example.Decoder(out)
    try:
        tokens, logits = decoder.generate(ref["prompt0_ids"], steps)
    finally:
        decoder.close()
    assert tokens == ref["prompt0_generated"][:steps].tolist()
    for step, step_logits in enumerate(logits):
        top = ref["prompt0_topk_ids"][step]
        np.testing.assert_allclose(step_logits[top], ref["prompt0_topk_logits"][step], atol=1e-3, rtol=0)
    # all 49152 logits of the first step, against the float16-stored reference
    np.testing.assert_allclose(logits[0], ref["prompt0_first_logits"].astype(np.float32), atol=2e-2, rtol=2e-3)
