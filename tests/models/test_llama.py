"""The llama builder: prefill in one step equals token by token equals a NumPy reference, in
the simulator, on Vulkan and in the emitted C; bad models give ArchitectureError."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.errors import ArchitectureError
from openinfer_jax.ir import format_graph
from openinfer_jax.models import build_graph, detect_architecture
from openinfer_jax.oinf import ModelLoader, write_oinf
from openinfer_jax.sim import Simulator
from openinfer_jax.trace import parse
from tests.models.tiny import llama_reference, write_tiny_llama

IDS = [3, 17, 5, 42, 9, 11, 2]
CHUNK = 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("llama") / "tiny.oinf")


def chunk_feed(tokens: list[int], chunk: int = CHUNK) -> dict[str, np.ndarray]:
    padded = np.zeros(chunk, np.int32)
    padded[: len(tokens)] = tokens
    return {"tokens": padded, "count": np.int32(len(tokens))}


def run(sim: Simulator, feeds: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
    ex = sim.make_executor()
    out = []
    for feed in feeds:
        ex.insert(feed)
        ex.step()
        out.append(np.asarray(ex.fetch("logits"))[0])
    return out


@pytest.mark.parametrize("tied", [True, False])
def test_prefill_in_one_step_matches_token_by_token_and_reference(
    tmp_path: Path, tied: bool
) -> None:
    path = write_tiny_llama(tmp_path / "m.oinf", tied=tied)
    ref = llama_reference(path, IDS)
    sim = Simulator(path, build_graph(path, "llama", chunk=CHUNK, context=32))
    # 7 tokens: one full chunk, then a padded chunk of 3.
    chunks = run(sim, [chunk_feed(IDS[:4]), chunk_feed(IDS[4:])])
    np.testing.assert_allclose(chunks[0], ref[3], atol=2e-5)
    np.testing.assert_allclose(chunks[1], ref[6], atol=2e-5)
    singles = run(sim, [chunk_feed([t]) for t in IDS])
    np.testing.assert_allclose(np.stack(singles), ref, atol=2e-5)


def test_decode_only_graph(tiny: Path) -> None:
    graph = build_graph(tiny, "llama", chunk=1, context=16)
    assert {d.name for d in graph.vars if d.kind.value == "dynamic"} == {"tokens"}
    sim = Simulator(tiny, graph)
    got = run(sim, [{"tokens": np.asarray([t], np.int32)} for t in IDS])
    np.testing.assert_allclose(np.stack(got), llama_reference(tiny, IDS), atol=2e-5)


def test_graph_text_round_trips_and_is_readable(tiny: Path) -> None:
    graph = build_graph(tiny, "llama", chunk=CHUNK, context=32)
    text = format_graph(graph)
    assert 'Wq(l): f32[hidden_size, hidden_size] @pattern("q.weight.{l}");' in text
    assert "cache.write k3_p >> K[l, step..end_p];" in text
    assert "op attention(qh_p, kt_p, vt_p, causal=true" in text
    # The printed text is a program: parsed back it runs the same.
    sim = Simulator(tiny, parse(text))
    np.testing.assert_allclose(
        run(sim, [chunk_feed(IDS[:4])])[0], llama_reference(tiny, IDS[:4])[3], atol=2e-5
    )


def test_prefill_compiles_once_per_path(tiny: Path) -> None:
    sim = Simulator(tiny, build_graph(tiny, "llama", chunk=CHUNK, context=64))
    ex = sim.make_executor()
    for tokens in ([1, 2, 3, 4], [5, 6], [7], [8], [9]):
        ex.insert(chunk_feed(tokens))
        ex.step()
    first = ex.stats["compilations"]
    for token in range(5):  # decode steps in the same cache bucket: no new compilation
        ex.insert(chunk_feed([token]))
        ex.step()
    assert ex.stats["compilations"] == first


def test_cache_full_is_a_typed_error_and_leaves_state(tiny: Path) -> None:
    from openinfer_jax.errors import SimulationError

    sim = Simulator(tiny, build_graph(tiny, "llama", chunk=CHUNK, context=6))
    ex = sim.make_executor()
    ex.insert(chunk_feed([1, 2, 3]))
    ex.step()
    ex.insert(chunk_feed([4, 5]))  # a chunk always writes 4 rows: 3..7 exceeds 6
    with pytest.raises(SimulationError, match="exceeds fixed size t=6"):
        ex.step()
    assert int(np.asarray(ex.fetch("step"))) == 3


@pytest.mark.vulkan
def test_prefill_on_vulkan(tiny: Path) -> None:
    pytest.importorskip("kp")
    sim = Simulator(tiny, build_graph(tiny, "llama", chunk=CHUNK, context=32), device="vulkan")
    got = run(sim, [chunk_feed(IDS[:4]), chunk_feed(IDS[4:]), chunk_feed([8])])
    ref = llama_reference(tiny, [*IDS, 8])
    np.testing.assert_allclose(np.stack(got), ref[[3, 6, 7]], atol=2e-5)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_prefill_in_emitted_c_matches_simulator(tiny: Path, tmp_path: Path) -> None:
    from tests.emit.harness import parity

    graph = build_graph(tiny, "llama", chunk=CHUNK, context=32)
    steps = [chunk_feed(IDS[:4]), chunk_feed(IDS[4:]), *(chunk_feed([t]) for t in (7, 8, 9))]
    assert parity(tmp_path, tiny, graph, steps, outputs=["logits"])["compared"] == 5


def test_f16_cache_graph(tiny: Path, tmp_path: Path) -> None:
    """kv_dtype="f16": the tables hold f16, new rows are cast before the write, attention
    reads them with f32 queries; logits stay within f16 rounding of the reference, a
    prefill step equals token by token, and the emitted C gives the simulator's results."""
    graph = build_graph(tiny, "llama", chunk=CHUNK, context=32, kv_dtype="f16")
    text = format_graph(graph)
    assert "K(l, t): f16[" in text and "V(l, t): f16[" in text
    assert "op cast(k3_p, to=f16) >> kc_p;" in text
    assert "cache.write kc_p >> K[l, step..end_p];" in text
    assert "op attention(qh_p, kt_p, vt_p, causal=true" in text
    sim = Simulator(tiny, graph)
    ref = llama_reference(tiny, IDS)
    chunks = run(sim, [chunk_feed(IDS[:4]), chunk_feed(IDS[4:])])
    singles = np.stack(run(sim, [chunk_feed([t]) for t in IDS]))
    np.testing.assert_allclose(singles, ref, atol=2e-3)
    np.testing.assert_allclose(chunks[1], singles[6], atol=2e-5)
    ex = sim.make_executor()
    ex.insert(chunk_feed(IDS[:4]))
    ex.step()
    assert np.asarray(ex.fetch("K")).dtype == np.float16
    if shutil.which("cc") is not None:
        from tests.emit.harness import parity

        steps = [chunk_feed(IDS[:4]), chunk_feed(IDS[4:]), chunk_feed([7])]
        assert parity(tmp_path, tiny, graph, steps, outputs=["logits"])["compared"] == 3
    with pytest.raises(ArchitectureError, match="kv_dtype must be one of f32, f16, bf16, got 'i8'"):
        build_graph(tiny, "llama", kv_dtype="i8")


