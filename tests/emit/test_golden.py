"""Golden sources: the emitted files of a few small graphs are checked in under
tests/emit/golden/; any codegen change shows as a diff. `UPDATE_GOLDEN=1` rewrites them.
Also: emission is deterministic (byte-identical on repeat, including through emit())."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import openinfer_jax.emit
from openinfer_jax.emit import Synthesizer
from tests.emit.cases import CASES

GOLDEN = Path(__file__).with_name("golden")
# The fixed C runtime is copied verbatim into every emitted program; the goldens hold only
# the generated files, and the copies are checked against the shipped runtime instead.
RUNTIME = Path(openinfer_jax.emit.__file__).parent / "runtime"


def _generated(files: dict[str, str]) -> dict[str, str]:
    """The emitted files that codegen writes (not verbatim copies of the shipped runtime)."""
    out = {}
    for fname, text in files.items():
        shipped = RUNTIME / fname
        if shipped.is_file():
            assert text == shipped.read_text(encoding="utf-8"), (
                f"{fname} is not the shipped runtime"
            )
            continue
        out[fname] = text
    return out


GOLDEN_CASES = ("minimal", "stability_guard", "cache_window_slice")


def _plan(name: str, tmp: Path):
    tmp.mkdir(parents=True, exist_ok=True)
    case = CASES[name](tmp)
    return Synthesizer(case.arch).synthesize(case.model, case.graph, name=name)


@pytest.mark.parametrize("name", GOLDEN_CASES)
def test_emitted_sources_match_golden(name: str, tmp_path: Path) -> None:
    plan = _plan(name, tmp_path)
    files = _generated(dict(plan.files))
    folder = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for fname, text in files.items():
            (folder / fname).write_text(text, encoding="utf-8")
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.iterdir())}
    assert sorted(on_disk) == sorted(files), "file set changed; run with UPDATE_GOLDEN=1 and review"
    for fname, text in files.items():
        assert text == on_disk[fname], (
            f"{name}/{fname} differs from golden; run with UPDATE_GOLDEN=1 and review the diff"
        )


def test_emission_is_byte_identical_on_repeat(tmp_path: Path) -> None:
    first = _plan("kv_cache_decode", tmp_path / "a")
    second = _plan("kv_cache_decode", tmp_path / "b")
    assert dict(first.files) == dict(second.files)
    out_a = first.emit(tmp_path / "out_a")
    out_b = second.emit(tmp_path / "out_b")
    for fname in first.files:
        assert (out_a / fname).read_bytes() == (out_b / fname).read_bytes()
        text = (out_a / fname).read_text()
        assert str(tmp_path) not in text  # no absolute paths leak into the sources
