"""flax msgpack and orbax -> .oinf, including MiniLM in the FlaxBertModel layout."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from flax import serialization
from safetensors import safe_open

from openinfer_jax.converters import convert, open_checkpoint
from openinfer_jax.converters.flax_reader import flatten_tree
from openinfer_jax.core.errors import ConversionError
from openinfer_jax.oinf import ModelLoader
from tests.converters.example_loader import load_example

flax_bert_tree = load_example("minilm/export_flax.py").flax_bert_tree


def test_flatten_tree_dotted_names() -> None:
    tree = {"a": {"b": np.zeros(1), "c": [np.ones(2), {"d": np.ones(3)}]}}
    assert [n for n, _ in flatten_tree(tree)] == ["a.b", "a.c.0", "a.c.1.d"]


def test_minilm_flax_msgpack_equals_safetensors(minilm_dir: Path, tmp_path: Path) -> None:
    tree = flax_bert_tree(minilm_dir / "model.safetensors")
    flax_dir = tmp_path / "flax"
    flax_dir.mkdir()
    (flax_dir / "flax_model.msgpack").write_bytes(serialization.msgpack_serialize(tree))
    (flax_dir / "config.json").write_text((minilm_dir / "config.json").read_text())

    # Plain conversion keeps flax's dotted names.
    plain = tmp_path / "plain.oinf"
    convert(flax_dir, plain)
    with (
        ModelLoader.open(plain) as m,
        safe_open(str(minilm_dir / "model.safetensors"), framework="numpy") as f,
    ):
        np.testing.assert_array_equal(
            m.tensor("encoder.layer.0.attention.self.query.kernel"),
            f.get_tensor("encoder.layer.0.attention.self.query.weight").T,
        )
        assert m.sizevars["hidden_size"] == 384

    # With the bert preset, flax and safetensors give the same tensors (kernels transposed back).
    from_flax, from_st = tmp_path / "flax.oinf", tmp_path / "st.oinf"
    convert(flax_dir / "flax_model.msgpack", from_flax, pattern="bert")
    convert(minilm_dir, from_st, pattern="bert", exclude=["*position_ids"])
    with ModelLoader.open(from_flax) as a, ModelLoader.open(from_st) as b:
        assert set(a.tensors) == set(b.tensors)
        assert len(a.tensors) == 103
        for name in a.tensors:
            assert a.tensors[name].shape == b.tensors[name].shape, name
            np.testing.assert_array_equal(a.tensor(name), b.tensor(name), err_msg=name)
        assert a.sizevars == b.sizevars


def test_orbax_round_trip(minilm_dir: Path, tmp_path: Path) -> None:
    import orbax.checkpoint as ocp

    tree = flax_bert_tree(minilm_dir / "model.safetensors", keep="encoder.layer.0.")
    ocp.PyTreeCheckpointer().save(tmp_path / "ckpt", tree)
    out = tmp_path / "orbax.oinf"
    report = convert(tmp_path / "ckpt", out)
    assert report.format == "orbax"
    expected = dict(flatten_tree(tree))
    with ModelLoader.open(out) as m:
        assert set(m.tensors) == set(expected)
        for name, value in expected.items():
            np.testing.assert_array_equal(m.tensor(name), value)


def test_msgpack_scalars_and_ints(tmp_path: Path) -> None:
    tree = {
        "params": {"w": np.arange(6, dtype=np.int32).reshape(2, 3), "step": np.asarray(7, np.int64)}
    }
    (tmp_path / "c.msgpack").write_bytes(serialization.msgpack_serialize(tree))
    convert(tmp_path / "c.msgpack", tmp_path / "c.oinf", dtype="f16")
    with ModelLoader.open(tmp_path / "c.oinf") as m:
        np.testing.assert_array_equal(m.tensor("params.w"), tree["params"]["w"])
        assert m.tensors["params.step"].shape == ()
        assert int(m.tensor("params.step")) == 7


@pytest.mark.parametrize("how", ["truncated", "garbage", "not-a-tree", "empty"])
def test_bad_msgpack(tmp_path: Path, how: str) -> None:
    good = serialization.msgpack_serialize({"a": {"w": np.ones((4, 4), np.float32)}})
    data = {
        "truncated": good[: len(good) // 2],
        "garbage": b"\xc1\xc1\xc1not msgpack",
        "not-a-tree": serialization.msgpack_serialize([1, 2, 3]),
        "empty": serialization.msgpack_serialize({}),
    }[how]
    (tmp_path / "x.msgpack").write_bytes(data)
    with pytest.raises(ConversionError, match=r"x\.msgpack"):
        convert(tmp_path / "x.msgpack", tmp_path / "x.oinf")
    assert not (tmp_path / "x.oinf").exists()


def test_not_orbax(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "_METADATA").write_text(json.dumps({"broken": True}))
    with pytest.raises(ConversionError, match="orbax"):
        open_checkpoint(tmp_path / "d")
