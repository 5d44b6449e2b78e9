"""No function over about 80 lines in the core packages without a written reason above it.

A long function in core/, ir/, oinf/ or trace/ must be preceded by a comment saying why it is
not split (CONTRIBUTING.md, "Checks before landing"); everything else is split.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "openinfer_jax"
CHECKED = ("core", "ir", "oinf", "trace")
LIMIT = 80


def _long_without_reason(text: str, where: str) -> list[str]:
    """`where:line name (n lines)` for each function of `text` over LIMIT lines whose
    `def` (or first decorator) has no comment line right above it."""
    lines = text.splitlines()
    out = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        above = lines[first - 2].strip() if first >= 2 else ""
        if length > LIMIT and not above.startswith("#"):
            out.append(f"{where}:{node.lineno} {node.name} ({length} lines)")
    return out


def test_long_functions_say_why() -> None:
    found = [
        entry
        for package in CHECKED
        for path in sorted((PACKAGE / package).rglob("*.py"))
        for entry in _long_without_reason(
            path.read_text(encoding="utf-8"), str(path.relative_to(PACKAGE.parent))
        )
    ]
    assert found == [], "split these, or write above each why it is one function"


def test_the_check_sees_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT))
    source = f"def long():\n{body}\n\n\n# one table, read in order\ndef reasoned():\n{body}\n"
    assert [entry.split(" ")[1] for entry in _long_without_reason(source, "probe.py")] == ["long"]
