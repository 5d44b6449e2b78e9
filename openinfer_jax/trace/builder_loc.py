"""Where in the user's Python code a builder call was made.

Every declaration and node built by `openinfer_jax.trace.builder` carries the
`SourceLoc` of the user's call (file, line, column, source line), not a location inside
the builder. We walk up the stack past the builder's own modules and read the column
from the code object's position table (Python 3.11+), so a caret can point at the call.
"""

from __future__ import annotations

import linecache
import sys
import weakref
from pathlib import Path
from types import CodeType, FrameType

from openinfer_jax.core.errors import DslSyntaxError
from openinfer_jax.ir.nodes import SourceLoc
from openinfer_jax.ir.validate_report import format_located

__all__ = ["builder_error", "caller_loc"]

# The builder's own source files: frames from these are skipped when looking for the user.
_BUILDER_DIR = Path(__file__).resolve().parent
_OWN_FILES = frozenset(
    str(_BUILDER_DIR / name) for name in ("builder.py", "builder_loc.py", "builder_values.py")
)


# Position tables of user code objects, read once each: a builder call per node would otherwise
# rescan its function's whole table (quadratic for a long generated program).
_POSITIONS: weakref.WeakKeyDictionary[CodeType, list[tuple[int | None, ...]]] = (
    weakref.WeakKeyDictionary()
)


def _is_own(frame: FrameType) -> bool:
    filename = frame.f_code.co_filename
    # contextlib frames sit between a `with` statement and our __enter__/__exit__.
    return filename in _OWN_FILES or filename.endswith(("contextlib.py",))


def caller_loc() -> SourceLoc | None:
    """The location of the innermost stack frame outside the builder's modules."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and _is_own(frame):
        frame = frame.f_back
    if frame is None:
        return None
    filename = frame.f_code.co_filename
    line = frame.f_lineno
    column = 1
    # co_positions has one entry per 2-byte code unit; f_lasti is a byte offset.
    positions = _POSITIONS.get(frame.f_code)
    if positions is None:
        positions = _POSITIONS[frame.f_code] = list(frame.f_code.co_positions())
    index = frame.f_lasti // 2
    position = positions[index] if 0 <= index < len(positions) else None
    if position is not None:
        start_line, _end_line, start_col, _end_col = position
        if start_line is not None:
            line = start_line
        if start_col is not None:
            column = start_col + 1
    snippet = linecache.getline(filename, line).rstrip("\n") or None
    return SourceLoc(line=line, column=column, file=filename, snippet=snippet)


def builder_error(message: str, loc: SourceLoc | None = None) -> DslSyntaxError:
    """A DslSyntaxError for a builder mistake, located at `loc` (default: the user's call)."""
    where = loc if loc is not None else caller_loc()
    error = DslSyntaxError(format_located(where, message))
    error.loc = where
    return error
