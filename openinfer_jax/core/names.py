"""Small value types shared by the IR and the op registry.

`VarName` lives here rather than in the IR so that the op registry (below the IR) can
recognise a param that names a variable without importing the IR.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["VarName"]


@dataclass(frozen=True)
class VarName:
    """A param value that names a variable (e.g. `value=alpha`), as opposed to a string literal."""

    name: str

    def __str__(self) -> str:
        return self.name
