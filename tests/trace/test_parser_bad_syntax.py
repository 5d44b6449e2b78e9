"""The bad-syntax corpus: each program raises DslSyntaxError at the line:column it declares.

Every file in tests/trace/bad_syntax/ starts with ``// expect: LINE:COL substring``. The
error must name ``file:LINE:COL``, contain the substring and say what was expected, then
show the offending source line with a caret under the column.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from openinfer_jax.core.errors import DslSyntaxError
from openinfer_jax.trace import parse, parse_file

CORPUS = sorted((Path(__file__).resolve().parent / "bad_syntax").glob("*.graph"))
_EXPECT = re.compile(r"// expect: (\d+):(\d+) (.+)")


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 35


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_bad_program_raises_located_error(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    header = _EXPECT.match(text.split("\n", 1)[0])
    assert header, f"{path.name} lacks a '// expect: LINE:COL substring' header"
    line, column, substring = int(header.group(1)), int(header.group(2)), header.group(3)

    with pytest.raises(DslSyntaxError) as info:
        parse_file(path)
    message = str(info.value)
    head, snippet_line, caret_line = message.split("\n")
    assert head.startswith(f"{path}:{line}:{column}: "), head
    assert substring in head
    assert "; expected " in head or "expected " in head
    source_line = text.split("\n")[line - 1]
    assert snippet_line == f"    {source_line}"
    assert caret_line == "    " + " " * (column - 1) + "^"
    loc = info.value.loc  # type: ignore[attr-defined]
    assert (loc.line, loc.column, loc.file) == (line, column, str(path))


def test_without_filename_the_location_is_line_and_column() -> None:
    with pytest.raises(DslSyntaxError) as info:
        parse("block entry {\n  op add(x y) >> z;\n}\n")
    assert str(info.value).startswith(
        "2:12: found name 'y' in the arguments of op 'add'; expected ',' or ')'"
    )


def test_caret_keeps_tabs_so_it_lines_up() -> None:
    with pytest.raises(DslSyntaxError) as info:
        parse("block entry {\n\top add(x) >> ;\n}\n")
    assert str(info.value).split("\n")[1:] == ["    \top add(x) >> ;", "    \t             ^"]
