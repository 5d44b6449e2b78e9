"""Layout compatibility: OinfWriter(align=8) produces exactly the bytes of an independent
struct-only encoder written from the reference spec, and the reader opens that encoder's files."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.oinf import (
    Bitset,
    DType,
    ModelLoader,
    QuantParams,
    QuantScale,
    TensorSpec,
    write_oinf,
)
from tests.oinf.minimal_encoder import Meta, Tensor, build, enc_string, pack_bits, quant_payload


def _reference_example(version: int) -> bytes:
    bitset_payload = struct.pack("<II", 9, 2) + bytes([0b00001101, 0b1]) + b"\x00" * 6
    nd = struct.pack("<II", 2, 2) + struct.pack("<2Q", 2, 3) + struct.pack("<6h", 0, 1, 2, 3, 4, -5)
    nd += b"\x00" * (-len(nd) % 8)
    metadata = [
        Meta(b"bits", 13, bitset_payload),
        Meta(b"eps", 10, struct.pack("<f", 1.5)),
        Meta(b"flag", 12, b"\x01"),
        Meta(b"mode", 14, enc_string(b"clamp_up")),
        Meta(b"n", 5, b"\x03"),
        Meta(b"neg", 2, struct.pack("<h", -300)),
        Meta(b"shape", 15, nd),
    ]
    tensors = [
        Tensor(b"a", 10, [2, 3], struct.pack("<6f", 0, 1, 2, 3, 4, 5)),
        Tensor(b"kv", 9, [3], None),
        Tensor(b"q", 18, [5], pack_bits([-8, 7, 1, 0, -1], 4)),
        Tensor(b"s", 3, [], struct.pack("<i", -7)),
    ]
    return build(version, sizevars=[(b"B", 4), (b"D", 8)], metadata=metadata, tensors=tensors)


def _ours(path: Path, version: int) -> bytes:
    write_oinf(
        path,
        version=version,
        align=8,
        sizevars={"D": 8, "B": 4},  # unsorted on purpose: the writer sorts tables by name
        metadata={
            "shape": np.array([[0, 1, 2], [3, 4, -5]], dtype=np.int16),
            "n": 3,
            "neg": -300,
            "mode": "clamp_up",
            "flag": True,
            "eps": 1.5,
            "bits": Bitset([1, 0, 1, 1, 0, 0, 0, 0, 1]),
        },
        tensors={
            "s": np.int32(-7),
            "q": TensorSpec(np.array([-8, 7, 1, 0, -1]), dtype=DType.I4),
            "kv": TensorSpec(dtype=DType.F16, shape=(3,)),
            "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        },
    )
    return path.read_bytes()


@pytest.mark.parametrize("version", [1, 2])
def test_writer_matches_independent_encoder_byte_for_byte(tmp_path: Path, version: int) -> None:
    expected = _reference_example(version)
    assert _ours(tmp_path / "m.oinf", version) == expected


@pytest.mark.parametrize("version", [1, 2])
def test_reader_opens_independent_encoder_file(tmp_path: Path, version: int) -> None:
    path = tmp_path / "ref.oinf"
    path.write_bytes(_reference_example(version))
    with ModelLoader.open(path) as m:
        assert m.version == version
        assert m.sizevars == {"B": 4, "D": 8}
        assert (
            m.metadata["mode"] == "clamp_up" and m.metadata["n"] == 3 and m.metadata["neg"] == -300
        )
        assert m.metadata_type("n") is DType.U8 and m.metadata_type("neg") is DType.I16
        assert m.metadata["bits"] == Bitset([1, 0, 1, 1, 0, 0, 0, 0, 1])
        assert m.metadata["flag"] is True and m.metadata["eps"] == 1.5
        np.testing.assert_array_equal(m.metadata["shape"], [[0, 1, 2], [3, 4, -5]])
        np.testing.assert_array_equal(m.tensor("a"), np.arange(6, dtype=np.float32).reshape(2, 3))
        np.testing.assert_array_equal(m.tensor("q"), [-8, 7, 1, 0, -1])
        assert m.tensor("s").shape == () and int(m.tensor("s")) == -7
        assert not m.tensors["kv"].has_data and m.tensors["kv"].shape == (3,)


def test_empty_model_header_bytes(tmp_path: Path) -> None:
    data = write_oinf(tmp_path / "e.oinf").read_bytes()
    expected = (
        b"OINF\x00"
        + struct.pack("<IIIIII", 2, 0, 0, 0, 0, 0)
        + struct.pack("<5Q", 72, 72, 72, 72, 72)
        + b"\x00" * 3
    )
    assert data == expected


def test_quantized_tensor_last_matches_original_layout(tmp_path: Path) -> None:
    # The original encoder is correct when the quantized tensor sorts last; we must agree there.
    q = quant_payload(1, 1, 0, 0, [0.5], 0, [])
    expected = build(
        2,
        tensors=[
            Tensor(b"a", 10, [2], struct.pack("<2f", 1, 2)),
            Tensor(b"z", 1, [3], struct.pack("<3b", 1, -2, 3), quant=q),
        ],
    )
    ours = write_oinf(
        tmp_path / "q.oinf",
        align=8,
        tensors={
            "z": TensorSpec(
                np.array([1, -2, 3], dtype=np.int8),
                quant=QuantParams.symmetric(QuantScale.per_tensor(0.5)),
            ),
            "a": np.array([1, 2], dtype=np.float32),
        },
    ).read_bytes()
    assert ours == expected
