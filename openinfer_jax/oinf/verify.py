"""`verify_file`: list every rule a `.oinf` file breaks, instead of stopping at the first."""

from __future__ import annotations

import contextlib
import mmap
import os
from pathlib import Path

from openinfer_jax.oinf.checks import Checker, StopParsing, Violation
from openinfer_jax.oinf.parse import parse_buffer

__all__ = ["Violation", "verify_buffer", "verify_file"]


def verify_buffer(data: bytes | bytearray | memoryview | mmap.mmap) -> list[Violation]:
    """Every violation in an in-memory `.oinf` image ([] when valid).

    Parsing continues past non-fatal violations; a fatal one (a table that can no longer
    be followed) ends the list.
    """
    checker = Checker(strict=False)
    view = memoryview(data).cast("B")
    with contextlib.suppress(StopParsing):
        parse_buffer(view, checker)
    return checker.violations


def verify_file(path: str | os.PathLike[str]) -> list[Violation]:
    """Every violation in the file at `path` ([] when valid).

    An unreadable file yields one violation with rule ``"IO"``.
    """
    file_path = Path(path)
    try:
        with open(file_path, "rb") as handle:
            if os.fstat(handle.fileno()).st_size == 0:
                return verify_buffer(b"")
            mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            return verify_buffer(mapping)
        finally:
            # A parsed value may still view the mapping; it is then unmapped when freed.
            with contextlib.suppress(BufferError):
                mapping.close()
    except OSError as err:
        return [
            Violation("IO", None, str(file_path), f"cannot read the file: {err.strerror or err}")
        ]
