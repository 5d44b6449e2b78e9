"""JAX's 64-bit mode for the simulator's own work, never for the whole process.

JAX decides once per process (``jax_enable_x64``) whether 64-bit types exist; the package
never changes that setting. Instead each simulator runs its JAX calls (executor set-up, steps,
fetches) inside a thread-local scope (`Precision.scope`):

- a graph that holds a 64-bit type (i64/u64/f64 in a declaration, an `assign` or a dtype param
  such as ``acc`` or ``to``) runs in 64-bit mode, so those values are exact;
- any other graph runs in 32-bit mode with explicit 64-bit requests made errors. Some op
  lowerings need 64-bit intermediates to give exact 32-bit results (fma, integer sums, casts
  from floats to ints); when one asks for a 64-bit type, `Precision.call` switches the
  simulator to 64-bit mode for good and runs the work again (a step is atomic, so a failed
  attempt left no trace in persistent state).

The mode is part of JAX's compilation cache key, so nothing compiled here leaks into the user's
own jitted functions, and ``jnp.zeros(1).dtype`` stays what the user's settings say.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import jax

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ir.nodes import Assign, Graph, Op
from openinfer_jax.ir.walk import walk_graph

__all__ = ["WIDE_DTYPES", "Precision", "graph_uses_64bit"]

WIDE_DTYPES = frozenset({DType.I64, DType.U64, DType.F64})

_T = TypeVar("_T")


# The scoped switches of this JAX version: `jax.enable_x64` (0.7 and later) or the older
# experimental one; `explicit_x64_dtypes` (a private state) turns a 64-bit request made in 32-bit
# mode into an error instead of a silent 32-bit result. Without it the upgrade cannot be
# detected, so every simulator runs in 64-bit mode (exact, as before the scoping).
def _find_enable_x64() -> Callable[[bool], Any]:
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64  # type: ignore[no-any-return]
    from jax.experimental import enable_x64

    return enable_x64  # type: ignore[no-any-return]


_enable_x64 = _find_enable_x64()
_explicit_x64: Callable[[str], Any] | None = getattr(jax._src.config, "explicit_x64_dtypes", None)
# The "error" setting, parsed once (JAX parses a string value at every use).
_ERROR: Any = (
    getattr(_explicit_x64("error"), "new_val", "error") if _explicit_x64 is not None else None
)
# JAX's message for a 64-bit dtype requested while 64-bit mode is off ("Explicitly requested
# dtype float64 requested in astype is not available ...").
_REQUEST_MARK = "Explicitly requested dtype"


class _Scope:
    """`Precision.scope`'s context manager (a class: every step enters one, and a
    generator-based one costs a few microseconds more)."""

    __slots__ = ("_switches",)

    def __init__(self, x64: bool) -> None:
        if x64:
            self._switches: tuple[Any, ...] = (_enable_x64(True),)
        else:
            assert _explicit_x64 is not None
            self._switches = (_enable_x64(False), _explicit_x64(_ERROR))

    def __enter__(self) -> None:
        entered = 0
        try:
            for switch in self._switches:
                switch.__enter__()
                entered += 1
        except BaseException:
            for switch in reversed(self._switches[:entered]):
                switch.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: Any) -> None:
        for switch in reversed(self._switches):
            switch.__exit__(*exc)


def graph_uses_64bit(graph: Graph) -> bool:
    """True when a declaration, an `assign` or an op's dtype param is i64, u64 or f64."""
    if any(decl.dtype in WIDE_DTYPES for decl in graph.vars):
        return True
    for node in walk_graph(graph):
        if isinstance(node, Assign) and node.dtype in WIDE_DTYPES:
            return True
        if isinstance(node, Op) and any(_is_wide(value) for _name, value in node.params):
            return True
    return False


def _is_wide(value: object) -> bool:
    if isinstance(value, DType):
        return value in WIDE_DTYPES
    return isinstance(value, tuple) and any(_is_wide(item) for item in value)


class Precision:
    """The JAX mode of one simulator: 64-bit (`x64`) or 32-bit with 64-bit requests refused."""

    def __init__(self, x64: bool) -> None:
        self.x64 = x64 or _explicit_x64 is None

    def scope(self) -> _Scope:
        """JAX calls inside run in this simulator's mode (thread-local; restored on exit)."""
        return _Scope(self.x64)

    def upgrade(self, err: BaseException) -> bool:
        """Switch to 64-bit mode when `err` (or its cause) is a refused 64-bit request.

        Returns True when the work that raised `err` should run again.
        """
        if self.x64:
            return False
        seen: BaseException | None = err
        while seen is not None:
            if isinstance(seen, ValueError) and _REQUEST_MARK in str(seen):
                self.x64 = True
                return True
            seen = seen.__cause__ or seen.__context__
        return False

    def call(self, work: Callable[[], _T]) -> _T:
        """`work()` inside `scope`, run once more in 64-bit mode if it needed 64-bit types.

        `work` must leave no trace when it raises (a simulator step rolls back).
        """
        while True:
            try:
                with self.scope():
                    return work()
            except Exception as err:
                if not self.upgrade(err):
                    raise
