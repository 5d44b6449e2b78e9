"""Steps are atomic under KeyboardInterrupt: an interrupt anywhere in a step leaves every
persistent variable, table, count and capacity as before the step, and the next step runs.

Interrupts are injected where CPython really runs signal handlers: at Python function
entries and after C calls (a profile function raises SIGINT at the N-th such event, for
N spread over a whole step), and with a real interval timer. An interrupt either rolls the
step back entirely or, when it lands after the commit, is delivered after it. Before the
fix, ~3% of the points left a table holding a donated (deleted) JAX buffer.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openinfer_jax.oinf import ModelLoader, write_oinf
from openinfer_jax.sim import Simulator

GRAPH = """
graph {
  dynamic { x: f32[4]; }
  volatile { h: f32[4]; a: f32[4]; r: f32[4]; }
  persistent {
    step: i32 @init(0);
    K(l, t): f32[4] @table;
    S: f32[4];
  }
  block entry {
    loop layers (l in 0..2) {
      op add(x, a) >> h;
      cache.write h >> K[l, step];
      cache.read K[l, step] >> r;
      op add(r, x) >> a;
    }
    cache.write a >> S;
    cache.increment step;
    return;
  }
}
"""
PERSISTENT = ("step", "K", "S")
# Points per step injected (evenly spread); the whole step has a few thousand.
POINTS = 80


@pytest.fixture(autouse=True)
def _python_sigint_handler() -> Any:
    """Python's own Ctrl-C handler during each test: a process started in the background by a
    non-interactive shell inherits SIGINT ignored, and Python then leaves it ignored."""
    previous = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> ModelLoader:
    path = tmp_path_factory.mktemp("intr") / "m.oinf"
    write_oinf(path, tensors={})
    return ModelLoader.open(path)


def _state(ex: Any) -> dict[str, np.ndarray]:
    return {name: np.array(ex.fetch(name)) for name in PERSISTENT}


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return all(np.array_equal(a[k], b[k]) for k in a)


def _x(step: int) -> np.ndarray:
    return np.full(4, step + 1, np.float32)


def _run(ex: Any, mode: str) -> None:
    if mode == "step":
        ex.step()
    else:
        for _ in ex.iterate():
            pass


def _profiled(step: Callable[[], None], inject_at: int | None) -> tuple[int, bool]:
    """Run `step` counting function entries and C-call returns; raise SIGINT at one."""
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event in ("call", "c_return"):
            count += 1
            if count == inject_at:
                signal.raise_signal(signal.SIGINT)

    sys.setprofile(profile)
    try:
        step()
    except KeyboardInterrupt:
        return count, True
    finally:
        sys.setprofile(None)
    return count, False


@pytest.mark.parametrize("mode", ["step", "iterate"])
def test_interrupt_anywhere_leaves_state_intact(model: ModelLoader, mode: str) -> None:
    sim = Simulator(model, GRAPH)
    ex, twin = sim.make_executor(), sim.make_executor()
    for k in range(2):  # warm: compile, grow the tables past their first entries
        for e in (ex, twin):
            e.insert(x=_x(k))
            _run(e, mode)
    ex.insert(x=_x(2))
    total, _ = _profiled(lambda: _run(ex, mode), None)
    twin.insert(x=_x(2))
    _run(twin, mode)
    assert _same(_state(ex), _state(twin))
    rolled_back = 0
    for n, target in enumerate(np.linspace(1, total, POINTS).astype(int).tolist()):
        before = _state(ex)
        twin.insert(x=_x(3 + n))
        _run(twin, mode)
        after = _state(twin)
        ex.insert(x=_x(3 + n))
        _, hit = _profiled(lambda: _run(ex, mode), target)
        now = _state(ex)  # every buffer still readable
        if hit and not _same(now, after):
            # Interrupted before the commit: rolled back entirely (an interrupt that lands
            # after the commit is delivered after it and leaves the new state).
            assert _same(now, before), f"state damaged by an interrupt at point {target}"
            rolled_back += 1
            ex.insert(x=_x(3 + n))
            _run(ex, mode)  # the retried step runs
        assert _same(_state(ex), after), f"diverged after an interrupt at point {target}"
    assert rolled_back > POINTS // 2
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_interval_timer_interrupts(model: ModelLoader) -> None:
    """Real SIGALRMs whose handler raises KeyboardInterrupt, at spread-out times in steps."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    sim = Simulator(model, GRAPH)
    ex, twin = sim.make_executor(), sim.make_executor()
    for e in (ex, twin):
        e.insert(x=_x(0))
        e.step()
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        delays = np.random.default_rng(0).uniform(1e-5, 2e-3, 60)
        hits = 0
        for n, delay in enumerate(delays.tolist()):
            before = _state(ex)
            ex.insert(x=_x(n))
            try:
                signal.setitimer(signal.ITIMER_REAL, delay)
                ex.step()
                signal.setitimer(signal.ITIMER_REAL, 0)
            except KeyboardInterrupt:
                hits += 1
                twin.insert(x=_x(n))
                twin.step()
                if not _same(_state(ex), _state(twin)):  # not committed: rolled back
                    assert _same(_state(ex), before)
                    ex.insert(x=_x(n))
                    ex.step()
            else:
                twin.insert(x=_x(n))
                twin.step()
            assert _same(_state(ex), _state(twin))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert hits > 0
    assert signal.getsignal(signal.SIGALRM) is previous


def test_guard_passes_signals_through_outside_transactions() -> None:
    from openinfer_jax.sim.interrupts import atomic, signal_guard

    held = []
    with signal_guard():
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        # held inside, raised as the transaction ends
        with pytest.raises(KeyboardInterrupt), atomic():
            signal.raise_signal(signal.SIGINT)
            held.append("still running")
    assert held == ["still running"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_guard_is_not_left_behind(model: ModelLoader, tmp_path: Path) -> None:
    sim = Simulator(model, GRAPH)
    ex = sim.make_executor()
    ex.insert(x=_x(0))
    ex.step()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.parametrize("mode", ["step", "iterate"])
def test_no_interrupt_point_leaves_the_guard_behind(model: ModelLoader, mode: str) -> None:
    """An interrupt at EVERY point of a step, the guard's own entry and exit included,
    leaves Python's handler in place and the guard inactive (a guard left active would let
    the next step run unguarded: its transactions could then be interrupted)."""
    from openinfer_jax.sim.interrupts import GUARD

    sim = Simulator(model, GRAPH)
    ex = sim.make_executor()
    for k in range(2):
        ex.insert(x=_x(k))
        _run(ex, mode)
    ex.insert(x=_x(2))
    total, _ = _profiled(lambda: _run(ex, mode), None)
    for target in range(1, total + 1):
        ex.insert(x=_x(target))
        _profiled(lambda: _run(ex, mode), target)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, target
        assert not GUARD.active and GUARD.depth == 0 and not GUARD.closing, target
