"""The bad-file corpus: every hand-made hostile file is rejected with OinfFormatError naming its
offset, field and rule, quickly and with bounded memory; `verify_file` lists the same rule."""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest

from openinfer_jax.errors import OinfFormatError
from openinfer_jax.oinf import ModelLoader, verify_file
from tests.oinf.make_corpus import CASES, CORPUS_DIR

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
