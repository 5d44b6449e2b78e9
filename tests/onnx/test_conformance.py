"""ONNX node tests through the importer, against the results recorded in conformance.json.

Every node test is imported; the supported ones run on the simulator's cpu and numpy
devices and must reach the status recorded for them (pass stays pass, a recorded failure
is noticed when it starts passing: update the results). A sample runs on emitted C, the
Vulkan device and emitted Vulkan. docs/onnx.md's table must be the one the recorded
results give (`python -m tests.onnx.conformance --write docs/onnx.md` regenerates both).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.onnx import conformance, table

pytest.importorskip("onnx")

ROOT = Path(__file__).resolve().parents[2]
RESULTS = json.loads(conformance.RESULTS.read_text())
TESTS = conformance.node_tests()
# Emitted C and the Vulkan backends take a second or more per test: the suite re-runs a
# fixed-size sample of their recorded passing results, evenly spread in name order (about
# 20 CPU seconds together). `python -m tests.onnx.conformance --backends c --jobs N` records
# the whole suite on a backend; `--backends c,vulkan --sample` one passing test per op.
SAMPLE_SIZE = {"c": 12, "vulkan": 11, "c-vulkan": 4}


def test_every_node_test_has_results() -> None:
    assert sorted(RESULTS) == sorted(t.name for t in TESTS)


def test_docs_table_is_current() -> None:
    page = (ROOT / "docs" / "onnx.md").read_text()
    want = table.render(TESTS, RESULTS, conformance.BACKENDS)
    assert table.current_section(page) == want, (
        "docs/onnx.md is stale: python -m tests.onnx.conformance --reuse --write docs/onnx.md"
    )


def _recorded(name: str, backend: str) -> str:
    return RESULTS[name][backend]["status"]


@pytest.mark.parametrize("test", TESTS, ids=lambda t: t.name)
def test_node(test: conformance.NodeTest, tmp_path: Path) -> None:
    outcomes = conformance.run_test(test, ("cpu", "numpy"), tmp_path)
    for backend, outcome in outcomes.items():
        recorded = _recorded(test.name, backend)
        assert outcome.status == recorded, (
            f"{backend}: {outcome.status} ({outcome.detail}), recorded {recorded}; if this is "
            "an improvement, re-run python -m tests.onnx.conformance"
        )


def _sample(backend: str) -> list[conformance.NodeTest]:
    passing = [
        t for t in TESTS if _recorded(t.name, "cpu") == "pass" and backend in RESULTS[t.name]
    ]
    return passing[:: max(1, len(passing) // SAMPLE_SIZE[backend])][: SAMPLE_SIZE[backend]]


RECORDED_SLOW = [b for b in ("c", "vulkan", "c-vulkan") if any(b in r for r in RESULTS.values())]


@pytest.mark.parametrize("backend", RECORDED_SLOW)
def test_sample_on_slow_backends(backend: str, tmp_path: Path) -> None:
    if backend != "c":
        pytest.importorskip("kp")
    sample = _sample(backend)
    assert sample, f"no recorded {backend} results"
    for test in sample:
        outcome = conformance.run_test(test, (backend,), tmp_path / test.name)[backend]
        assert outcome.status == _recorded(test.name, backend), f"{test.name}: {outcome.detail}"