def _drop(path: Path, out: Path, name: str, **replace: np.ndarray) -> Path:
    with ModelLoader.open(path) as m:
        tensors = {k: np.asarray(m.tensor(k)) for k in m.tensors if k != name}
        tensors.update(replace)
        return write_oinf(
            out, sizevars=dict(m.sizevars), metadata=dict(m.metadata), tensors=tensors
        )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            "drop q.weight.1",
            "tensor 'q.weight.1' is missing; convert the checkpoint with `openinfer convert SRC -o M.oinf --pattern llama`",
        ),
        ("shape k.weight.0", "tensor 'k.weight.0' has shape [8, 32], expected [16, 32]"),
        ("dtype up.weight.0", "tensor 'up.weight.0' is f16 but 'tok_emb.weight' is f32"),
    ],
)
def test_arch_mismatch_names_the_tensor(
    tiny: Path, tmp_path: Path, change: str, message: str
) -> None:
    kind, name = change.split()
    with ModelLoader.open(tiny) as m:
        original = np.asarray(m.tensor(name))
    replace = {}
    if kind == "shape":
        replace[name] = original[:8]
    elif kind == "dtype":
        replace[name] = original.astype(np.float16)
    bad = _drop(tiny, tmp_path / "bad.oinf", name if kind == "drop" else "", **replace)
    with pytest.raises(ArchitectureError) as info:
        build_graph(bad, "llama")
    assert message in str(info.value)


