"""Tokenizers from model metadata: GGUF byte-level BPE (SmolLM2 and a tiny one), tokenizer.json
(MiniLM), chat templates, and the typed errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.errors import TokenizerError
from openinfer_jax.generate import apply_chat_template, load_tokenizer
from openinfer_jax.generate.chat import chat_format
from openinfer_jax.oinf import ModelLoader, write_oinf
from tests.models.tiny import TOKENS, tokenizer_metadata, write_tiny_llama

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = ROOT / "tests" / "fixtures" / "references"


def test_tiny_gguf_bpe_round_trips(tmp_path: Path) -> None:
    with ModelLoader.open(write_tiny_llama(tmp_path / "m.oinf")) as m:
        tok = load_tokenizer(m)
    ids = tok.encode("the cat sat on the mat.")
    assert tok.decode(ids) == "the cat sat on the mat."
    assert tok.encode(" the") == [TOKENS.index("Ġthe")]  # merges applied: Ġ+t, then Ġt+he
    assert tok.encode("<|im_start|>the") == [1, TOKENS.index("t"), TOKENS.index("he")]
    assert tok.eos_ids == {0} and tok.bos_id == 1 and not tok.add_bos


@pytest.mark.slow
def test_smollm2_gguf_tokenizer_matches_transformers(smollm_oinf: Path) -> None:
    ref = np.load(REFERENCES / "smollm2.npz")
    manifest = json.loads((REFERENCES / "manifest.json").read_text())["smollm2"]
    with ModelLoader.open(smollm_oinf) as m:
        tok = load_tokenizer(m)
    for i, prompt in enumerate(manifest["prompts"]):
        assert tok.encode(prompt) == ref[f"prompt{i}_ids"].tolist()
        assert tok.decode(ref[f"prompt{i}_generated"].tolist()) == manifest["generated_text"][i]
    assert tok.encode("12 <|im_end|>") == [33, 34, 216, 2]  # smollm pre: digits one by one
    assert tok.eos_ids == {2} and chat_format(tok.chat_template or "") == "chatml"


@pytest.mark.slow
def test_minilm_tokenizer_json_from_metadata(minilm_oinf: Path) -> None:
    with ModelLoader.open(minilm_oinf) as m:
        tok = load_tokenizer(m)
    ref = np.load(REFERENCES / "minilm.npz")
    sentence = json.loads((REFERENCES / "manifest.json").read_text())["minilm"]["sentences"][0]
    want = [int(t) for t, keep in zip(ref["input_ids"][0], ref["attention_mask"][0]) if keep]
    assert tok.encode(sentence) == want  # [CLS] ... [SEP], no padding


def test_tokenizer_file_overrides_metadata(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    t = Tokenizer(models.WordLevel({"hello": 0, "world": 1, "[UNK]": 2}, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    t.save(str(tmp_path / "tokenizer.json"))
    with ModelLoader.open(write_tiny_llama(tmp_path / "m.oinf")) as m:
        tok = load_tokenizer(m, tmp_path / "tokenizer.json")
    assert tok.encode("hello world") == [0, 1]


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({}, "holds no tokenizer"),
        (
            {**tokenizer_metadata(), "tokenizer.ggml.model": "bert"},
            "tokenizer.ggml.model is 'bert'",
        ),
        ({**tokenizer_metadata(), "tokenizer.ggml.tokens": "not json"}, "is not a JSON list"),
    ],
)
def test_unusable_tokenizer_metadata_is_a_typed_error(
    tmp_path: Path, metadata: dict, message: str
) -> None:
    path = write_oinf(
        tmp_path / "m.oinf", metadata=metadata, tensors={"w": np.zeros(1, np.float32)}
    )
    with ModelLoader.open(path) as m, pytest.raises(TokenizerError, match=message):
        load_tokenizer(m)
    with (
        ModelLoader.open(path) as m,
        pytest.raises(TokenizerError, match="cannot read the tokenizer file"),
    ):
        load_tokenizer(m, tmp_path / "missing.json")


SMOLLM_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def test_chatml_with_the_templates_default_system_message() -> None:
    text = apply_chat_template(SMOLLM_TEMPLATE, [{"role": "user", "content": "Hi"}])
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    own = apply_chat_template(
        SMOLLM_TEMPLATE,
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    )
    assert own.startswith("<|im_start|>system\nBe brief.<|im_end|>\n") and "SmolLM" not in own


def test_llama3_template_and_unknown_template() -> None:
    template = "{{ '<|begin_of_text|>' }}{% for m in messages %}<|start_header_id|>..."
    text = apply_chat_template(template, [{"role": "user", "content": " Hi "}])
    assert text == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    with pytest.raises(TokenizerError, match="no chat template"):
        apply_chat_template(None, [{"role": "user", "content": "Hi"}])
    # An unknown format needs jinja2, which is not a dependency: the error names the way out.
    import sys

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "jinja2", None)
        mp.setitem(sys.modules, "jinja2.sandbox", None)
        with pytest.raises(TokenizerError, match="install jinja2"):
            apply_chat_template("[INST] {{ messages }}", [{"role": "user", "content": "Hi"}])
