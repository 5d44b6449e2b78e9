"""The Generator on a tiny llama model: prefill in chunks equals token by token equals the
NumPy reference's greedy choice, the simulator and the emitted C give the same tokens (also
sampled with a seed), streaming, stops, typed errors; SmolLM2 end to end (slow)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.errors import GenerationError
from openinfer_jax.generate import Generator, SamplingConfig
from openinfer_jax.ir import format_graph
from tests.models.tiny import llama_reference, write_tiny_llama

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "the cat sat on a mat"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("gen") / "tiny.oinf")


@pytest.fixture(scope="module")
def gen(tiny: Path) -> Generator:
    generator = Generator(tiny, chunk=4, context=32)
    yield generator
    generator.close()


def greedy_reference(path: Path, ids: list[int], n: int) -> list[int]:
    out: list[int] = []
    for _ in range(n):
        out.append(int(np.argmax(llama_reference(path, ids + out)[-1])))
    return out


def test_greedy_matches_reference_and_prefills_in_chunks(tiny: Path, gen: Generator) -> None:
    ids = gen.prompt_ids(PROMPT)
    result = gen.generate(PROMPT, max_new_tokens=6, stop_at_eos=False)
    assert result.tokens == greedy_reference(tiny, ids, 6)
    assert result.prefill_steps == -(-len(ids) // 4) and result.prompt_tokens == len(ids)
    assert result.decode_steps == 5 and result.stop == "length"
    one_by_one = Generator(tiny, chunk=1, context=32)
    try:
        again = one_by_one.generate(PROMPT, max_new_tokens=6, stop_at_eos=False)
    finally:
        one_by_one.close()
    assert again.tokens == result.tokens and again.prefill_steps == len(ids)


def test_f16_cache_generates_from_f16_tables(tiny: Path, gen: Generator) -> None:
    """kv_dtype="f16" builds the graph with f16 K/V tables; on the tiny model its greedy
    tokens are the f32 cache's (logits differ by f16 rounding only)."""
    with Generator(tiny, chunk=4, context=32, kv_dtype="f16") as half:
        assert "K(l, t): f16[" in format_graph(half.graph)
        got = half.generate(PROMPT, max_new_tokens=6, stop_at_eos=False)
    assert got.tokens == gen.generate(PROMPT, max_new_tokens=6, stop_at_eos=False).tokens


def test_stream_pieces_make_the_text(gen: Generator) -> None:
    pieces = list(gen.stream(PROMPT, max_new_tokens=6, stop_at_eos=False))
    assert "".join(pieces) == gen.generate(PROMPT, max_new_tokens=6, stop_at_eos=False).text
    assert len(pieces) > 1


def test_seeded_sampling_is_reproducible(gen: Generator) -> None:
    config = SamplingConfig(temperature=1.5, top_k=20, top_p=0.95, seed=11)
    a = gen.generate(PROMPT, max_new_tokens=8, sampling=config, stop_at_eos=False).tokens
    assert a == gen.generate(PROMPT, max_new_tokens=8, sampling=config, stop_at_eos=False).tokens


def test_stops_at_eos(gen: Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    first = gen.generate(PROMPT, max_new_tokens=3, stop_at_eos=False).tokens
    monkeypatch.setattr(gen.tokenizer, "eos_ids", frozenset({first[1]}))
    result = gen.generate(PROMPT, max_new_tokens=10)
    assert result.tokens == first[: first.index(first[1]) + 1] and result.stop == "eos"


def test_prompt_longer_than_the_cache_is_a_typed_error(tiny: Path) -> None:
    small = Generator(tiny, chunk=4, context=8)
    try:
        with pytest.raises(
            GenerationError, match=r"the prompt has \d+ tokens but the cache holds 8 .*--context"
        ):
            small.generate("the cat sat on the mat and the dog sat on the cat")
        # a prompt that fits but leaves little room stops at the end of the cache
        result = small.generate("the cat", max_new_tokens=50, stop_at_eos=False)
        assert result.stop == "context" and result.prompt_tokens + len(result.tokens) == 9
    finally:
        small.close()
    with pytest.raises(GenerationError, match="exceeds the model's 256 positions"):
        Generator(tiny, context=1000)
    with pytest.raises(GenerationError, match="kv_dtype must be one of f32, f16, bf16, got 'f8'"):
        Generator(tiny, kv_dtype="f8")
    with pytest.raises(GenerationError, match="unknown target 'gpu'"):
        Generator(tiny, target="gpu")


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_c_target_gives_the_simulators_tokens(
    tiny: Path, gen: Generator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    config = SamplingConfig(temperature=0.9, top_k=10, seed=5)
    with Generator(tiny, target="c", chunk=4, context=32) as c_gen:
        for sampling in (None, config):
            want = gen.generate(PROMPT, max_new_tokens=8, sampling=sampling, stop_at_eos=False)
            got = c_gen.generate(PROMPT, max_new_tokens=8, sampling=sampling, stop_at_eos=False)
            assert got.tokens == want.tokens
    assert len(list((tmp_path / "openinfer-jax" / "c").iterdir())) == 1  # built once, cached


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_c_generate_driver_greedy_mode_takes_token_ids(
    tiny: Path, gen: Generator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    from openinfer_jax.generate.c_runner import build_generate_program

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    exe = build_generate_program(tiny, gen.graph, gen.chunk, gen.context)
    ids = gen.prompt_ids(PROMPT)
    done = subprocess.run(
        [str(exe), str(tiny), "5", "-1", *map(str, ids)], capture_output=True, text=True, check=True
    )
    assert [int(t) for t in done.stdout.split()] == greedy_reference(tiny, ids, 5)


@pytest.mark.slow
def test_smollm2_generates_the_reference_continuation(smollm_oinf: Path) -> None:
    manifest = json.loads((ROOT / "tests/fixtures/references/manifest.json").read_text())["smollm2"]
    ref = np.load(ROOT / "tests/fixtures/references/smollm2.npz")
    with Generator(smollm_oinf, context=64) as generator:
        result = generator.generate(manifest["prompts"][0], max_new_tokens=6, stop_at_eos=False)
    assert result.prefill_steps == 1
    assert result.tokens == ref["prompt0_generated"][:6].tolist()
    assert manifest["generated_text"][0].startswith(result.text)
