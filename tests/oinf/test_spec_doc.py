"""docs/oinf.md and the reader agree: the same numbered rules, each one enforced and cited in code."""

from __future__ import annotations

import re
from pathlib import Path

from openinfer_jax.oinf.spec import RULES

ROOT = Path(__file__).resolve().parents[2]
READER_SOURCES = ["parse.py", "checks.py", "metadata.py", "quant.py", "blockquant.py"]


def test_doc_lists_exactly_the_rules() -> None:
    doc = (ROOT / "docs" / "oinf.md").read_text()
    documented = re.findall(r"^- \*\*(R\d+)\*\*", doc, flags=re.M)
    assert documented == list(RULES)  # same rules, same order, no duplicates


def test_every_rule_is_cited_by_a_check() -> None:
    # Each rule id appears as the literal passed to Checker.fail / Cursor; test_corpus.py
    # proves each one actually fires on a file that breaks it.
    code = "\n".join(
        (ROOT / "openinfer_jax" / "oinf" / name).read_text() for name in READER_SOURCES
    )
    for rule in RULES:
        assert f'"{rule}"' in code, f"{rule} is not cited by any check"
