"""Block quantization in conversions: GGUF Q8_0/Q4_0/Q4_1 kept packed, `--quantize` from floats."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from safetensors.numpy import save_file

from openinfer_jax.cli import main
from openinfer_jax.converters import convert
from openinfer_jax.errors import ConversionError
from openinfer_jax.oinf import BlockScheme, DType, ModelLoader, quantize
from tests.converters.test_gguf_reader import (
    HEADS,
    HIDDEN,
    KV_HEADS,
    VOCAB,
    dequantize_q4_1,
    llama_cpp_permute,
    raw_gguf_tensor,
    write_tiny_llama,
)

Q = gguf.GGMLQuantizationType


def _ggml_dequantize(array: np.ndarray, qtype: Q) -> np.ndarray:
    return gguf.quants.dequantize(gguf.quants.quantize(array, qtype), qtype)


@pytest.fixture()
def packed_llama(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """A tiny llama GGUF with every block type, Q/K permuted as llama.cpp writes them."""
    rng = np.random.default_rng(5)
    hf = {
        "q": rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32),
        "k": rng.standard_normal((HIDDEN // HEADS * KV_HEADS, HIDDEN)).astype(np.float32),
        "emb": rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32),
        "up": rng.standard_normal((96, HIDDEN)).astype(np.float32),
        "norm": rng.standard_normal(HIDDEN).astype(np.float32),
    }
    path = tmp_path / "packed.gguf"
    write_tiny_llama(
        path,
        {
            "token_embd.weight": (hf["emb"], Q.Q8_0),
            "blk.0.attn_q.weight": (llama_cpp_permute(hf["q"], HEADS), Q.Q4_1),
            "blk.0.attn_k.weight": (llama_cpp_permute(hf["k"], KV_HEADS), Q.Q4_0),
            "blk.0.ffn_up.weight": (hf["up"], Q.Q4_1),
            "output_norm.weight": (hf["norm"], Q.F32),
        },
    )
    return path, hf


def test_gguf_blocks_stay_packed_and_match_ggml(
    packed_llama: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    path, hf = packed_llama
    out, f32 = tmp_path / "p.oinf", tmp_path / "f.oinf"
    report = convert(path, out, pattern="llama")
    convert(path, f32, pattern="llama", dtype="f32")
    assert report.dtype_counts == {"q8_0": 1, "q4_1": 2, "q4_0": 1, "f32": 1}
    assert any("kept packed" in n for n in report.notes) and report.quant_errors == {}
    expected = {
        "tok_emb.weight": (BlockScheme.Q8_0, _ggml_dequantize(hf["emb"], Q.Q8_0)),
        "up.weight.0": (BlockScheme.Q4_1, _ggml_dequantize(hf["up"], Q.Q4_1)),
    }
    with ModelLoader.open(out) as m, ModelLoader.open(f32) as ref:
        for name in m.tensors:
            # the packed file dequantizes to exactly the f32 file's values
            np.testing.assert_array_equal(m.tensor(name), ref.tensor(name))
        for name, (scheme, values) in expected.items():
            info = m.tensors[name]
            assert info.block is not None and info.block.scheme is scheme
            assert info.block.layout.block_size == 32
            np.testing.assert_array_equal(m.tensor(name), values)
        q = m.quantized("q.weight.0")
        k = m.quantized("k.weight.0")
        assert q.quants.shape == (HIDDEN, HIDDEN // 2) and k.scheme is BlockScheme.Q4_0
        # quantized in llama.cpp's row order, un-permuted packed: rows move whole
        want_q = _ggml_dequantize(llama_cpp_permute(hf["q"], HEADS), Q.Q4_1)
        np.testing.assert_array_equal(llama_cpp_permute(q.dequantize(), HEADS), want_q)
        want_k = _ggml_dequantize(llama_cpp_permute(hf["k"], KV_HEADS), Q.Q4_0)
        np.testing.assert_array_equal(llama_cpp_permute(k.dequantize(), KV_HEADS), want_k)
        assert m.tensors["norm.weight"].dtype is DType.F32


def test_smollm2_packed_size_and_values(
    smollm_gguf: Path, smollm_packed_oinf: Path, tmp_path: Path
) -> None:
    out = tmp_path / "smol_q.oinf"
    picked = [
        "token_embd.weight",
        "blk.0.attn_q.weight",
        "blk.7.ffn_down.weight",
        "output_norm.weight",
    ]
    convert(smollm_gguf, out, include=picked)
    with ModelLoader.open(out) as m:
        for name in picked:
            data, qtype = raw_gguf_tensor(smollm_gguf, name)
            info = m.tensors[name]
            if qtype == "Q4_1":
                values = m.tensor(name)
                if "attn_q" in name:
                    values = llama_cpp_permute(values, 9)
                np.testing.assert_array_equal(values, dequantize_q4_1(data, info.shape))
                assert (
                    info.data_nbytes + info.block.layout.payload_nbytes(info.shape)
                    <= data.size + 64  # + the 56-byte payload header
                )  # type: ignore[union-attr]
            elif qtype == "Q8_0":
                assert info.block is not None and info.block.scheme is BlockScheme.Q8_0
    ratio = smollm_packed_oinf.stat().st_size / smollm_gguf.stat().st_size
    assert ratio <= 1.1, ratio  # issue 15: .oinf <= 1.1x the GGUF (1.0012x)


def _safetensors(path: Path) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    tensors = {
        "emb.weight": rng.standard_normal((40, 64)).astype(np.float32),
        "layer.0.w": (rng.standard_normal((32, 64)) * 0.02).astype(np.float16),
        "layer.0.bias": rng.standard_normal(32).astype(np.float32),
        "position_ids": np.arange(16, dtype=np.int64).reshape(1, 16),
    }
    save_file(tensors, str(path))
    return tensors


@pytest.mark.parametrize("scheme", ["q8_0", "q4_0", "q4_1"])
def test_quantize_from_floats_reports_errors(tmp_path: Path, scheme: str) -> None:
    src = tmp_path / "m.safetensors"
    tensors = _safetensors(src)
    out = tmp_path / "m.oinf"
    report = convert(src, out, quantize=scheme, block_size=16)
    assert set(report.quant_errors) == {"emb.weight", "layer.0.w"}
    with ModelLoader.open(out) as m:
        for name in report.quant_errors:
            want = quantize(tensors[name].astype(np.float32), scheme, 16)
            got = m.quantized(name)
            assert got.layout == want.layout
            np.testing.assert_array_equal(got.quants, want.quants)
            err = report.quant_errors[name]
            diff = want.dequantize() - tensors[name].astype(np.float32)
            assert err.max_abs == pytest.approx(float(np.abs(diff).max()), rel=1e-6)
            assert err.rms == pytest.approx(
                float(np.sqrt(np.mean(diff.astype(np.float64) ** 2))), rel=1e-6
            )
            assert 0 < err.relative_rms < 0.2
        assert m.tensors["layer.0.bias"].dtype is DType.F32  # 1-D stays
        assert m.tensors["position_ids"].dtype is DType.I64  # integers are never quantized
    assert report.dtype_counts == {scheme: 2, "f32": 1, "i64": 1}


def test_quantize_keep_glob_dtype_and_gguf_float_source(tmp_path: Path) -> None:
    src = tmp_path / "m.safetensors"
    tensors = _safetensors(src)
    out = tmp_path / "k.oinf"
    report = convert(src, out, quantize=["q8_0:emb.*", "q4_1"], keep=["f32:layer.0.w"], dtype="f16")
    with ModelLoader.open(out) as m:
        assert m.tensors["emb.weight"].block.scheme is BlockScheme.Q8_0  # type: ignore[union-attr]
        assert m.tensors["layer.0.w"].dtype is DType.F32 and m.tensors["layer.0.w"].block is None
        assert m.tensors["layer.0.bias"].dtype is DType.F16  # --dtype for the rest
    assert set(report.quant_errors) == {"emb.weight"}
    assert any("left unquantized" in n for n in report.notes)
    # a GGUF with F32 tensors is a float source like any other
    gguf_path = tmp_path / "f.gguf"
    write_tiny_llama(gguf_path, {"token_embd.weight": (tensors["emb.weight"], Q.F32)})
    report = convert(gguf_path, tmp_path / "g.oinf", quantize="q4_0")
    with ModelLoader.open(tmp_path / "g.oinf") as m:
        want = quantize(tensors["emb.weight"], "q4_0").dequantize()
        np.testing.assert_array_equal(m.tensor("token_embd.weight"), want)


def test_requantize_a_packed_gguf_tensor_by_name(
    packed_llama: tuple[Path, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    path, _ = packed_llama
    out = tmp_path / "r.oinf"
    report = convert(path, out, pattern="llama", quantize=["q4_0:token_embd.*", "q8_0"])
    with ModelLoader.open(out) as m:
        assert m.tensors["tok_emb.weight"].block.scheme is BlockScheme.Q4_0  # type: ignore[union-attr]
        assert m.tensors["up.weight.0"].block.scheme is BlockScheme.Q4_1  # type: ignore[union-attr]
    assert set(report.quant_errors) == {"tok_emb.weight"}  # measured against the Q8_0 values


def test_bad_quantize_requests(tmp_path: Path) -> None:
    src = tmp_path / "m.safetensors"
    _safetensors(src)
    out = tmp_path / "bad.oinf"
    with pytest.raises(ConversionError, match=r"does not divide the last axis.*--block N"):
        convert(src, out, quantize="q8_0", block_size=48)
    with pytest.raises(ConversionError, match=r"'position_ids', a i64 tensor; only floating"):
        convert(src, out, quantize="q8_0:position*")
    with pytest.raises(ConversionError, match="expected one of q8_0, q4_0, q4_1"):
        convert(src, out, quantize="q3_k")
    with pytest.raises(ConversionError, match="expected DTYPE:NAME_GLOB"):
        convert(src, out, quantize="q8_0", keep=["i8:emb*"])
    with pytest.raises(ConversionError, match="positive integer"):
        convert(src, out, quantize="q8_0", block_size=0)
    with pytest.raises(ConversionError, match="does not fill whole bytes"):
        convert(src, out, quantize="q4_1", block_size=1)
    assert not out.exists()


def test_cli_quantize_prints_the_error_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "m.safetensors"
    _safetensors(src)
    out = tmp_path / "c.oinf"
    code = main(["convert", str(src), "-o", str(out), "--quantize", "q4_1", "--block", "16",
                 "--keep", "f32:emb.*"])  # fmt: skip
    assert code == 0
    err = capsys.readouterr().err
    assert "quantization error" in err and "layer.0.w" in err and "rms err / rms" in err
    with ModelLoader.open(out) as m:
        assert m.tensors["layer.0.w"].block.layout.block_size == 16  # type: ignore[union-attr]
        assert m.tensors["emb.weight"].dtype is DType.F32
    assert main(["convert", str(src), "--dry-run", "--quantize", "q8_0"]) == 0
    assert "q8_0" in capsys.readouterr().out
    assert (
        main(
            [
                "convert",
                str(src),
                "-o",
                str(tmp_path / "x.oinf"),
                "--quantize",
                "q8_0",
                "--block",
                "7",
            ]
        )
        == 1
    )
