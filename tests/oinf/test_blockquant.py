"""Block-quantized tensors (docs/oinf.md §5.1): quantizers, the planes, writer and reader round trips."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize as gguf_dequantize
from gguf.quants import quantize as gguf_quantize
from hypothesis import given, settings
from hypothesis import strategies as st

from openinfer_jax.core.errors import OinfFormatError
from openinfer_jax.oinf import (
    BlockLayout,
    BlockScheme,
    DType,
    ModelLoader,
    OinfWriter,
    QuantizedTensor,
    quantize,
    verify_file,
)

SCHEMES = list(BlockScheme)


@pytest.mark.parametrize("scheme", SCHEMES, ids=str)
def test_quantizer_matches_gguf_bit_for_bit(scheme: BlockScheme) -> None:
    # Same codes and scales as GGML's reference quantizer, so the dequantized f32 are identical.
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((16, 256)) * rng.uniform(0.01, 10, (16, 1))).astype(np.float32)
    x[3, :32] = 0.0  # an all-zero block: scale 0
    qtype = gguf.GGMLQuantizationType[scheme.value.upper()]
    want = gguf_dequantize(gguf_quantize(x, qtype), qtype)
    assert np.array_equal(quantize(x, scheme).dequantize(), want)


@pytest.mark.parametrize("scheme", SCHEMES, ids=str)
def test_error_is_bounded_by_half_a_step(scheme: BlockScheme) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 96)).astype(np.float32)
    q = quantize(x, scheme, block_size=16)
    step = np.repeat(np.abs(q.scales.astype(np.float32)), 16, axis=-1)
    # q4_0 and q8_0 round to nearest; q4_0 clips the extreme code of the positive end by one step
    slack = 1.0 if scheme is BlockScheme.Q4_0 else 0.5
    assert np.all(np.abs(q.dequantize() - x) <= step * slack + 2e-3 * np.abs(x) + 1e-6)


def test_planes_and_nibble_order() -> None:
    codes = np.arange(32, dtype=np.uint8).reshape(1, 32) % 16
    q = QuantizedTensor.from_codes(
        BlockLayout("q4_1"), codes, np.ones((1, 1), np.float16), np.zeros((1, 1), np.float16)
    )
    # element 2i in the low nibble of byte i, 2i+1 in the high one (the .oinf packed rule)
    assert q.quants.shape == (1, 16) and q.quants[0, 0] == 0x10 and q.quants[0, 1] == 0x32
    assert np.array_equal(q.codes(), codes)
    assert np.array_equal(q.dequantize(), codes.astype(np.float32))
    signed = QuantizedTensor.from_codes(
        BlockLayout("q4_0"), np.full((1, 32), -8, np.int8), np.ones((1, 1), np.float16)
    )
    assert signed.quants[0, 0] == 0x88 and np.all(signed.dequantize() == -8)


def _write(path: Path, tensors: dict[str, object]) -> None:
    with OinfWriter(path) as w:
        w.add_tensor("before", np.arange(3, dtype=np.float32))
        for name, value in tensors.items():
            w.add_tensor(name, value)
        w.add_tensor("zafter", np.arange(5, dtype=np.int16))


@pytest.mark.parametrize("scale_dtype", [DType.F16, DType.F32], ids=str)
@pytest.mark.parametrize("scheme", SCHEMES, ids=str)
def test_round_trip_is_zero_copy(tmp_path: Path, scheme: BlockScheme, scale_dtype: DType) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 64)).astype(np.float32)
    q = quantize(x, scheme, block_size=32, scale_dtype=scale_dtype)
    path = tmp_path / "m.oinf"
    _write(path, {"w": q})
    assert verify_file(path) == []
    with ModelLoader.open(path) as m:
        info = m.tensors["w"]
        assert info.dtype is scheme.data_dtype and info.shape == (2, 3, 64)
        assert info.block is not None and info.block.layout == q.layout and info.block.count == 12
        got = m.quantized("w")
        for plane in ("quants", "scales", "offsets"):
            a, b = getattr(got, plane), getattr(q, plane)
            assert (a is None) == (b is None)
            if a is not None:
                assert np.array_equal(a, b) and not a.flags.writeable and not a.flags.owndata
        assert np.array_equal(m.tensor("w"), q.dequantize())
        assert np.array_equal(m.tensor("zafter"), np.arange(5))
        with pytest.raises(OinfFormatError, match="not block-quantized"):
            m.quantized("before")
    # the payload directly follows the codes
    assert info.block.scales_offset - 56 == info.data_offset + (info.data_nbytes + 7) // 8 * 8


def test_streamed_loader_and_sizes(tmp_path: Path) -> None:
    x = np.linspace(-1, 1, 8 * 128, dtype=np.float32).reshape(8, 128)
    layout = BlockLayout("q4_1", 64)
    path = tmp_path / "s.oinf"
    with OinfWriter(path) as w:
        w.add_tensor("w", shape=x.shape, block=layout, loader=lambda: quantize(x, "q4_1", 64))
    with ModelLoader.open(path) as m:
        assert np.array_equal(m.tensor("w"), quantize(x, "q4_1", 64).dequantize())
        block = m.tensors["w"].block
        assert block is not None and block.describe() == "q4_1 block 64 (f16 scales), 16 blocks"
    # 4 bits per weight + two f16 per 64 weights
    assert m.tensors["w"].data_nbytes == 8 * 64
    with OinfWriter(tmp_path / "bad.oinf") as w:
        w.add_tensor("w", shape=x.shape, block=layout, loader=lambda: quantize(x, "q4_1", 32))
        with pytest.raises(OinfFormatError, match="must return a QuantizedTensor of q4_1 block 64"):
            w.close()
    assert not (tmp_path / "bad.oinf").exists()


def test_bad_input_is_rejected() -> None:
    x = np.ones((4, 48), np.float32)
    with pytest.raises(OinfFormatError, match="does not divide the last axis"):
        quantize(x, "q8_0", block_size=32)
    with pytest.raises(OinfFormatError, match="does not fill whole bytes"):
        quantize(np.ones((2, 9), np.float32), "q4_1", block_size=3)
    with pytest.raises(OinfFormatError, match="only float tensors"):
        quantize(np.ones((2, 32), np.int32), "q8_0")
    with pytest.raises(OinfFormatError, match="inf or NaN"):
        quantize(np.full((1, 32), np.inf, np.float32), "q8_0")
    with pytest.raises(OinfFormatError, match="does not fit f16"):
        quantize(np.full((1, 32), 1e9, np.float32), "q8_0")
    assert np.isfinite(
        quantize(np.full((1, 32), 1e9, np.float32), "q8_0", scale_dtype=DType.F32).dequantize()
    ).all()
    with pytest.raises(ValueError, match="expected one of q8_0, q4_0, q4_1"):
        BlockScheme.parse("q5_k")
    with pytest.raises(OinfFormatError, match="plane scales must be"):
        QuantizedTensor(
            BlockLayout("q8_0"), (2, 32), np.zeros((2, 32), np.uint8), np.zeros((2, 2), np.float16)
        )


def test_verify_reports_a_nan_scale_with_its_offset(tmp_path: Path) -> None:
    q = quantize(np.ones((2, 64), np.float32), "q8_0")
    path = tmp_path / "nan.oinf"
    _write(path, {"w": q})
    with ModelLoader.open(path) as m:
        scales_at = m.tensors["w"].block.scales_offset  # type: ignore[union-attr]
    raw = bytearray(path.read_bytes())
    raw[scales_at + 2 * 3 : scales_at + 2 * 3 + 2] = np.float16(np.nan).tobytes()
    path.write_bytes(bytes(raw))
    found = verify_file(path)
    assert [v.rule for v in found] == ["R36"] and found[0].offset == scales_at + 6
    assert "scales[3]" in found[0].field
    with pytest.raises(OinfFormatError, match="R36 violated"):
        ModelLoader.open(path)


@settings(max_examples=40, deadline=None)
@given(
    scheme=st.sampled_from(SCHEMES),
    rows=st.integers(1, 5),
    blocks=st.integers(1, 4),
    block=st.sampled_from([2, 8, 32, 64]),
    seed=st.integers(0, 2**31),
)
def test_property_planes_round_trip(
    scheme: BlockScheme, rows: int, blocks: int, block: int, seed: int
) -> None:
    x = np.random.default_rng(seed).standard_normal((rows, blocks * block)).astype(np.float32)
    q = quantize(x, scheme, block_size=block)
    again = QuantizedTensor.from_codes(q.layout, q.codes(), q.scales, q.offsets)
    assert np.array_equal(again.quants, q.quants)
    picked = q.rows(np.array([rows - 1, 0]))
    assert np.array_equal(picked.dequantize(), q.dequantize()[[rows - 1, 0]])
