"""Round trips through the writer and the reader: every dtype, every metadata value type, v1 and v2."""

from __future__ import annotations

import mmap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from openinfer_jax.core.errors import GraphValidationError, OinfFormatError
from openinfer_jax.oinf import (
    Bitset,
    DType,
    ModelLoader,
    OinfWriter,
    QuantParams,
    QuantScale,
    QuantZeroPoint,
    TensorSpec,
    UnknownNameError,
    verify_file,
    write_oinf,
)

TENSOR_DTYPES = [d for d in DType if d.is_tensor_type]
VERSIONS = [1, 2]


def _sample(dtype: DType, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Values covering the dtype's whole range (ints) or a spread of floats."""
    rng = np.random.default_rng(seed)
    if dtype is DType.BOOL:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dtype is DType.T1:
        return rng.choice(np.array([-1, 1], dtype=np.int8), shape)
    if dtype.is_int:
        lo, hi = dtype.value_range()
        return rng.integers(lo, hi, shape, endpoint=True, dtype=dtype.numpy)
    return (rng.normal(size=shape) * 100).astype(dtype.numpy)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("dtype", TENSOR_DTYPES, ids=str)
def test_tensor_round_trip_every_dtype(tmp_path: Path, dtype: DType, version: int) -> None:
    shapes = {"t_scalar": (), "t_vec": (13,), "t_mat": (3, 7), "t_empty": (0, 4)}
    values = {name: _sample(dtype, shape, i) for i, (name, shape) in enumerate(shapes.items())}
    path = write_oinf(
        tmp_path / "m.oinf",
        version=version,
        tensors={n: TensorSpec(v, dtype=dtype) for n, v in values.items()},
    )
    assert verify_file(path) == []
    with ModelLoader.open(path) as m:
        assert m.version == version
        for name, expected in values.items():
            info = m.tensors[name]
            assert info.dtype is dtype and info.shape == expected.shape and info.has_data
            assert info.data_nbytes == dtype.nbytes(expected.size)
            got = m.tensor(name)
            assert got.dtype == dtype.numpy
            if dtype.is_float:  # compare bits, so NaN payloads and signed zeros count too
                got, expected = got.reshape(-1).view(np.uint8), expected.reshape(-1).view(np.uint8)
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("version", VERSIONS)
def test_f8_and_bf16_special_values(tmp_path: Path, version: int) -> None:
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, 57344.0], dtype=np.float32)
    path = write_oinf(
        tmp_path / "s.oinf",
        version=version,
        tensors={
            "f8": TensorSpec(specials, dtype=DType.F8),
            "bf": TensorSpec(specials, dtype=DType.BF16),
        },
    )
    with ModelLoader.open(path) as m:
        raw = bytes(m.tensor_bytes("f8"))
        assert raw[:5] == bytes(
            [0x7D, 0x7C, 0xFC, 0x00, 0x80]
        )  # the original's NaN/inf/zero encodings
        f8 = m.tensor("f8").astype(np.float32)
        assert (
            np.isnan(f8[0])
            and f8[1] == np.inf
            and f8[2] == -np.inf
            and f8[5] == 1.5
            and f8[6] == 57344.0
        )
        bf = m.tensor("bf")
        assert bf.dtype == ml_dtypes.bfloat16
        assert np.isnan(bf[0]) and bf[1] == np.inf and bf[2] == -np.inf
        # bf16 is the upper half of f32 rounded to nearest even.
        bits = m.tensor("bf")[5:6].view(np.uint16)[0]
        assert bits == 0x3FC0


def test_bf16_rounds_to_nearest_even(tmp_path: Path) -> None:
    # 1 + 2^-8 is halfway between two bf16 values: ties go to the even mantissa (1.0).
    values = np.array([1 + 2**-8, 1 + 3 * 2**-8], dtype=np.float32)
    path = write_oinf(tmp_path / "b.oinf", tensors={"x": TensorSpec(values, dtype=DType.BF16)})
    with ModelLoader.open(path) as m:
        assert list(m.tensor("x").view(np.uint16)) == [0x3F80, 0x3F82]