def test_bert_model_is_not_llama(tmp_path: Path) -> None:
    from tests.models.test_bert import write_tiny_bert

    bert = write_tiny_bert(tmp_path / "bert.oinf")
    with pytest.raises(ArchitectureError, match=r"tensor .norm.weight. is missing"):
        build_graph(bert, "llama")
    with ModelLoader.open(bert) as m:
        assert detect_architecture(m) == "bert"


def test_unknown_arch_and_option(tiny: Path) -> None:
    with pytest.raises(ArchitectureError, match="unknown architecture 'gpt9'; known: bert, llama"):
        build_graph(tiny, "gpt9")
    with pytest.raises(ArchitectureError, match="takes the options chunk, context, kv_dtype, not seq"):
        build_graph(tiny, "llama", seq=4)
    assert build_graph(tiny).blocks[0].name == "entry"  # detected from model_type


def test_block_quantized_weights(tiny: Path, tmp_path: Path) -> None:
    """Packed q4_1/q8_0 weights are declared with their schemes and read packed; a model whose
    layers are stored differently is an ArchitectureError naming both tensors."""
    from openinfer_jax.oinf import OinfWriter, quantize

    packed, dense = tmp_path / "q.oinf", tmp_path / "f.oinf"
    with ModelLoader.open(tiny) as m, OinfWriter(packed) as wq, OinfWriter(dense) as wf:
        for name, value in m.sizevars.items():
            wq.add_sizevar(name, value)
            wf.add_sizevar(name, value)
        for key in m.metadata:
            wq.add_metadata(key, m.metadata[key])
            wf.add_metadata(key, m.metadata[key])
        for name, info in m.tensors.items():
            array = np.asarray(m.tensor(name))
            if len(info.shape) == 2:
                scheme = "q8_0" if name == "tok_emb.weight" else "q4_1"
                qt = quantize(array, scheme, 16)
                wq.add_tensor(name, qt)
                wf.add_tensor(name, qt.dequantize())
            else:
                wq.add_tensor(name, array)
                wf.add_tensor(name, array)
    graph = build_graph(packed, "llama", chunk=CHUNK, context=32)
    text = format_graph(graph)
    assert "Wq(l): q4_1[" in text and "tok_emb: q8_0[vocab_size, hidden_size]" in text
    feeds = [chunk_feed(IDS[:4]), chunk_feed([IDS[4]])]
    got = run(Simulator(packed, graph), feeds)
    want = run(Simulator(dense, build_graph(dense, "llama", chunk=CHUNK, context=32)), feeds)
    np.testing.assert_allclose(np.stack(got), np.stack(want), atol=2e-5)
    with ModelLoader.open(tiny) as m:
        weight = np.asarray(m.tensor("up.weight.0"))
    bad = _drop(tiny, tmp_path / "mixed.oinf", "", **{"up.weight.0": quantize(weight, "q8_0", 16)})
    with pytest.raises(
        ArchitectureError, match=r"'up.weight.1' is f32 but 'up.weight.0' is q8_0; a prefix table"
    ):
        build_graph(bad, "llama")
