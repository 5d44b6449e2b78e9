"""Per-executor compilation statistics.

Executors of one simulator share its compiled regions, so the simulator's caches cannot
say which executor paid for a compilation. An executable is built when some executor's
call misses the cache, and XLA compiles it on that executor's first call of it; that call
is counted for that executor alone: as a compilation, or as a hit of JAX's persistent
compilation cache (sim/compile_cache.py) when XLA loaded the executable from disk instead
(JAX reports those through `jax.monitoring`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["CompileStats", "persistent_cache_hits"]

_HIT_EVENT = "/jax/compilation_cache/cache_hits"


class _HitCounter:
    """Persistent-cache hits seen in this process (one `jax.monitoring` listener)."""

    def __init__(self) -> None:
        self.hits = 0
        self._lock = threading.Lock()
        self._registered = False

    def ensure_listening(self) -> None:
        with self._lock:
            if self._registered:
                return
            import jax.monitoring

            jax.monitoring.register_event_listener(self._on_event)
            self._registered = True

    def _on_event(self, event: str, **_kwargs: Any) -> None:
        if event == _HIT_EVENT:
            self.hits += 1


_HITS = _HitCounter()


def persistent_cache_hits() -> int:
    """Executables JAX's persistent cache has loaded in this process so far (counted once
    a `CompileStats` exists)."""
    return _HITS.hits


class CompileStats:
    """What one executor compiled: XLA compilations, persistent-cache hits, regions that
    fell back to exact shapes."""

    def __init__(self) -> None:
        self.compilations = 0
        self.cache_hits = 0
        self.exact_fallbacks = 0
        _HITS.ensure_listening()

    def first_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call a new executable for the first time (XLA compiles it now); count it."""
        before = _HITS.hits
        out = fn(*args)
        if _HITS.hits > before:
            self.cache_hits += 1
        else:
            self.compilations += 1
        return out
