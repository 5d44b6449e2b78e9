"""Op tests call lowerings directly, outside a simulator: give them JAX's 64-bit mode as the
simulator gives graphs with 64-bit types (scoped to the test call; the package sets no global
mode). test_conformance.py instead picks the mode per case exactly as the simulator does.

Also reports the size of the op conformance matrix at the end of a run (the lead quotes it).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax
import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Run each op test in 64-bit mode (a hook, not a fixture: hypothesis tests re-enter it)."""
    with jax.enable_x64(True):
        return (yield)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print how many conformance cases and op × dtype groups passed."""
    passed = terminalreporter.stats.get("passed", [])
    edge = sum(1 for r in passed if "test_conformance.py::test_edge_values[" in r.nodeid)
    groups = sum(1 for r in passed if "test_conformance.py::test_generated_values[" in r.nodeid)
    inplace = sum(1 for r in passed if "test_conformance.py::test_inplace_lowering" in r.nodeid)
    if edge or groups or inplace:
        terminalreporter.write_line(
            f"ops conformance: {edge} op x dtype x variant cases passed on edge values, "
            f"{groups} op x dtype groups passed on hypothesis draws, "
            f"{inplace} in-place ops passed with donated buffers"
        )