METADATA_CASES: dict[str, tuple[object, DType, object]] = {
    # key: (value given, expected value type, expected value read back)
    "u8": (200, DType.U8, 200),
    "u16": (300, DType.U16, 300),
    "u32": (70000, DType.U32, 70000),
    "u64": (2**40, DType.U64, 2**40),
    "i8": (-5, DType.I8, -5),
    "i16": (-300, DType.I16, -300),
    "i32": (-70000, DType.I32, -70000),
    "i64": (-(2**40), DType.I64, -(2**40)),
    "f32": (1.25, DType.F32, 1.25),
    "f64": ((0.1, DType.F64), DType.F64, 0.1),
    "f16": ((np.float16(0.5)), DType.F16, 0.5),
    "bf16": ((2.5, DType.BF16), DType.BF16, 2.5),
    "f8": ((-3.0, DType.F8), DType.F8, -3.0),
    "flag": (False, DType.BOOL, False),
    "text": ("hello world: v1.2", DType.STRING, "hello world: v1.2"),
    "empty": ("", DType.STRING, ""),
    "bits": (Bitset([True] * 17), DType.BITSET, Bitset([True] * 17)),
    "nobits": (Bitset([]), DType.BITSET, Bitset([])),
    "forced_u64": ((5, DType.U64), DType.U64, 5),
    "np_i16": (np.int16(-2), DType.I16, -2),
    # np.float64 subclasses float: it keeps f64 (it was stored as f32, losing 0.1's digits)
    "np_f64": (np.float64(0.1), DType.F64, 0.1),
    "np_f32": (np.float32(0.25), DType.F32, 0.25),
}
METADATA_CASES.update(
    {
        f"packed_{d.short}": (
            (d.value_range()[0] if d is not DType.T1 else -1, d),
            d,
            d.value_range()[0] if d is not DType.T1 else -1,
        )
        for d in DType
        if d.is_packed
    }
)


@pytest.mark.parametrize("version", VERSIONS)
def test_metadata_round_trip_every_value_type(tmp_path: Path, version: int) -> None:
    path = write_oinf(
        tmp_path / "m.oinf",
        version=version,
        metadata={k: v for k, (v, _, _) in METADATA_CASES.items()},
    )
    with ModelLoader.open(path) as m:
        for key, (_, vtype, expected) in METADATA_CASES.items():
            assert m.metadata_type(key) is vtype, key
            assert m.metadata[key] == expected, key
            assert type(m.metadata[key]) is type(expected), key


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("dtype", TENSOR_DTYPES, ids=str)
def test_metadata_ndarray_every_element_type(tmp_path: Path, dtype: DType, version: int) -> None:
    values = _sample(dtype, (2, 5), 3)
    path = write_oinf(
        tmp_path / "n.oinf",
        version=version,
        metadata={"arr": (values, dtype), "scalar0d": (_sample(dtype, (), 4), dtype)},
    )
    with ModelLoader.open(path) as m:
        assert m.metadata_type("arr") is DType.NDARRAY
        got = m.metadata["arr"]
        assert got.dtype == dtype.numpy and got.shape == (2, 5)
        np.testing.assert_array_equal(
            got.view(np.uint8) if dtype.is_float else got,
            values.view(np.uint8) if dtype.is_float else values,
        )
        assert not got.flags.writeable


def _quant_cases() -> dict[str, tuple[np.ndarray, QuantParams]]:
    w = np.arange(12, dtype=np.int8).reshape(3, 4)
    return {
        "sym_tensor": (w, QuantParams.symmetric(QuantScale.per_tensor(0.125))),
        "sym_channel": (w, QuantParams.symmetric(QuantScale.per_channel(1, [0.5, 0.25, 1.0, 2.0]))),
        "asym_tensor_zp": (
            w,
            QuantParams.asymmetric(QuantScale.per_tensor(0.5), QuantZeroPoint.per_tensor(-3)),
        ),
        "asym_channel_zp": (
            w,
            QuantParams.asymmetric(
                QuantScale.per_channel(0, [1.0, 2.0, 4.0]),
                QuantZeroPoint.per_channel(0, [1, -1, 7]),
            ),
        ),
        "asym_no_zp": (w, QuantParams.asymmetric(QuantScale.per_tensor(3.0))),
    }


def test_quant_params_round_trip(tmp_path: Path) -> None:
    cases = _quant_cases()
    path = write_oinf(
        tmp_path / "q.oinf", tensors={n: TensorSpec(w, quant=q) for n, (w, q) in cases.items()}
    )
    assert verify_file(path) == []
    with ModelLoader.open(path) as m:
        for name, (w, q) in cases.items():
            assert m.tensors[name].quant == q
            np.testing.assert_array_equal(m.tensor(name), w)


