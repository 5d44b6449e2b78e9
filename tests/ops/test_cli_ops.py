"""`openinfer ops`: the table, the markdown page, and one-line errors for unknown names."""

from __future__ import annotations

import pytest

from openinfer_jax.cli import main
from openinfer_jax.ops.docgen import render_markdown


def test_table_lists_the_requested_ops(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ops", "matmul", "relu"]) == 0
    out = capsys.readouterr().out
    assert "matmul" in out and "relu" in out and "negative_slope" in out and "add " not in out


def test_full_table_and_category_filter(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ops"]) == 0
    assert "popcount" in capsys.readouterr().out
    assert main(["ops", "--category", "bitwise"]) == 0
    out = capsys.readouterr().out
    assert "shl" in out and "matmul" not in out


def test_markdown_prints_the_docs_page(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ops", "--markdown"]) == 0
    assert capsys.readouterr().out == render_markdown()


@pytest.mark.parametrize("argv, words", [
    (["ops", "no_such_op"], ["unknown op 'no_such_op'", "known ops:", "add"]),
    (["ops", "--category", "magic"], ["unknown op category 'magic'", "arith"]),
])  # fmt: skip
def test_unknown_names_give_one_line_errors(
    argv: list[str], words: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    for word in words:
        assert word in err
