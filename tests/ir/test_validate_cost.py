"""Validation cost stays linear in the program: deep loop nesting (the parser allows 64 levels)
must not make any pass walk loop bodies 2**depth times.

The work is counted (Python calls made during `validate`), not timed, so the test is exact on
a loaded machine: an exponential walk makes depth 16 cost 256 times depth 8.
"""

from __future__ import annotations

import sys
from pathlib import Path

from openinfer_jax.ir.validate import validate
from openinfer_jax.trace import parse, parse_file
from openinfer_jax.trace.parser import MAX_LOOP_DEPTH

CORPUS = Path(__file__).with_name("corpus")


def nested(depth: int) -> str:
    """A program whose innermost loop yields, awaits, writes a cache table and reads W[l]."""
    body = "op add(x, W[i0]) >> y; yield y; await y; cache.write y >> K[i0];"
    for i in range(depth):
        body = f"loop l{i} (i{i} in 0..1) {{ {body} }}"
    return (
        'graph { volatile { x: f32[2]; y: f32[2]; W(l): f32[2] @pattern("w.{l}"); }\n'
        "persistent { K(t): f32[2] @table; }\n"
        f"block entry {{ {body} return; }}\n"
        "block c { await y; op relu(y) >> y; yield y; } }\n"
    )


def _calls(depth: int) -> int:
    graph = parse(nested(depth))
    count = 0

    def profile(frame, event, arg):  # type: ignore[no-untyped-def]
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        validate(graph)
    finally:
        sys.setprofile(None)
    return count


def test_validation_work_is_linear_in_loop_depth() -> None:
    small, large = _calls(8), _calls(16)
    assert large < 3 * small, (small, large)


def test_deepest_nesting_the_parser_allows_validates() -> None:
    graph = parse_file(CORPUS / "loops_nested_64.graph")
    validate(graph)
    assert parse(nested(MAX_LOOP_DEPTH)) == graph


def test_corpus_file_is_current() -> None:
    assert (CORPUS / "loops_nested_64.graph").read_text() == nested(MAX_LOOP_DEPTH)
