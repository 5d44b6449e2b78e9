"""safetensors -> .oinf: single and sharded files, config.json, dtypes, corrupt input."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

from openinfer_jax.converters import convert, open_checkpoint
from openinfer_jax.converters.safetensors_reader import read_header
from openinfer_jax.core.errors import ConversionError
from openinfer_jax.oinf import DType, ModelLoader
from tests.converters.conftest import tiny_bert_config, tiny_bert_tensors


def test_single_file_round_trip_with_config(tiny_bert_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.oinf"
    report = convert(tiny_bert_dir, out)
    source = tiny_bert_tensors()
    assert report.tensors == len(source)
    with ModelLoader.open(out) as m:
        assert set(m.tensors) == set(source)
        for name, array in source.items():
            np.testing.assert_array_equal(m.tensor(name), array)
            assert m.tensors[name].dtype is DType.F32
        assert m.sizevars["hidden_size"] == 8
        assert m.sizevars["num_hidden_layers"] == 2
        assert m.sizevars["head_dim"] == 4  # derived from hidden_size / num_attention_heads
        assert m.metadata["model_type"] == "bert"
        assert m.metadata["layer_norm_eps"] == pytest.approx(1e-12, rel=0, abs=0)
        assert json.loads(m.metadata["config.json"])["hidden_act"] == "gelu"
        assert m.metadata["safetensors.format"] == "pt"


def test_sharded_checkpoint_with_index(tmp_path: Path) -> None:
    tensors = tiny_bert_tensors()
    names = sorted(tensors)
    halves = {
        "model-00001-of-00002.safetensors": names[::2],
        "model-00002-of-00002.safetensors": names[1::2],
    }
    weight_map = {}
    for file, part in halves.items():
        save_file({n: tensors[n] for n in part}, str(tmp_path / file))
        weight_map.update(dict.fromkeys(part, file))
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    (tmp_path / "config.json").write_text(json.dumps(tiny_bert_config()))
    out = tmp_path / "m.oinf"
    for src in (tmp_path, tmp_path / "model.safetensors.index.json"):
        convert(src, out, force=True)
        with ModelLoader.open(out) as m:
            assert set(m.tensors) == set(tensors)
            for name in names:
                np.testing.assert_array_equal(m.tensor(name), tensors[name])


def test_index_naming_a_missing_tensor_fails(tmp_path: Path) -> None:
    save_file({"a": np.zeros(2, np.float32)}, str(tmp_path / "s1.safetensors"))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"a": "s1.safetensors", "b": "s1.safetensors"}}))
    with pytest.raises(ConversionError, match=r"'b'.*lacks it"):
        open_checkpoint(tmp_path)


def test_bf16_and_cast(tmp_path: Path) -> None:
    values = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    save_file(
        {"w": values.astype(ml_dtypes.bfloat16), "ids": np.arange(3, dtype=np.int64)},
        str(tmp_path / "x.safetensors"),
    )
    out = tmp_path / "x.oinf"
    convert(tmp_path / "x.safetensors", out)
    with ModelLoader.open(out) as m:
        assert m.tensors["w"].dtype is DType.BF16
        np.testing.assert_array_equal(m.tensor("w"), values.astype(ml_dtypes.bfloat16))
    convert(tmp_path / "x.safetensors", out, dtype="f32", force=True)
    with ModelLoader.open(out) as m:
        assert m.tensors["w"].dtype is DType.F32
        assert m.tensors["ids"].dtype is DType.I64  # integers are never cast
        np.testing.assert_array_equal(
            m.tensor("w"), values.astype(ml_dtypes.bfloat16).astype(np.float32)
        )


@settings(max_examples=15, deadline=None)
@given(
    shape=st.lists(st.integers(0, 5), min_size=0, max_size=3),
    src=st.sampled_from(["float32", "float16", "float64"]),
    dst=st.sampled_from([None, "f32", "f16", "bf16"]),
)
def test_cast_matches_numpy(
    tmp_path_factory: pytest.TempPathFactory, shape: list[int], src: str, dst: str | None
) -> None:
    directory = tmp_path_factory.mktemp("cast")
    rng = np.random.default_rng(len(shape))
    values = np.asarray(rng.standard_normal(shape) * 100).astype(src)
    save_file({"t": values}, str(directory / "t.safetensors"))
    convert(directory / "t.safetensors", directory / "t.oinf", dtype=dst)
    expected = (
        values
        if dst is None
        else np.asarray(values).astype(
            {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}[dst]
        )
    )
    with ModelLoader.open(directory / "t.oinf") as m:
        got = m.tensor("t")
        assert got.shape == tuple(shape)
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


def _corrupt(path: Path, how: str) -> None:
    raw = bytearray(path.read_bytes())
    if how == "truncated-data":
        path.write_bytes(bytes(raw[:-10]))
    elif how == "truncated-header":
        path.write_bytes(bytes(raw[:20]))
    elif how == "short":
        path.write_bytes(bytes(raw[:5]))
    elif how == "bad-json":
        raw[8] = ord("!")
        path.write_bytes(bytes(raw))
    elif how == "bad-dtype":
        path.write_bytes(bytes(raw).replace(b'"F32"', b'"C64"', 1))
    elif how == "bad-offsets":
        header_size = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8 : 8 + header_size])
        first = next(k for k in header if k != "__metadata__")
        header[first]["data_offsets"][1] += 4
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (header_size - len(text))
        path.write_bytes(bytes(raw[:8]) + text[:header_size] + bytes(raw[8 + header_size :]))


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("truncated-data", "truncated"),
        ("truncated-header", "truncated"),
        ("short", "truncated"),
        ("bad-json", "header JSON"),
        ("bad-dtype", "C64"),
        ("bad-offsets", "span"),
    ],
)
def test_corrupt_safetensors_is_a_conversion_error(
    tiny_bert_dir: Path, tmp_path: Path, how: str, message: str
) -> None:
    path = tiny_bert_dir / "model.safetensors"
    _corrupt(path, how)
    out = tmp_path / "out.oinf"
    with pytest.raises(ConversionError, match=message):
        convert(path, out)
    assert not out.exists()


def test_file_shrinking_after_planning_leaves_no_output(
    tiny_bert_dir: Path, tmp_path: Path
) -> None:
    from openinfer_jax.converters import build_plan, write_plan

    path = tiny_bert_dir / "model.safetensors"
    plan = build_plan(open_checkpoint(path))
    path.write_bytes(path.read_bytes()[:-100])
    out = tmp_path / "out.oinf"
    with pytest.raises(ConversionError, match=r"shrank|cannot read"):
        write_plan(plan, out)
    assert not out.exists()
    assert list(tmp_path.glob(".out.oinf*")) == []  # no temporary file left behind


def test_config_disagreeing_with_shapes(tiny_bert_dir: Path, tmp_path: Path) -> None:
    config = tiny_bert_config()
    config["hidden_size"] = 12
    config["num_attention_heads"] = 3
    (tiny_bert_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConversionError, match=r"hidden_size=12.*word_embeddings"):
        convert(tiny_bert_dir, tmp_path / "out.oinf")
    config = tiny_bert_config()
    config["num_hidden_layers"] = 3
    (tiny_bert_dir / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConversionError, match="num_hidden_layers=3 but the tensors hold 2"):
        convert(tiny_bert_dir, tmp_path / "out.oinf")
    (tiny_bert_dir / "config.json").write_text("{not json")
    with pytest.raises(ConversionError, match=r"config.json"):
        convert(tiny_bert_dir, tmp_path / "out.oinf")
    assert not (tmp_path / "out.oinf").exists()


def test_read_header_gives_absolute_offsets(tiny_bert_dir: Path) -> None:
    path = tiny_bert_dir / "model.safetensors"
    start, entries, meta = read_header(path)
    raw = path.read_bytes()
    word = entries["embeddings.word_embeddings.weight"]
    assert word["begin"] >= start
    got = np.frombuffer(raw[word["begin"] : word["end"]], np.float32).reshape(word["shape"])
    np.testing.assert_array_equal(got, tiny_bert_tensors()["embeddings.word_embeddings.weight"])
    assert meta == {"format": "pt"}


# ---- the real MiniLM (all-MiniLM-L6-v2) -------------------------------------------------------


def test_minilm_bit_exact(minilm_dir: Path, tmp_path: Path) -> None:
    from safetensors import safe_open

    out = tmp_path / "minilm.oinf"
    report = convert(minilm_dir, out)
    assert report.tensors == 105 - 1  # 104 tensors (the header's 105th entry is __metadata__)
    with (
        ModelLoader.open(out) as m,
        safe_open(str(minilm_dir / "model.safetensors"), framework="numpy") as f,
    ):
        assert set(m.tensors) == set(f.keys())
        for name in f.keys():  # noqa: SIM118
            expected = f.get_tensor(name)
            got = m.tensor(name)
            assert got.shape == expected.shape and got.dtype == expected.dtype, name
            np.testing.assert_array_equal(got, expected, err_msg=name)
        assert m.tensors["embeddings.word_embeddings.weight"].shape == (30522, 384)
        assert m.tensors["encoder.layer.5.intermediate.dense.weight"].shape == (1536, 384)
        assert m.tensors["embeddings.position_ids"].dtype is DType.I64
        assert m.sizevars == {
            "hidden_size": 384, "intermediate_size": 1536, "max_position_embeddings": 512,
            "num_attention_heads": 12, "num_hidden_layers": 6, "type_vocab_size": 2,
            "vocab_size": 30522, "head_dim": 32,
        }  # fmt: skip
        assert m.metadata["hidden_act"] == "gelu"
        tokenizer = json.loads(m.metadata["tokenizer.json"])
        assert tokenizer["model"]["vocab"]["[CLS]"] == 101


def test_minilm_f16_with_bert_pattern(minilm_dir: Path, tmp_path: Path) -> None:
    from safetensors import safe_open

    out = tmp_path / "minilm16.oinf"
    convert(minilm_dir, out, dtype="f16", pattern="bert")
    with (
        ModelLoader.open(out) as m,
        safe_open(str(minilm_dir / "model.safetensors"), framework="numpy") as f,
    ):
        assert m.tensors["q.weight.5"].dtype is DType.F16
        np.testing.assert_array_equal(
            m.tensor("q.weight.5"),
            f.get_tensor("encoder.layer.5.attention.self.query.weight").astype(np.float16),
        )
        assert m.tensors["position_ids"].dtype is DType.I64
        assert sorted(n for n in m.tensors if n.endswith(".3")) == sorted(
            f"{s}.{p}.3"
            for s in ("q", "k", "v", "attn_out", "attn_ln", "ffn_in", "ffn_out", "ffn_ln")
            for p in ("weight", "bias")
        )


def _safetensors(path: Path, header: bytes, data: bytes = b"\x00" * 16) -> Path:
    path.write_bytes(len(header).to_bytes(8, "little") + header + data)
    return path


F32_2 = '"dtype":"F32","shape":[2]'


@pytest.mark.parametrize(
    ("header", "message"),
    [
        # two tensors sharing bytes 0..8
        (
            '{"a":{' + F32_2 + ',"data_offsets":[0,8]},"b":{' + F32_2 + ',"data_offsets":[4,12]}}',
            "inside tensor 'a'",
        ),
        ('{"__metadata__":["x"],"a":{' + F32_2 + ',"data_offsets":[0,8]}}', "__metadata__"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"a":{"dtype":"F32","shape":[' + "9" * 5000 + '],"data_offsets":[0,8]}}', "digits"),
        ('{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}}', "span"),
    ],
    ids=["overlap", "metadata-list", "deep-json", "5000-digit-int", "huge-shape"],
)
def test_hostile_headers_are_conversion_errors(tmp_path: Path, header: str, message: str) -> None:
    path = _safetensors(tmp_path / "bad.safetensors", header.encode())
    out = tmp_path / "out.oinf"
    with pytest.raises(ConversionError, match=message):
        convert(path, out)
    assert not out.exists()


@pytest.mark.parametrize(
    "config",
    ["[" * 100_000 + "]" * 100_000, '{"hidden_size": ' + "9" * 5000 + "}"],
    ids=["deep", "5000-digit-int"],
)
def test_hostile_config_json_is_a_conversion_error(
    tiny_bert_dir: Path, tmp_path: Path, config: str
) -> None:
    (tiny_bert_dir / "config.json").write_text(config)
    out = tmp_path / "out.oinf"
    with pytest.raises(ConversionError, match=r"config\.json"):
        convert(tiny_bert_dir / "model.safetensors", out)
    assert not out.exists()
