"""Rule enforcement for the reader: a violation collector and a bounds-checked cursor.

The reader runs in one of two modes. Strict (`ModelLoader.open`): the first violation
raises `OinfFormatError`. Collecting (`verify_file`): violations are recorded and parsing
goes on where it safely can; a *fatal* violation (something that makes the rest of the
structure unreadable, such as a string running past its section) stops parsing.
Every read goes through `Cursor`, which never reads past the end it was given, so a
hostile length can never make us touch memory outside the file.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from openinfer_jax.core.errors import OinfFormatError
from openinfer_jax.oinf import spec

__all__ = ["Checker", "Cursor", "StopParsing", "Violation"]

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


@dataclass(frozen=True)
class Violation:
    """One broken rule: which rule, where (byte offset and field) and what was found."""

    rule: str
    offset: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = (
            self.field
            if self.offset is None
            else f"{self.field} at offset {self.offset} (0x{self.offset:x})"
        )
        return f"{self.rule} {where}: {self.message}"


class StopParsing(Exception):
    """Raised in collecting mode after a fatal violation; the collector holds the list."""


class Checker:
    """Turns a broken rule into an exception (strict) or a recorded `Violation` (collecting)."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.violations: list[Violation] = []

    def fail(
        self, rule: str, message: str, *, offset: int | None, field: str, fatal: bool = False
    ) -> None:
        """Report a violation of `rule` (a key of `spec.RULES`).

        Raises:
            OinfFormatError: in strict mode, always.
            StopParsing: in collecting mode when `fatal` is true.
        """
        if self.strict:
            raise OinfFormatError(
                f"{rule} violated: {message} (rule: {spec.RULES[rule]}); "
                "the file is damaged or was not written by a conforming encoder: regenerate it, "
                "e.g. with openinfer_jax.oinf.OinfWriter",
                offset=offset,
                field=field,
            )
        self.violations.append(Violation(rule, offset, field, message))
        if fatal:
            raise StopParsing


class Cursor:
    """Sequential little-endian reads over `buf[pos:end]`, failing rule `rule` on overrun."""

    __slots__ = ("buf", "checker", "end", "pos", "rule")

    def __init__(self, buf: memoryview, pos: int, end: int, checker: Checker, rule: str) -> None:
        self.buf = buf
        self.pos = pos
        self.end = end
        self.checker = checker
        self.rule = rule

    def _need(self, nbytes: int, field: str) -> int:
        start = self.pos
        if start + nbytes > self.end:
            self.checker.fail(
                self.rule,
                f"needs {nbytes} bytes but only {max(0, self.end - start)} remain before offset {self.end}; "
                "the count or a length before it is wrong, or the file is truncated",
                offset=start,
                field=field,
                fatal=True,
            )
        self.pos = start + nbytes
        return start

    def u32(self, field: str) -> int:
        """Read a u32."""
        return int(_U32.unpack_from(self.buf, self._need(4, field))[0])

    def u64(self, field: str) -> int:
        """Read a u64."""
        return int(_U64.unpack_from(self.buf, self._need(8, field))[0])

    def unpack(self, layout: struct.Struct, field: str) -> tuple[int, ...]:
        """Read a fixed struct (several fields at once, for speed)."""
        return layout.unpack_from(self.buf, self._need(layout.size, field))

    def u64s(self, count: int, field: str) -> tuple[int, ...]:
        """Read `count` u64 values; `count` is bounded by the remaining bytes first."""
        start = self._need(8 * count, field)
        return struct.unpack_from(f"<{count}Q", self.buf, start) if count else ()

    def string(self, field: str, *, name: bool) -> str:
        """Read a string (R9): u32 length, bytes, zero padding to a multiple of 8.

        `name=True` checks the name alphabet, otherwise the STRING-value alphabet (R10).
        """
        start = self.pos
        length = self.u32(f"{field}.length")
        # The length is checked against the bytes left before anything is sliced (R9).
        if 4 + length > self.end - start or spec.string_size(length) > self.end - start:
            self.checker.fail(
                "R9",
                f"string length {length} runs past the end of its section at offset {self.end}",
                offset=start,
                field=f"{field}.length",
                fatal=True,
            )
        raw = bytes(self.buf[start + 4 : start + 4 + length])
        valid = spec.is_valid_name(raw) if name else spec.is_valid_text(raw)
        if not valid:
            shown = raw[:40].decode("ascii", "backslashreplace")
            expected = "1+ characters of [A-Za-z0-9._-]" if name else "printable ASCII"
            self.checker.fail(
                "R10",
                f"string {shown!r} is not {expected}; rename it",
                offset=start + 4,
                field=field,
            )
        pad_start = start + 4 + length
        pad_end = start + spec.string_size(length)
        if any(self.buf[pad_start:pad_end]):
            self.checker.fail(
                "R11", "string padding bytes are not 0", offset=pad_start, field=field
            )
        self.pos = pad_end
        return raw.decode("ascii", "backslashreplace")
