"""The examples in docs/dsl.md and docs/graph-json.md are real: they parse and decode."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from openinfer_jax.ir import from_json
from openinfer_jax.trace import parse, parse_file

from .fixtures import SEED_DIR

DOCS = Path(__file__).resolve().parents[2] / "docs"
_PROGRAM_START = ("graph", "dynamic", "volatile", "constant", "persistent", "block")
_NODE_START = (
    "op ",
    "cache.",
    "loop ",
    "transfer ",
    "assign ",
    "branch ",
    "barrier;",
    "dep ",
    "return",
)


def _code_blocks(name: str) -> list[str]:
    text = (DOCS / name).read_text(encoding="utf-8")
    return re.findall(r"```(?:[a-z]*)\n(.*?)```", text, re.S)


def _dsl_examples() -> list[str]:
    out = []
    for block in _code_blocks("dsl.md"):
        first = block.lstrip().split("\n", 1)[0]
        if (
            ":=" in block
            or '";"' in block
            or first.startswith(("openinfer", "from ", "graph =", "model.graph"))
        ):
            continue  # grammar rules, shell commands, Python, error output
        if first.startswith(_PROGRAM_START):
            out.append(block)
        elif first.startswith(_NODE_START):
            out.append("block entry {\n" + block + "}\n")
    return out


DSL_EXAMPLES = _dsl_examples()


def test_dsl_doc_has_many_examples() -> None:
    assert len(DSL_EXAMPLES) >= 10


@pytest.mark.parametrize("example", DSL_EXAMPLES, ids=[f"ex{i}" for i in range(len(DSL_EXAMPLES))])
def test_dsl_doc_examples_parse(example: str) -> None:
    parse(example)


def test_graph_json_doc_example_is_the_minimal_seed() -> None:
    documents = [
        b for b in _code_blocks("graph-json.md") if b.startswith("{\n") and '"nodes": [' in b
    ]
    assert len(documents) == 1
    assert from_json(json.loads(documents[0])) == parse_file(SEED_DIR / "002_minimal.graph")
