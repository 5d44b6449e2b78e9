"""Host planning done once and replayed as arithmetic: integers that remember their formula.

The host part of a wide region (wide.py) resolves every cache index and plans every table
block (`TableCache.prepare_read` / `prepare_write`): Python work per cache op, per call.
Between two decode steps only a few integers change: the scalars named in cache indices
(`step`) and the tables' counts. So the first call plans with those integers as `SymInt`s,
ints that also carry an affine formula over them (their *variables*), and that record the
outcome of every comparison the planning code makes as a linear guard (`formula >= 0`).
The planning code is the ordinary one: a `SymInt` is an `int`.

`Recording.plan(...)` turns the formulas into an `AffinePlan`: matrices such that, for a
variable vector `x`, every guard holds iff `G @ x + g >= 0`, and every block offset, valid
length and final count is `A @ x + a`. Where all guards hold, the planning code would take
the same branches, so it would compute exactly these values; a later call evaluates the
guards and the formulas with a few NumPy operations and walks afresh only when a guard
fails (a new bucket, a table that must grow, an index out of range: the walk reports it).

Values that must stay fixed (block sizes, which are part of the compiled program) are
`pin`ned: an equality guard. Operations that are not affine (a product of two variables,
division by a variable, bit operations) pin their operands, so a formula is never wrong,
at worst it is valid for fewer calls.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["AffinePlan", "Recording", "SymInt", "pin", "recording"]

Terms = dict[Hashable, int]
_STATE = threading.local()


class Recording:
    """The guards recorded while planning code ran on `SymInt`s (see `recording`)."""

    def __init__(self) -> None:
        self.guards: set[tuple[tuple[tuple[Hashable, int], ...], int]] = set()

    def require(self, terms: Terms, const: int) -> None:
        """Record the guard `terms . x + const >= 0` (dropped when it has no variables)."""
        if terms:
            self.guards.add((tuple(sorted(terms.items(), key=repr)), const))

    def plan(self, variables: Sequence[Hashable], outputs: Sequence[Any]) -> AffinePlan:
        """An `AffinePlan` over `variables` (their order is `x`'s) for `outputs` (ints or
        `SymInt`s). Raises KeyError if a formula names a variable not listed."""
        col = {v: k for k, v in enumerate(variables)}
        n = len(variables)
        guards = sorted(self.guards, key=repr)
        gmat = np.zeros((len(guards), n), np.int64)
        gvec = np.zeros(len(guards), np.int64)
        for row, (terms, const) in enumerate(guards):
            for var, coef in terms:
                gmat[row, col[var]] = coef
            gvec[row] = const
        amat = np.zeros((len(outputs), n), np.int64)
        avec = np.zeros(len(outputs), np.int64)
        for row, value in enumerate(outputs):
            terms_d, const = _lift(value)
            for var, coef in terms_d.items():
                amat[row, col[var]] = coef
            avec[row] = const
        return AffinePlan(tuple(variables), gmat, gvec, amat, avec)


@dataclass(frozen=True)
class AffinePlan:
    """Guards `G @ x + g >= 0` and outputs `A @ x + a` over the variables' values `x`."""

    variables: tuple[Hashable, ...]
    gmat: np.ndarray
    gvec: np.ndarray
    amat: np.ndarray
    avec: np.ndarray
    _mat: np.ndarray = field(init=False, repr=False, compare=False)
    _vec: np.ndarray = field(init=False, repr=False, compare=False)
    _moves: dict[tuple[int, ...], np.ndarray] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Guards and outputs stacked: one product per call (this runs before every
        # replayed region call).
        object.__setattr__(self, "_mat", np.concatenate([self.gmat, self.amat]))
        object.__setattr__(self, "_vec", np.concatenate([self.gvec, self.avec]))
        object.__setattr__(self, "_moves", {})

    def evaluate(self, x: Sequence[int]) -> np.ndarray | None:
        """The outputs at `x` (int64), or None when a guard fails there."""
        return self.outputs(self.values(x))

    def values(self, x: Sequence[int]) -> np.ndarray:
        """Guards and outputs at `x`, stacked (see `outputs`)."""
        both: np.ndarray = self._mat @ np.array(x, np.int64) + self._vec
        return both

    def moved(self, both: np.ndarray, dx: tuple[int, ...]) -> np.ndarray:
        """`values(x + dx)` from `both = values(x)`: one addition (the product of a step
        `dx` is kept; a decode step moves every variable by the same step each call)."""
        moved: np.ndarray = both + self.step(dx)
        return moved

    def step(self, dx: tuple[int, ...]) -> np.ndarray:
        """What `values` gains when `x` moves by `dx` (kept for the last few steps)."""
        step = self._moves.get(dx)
        if step is None:
            if len(self._moves) >= _MOVES_KEPT:
                self._moves.clear()
            step = self._moves[dx] = self._mat @ np.array(dx, np.int64)
        return step

    def headroom(self, both: np.ndarray, dx: tuple[int, ...]) -> int:
        """How many more moves by `dx` keep every guard holding, from `both = values(x)`
        where they all hold: guards that `dx` does not lower hold for good (then a large
        number), the others last until their value runs out."""
        guards = len(self.gvec)
        fall = self.step(dx)[:guards]
        lowered = fall < 0
        if not lowered.any():
            return _FOREVER
        return int((both[:guards][lowered] // -fall[lowered]).min())

    def outputs(self, both: np.ndarray) -> np.ndarray | None:
        """The outputs of stacked `values`, or None when a guard fails there."""
        guards = len(self.gvec)
        if guards and both[:guards].min() < 0:
            return None
        return both[guards:]


_MOVES_KEPT = 8
_FOREVER = 1 << 62


@contextmanager
def recording() -> Iterator[Recording]:
    """Record the guards of `SymInt` comparisons made in this thread inside the block."""
    outer = getattr(_STATE, "rec", None)
    rec = Recording()
    _STATE.rec = rec
    try:
        yield rec
    finally:
        _STATE.rec = outer


def _active() -> Recording | None:
    return getattr(_STATE, "rec", None)


def _lift(value: Any) -> tuple[Terms, int]:
    """(terms, constant) of an int or `SymInt`."""
    if isinstance(value, SymInt):
        return value.terms, value.const
    return {}, int(value)


def _combine(a: Terms, b: Terms, sign: int) -> Terms:
    out = dict(a)
    for var, coef in b.items():
        out[var] = out.get(var, 0) + sign * coef
    return out


def pin(value: Any) -> Any:
    """A plain int equal to `value`; for a `SymInt`, guard that it keeps this value."""
    if isinstance(value, SymInt):
        return value.pinned()
    return value


class SymInt(int):
    """An int with an affine formula over plan variables (`terms . x + const`).

    It is the formula's value at the variables' current values. Arithmetic keeps the
    formula; comparisons, truth tests and non-affine operations return plain results and,
    inside `recording()`, record the guard under which they come out the same.
    """

    terms: Terms
    const: int

    def __new__(cls, terms: Terms, const: int, value: int) -> SymInt:
        """The formula `terms . x + const`, whose value at the current `x` is `value`."""
        obj = int.__new__(cls, value)
        obj.terms = terms
        obj.const = const
        return obj

    @classmethod
    def variable(cls, name: Hashable, value: int) -> SymInt:
        """The plan variable `name`, currently `value`."""
        return cls({name: 1}, 0, int(value))

    # ---- formula bookkeeping -------------------------------------------------------------
    def _new(self, terms: Terms, const: int, value: int) -> int:
        terms = {v: c for v, c in terms.items() if c}
        if not terms:
            return value
        return SymInt(terms, const, value)

    def pinned(self) -> int:
        """This value as a plain int, guarded to stay this value."""
        rec = _active()
        if rec is not None:
            value = int.__int__(self)
            rec.require(self.terms, self.const - value)
            rec.require({v: -c for v, c in self.terms.items()}, value - self.const)
        return int.__int__(self)

    # ---- affine arithmetic ----------------------------------------------------------------
    def __add__(self, other: Any) -> Any:
        if not isinstance(other, int):
            return NotImplemented
        terms, const = _lift(other)
        return self._new(
            _combine(self.terms, terms, 1), self.const + const, int.__add__(self, int(other))
        )

    __radd__ = __add__

    def __sub__(self, other: Any) -> Any:
        if not isinstance(other, int):
            return NotImplemented
        terms, const = _lift(other)
        return self._new(
            _combine(self.terms, terms, -1), self.const - const, int.__sub__(self, int(other))
        )

    def __rsub__(self, other: Any) -> Any:
        if not isinstance(other, int):
            return NotImplemented
        return (-self) + other

    def __neg__(self) -> Any:
        return self._new({v: -c for v, c in self.terms.items()}, -self.const, -int.__int__(self))

    def __pos__(self) -> Any:
        return self

    def __mul__(self, other: Any) -> Any:
        if not isinstance(other, int):
            return NotImplemented
        factor = pin(other)
        return self._new(
            {v: c * factor for v, c in self.terms.items()},
            self.const * factor,
            int.__int__(self) * factor,
        )

    __rmul__ = __mul__

    def __floordiv__(self, other: Any) -> Any:
        if not isinstance(other, int):
            return NotImplemented
        divisor = pin(other)
        if divisor <= 0:
            return int.__floordiv__(self.pinned(), divisor)
        quotient = int.__int__(self) // divisor
        rec = _active()
        if rec is not None:  # divisor * q <= self < divisor * (q + 1)
            rec.require(self.terms, self.const - divisor * quotient)
            rec.require(
                {v: -c for v, c in self.terms.items()},
                divisor * quotient + divisor - 1 - self.const,
            )
        return quotient

    def __mod__(self, other: Any) -> Any:
        if not isinstance(other, int):
            return NotImplemented
        divisor = pin(other)
        if divisor <= 0:
            return int.__mod__(self.pinned(), divisor)
        return self - divisor * (self // divisor)

    def __abs__(self) -> Any:
        return -self if self < 0 else self

    # ---- comparisons: plain results, guarded ------------------------------------------------
    def _compare(self, other: Any, op: Callable[[int, int], bool]) -> Any:
        if not isinstance(other, int):
            return NotImplemented
        result = op(int.__int__(self), int(other))
        rec = _active()
        if rec is None:
            return result
        terms, const = _lift(other)
        d_terms = _combine(self.terms, terms, -1)  # d = self - other
        d_const = self.const - const
        neg_terms = {v: -c for v, c in d_terms.items()}
        # Each outcome as "d >= k" or "-d >= k" (integers: d > 0 is d - 1 >= 0).
        less = (neg_terms, -d_const - 1)  # self < other
        greater = (d_terms, d_const - 1)  # self > other
        at_least = (d_terms, d_const)  # self >= other
        at_most = (neg_terms, -d_const)  # self <= other
        if op is operator.lt:
            rec.require(*(less if result else at_least))
        elif op is operator.le:
            rec.require(*(at_most if result else greater))
        elif op is operator.gt:
            rec.require(*(greater if result else at_most))
        elif op is operator.ge:
            rec.require(*(at_least if result else less))
        else:  # == or !=: equal, or strictly on the side it is on now
            equal = int.__int__(self) == int(other)
            if equal:
                rec.require(*at_least)
                rec.require(*at_most)
            else:
                rec.require(*(less if int.__int__(self) < int(other) else greater))
        return result

    def __lt__(self, other: Any) -> Any:
        return self._compare(other, operator.lt)

    def __le__(self, other: Any) -> Any:
        return self._compare(other, operator.le)

    def __gt__(self, other: Any) -> Any:
        return self._compare(other, operator.gt)

    def __ge__(self, other: Any) -> Any:
        return self._compare(other, operator.ge)

    def __eq__(self, other: Any) -> Any:
        return self._compare(other, operator.eq)

    def __ne__(self, other: Any) -> Any:
        return self._compare(other, operator.ne)

    __hash__ = int.__hash__

    def __bool__(self) -> bool:
        return bool(self != 0)

    def __repr__(self) -> str:
        return repr(int.__int__(self))

    __str__ = __repr__


def _pinning(name: str) -> Callable[..., Any]:
    """An int method that first pins the `SymInt` (no affine formula for its result)."""
    base = getattr(int, name)

    def method(self: SymInt, *args: Any) -> Any:
        return base(self.pinned(), *(pin(a) for a in args))

    method.__name__ = name
    return method


# Non-affine operations: their results are plain ints, valid while the operands are pinned.
for _name in (
    "__truediv__", "__rtruediv__", "__rfloordiv__", "__rmod__", "__pow__", "__rpow__",
    "__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "__lshift__",
    "__rlshift__", "__rshift__", "__rrshift__", "__invert__", "__float__", "__round__",
    "__trunc__", "__floor__", "__ceil__", "__divmod__", "__rdivmod__", "bit_length",
    "__format__",
):  # fmt: skip
    setattr(SymInt, _name, _pinning(_name))
