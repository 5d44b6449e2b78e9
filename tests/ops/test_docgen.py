"""docs/ops.md is generated from the registry and committed up to date."""

from __future__ import annotations

from pathlib import Path

from openinfer_jax.ops import registry
from openinfer_jax.ops.docgen import compact_dtypes, render_markdown
from openinfer_jax.ops.registry import FLOAT, SIGNED

DOCS = Path(__file__).resolve().parents[2] / "docs" / "ops.md"


def test_committed_docs_match_the_registry() -> None:
    assert DOCS.read_text(encoding="utf-8") == render_markdown(), (
        "docs/ops.md is stale; regenerate it with "
        "`.venv/bin/python -m openinfer_jax.ops.docgen > docs/ops.md`"
    )


def test_every_op_params_and_acc_rules_appear() -> None:
    text = render_markdown()
    for op in registry.all_ops():
        assert f"| `{op.name}`" in text
        for name in op.params:
            assert f"`{name}`" in text
    assert "[i32,i64]" in text and "rounding_mode" in text and "alias alpha" in text


def test_compact_dtypes_names_whole_sets() -> None:
    assert compact_dtypes(FLOAT | SIGNED) == "F, S"
    assert compact_dtypes({*FLOAT} - {next(iter(FLOAT))}) != "F"
