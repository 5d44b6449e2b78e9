"""Signals arrive between the executor's state changes, never inside one.

A step changes persistent state in small transactions: a table write donates the table's
buffer to XLA and keeps the buffer XLA returns, then records how to undo it. A
KeyboardInterrupt (or any Python signal handler that raises) delivered between those two
statements would leave the table holding a donated, deleted buffer, or a change without
its undo record, and the step's rollback could not restore it.

So while a step runs, `signal_guard` replaces the Python handler of each signal that has
one (SIGINT's `default_int_handler`, a user's SIGALRM/SIGTERM handler, ...) with a
recorder, and `atomic()` marks the transactions: a signal that arrives inside one is held
and handed to its original handler as the transaction ends, outside it it goes to the
original handler at once. Python runs signal handlers only in the main thread, so a step
run in another thread needs (and gets) no guard.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["GUARD", "atomic", "signal_guard"]

try:  # the C functions under `signal`: no Enum conversion of every handler (twice a step)
    import _signal as _handlers
except ImportError:  # pragma: no cover - other Python implementations
    _handlers = signal  # type: ignore[assignment]

# Signals whose Python handlers may raise into a step. SIG_DFL/SIG_IGN are left alone: they
# never run Python code (SIGKILL and a default SIGTERM end the process, no state survives).
_GUARDED = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGALRM", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, name)
)


class _Guard:
    """Process-wide state: the handlers replaced, the transaction depth, held signals."""

    def __init__(self) -> None:
        self.original: dict[int, Callable[[int, FrameType | None], Any]] = {}
        self.active = False
        # Set (inline, no call) once the guarded step is over: a signal landing before the
        # guard's own exit has run is delivered with the original handlers back in place.
        self.closing = False
        self.depth = 0
        self.held: list[tuple[Callable[[int, FrameType | None], Any], int, FrameType | None]] = []

    def handler(self, signum: int, frame: FrameType | None) -> None:
        original = self.original[signum]
        if self.depth:
            self.held.append((original, signum, frame))
            return
        if self.closing:  # what the guard's exit would do: it may not run now
            self.uninstall()
            self.active = self.closing = False
        original(signum, frame)

    def install(self) -> None:
        """Replace each guarded Python handler by `handler` (idempotent)."""
        for signum in _GUARDED:
            current = _handlers.getsignal(signum)
            if callable(current) and current != self.handler:
                self.original[signum] = current
                _handlers.signal(signum, self.handler)

    def uninstall(self) -> None:
        """Put the original handlers back (where nobody replaced ours meanwhile)."""
        for signum, original in self.original.items():
            if _handlers.getsignal(signum) == self.handler:
                _handlers.signal(signum, original)
        self.original = {}

    def leave(self) -> None:
        """End one transaction; the outermost hands held signals to their handlers."""
        self.depth -= 1
        if self.depth == 0 and self.held:
            self.deliver()

    def deliver(self) -> None:
        """Hand the held signals to their original handlers."""
        held, self.held = self.held, []
        for original, signum, frame in held:
            original(signum, frame)


#: The guard. A transaction that must start without a single call before it (the end of a
#: step: CPython runs signal handlers at calls, function entries and loop jumps, never
#: between two plain attribute stores) writes `GUARD.depth += 1` inline and
#: `GUARD.leave()` in a `finally`; everything else uses `atomic()`.
GUARD = _Guard()
_GUARD = GUARD


class _SignalGuard:
    """`signal_guard()`'s context manager (a class: every step enters one, and a
    generator-based one costs a few microseconds more)."""

    __slots__ = ("installed",)

    def __init__(self) -> None:
        self.installed = False

    def __enter__(self) -> None:
        if _GUARD.active or threading.get_ident() != threading.main_thread().ident:
            return
        # A signal landing while the handlers are swapped is held (no transaction is open
        # between steps, so the count starts at 1) and goes out as the step's first
        # transaction ends; one landing before the first swap leaves nothing installed.
        _GUARD.depth, _GUARD.held, _GUARD.closing = 1, [], False
        try:
            _GUARD.install()
        except BaseException:
            _GUARD.uninstall()
            _GUARD.depth = 0
            raise
        _GUARD.active = self.installed = True
        _GUARD.depth = 0

    def __exit__(self, *exc: object) -> None:
        if self.installed:
            self.installed = False
            _GUARD.depth += 1  # held while the original handlers go back, then delivered
            _GUARD.active = False
            try:
                _GUARD.uninstall()
            finally:
                # Inline: the original handlers are back, a call could already raise.
                _GUARD.closing = False
                _GUARD.depth -= 1
                if _GUARD.held:
                    _GUARD.deliver()


def signal_guard() -> _SignalGuard:
    """Route Python signal handlers through the guard for the duration (one step). The
    guarded code ends with `GUARD.closing = True` (in a `finally`, inline) where the guard
    it entered is the one that `installed` the handlers.

    Nests (only the outermost installs and restores); outside the main thread it does
    nothing. Every step starts it afresh, so a transaction count or handler left behind by
    a signal that landed in this bookkeeping itself cannot outlive the step: a leftover
    handler passes signals straight through, and the count starts at 0.
    """
    return _SignalGuard()


class _Atomic:
    """The context manager `atomic()` returns (a class: a generator-based one costs a few
    microseconds per use, and a step uses several)."""

    __slots__ = ()

    def __enter__(self) -> None:
        _GUARD.depth += 1

    def __exit__(self, *exc: object) -> None:
        _GUARD.leave()


_ATOMIC = _Atomic()


def atomic() -> _Atomic:
    """A transaction on executor state: signals are held until it ends, then delivered.

    Cheap (a counter); nests. A signal held here is handed to its original handler when
    the outermost transaction ends, so a KeyboardInterrupt surfaces right after it.
    """
    return _ATOMIC
