"""The README's Python tour runs as written, and both frontends give the same IR."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _python_blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def test_readme_tour_runs_and_frontends_agree(tmp_path, monkeypatch, capsys):
    blocks = _python_blocks()
    assert len(blocks) == 2, "the README tour has a text-DSL block and a builder block"
    monkeypatch.chdir(tmp_path)
    scope: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), scope)
    ex = scope["ex"]
    np.testing.assert_array_equal(ex.fetch("h"), np.full((4, 8), 2.0, np.float32))
    from openinfer_jax import parse

    assert scope["graph"] == parse(scope["program"])
    assert "2." in capsys.readouterr().out
