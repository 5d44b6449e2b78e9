"""Parser fuzzing: any text either parses or raises DslSyntaxError, nothing else escapes.

Inputs are random text, random token soup from the DSL's own vocabulary, and seed
programs with random edits (deletions, insertions, duplications). Whatever parses must
also print and parse back to an equal graph.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openinfer_jax.core.errors import DslSyntaxError
from openinfer_jax.ir import format_graph
from openinfer_jax.trace import parse

SEEDS = [
    p.read_text(encoding="utf-8")
    for p in sorted((Path(__file__).resolve().parent.parent / "fixtures" / "seeds").glob("*.graph"))
]

VOCABULARY = [
    "graph", "graph!", "{", "}", "(", ")", "[", "]", ":", ";", ",", "=", ">>", "..", "@", "*", "-", "!",
    "dynamic", "volatile", "constant", "constants", "persistent", "block", "entry", "assign", "op", "transfer",
    "cache.read", "cache.write", "cache.increment", "cache.decrement", "cache.reset", "branch", "loop",
    "in", "yield", "await", "barrier", "dep", "after", "before", "return", "f32", "bool", "i4", "x", "W",
    "K", "l", "step", "0", "5", "1.5", "1e-6", "inf", "nan", "true", '"W.{l}"', '"', "init", "ref", "pattern",
    "table", "fixed", "auto_dim", "@init(", "@fixed(i=", "//", "/*", "*/", "\n", " ", "\t", "$", ">", ".",
]  # fmt: skip


def _check(text: str) -> None:
    try:
        graph = parse(text)
    except DslSyntaxError as err:
        # Every syntax error is located (line:col) and says what was expected.
        assert "expected" in str(err)
        return
    assert parse(format_graph(graph)) == graph


_fuzz = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_fuzz
@given(st.text(max_size=200))
def test_random_text(text: str) -> None:
    _check(text)


@_fuzz
@given(st.lists(st.sampled_from(VOCABULARY), max_size=60))
def test_token_soup(tokens: list[str]) -> None:
    _check(" ".join(tokens))


@_fuzz
@given(st.data())
def test_mutated_seed_programs(data: st.DataObject) -> None:
    text = data.draw(st.sampled_from(SEEDS))
    for _ in range(data.draw(st.integers(1, 4))):
        if not text:
            break
        start = data.draw(st.integers(0, len(text) - 1))
        end = data.draw(st.integers(start, min(len(text), start + 12)))
        action = data.draw(st.sampled_from(["delete", "insert", "duplicate", "replace"]))
        if action == "delete":
            text = text[:start] + text[end:]
        elif action == "insert":
            text = text[:start] + data.draw(st.sampled_from(VOCABULARY)) + text[start:]
        elif action == "duplicate":
            text = text[:end] + text[start:end] + text[end:]
        else:
            text = text[:start] + data.draw(st.text(max_size=3)) + text[end:]
    _check(text)


def test_deeply_nested_brackets_do_not_escape_as_recursion_errors() -> None:
    _check("block b {" + "loop l (i in 0..1) {" * 500)
    _check("[" * 5000)
