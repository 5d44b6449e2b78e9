"""Resource limits: the budget one number in a program, a model or an input may claim.

A loop bound of 10**9, a sizevar that makes `f32[N, N]` a terabyte, or a cache index of
10**9 must fail early with a typed error naming the variable and the limit, not inside
JAX after gigabytes of allocation. Validation (`validate(..., limits=)`) checks what the
program and model fix; the simulator (`Simulator(..., limits=)`) checks what only run time
knows (indices, loop bounds read from variables). Every limit can be raised (or lowered)
by the caller, on the command line with ``--limit NAME=VALUE`` (docs/simulator.md,
"Limits").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from openinfer_jax.core.errors import OpenInferError

__all__ = ["DEFAULT_LIMITS", "Limits"]


@dataclass(frozen=True)
class Limits:
    """The budget (all positive ints).

    Attributes:
        max_loop_depth: loops nested deeper than this are rejected (the DSL parser stops
            there too).
        max_unrolled_iterations: a fused region unrolls its loops into one XLA program
            while the iterations it unrolls stay within this; a longer loop stays a loop
            (run by the scheduler; a pure body as one `lax.fori_loop`).
        max_tensor_elements: elements of one variable, or of a cache table's storage.
        max_cache_entries: entries along one index of a cache table (a write to index
            10**9 fails instead of growing the buffer to hold it); also caps `@fixed`.
    """

    max_loop_depth: int = 64
    max_unrolled_iterations: int = 4096
    max_tensor_elements: int = 1 << 31
    max_cache_entries: int = 1 << 24

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise OpenInferError(
                    f"limit {field.name} must be a positive int, got {value!r}"
                ) from None

    def with_overrides(self, settings: list[str] | None) -> Limits:
        """A copy with ``NAME=VALUE`` settings applied (the CLI's ``--limit``).

        Raises:
            OpenInferError: an unknown name or a value that is not a positive int.
        """
        changes: dict[str, int] = {}
        names = [f.name for f in dataclasses.fields(self)]
        for setting in settings or []:
            name, sep, text = setting.partition("=")
            name = name.strip().replace("-", "_")
            if not sep or name not in names:
                raise OpenInferError(
                    f"--limit {setting!r}: expected NAME=VALUE with NAME one of {', '.join(names)}"
                )
            try:
                changes[name] = int(text.replace("_", ""), 0)
            except ValueError:
                raise OpenInferError(f"--limit {setting!r}: {text!r} is not an integer") from None
        return dataclasses.replace(self, **changes)


#: The defaults: generous for real models (a 2**31-element tensor is 8 GiB of f32).
DEFAULT_LIMITS = Limits()
