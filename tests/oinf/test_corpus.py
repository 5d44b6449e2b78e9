"""The bad-file corpus: every hand-made hostile file is rejected with OinfFormatError naming its
offset, field and rule, quickly and with bounded memory; `verify_file` lists the same rule."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest

from openinfer_jax.core.errors import OinfFormatError
from openinfer_jax.oinf import ModelLoader, verify_file
from tests.oinf.make_corpus import CASES, CORPUS_DIR, VALID_CASES, VALID_DIR

MANIFEST = json.loads((CORPUS_DIR / "manifest.json").read_text())
MEMORY_LIMIT = 4 << 20  # "a few MB regardless of what the header claims"


def test_committed_corpus_matches_generator() -> None:
    assert sorted(MANIFEST) == sorted(c.name for c in CASES)
    for case in CASES:
        assert MANIFEST[case.name]["rule"] == case.rule
        assert (CORPUS_DIR / f"{case.name}.oinf").read_bytes() == case.make(), (
            f"regenerate with make_corpus.py ({case.name})"
        )


def test_corpus_covers_every_rule() -> None:
    from openinfer_jax.oinf.spec import RULES

    assert {c.rule for c in CASES} == set(RULES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_file_is_rejected(case) -> None:  # type: ignore[no-untyped-def]
    path = CORPUS_DIR / f"{case.name}.oinf"
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(OinfFormatError) as info:
            ModelLoader.open(path)
        elapsed = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    err = info.value
    assert f"{case.rule} violated" in str(err), str(err)
    assert err.offset is not None and err.field, str(err)
    assert f"offset {err.offset}" in str(err) and err.field in str(err)
    assert elapsed < 1.0
    assert peak < MEMORY_LIMIT
    assert case.rule in {v.rule for v in verify_file(path)}
    with pytest.raises(OinfFormatError, match=f"{case.rule} violated"):
        ModelLoader.from_buffer(path.read_bytes())


def test_verify_lists_several_violations(tmp_path: Path) -> None:
    from tests.oinf.minimal_encoder import Meta, Tensor, build

    data = build(
        2,
        metadata=[Meta(b"m", 5, b"\x01", over={"value_flags": 2})],
        tensors=[
            Tensor(b"a", 99, [1], b"\x00"),
            Tensor(b"b", 10, [1], b"\x00" * 4, over={"flags": 9}),
        ],
        header={"flags": 1},
    )
    path = tmp_path / "multi.oinf"
    path.write_bytes(data)
    rules = [v.rule for v in verify_file(path)]
    assert rules == ["R4", "R16", "R22", "R24"]
    assert verify_file(tmp_path / "missing.oinf")[0].rule == "IO"


def test_committed_valid_corpus_matches_generator() -> None:
    assert sorted(p.stem for p in VALID_DIR.glob("*.oinf")) == sorted(c.name for c in VALID_CASES)
    for case in VALID_CASES:
        assert (VALID_DIR / f"{case.name}.oinf").read_bytes() == case.make(), case.name


@pytest.mark.parametrize("case", VALID_CASES, ids=lambda c: c.name)
def test_edge_file_is_valid(case) -> None:  # type: ignore[no-untyped-def]
    path = VALID_DIR / f"{case.name}.oinf"
    assert verify_file(path) == []
    with ModelLoader.open(path) as model:
        for key in model.metadata:
            try:
                model.metadata[key]
            except OinfFormatError as err:  # a shape NumPy cannot hold: typed, naming the entry
                assert f"'{key}'" in str(err) and "NumPy" in str(err)
        for name, info in model.tensors.items():
            if not info.has_data:
                continue
            try:
                model.tensor(name)
            except OinfFormatError as err:
                assert f"tensor '{name}'" in str(err) and "NumPy" in str(err)


def test_unrepresentable_empty_shapes_raise_typed_errors() -> None:
    with ModelLoader.open(VALID_DIR / "empty_tensor_huge_dims.oinf") as model:
        assert model.tensors["w"].shape == (1 << 62, 0)
        assert len(model.tensor_bytes("w")) == 0
        with pytest.raises(OinfFormatError, match="too large for a NumPy array"):
            model.tensor("w")
    with ModelLoader.open(VALID_DIR / "ndarray_empty_huge_dim.oinf") as model:
        assert "m" in model.metadata and model.metadata_type("m").short == "ndarray"
        with pytest.raises(OinfFormatError, match="metadata\\[0\\] 'm'"):
            model.metadata["m"]


def test_opening_does_not_unpack_packed_metadata(tmp_path: Path) -> None:
    """A 1 MiB i1 NDARRAY (8 Mi elements) is checked at open, unpacked only when read."""
    import numpy as np

    from openinfer_jax.oinf import DType, write_oinf

    path = tmp_path / "packed.oinf"
    values = np.zeros(8 << 20, dtype=np.int8)
    values[::3] = -1
    write_oinf(path, metadata={"mask": (values, DType.I1)})
    del values
    tracemalloc.start()
    try:
        with ModelLoader.open(path) as model:
            _, peak_open = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            mask = model.metadata["mask"]
            _, peak_read = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak_open < MEMORY_LIMIT
    assert mask.shape == (8 << 20,) and mask[0] == -1 and mask[1] == 0
    assert peak_read < 3 * mask.nbytes  # the unpacked array plus one temporary