def test_quantized_tensor_sorting_before_unquantized_ones(tmp_path: Path) -> None:
    # The original encoder's bug: a quantized tensor followed (in name order) by one with data
    # got offsets that did not match what was written. Our offsets follow the written order.
    q = QuantParams.asymmetric(QuantScale.per_tensor(0.5), QuantZeroPoint.per_tensor(2))
    tensors = {
        "a_quant": TensorSpec(np.array([1, 2, 3], dtype=np.int8), quant=q),
        "b_plain": np.arange(5, dtype=np.float32),
        "c_quant": TensorSpec(
            np.array([[-8, 7]]),
            dtype=DType.I4,
            quant=QuantParams.symmetric(QuantScale.per_channel(1, [1.0, 2.0])),
        ),
        "d_plain": np.arange(3, dtype=np.int64),
    }
    for align in (8, 64):
        path = write_oinf(tmp_path / f"q{align}.oinf", align=align, tensors=tensors)
        assert verify_file(path) == []
        with ModelLoader.open(path) as m:
            assert m.tensors["a_quant"].quant == q
            assert m.tensors["c_quant"].quant == tensors["c_quant"].quant
            np.testing.assert_array_equal(m.tensor("b_plain"), np.arange(5, dtype=np.float32))
            np.testing.assert_array_equal(m.tensor("d_plain"), np.arange(3))
            np.testing.assert_array_equal(m.tensor("c_quant"), [[-8, 7]])


def test_zero_copy_view_on_the_mapping(tmp_path: Path) -> None:
    path = write_oinf(tmp_path / "z.oinf", tensors={"w": np.arange(1000, dtype=np.float32)})
    with ModelLoader.open(path) as m:
        a = m.tensor("w")
        assert not a.flags.writeable
        base = a
        while isinstance(base, np.ndarray):
            base = base.base
        if isinstance(base, memoryview):  # np.frombuffer wraps the exporter in a memoryview
            base = base.obj
        assert isinstance(base, mmap.mmap)
        assert np.shares_memory(a, np.frombuffer(m.tensor_bytes("w"), dtype=np.float32))
        assert a.ctypes.data % 64 == 0  # data blobs are 64-aligned by default
        with pytest.raises(ValueError):
            a[0] = 1.0


def test_packed_tensor_bytes_stay_packed(tmp_path: Path) -> None:
    path = write_oinf(
        tmp_path / "p.oinf",
        tensors={"u1": TensorSpec(np.array([1, 0, 1, 1, 0, 0, 0, 0, 1]), dtype=DType.U1)},
    )
    with ModelLoader.open(path) as m:
        assert bytes(m.tensor_bytes("u1")) == bytes([0b00001101, 0b1])
        assert m.tensor("u1").dtype == np.uint8


def test_declared_tensor_and_lookups(tmp_path: Path) -> None:
    path = write_oinf(
        tmp_path / "d.oinf",
        sizevars={"B": 4, "D": 16},
        tensors={"kv": TensorSpec(dtype=DType.F16, shape=(4, 8))},
    )
    with ModelLoader.open(path) as m:
        assert m.tensors["kv"].has_data is False and m.tensors["kv"].data_offset == 0
        with pytest.raises(OinfFormatError, match="without data"):
            m.tensor("kv")
        with pytest.raises(UnknownNameError, match="unknown tensor 'nope'"):
            m.tensor("nope")
        assert m.size_of("B") == 4
        with pytest.raises(UnknownNameError, match=r"unknown sizevar 'Q'.*B, D"):
            m.size_of("Q")
        assert m.resolve_dim("3*D") == 48 and m.resolve_dim("B*D") == 64 and m.resolve_dim(5) == 5
        assert m.resolve_shape(("B", "3*D", 4)) == (4, 48, 4)
        with pytest.raises(GraphValidationError, match="malformed"):
            m.resolve_dim("B+D")
    with pytest.raises(OinfFormatError, match="closed"):
        m.tensor("kv")


def test_writer_streams_loaders_once_in_name_order(tmp_path: Path) -> None:
    calls: list[str] = []

    def loader(name: str, n: int):  # type: ignore[no-untyped-def]
        def produce() -> np.ndarray:
            calls.append(name)
            return np.full((n,), n, dtype=np.float32)

        return produce

    with OinfWriter(tmp_path / "s.oinf") as w:
        for name, n in (("c", 3), ("a", 1), ("b", 2)):
            w.add_tensor(name, dtype=DType.F32, shape=(n,), loader=loader(name, n))
        assert calls == []  # nothing is produced before close
    assert calls == ["a", "b", "c"]
    with ModelLoader.open(tmp_path / "s.oinf") as m:
        np.testing.assert_array_equal(m.tensor("c"), [3, 3, 3])
