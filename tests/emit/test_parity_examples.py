"""Every example graph: emitted C, compiled with the system compiler, matches the simulator
on several steps (exact for ints and bool, docs/synthesis.md tolerance for floats)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.emit.cases import CASES
from tests.emit.harness import CC, parity

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_parity(name: str, tmp_path: Path) -> None:
    case = CASES[name](tmp_path)
    result = parity(tmp_path, case.model, case.graph, case.steps, arch=case.arch)
    assert result["compared"] >= len(case.steps)
