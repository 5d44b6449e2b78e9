"""GGUF -> .oinf: metadata mapping, dequantization, Q/K un-permutation, bad input, SmolLM2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import gguf
import numpy as np
import pytest

from openinfer_jax.converters import Checkpoint, build_plan, convert, open_checkpoint, write_plan
from openinfer_jax.converters.gguf_reader import unpermute_rows
from openinfer_jax.core.errors import ConversionError
from openinfer_jax.oinf import DType, ModelLoader

HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 64, 4, 2, 96, 40


def llama_cpp_permute(weight: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's Q/K row order written with explicit indices (independent of the converter).

    Within each head of size hd, HF row ``k*hd/2 + j`` (k in {0,1}) goes to GGUF row ``2*j + k``.
    """
    rows = weight.shape[0]
    hd = rows // n_head
    out = np.empty_like(weight)
    for h in range(n_head):
        for j in range(hd // 2):
            for k in range(2):
                out[h * hd + 2 * j + k] = weight[h * hd + k * (hd // 2) + j]
    return out


def dequantize_q8_0(raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Q8_0 by the block layout (f16 scale + 32 x int8), independent of gguf.quants."""
    blocks = raw.reshape(-1, 34)
    scale = blocks[:, :2].copy().view(np.float16).astype(np.float32)
    values = blocks[:, 2:].copy().view(np.int8).astype(np.float32)
    return (scale * values).reshape(shape)


def dequantize_q4_1(raw: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Q4_1 by the block layout (f16 d, f16 m, 16 bytes of nibbles: low = 0..15, high = 16..31)."""
    blocks = raw.reshape(-1, 20)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    qs = blocks[:, 4:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
    return (d * q + m).reshape(shape)


def write_tiny_llama(
    path: Path, tensors: dict[str, tuple[np.ndarray, gguf.GGMLQuantizationType]]
) -> None:
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_embedding_length(HIDDEN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_feed_forward_length(FFN)
    writer.add_context_length(128)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_token_list([f"tok{i}" for i in range(VOCAB)])
    writer.add_string("general.name", "tiny")
    for name, (array, qtype) in tensors.items():
        if qtype in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            writer.add_tensor(name, array)
        else:
            writer.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture()
def tiny_llama(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    hf = {
        "q": rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32),
        "k": rng.standard_normal((HIDDEN // HEADS * KV_HEADS, HIDDEN)).astype(np.float32),
        "emb": rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32),
        "up": rng.standard_normal((FFN, HIDDEN)).astype(np.float32),
        "norm": rng.standard_normal(HIDDEN).astype(np.float32),
    }
    f32, q8, q4 = (
        gguf.GGMLQuantizationType.F32,
        gguf.GGMLQuantizationType.Q8_0,
        gguf.GGMLQuantizationType.Q4_0,
    )
    path = tmp_path / "tiny.gguf"
    write_tiny_llama(
        path,
        {
            "token_embd.weight": (hf["emb"], q8),
            "blk.0.attn_q.weight": (llama_cpp_permute(hf["q"], HEADS), f32),
            "blk.0.attn_k.weight": (llama_cpp_permute(hf["k"], KV_HEADS), f32),
            "blk.0.ffn_up.weight": (hf["up"], q4),
            "output_norm.weight": (hf["norm"], f32),
        },
    )
    return path, hf


def test_tiny_llama_metadata_and_unpermute(
    tiny_llama: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    path, hf = tiny_llama
    out = tmp_path / "t.oinf"
    convert(path, out, pattern="llama")
    with ModelLoader.open(out) as m:
        assert m.sizevars == {
            "num_hidden_layers": 1, "hidden_size": HIDDEN, "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS, "intermediate_size": FFN, "max_position_embeddings": 128,
            "vocab_size": VOCAB, "head_dim": HIDDEN // HEADS,
        }  # fmt: skip
        assert m.metadata["rope_theta"] == 10000.0
        assert m.metadata["rms_norm_eps"] == pytest.approx(1e-5)
        assert m.metadata["model_type"] == "llama"
        assert m.metadata["tie_word_embeddings"] is True
        assert json.loads(m.metadata["tokenizer.ggml.tokens"])[3] == "tok3"
        np.testing.assert_array_equal(m.tensor("q.weight.0"), hf["q"])
        np.testing.assert_array_equal(m.tensor("k.weight.0"), hf["k"])
        np.testing.assert_array_equal(m.tensor("norm.weight"), hf["norm"])
        # Quantized tensors: within the quantization error, and exactly the block formula.
        emb = m.tensor("tok_emb.weight")
        assert emb.shape == (VOCAB, HIDDEN) and emb.dtype == np.float32
        np.testing.assert_allclose(emb, hf["emb"], atol=np.abs(hf["emb"]).max() / 100)
        raw = gguf.quants.quantize(hf["emb"], gguf.GGMLQuantizationType.Q8_0)
        np.testing.assert_array_equal(emb, dequantize_q8_0(raw, (VOCAB, HIDDEN)))
        np.testing.assert_allclose(
            m.tensor("up.weight.0"), hf["up"], atol=np.abs(hf["up"]).max() / 6
        )


def test_unpermute_can_be_disabled(tiny_llama: tuple[Path, dict[str, np.ndarray]]) -> None:
    from openinfer_jax.converters.gguf_reader import open_gguf

    path, hf = tiny_llama
    with open_gguf(path, unpermute=False) as checkpoint:
        q = next(t for t in checkpoint.tensors if t.name == "blk.0.attn_q.weight")
        np.testing.assert_array_equal(q.load(), llama_cpp_permute(hf["q"], HEADS))


def test_unpermute_rows_inverts_the_permutation() -> None:
    w = np.arange(24 * 3, dtype=np.float32).reshape(24, 3)
    for heads in (1, 2, 3, 6):
        np.testing.assert_array_equal(unpermute_rows(llama_cpp_permute(w, heads), heads), w)
    with pytest.raises(ConversionError, match="heads"):
        unpermute_rows(w, 5)


def test_f16_output(tiny_llama: tuple[Path, dict[str, np.ndarray]], tmp_path: Path) -> None:
    path, hf = tiny_llama
    convert(path, tmp_path / "h.oinf", dtype="f16", include=["blk.0.attn_q.weight"])
    with ModelLoader.open(tmp_path / "h.oinf") as m:
        assert m.tensors["blk.0.attn_q.weight"].dtype is DType.F16
        np.testing.assert_array_equal(m.tensor("blk.0.attn_q.weight"), hf["q"].astype(np.float16))


def test_unsupported_quant_type_names_tensor(tmp_path: Path) -> None:
    path = tmp_path / "q81.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    q81 = gguf.GGMLQuantizationType.Q8_1
    _, size = gguf.GGML_QUANT_SIZES[q81]
    writer.add_tensor("blk.0.weird.weight", np.zeros((2, size), np.uint8), raw_dtype=q81)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(
        ConversionError, match=r"'blk\.0\.weird\.weight' has quantization type Q8_1"
    ):
        convert(path, tmp_path / "out.oinf")
    assert not (tmp_path / "out.oinf").exists()


@pytest.mark.parametrize("keep", [3, 100, 1000])
def test_truncated_gguf(
    tiny_llama: tuple[Path, dict[str, np.ndarray]], tmp_path: Path, keep: int
) -> None:
    path, _ = tiny_llama
    path.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(ConversionError, match="GGUF"):
        convert(path, tmp_path / "out.oinf")
    assert not (tmp_path / "out.oinf").exists()


def test_truncated_tensor_data(
    tiny_llama: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    path, _ = tiny_llama
    path.write_bytes(path.read_bytes()[:-64])
    with pytest.raises(ConversionError):
        convert(path, tmp_path / "out.oinf")
    assert not (tmp_path / "out.oinf").exists()


def test_dry_run_cli(
    tiny_llama: tuple[Path, dict[str, np.ndarray]], capsys: pytest.CaptureFixture[str]
) -> None:
    from openinfer_jax.cli import main

    path, _ = tiny_llama
    assert (
        main(["convert", str(path), "--dry-run", "--pattern", "llama", "--include", "blk.0.*"]) == 0
    )
    out = capsys.readouterr().out
    assert "q.weight.0" in out and "Q4_0" in out and "3 tensors" in out


# ---- the real SmolLM2-135M Q4_1 ---------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm_checkpoint(smollm_gguf: Path) -> Iterator[Checkpoint]:
    """The SmolLM2 checkpoint opened once (gguf's reader takes seconds to parse the vocabulary)."""
    checkpoint = open_checkpoint(smollm_gguf)
    yield checkpoint
    checkpoint.close()


def test_smollm2_plan_shapes(smollm_checkpoint: Checkpoint) -> None:
    plan = build_plan(smollm_checkpoint, pattern="llama")
    shapes = {t.name: t.shape for t in plan.tensors}
    assert len(shapes) == 272
    assert shapes["tok_emb.weight"] == (49152, 576)
    assert shapes["q.weight.29"] == (576, 576)
    assert shapes["k.weight.0"] == (192, 576)
    assert shapes["down.weight.7"] == (576, 1536)
    assert shapes["norm.weight"] == (576,)
    assert "lm_head.weight" not in shapes  # tied embeddings
    assert plan.sizevars["num_key_value_heads"] == 3 and plan.sizevars["num_hidden_layers"] == 30
    assert plan.metadata["rope_theta"] == (100000.0, DType.F32)
    # Q4_1/Q8_0 stay packed by default, f32 norms stay f32; --dtype f32 dequantizes
    kinds = {t.name: t.kind for t in plan.tensors}
    assert kinds["tok_emb.weight"] == "q8_0" and kinds["q.weight.29"] == "q4_1"
    assert kinds["norm.weight"] == "f32"
    assert sorted(set(kinds.values())) == ["f32", "q4_1", "q8_0"]
    plan = build_plan(smollm_checkpoint, pattern="llama", dtype="f32")
    assert all(t.dtype is DType.F32 and t.layout is None for t in plan.tensors)


def test_smollm2_weights_match_independent_dequantization(
    smollm_gguf: Path, smollm_checkpoint: Checkpoint, tmp_path: Path
) -> None:
    picked = [
        "blk.0.attn_q.weight",
        "blk.0.attn_k.weight",
        "blk.3.ffn_down.weight",
        "blk.0.attn_norm.weight",
    ]
    out = tmp_path / "smol.oinf"
    write_plan(build_plan(smollm_checkpoint, include=picked), out)
    with ModelLoader.open(out) as m:
        assert sorted(m.tensors) == sorted(picked)
        for name in picked:
            data, qtype = raw_gguf_tensor(smollm_gguf, name)
            shape = m.tensors[name].shape
            expected = (
                dequantize_q4_1(data, shape)
                if qtype == "Q4_1"
                else data.view(np.float32).reshape(shape)
            )
            heads = {"attn_q": 9, "attn_k": 3}.get(name.split(".")[2])
            if heads:
                # the converter must give the Hugging Face order: GGUF rows = permute(HF rows)
                np.testing.assert_array_equal(llama_cpp_permute(m.tensor(name), heads), expected)
            else:
                np.testing.assert_array_equal(m.tensor(name), expected)


def raw_gguf_tensor(path: Path, name: str) -> tuple[np.ndarray, str]:
    """A tensor's raw bytes and type name, read from the GGUF tensor-info table by hand."""
    types = {0: "F32", 3: "Q4_1", 8: "Q8_0"}
    raw = path.read_bytes()
    pos = 8  # magic + version
    n_tensors, n_kv = np.frombuffer(raw, np.uint64, 2, pos).tolist()
    pos += 16

    def read_str(p: int) -> tuple[str, int]:
        n = int(np.frombuffer(raw, np.uint64, 1, p)[0])
        return raw[p + 8 : p + 8 + n].decode(), p + 8 + n

    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip_value(kind: int, p: int) -> int:
        if kind == 8:
            return read_str(p)[1]
        if kind == 9:
            sub, count = (
                int(np.frombuffer(raw, np.uint32, 1, p)[0]),
                int(np.frombuffer(raw, np.uint64, 1, p + 4)[0]),
            )
            p += 12
            if sub in sizes:
                return p + sizes[sub] * count
            for _ in range(count):
                p = skip_value(sub, p)
            return p
        return p + sizes[kind]

    for _ in range(n_kv):
        _, pos = read_str(pos)
        kind = int(np.frombuffer(raw, np.uint32, 1, pos)[0])
        pos = skip_value(kind, pos + 4)
    infos = {}
    for _ in range(n_tensors):
        tname, pos = read_str(pos)
        ndim = int(np.frombuffer(raw, np.uint32, 1, pos)[0])
        dims = np.frombuffer(raw, np.uint64, ndim, pos + 4).tolist()
        pos += 4 + 8 * ndim
        kind = int(np.frombuffer(raw, np.uint32, 1, pos)[0])
        offset = int(np.frombuffer(raw, np.uint64, 1, pos + 4)[0])
        pos += 12
        infos[tname] = (dims, types[kind], offset)
    data_start = (pos + 31) // 32 * 32  # general.alignment defaults to 32
    dims, kind, offset = infos[name]
    numel = int(np.prod(dims))
    nbytes = {"F32": numel * 4, "Q4_1": numel // 32 * 20, "Q8_0": numel // 32 * 34}[kind]
    start = data_start + offset
    return np.frombuffer(raw, np.uint8, nbytes, start), kind
