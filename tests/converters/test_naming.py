"""Rename rules, presets, include/exclude and name collisions."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from openinfer_jax.converters import build_plan, open_checkpoint, parse_rule
from openinfer_jax.converters.naming import PATTERNS, rename, rules_for, selected
from openinfer_jax.core.errors import ConversionError


def test_rule_groups_by_number_and_name() -> None:
    rule = parse_rule(r"blk\.(\d+)\.attn_(?P<w>[qkv])\.weight=layers.{1}.w{w}")
    assert rule.apply("blk.7.attn_k.weight") == "layers.7.wk"
    assert rule.apply("blk.7.attn_k.weight.extra") is None  # full match only


@pytest.mark.parametrize(
    ("text", "message"),
    [("no-equals-sign", "REGEX=REPLACEMENT"), (r"(\d+=x.{2}", "invalid regex"), (r"a(\d)=x.{2}", "group {2}"),
     (r"a(\d)=x.{name}", "group {name}")],
)  # fmt: skip
def test_bad_rules(text: str, message: str) -> None:
    with pytest.raises(ConversionError, match=re.escape(message)):
        parse_rule(text)


def test_first_matching_rule_wins_and_user_rules_come_first() -> None:
    rules = rules_for([r"blk\.0\.attn_q\.weight=special"], pattern="llama")
    assert rename("blk.0.attn_q.weight", rules) == ("special", False)
    assert rename("blk.1.attn_q.weight", rules) == ("q.weight.1", False)
    assert rename("unrelated", rules) == ("unrelated", False)


@given(layer=st.integers(0, 500))
def test_llama_gguf_and_hf_names_agree(layer: int) -> None:
    rules = rules_for(pattern="llama")
    pairs = [
        (f"blk.{layer}.attn_q.weight", f"model.layers.{layer}.self_attn.q_proj.weight"),
        (f"blk.{layer}.ffn_down.weight", f"model.layers.{layer}.mlp.down_proj.weight"),
        (f"blk.{layer}.attn_norm.weight", f"model.layers.{layer}.input_layernorm.weight"),
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output.weight", "lm_head.weight"),
    ]
    for gguf_name, hf_name in pairs:
        assert rename(gguf_name, rules) == rename(hf_name, rules)
    assert rename(f"blk.{layer}.attn_q.weight", rules)[0] == f"q.weight.{layer}"


def test_bert_preset_maps_pytorch_and_flax_to_one_layout() -> None:
    rules = rules_for(pattern="bert")
    assert rename("encoder.layer.3.attention.self.query.weight", rules) == ("q.weight.3", False)
    assert rename("encoder.layer.3.attention.self.query.kernel", rules) == ("q.weight.3", True)
    assert rename("encoder.layer.3.output.LayerNorm.scale", rules) == ("ffn_ln.weight.3", False)
    assert rename("embeddings.word_embeddings.embedding", rules) == ("tok_emb.weight", False)
    assert rename("bert.pooler.dense.bias", rules) == ("pooler.bias", False)


def test_layer_suffix_preset() -> None:
    assert rename("encoder.12.mlp.w", PATTERNS["layer-suffix"]) == ("encoder.mlp.w.12", False)


def test_unknown_pattern() -> None:
    with pytest.raises(ConversionError, match="unknown --pattern 'gpt9'"):
        rules_for(pattern="gpt9")


def test_globs() -> None:
    assert selected("encoder.layer.0.x", ["encoder.*"], [])
    assert not selected("pooler.x", ["encoder.*"], [])
    assert not selected("encoder.layer.0.x", [], ["*.layer.0.*"])


def test_collision_names_both_sources(tiny_bert_dir: Path) -> None:
    checkpoint = open_checkpoint(tiny_bert_dir)
    with pytest.raises(
        ConversionError, match=r"name collision: '.*layer\.0.*' and '.*layer\.1.*' would both"
    ):
        build_plan(checkpoint, rename_rules=[r"encoder\.layer\.\d+\.(.*)=merged.{1}"])


def test_invalid_destination_name(tiny_bert_dir: Path) -> None:
    checkpoint = open_checkpoint(tiny_bert_dir)
    with pytest.raises(ConversionError, match="name rule"):
        build_plan(checkpoint, rename_rules=[r"embeddings\.(.*)=emb/{1}"])


def test_include_exclude_in_plan(tiny_bert_dir: Path) -> None:
    checkpoint = open_checkpoint(tiny_bert_dir)
    plan = build_plan(checkpoint, include=["encoder.*"], exclude=["*.bias"], pattern="bert")
    names = sorted(t.name for t in plan.tensors)
    assert names == sorted(
        f"{s}.weight.{layer}" for s in ("q", "ffn_in", "ffn_out") for layer in (0, 1)
    )
    assert "embeddings.word_embeddings.weight" in plan.skipped
    with pytest.raises(ConversionError, match="no tensor left"):
        build_plan(checkpoint, include=["nothing*"])


def test_transpose_only_2d(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    save_file(
        {"encoder.layer.0.intermediate.dense.kernel": np.zeros((2, 3, 4), np.float32)},
        str(tmp_path / "k.safetensors"),
    )
    with pytest.raises(ConversionError, match="not 2-D"):
        build_plan(open_checkpoint(tmp_path / "k.safetensors"), pattern="bert")
