"""Fuzz: mutated valid files are either valid models or rejected with OinfFormatError, nothing else.

The example count comes from FUZZ_EXAMPLES (small by default so the suite stays fast;
`make fuzz` runs 20000). Whatever opens must also be fully readable, and the strict
reader and the collecting verifier must agree on validity.
"""

from __future__ import annotations

import os
import struct
import tempfile
from functools import cache
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from openinfer_jax.core.errors import OinfFormatError
from openinfer_jax.oinf import (
    Bitset,
    DType,
    ModelLoader,
    QuantParams,
    QuantScale,
    QuantZeroPoint,
    TensorSpec,
    verify_buffer,
    write_oinf,
)
from openinfer_jax.oinf.checks import Checker
from openinfer_jax.oinf.parse import parse_buffer

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))


@cache
def seeds() -> tuple[bytes, ...]:
    """A few small valid files covering every section kind, both versions, packed and quant."""
    with tempfile.TemporaryDirectory() as tmp:
        out = []
        common = {
            "sizevars": {"B": 2, "D": 3},
            "metadata": {
                "n": 7,
                "s": "txt",
                "f": 0.5,
                "b": True,
                "bits": Bitset([1, 0, 1]),
                "arr": np.arange(3, dtype=np.int16),
                "pk": (np.array([1, -1]), DType.I2),
            },
        }
        tensors = {
            "w": np.arange(6, dtype=np.float32).reshape(2, 3),
            "p": TensorSpec(np.array([-8, 7, 3]), dtype=DType.I4),
            "kv": TensorSpec(dtype=DType.F16, shape=(2, 2)),
        }
        quant = {
            "q": TensorSpec(
                np.ones((2, 2), np.int8),
                quant=QuantParams.asymmetric(
                    QuantScale.per_channel(0, [0.5, 2.0]), QuantZeroPoint.per_channel(0, [1, 2])
                ),
            )
        }
        for i, (version, extra, align) in enumerate(((1, {}, 8), (2, quant, 8), (2, quant, 64))):
            path = Path(tmp) / f"s{i}.oinf"
            write_oinf(path, version=version, align=align, tensors={**tensors, **extra}, **common)  # type: ignore[arg-type]
            out.append(path.read_bytes())
        return tuple(out)


INTERESTING = [
    0,
    1,
    7,
    8,
    0x7F,
    0x80,
    0xFF,
    0xFFFF,
    0xFFFFFFFF,
    1 << 31,
    1 << 32,
    1 << 62,
    (1 << 64) - 1,
]


KINDS = ["byte"] * 3 + ["u32"] * 3 + ["u64"] * 3 + ["truncate", "extend", "splice"]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(seeds())))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(KINDS))
        # Mostly past the magic, so mutations reach the tables rather than stopping at R2.
        pos = draw(st.integers(5, max(5, len(data) - 1)) | st.integers(0, max(0, len(data) - 1)))
        pos = min(pos, len(data))  # earlier truncations may have shortened the file
        if kind == "byte" and pos < len(data):
            data[pos] = draw(st.integers(0, 255))
        elif kind in ("u32", "u64") and data:
            size = 4 if kind == "u32" else 8
            pos = min(pos, max(0, len(data) - size))
            value = draw(st.sampled_from(INTERESTING) | st.integers(0, (1 << (8 * size)) - 1)) & (
                (1 << (8 * size)) - 1
            )
            data[pos : pos + size] = struct.pack("<I" if size == 4 else "<Q", value)[
                : len(data) - pos
            ]
        elif kind == "truncate":
            del data[pos:]
        elif kind == "extend":
            data += bytes(draw(st.integers(1, 16)))
        elif kind == "splice":
            end = draw(st.integers(pos, min(len(data), pos + 32)))
            data[pos:pos] = data[pos:end]
    if len(data) >= 69 and draw(st.booleans()):
        # Keep file_size honest half the time, so length changes probe the tables, not just R6.
        data[61:69] = struct.pack("<Q", len(data))
    return bytes(data)


def _read_everything(model: ModelLoader) -> None:
    for name, info in model.tensors.items():
        if info.has_data:
            arr = model.tensor(name)
            assert arr.shape == info.shape
            assert len(model.tensor_bytes(name)) == info.data_nbytes
    for value in model.metadata.values():
        if isinstance(value, np.ndarray):
            value.sum()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutated())
def test_mutated_files_are_valid_or_rejected(data: bytes) -> None:
    violations = verify_buffer(data)
    try:
        model = ModelLoader.from_buffer(data)
    except OinfFormatError:
        assert violations, "strict reader rejected a file the verifier accepts"
        event(f"rejected {violations[0].rule}")
        return
    event("valid")
    assert violations == [], "strict reader accepted a file the verifier rejects"
    # The vectorized tensor-table path must agree exactly with the per-entry parser.
    slow = parse_buffer(memoryview(data), Checker(strict=True), fast=False)
    assert slow.tensors == model.tensors and list(slow.tensors) == list(model.tensors)
    _read_everything(model)
    model.close()


def test_seeds_are_valid() -> None:
    for data in seeds():
        assert verify_buffer(data) == []
        _read_everything(ModelLoader.from_buffer(data))


def _many_tensors() -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "many.oinf"
        tensors = {
            f"t{i:03d}": np.zeros(
                (i % 3 + 1,) * (i % 4), dtype=[np.float32, np.int8, np.float16][i % 3]
            )
            for i in range(60)
        }
        tensors["declared"] = TensorSpec(dtype=DType.I4, shape=(3, 5))
        tensors["packed"] = TensorSpec(np.array([1, 0, 1]), dtype=DType.U1)
        write_oinf(path, tensors=tensors)
        return path.read_bytes()


def test_fast_and_slow_tensor_tables_agree() -> None:
    data = _many_tensors()
    fast = parse_buffer(memoryview(data), Checker(strict=True))
    slow = parse_buffer(memoryview(data), Checker(strict=True), fast=False)
    assert fast.tensors == slow.tensors and list(fast.tensors) == list(slow.tensors)
    assert fast.tensors["t007"].shape == (2, 2, 2) and fast.tensors["t004"].shape == ()


@settings(
    max_examples=max(50, EXAMPLES // 3),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_fast_path_never_accepts_what_the_slow_path_rejects(data: st.DataObject) -> None:
    raw = bytearray(_many_tensors_cached())
    start, end = struct.unpack_from("<QQ", raw, 45)
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(start, end - 1))
        raw[pos] = data.draw(st.integers(0, 255))
    try:
        slow = parse_buffer(memoryview(bytes(raw)), Checker(strict=True), fast=False)
    except OinfFormatError:
        slow = None
    try:
        fast = parse_buffer(memoryview(bytes(raw)), Checker(strict=True))
    except OinfFormatError:
        fast = None
    assert (fast is None) == (slow is None)
    if fast is not None and slow is not None:
        assert fast.tensors == slow.tensors


@cache
def _many_tensors_cached() -> bytes:
    return _many_tensors()
