"""Every seed program written with the Python builder gives the same IR as its graph{} text."""

from __future__ import annotations

from pathlib import Path

import pytest

from openinfer_jax.trace import parse_file
from tests.trace.seed_programs import SEED_PROGRAMS

SEEDS = Path(__file__).resolve().parents[1] / "fixtures" / "seeds"
FIXTURES = sorted(SEEDS.glob("*.graph"))


def test_every_fixture_has_a_python_program() -> None:
    assert FIXTURES, "no seed fixtures found"
    assert {p.stem for p in FIXTURES} == set(SEED_PROGRAMS)


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_builder_equals_parser(path: Path) -> None:
    text_graph = parse_file(path)
    built = SEED_PROGRAMS[path.stem]()
    assert built == text_graph


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_builder_locations_point_into_seed_programs(path: Path) -> None:
    built = SEED_PROGRAMS[path.stem]()
    source = Path(__file__).with_name("seed_programs.py")
    lines = source.read_text().splitlines()
    for decl in built.vars:
        assert decl.loc is not None and decl.loc.file == str(source)
        assert decl.loc.snippet == lines[decl.loc.line - 1]
    for block in built.blocks:
        for node in block.nodes:
            assert node.loc is not None and node.loc.file == str(source)
            # The caret column points at the start of the call in that line.
            assert node.loc.snippet is not None and node.loc.snippet[node.loc.column - 1:].startswith(("b.", "c."))
