"""Layers become loops: runs of identical step windows folded into one `loop` over tables.

A *run* is n >= 2 consecutive windows of p steps each that compute the same thing: the
same ops, params and result types, reading (a) values of their own window at the same
positions, (b) values of the previous window at the same positions (the *carried* values,
like a residual stream; window 0 reads values from before the run there), (c) the same
values from before the run (a mask), and (d) constants. Constants that differ between
windows (each layer's weights) become prefix tables ``W(l): f32[...] @pattern("....{l}")``;
the loop body is window 0 with those reads indexed by the loop index. At least one table
is required: a run is "identical up to its initializers".

Finding runs: every step gets a coarse signature (op, params, result type, input types);
equal signature runs at shift p are found for every p with NumPy, best coverage first
(ties: smaller p, then the rotation with fewest carried values, then the earliest). Each
candidate is then checked exactly (`_Run.check`); rejected ones fall back to the next.
After a run is folded, the steps before and after it are searched the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.ir.nodes import Loop, MemoryKind, Node, VarDecl, VarRef
from openinfer_jax.onnx.naming import Namer, identifier, tensor_name
from openinfer_jax.onnx.program import Program
from openinfer_jax.onnx.values import TRANSFER, Role, Step, Tensor

__all__ = ["LoopItem", "roll_loops"]

# Candidates checked per search before giving up on a segment (bounds the work on big
# graphs with many near-repeats).
_MAX_CANDIDATES = 64
_INDEX = "l"


@dataclass(eq=False)
class Table:
    """A prefix table: one constant per window, read as ``name[l]`` in the body."""

    entries: list[Tensor]
    name: str = ""
    pattern: str = ""

    @property
    def dtype(self) -> DType:
        """The entries' dtype."""
        return self.entries[0].dtype

    @property
    def shape(self) -> tuple[int, ...]:
        """The entries' shape."""
        return self.entries[0].shape


@dataclass
class LoopItem:
    """A folded run: ``loop name (l in 0..count) { body }`` with its tables.

    `before` are transfers that initialize carried variables, `body` is window 0's steps
    (with the carry transfers at its end), `refs` maps window-0 constants to table reads.
    """

    body: list[Step]
    count: int
    tables: list[Table]
    refs: dict[int, Table]
    before: list[Step] = field(default_factory=list)
    name: str = "layers"
    bound: str = ""  # a sizevar holding `count` when the index starts at 0
    start: int = 0

    # ---- naming (called by build) --------------------------------------------------------
    def name_tables(self, namer: Namer, tensor_namer: Namer) -> None:
        """Choose the loop's, bound's and tables' names (DSL and `.oinf`).

        A table whose entries' names count up by one (``layers.0.q``, ``layers.1.q``...)
        keeps them, with ``{l}`` in place of the number; the loop index starts where the
        most tables start counting (0 when it can: the bound is then a sizevar,
        ``num_layers``). Other tables get ``<name>.{l}``.
        """
        self.name = namer.take("layers")
        stems = [_table_stem(t.entries) for t in self.tables]
        bases = [b for _, b in stems if b is not None]
        self.start = 0 if not bases or 0 in bases else max(set(bases), key=bases.count)
        if self.start == 0:
            self.bound = namer.take("num_" + self.name)
        short = _strip_common_prefix([identifier(re.sub(r"[._-]?\{l\}", "", p)) for p, _ in stems])
        for table, (pattern, base), var in zip(self.tables, stems, short, strict=True):
            table.name = namer.take(var)
            if base != self.start:
                pattern = re.sub(r"[._-]?\{l\}", "", pattern) + ".{l}"
            while any(_expand(pattern, i) in tensor_namer.taken for i in self.indices):
                pattern = pattern.replace("{l}", "x.{l}", 1)
            for i in self.indices:
                tensor_namer.taken.add(_expand(pattern, i))
            table.pattern = pattern

    @property
    def indices(self) -> range:
        """The loop index's values."""
        return range(self.start, self.start + self.count)

    # ---- contents -------------------------------------------------------------------------
    def is_table_entry(self, tensor: Tensor) -> bool:
        """True for a window-0 constant that the body reads through a table."""
        return id(tensor) in self.refs

    def variables(self) -> list[Tensor]:
        """Every variable the loop and its initialization use (table entries included)."""
        out: list[Tensor] = []
        for step in (*self.before, *self.body):
            out.extend((*step.inputs, step.output))
        return out

    def table_decls(self) -> list[VarDecl]:
        """``T(l): dtype[dims] @pattern("...");`` for every table."""
        return [
            VarDecl(
                t.name, MemoryKind.CONSTANT, t.dtype, t.shape, pattern=t.pattern,
                table_indices=(_INDEX,),
            )
            for t in self.tables
        ]  # fmt: skip

    def table_tensors(self) -> dict[str, tuple[DType, np.ndarray]]:
        """`.oinf` tensors of every table entry."""
        out: dict[str, tuple[DType, np.ndarray]] = {}
        for t in self.tables:
            for i, entry in zip(self.indices, t.entries, strict=True):
                assert entry.data is not None
                out[_expand(t.pattern, i)] = (entry.dtype, np.asarray(entry.data))
        return out

    def node(self, name_of: Callable[[Tensor], str]) -> list[Node]:
        """The initializing transfers and the `loop` node."""
        from openinfer_jax.onnx.build import step_node

        refs = {k: VarRef(t.name, (_INDEX,)) for k, t in self.refs.items()}
        body = tuple(step_node(s, name_of, refs) for s in self.body)
        nodes = [step_node(s, name_of) for s in self.before]
        end: int | str = self.bound if self.bound else self.start + self.count
        nodes.append(Loop(self.name, _INDEX, self.start, end, body))
        return nodes


def _expand(pattern: str, index: int) -> str:
    return pattern.replace("{l}", str(index))


def _table_stem(entries: Sequence[Tensor]) -> tuple[str, int | None]:
    """A `.oinf` name pattern for the entries and where its count starts: the one number
    in their names that counts up by one becomes ``{l}``; else the first name with its
    trailing number dropped and no start (None)."""
    names = [tensor_name(e.hint) for e in entries]
    parts = [re.split(r"(\d+)", n) for n in names]
    if all(len(p) == len(parts[0]) for p in parts):
        varying = [i for i in range(len(parts[0])) if len({p[i] for p in parts}) > 1]
        if len(varying) == 1 and varying[0] % 2 == 1:
            i = varying[0]
            numbers = [int(p[i]) for p in parts]
            if numbers == list(range(numbers[0], numbers[0] + len(numbers))):
                template = list(parts[0])
                template[i] = "{l}"
                return "".join(template), numbers[0]
    stem = re.sub(r"[._-]?\d+$", "", names[0]) or names[0]
    return stem + "{l}", None


def _strip_common_prefix(names: list[str]) -> list[str]:
    """Drop the `_`-separated words every name starts with (kept when a name would vanish)."""
    if len(names) < 2:
        return names
    words = [n.split("_") for n in names]
    common = 0
    while (
        all(len(w) > common + 1 for w in words)
        and len({w[common] for w in words}) == 1
        and all(w[common + 1][:1].isalpha() for w in words)
    ):
        common += 1
    out = ["_".join(w[common:]) for w in words]
    return out if len(set(out)) == len(out) else names


# ---- search -------------------------------------------------------------------------------------
def _signatures(steps: Sequence[Step]) -> np.ndarray:
    """A coarse signature id per step: equal ids are necessary for windows to match."""
    ids: dict[object, int] = {}
    out = np.empty(len(steps), dtype=np.int64)
    for i, s in enumerate(steps):
        key = (
            s.op,
            repr(s.params),
            s.output.dtype,
            s.output.shape,
            tuple((t.dtype, t.shape, t.role in (Role.WEIGHT, Role.SCALAR)) for t in s.inputs),
        )
        out[i] = ids.setdefault(key, len(ids))
    return out


def _candidates(sig: np.ndarray, lo: int, hi: int) -> list[tuple[int, int, int]]:
    """(start, period, count) of repeated windows in sig[lo:hi], best coverage first."""
    found: list[tuple[int, int, int]] = []
    seg = sig[lo:hi]
    size = len(seg)
    for period in range(1, size // 2 + 1):
        same = seg[:-period] == seg[period:]
        if not same.any():
            continue
        # Runs of consecutive True: starts and lengths.
        padded = np.concatenate(([False], same, [False]))
        edges = np.flatnonzero(padded[1:] != padded[:-1])
        for begin, end in zip(edges[::2], edges[1::2], strict=True):
            length = int(end - begin)
            count = length // period + 1
            if count < 2:
                continue
            for shift in range(length - (count - 1) * period + 1):
                found.append((lo + int(begin) + shift, period, count))
    found.sort(key=lambda c: (-c[1] * c[2], c[1], c[0]))
    return found


@dataclass
class _Slot:
    """How one input of one body step is read, the same in every window."""

    kind: str  # local, prev, outer, const
    position: int = -1  # local/prev: producing step's position in its window


@dataclass
class _Run:
    """One candidate run and, after `check`, everything needed to fold it."""

    steps: list[Step]
    start: int
    period: int
    count: int
    producer: dict[int, int]
    consumers: dict[int, list[int]]
    protected: set[int]  # values read outside the steps (graph and state outputs)
    slots: dict[tuple[int, int], _Slot] = field(default_factory=dict)
    tables: dict[tuple[int, int], Table] = field(default_factory=dict)
    carried: dict[int, Tensor] = field(default_factory=dict)  # position -> init value

    @property
    def end(self) -> int:
        return self.start + self.period * self.count

    def window(self, i: int) -> list[Step]:
        base = self.start + i * self.period
        return self.steps[base : base + self.period]

    def check(self) -> bool:
        """True if the windows are exactly equal up to constants, with valid data flow."""
        p, s = self.period, self.start
        for i in range(self.count):
            base = s + i * p
            for j, step in enumerate(self.window(i)):
                template = self.steps[s + j]
                if not _same_step(step, template):
                    return False
                for m, t in enumerate(step.inputs):
                    slot = self._classify(t, base, j, i)
                    if slot is None:
                        return False
                    key = (j, m)
                    if i == 0:
                        self.slots[key] = slot
                        continue
                    first = self.slots[key]
                    if i == 1 and first.kind == "outer" and slot.kind == "prev":
                        self.slots[key] = slot
                        init = template.inputs[m]
                        if self.carried.setdefault(slot.position, init) is not init:
                            return False
                        continue
                    if (first.kind, first.position) != (slot.kind, slot.position):
                        return False
                    if slot.kind == "outer" and t is not template.inputs[m]:
                        return False
        # Window 0 must read the carried inits exactly where later windows read "prev".
        for (j, m), slot in self.slots.items():
            if (
                slot.kind == "prev"
                and self.steps[s + j].inputs[m] is not self.carried[slot.position]
            ):
                return False
        if not self._tables():
            return False
        return self._outputs_ok()

    def _classify(self, t: Tensor, base: int, j: int, window: int) -> _Slot | None:
        q = self.producer.get(id(t))
        if q is not None and base <= q < base + j:
            return _Slot("local", q - base)
        if q is not None and window > 0 and base - self.period <= q < base:
            return _Slot("prev", q - (base - self.period))
        if q is None or q < self.start:
            if t.role in (Role.WEIGHT, Role.SCALAR):
                return _Slot("const")
            return _Slot("outer")
        return None  # a value of an older window, or of a later step

    def _tables(self) -> bool:
        shared: dict[tuple[int, ...], Table] = {}
        for (j, m), slot in self.slots.items():
            if slot.kind != "const":
                continue
            entries = [self.window(i)[j].inputs[m] for i in range(self.count)]
            if all(e is entries[0] for e in entries):
                continue
            if any(e.dtype is not entries[0].dtype or e.shape != entries[0].shape for e in entries):
                return False
            key = tuple(id(e) for e in entries)
            self.tables[(j, m)] = shared.setdefault(key, Table(entries))
        return bool(self.tables)

    def _outputs_ok(self) -> bool:
        """Values of windows before the last may be read only by the next window's carried
        slots; nothing outside the steps may read them."""
        last = self.start + (self.count - 1) * self.period
        for q in range(self.start, last):
            out = self.steps[q].output
            if id(out) in self.protected:
                return False
            window = (q - self.start) // self.period
            limit = self.start + (window + 2) * self.period
            for c in self.consumers.get(id(out), []):
                if c >= limit or c < q:
                    return False
        return True

    def carried_count(self) -> int:
        return len(self.carried)


def _same_step(a: Step, b: Step) -> bool:
    return (
        a.op == b.op
        and a.params == b.params
        and a.output.dtype is b.output.dtype
        and a.output.shape == b.output.shape
        and len(a.inputs) == len(b.inputs)
        and all(
            x.dtype is y.dtype and x.shape == y.shape
            for x, y in zip(a.inputs, b.inputs, strict=True)
        )
    )


def roll_loops(program: Program) -> list[Step | LoopItem]:
    """The program's steps with every foldable run of layers replaced by a `LoopItem`.

    Steps after a folded run are rewritten to read the body's variables (which hold the
    last iteration's values); program outputs likewise.
    """
    steps = program.steps
    protected = {id(t) for _, t in program.outputs} | {id(p.output) for p in program.state}
    sig = _signatures(steps)
    producer = {id(s.output): i for i, s in enumerate(steps)}
    consumers: dict[int, list[int]] = {}
    for i, s in enumerate(steps):
        for t in s.inputs:
            consumers.setdefault(id(t), []).append(i)
    runs: list[_Run] = []
    _search(steps, sig, 0, len(steps), producer, consumers, protected, runs)
    runs.sort(key=lambda r: r.start)
    items: list[Step | LoopItem] = []
    substitute: dict[int, Tensor] = {}
    position = 0
    for run in runs:
        items.extend(steps[position : run.start])
        items.append(_fold(run, substitute, consumers))
        position = run.end
    items.extend(steps[position:])
    _rewrite(items, substitute, program)
    return items


def _search(
    steps: list[Step],
    sig: np.ndarray,
    lo: int,
    hi: int,
    producer: dict[int, int],
    consumers: dict[int, list[int]],
    protected: set[int],
    runs: list[_Run],
) -> None:
    if hi - lo < 2:
        return
    best: _Run | None = None
    tried = 0
    for start, period, count in _candidates(sig, lo, hi):
        if best is not None and period * count < best.period * best.count:
            break
        if tried >= _MAX_CANDIDATES:
            break
        for n in range(count, 1, -1):
            run = _Run(steps, start, period, n, producer, consumers, protected)
            tried += 1
            if run.check():
                if best is None or (
                    period * n,
                    -period,
                    -run.carried_count(),
                ) > (best.period * best.count, -best.period, -best.carried_count()):
                    best = run
                break
    if best is None:
        return
    runs.append(best)
    _search(steps, sig, lo, best.start, producer, consumers, protected, runs)
    _search(steps, sig, best.end, hi, producer, consumers, protected, runs)


def _fold(run: _Run, substitute: dict[int, Tensor], consumers: dict[int, list[int]]) -> LoopItem:
    """Build the LoopItem of a checked run; records last-window -> body substitutions."""
    s = run.start
    body = [Step(st.op, st.inputs, st.params, st.output, st.node) for st in run.window(0)]
    # Each table is read through a placeholder of its own: window 0's constant may also be
    # read, unindexed, by a slot where every window shares it.
    refs: dict[int, Table] = {}
    placeholders: dict[int, Tensor] = {}
    for (j, m), table in run.tables.items():
        if id(table) not in placeholders:
            first = table.entries[0]
            placeholders[id(table)] = Tensor(
                first.dtype, first.shape, first.hint, Role.WEIGHT, first.data
            )
            refs[id(placeholders[id(table)])] = table
        inputs = list(body[j].inputs)
        inputs[m] = placeholders[id(table)]
        body[j].inputs = tuple(inputs)
    before: list[Step] = []
    tail: list[Step] = []
    carry_var: dict[int, Tensor] = {}
    for k, init in sorted(run.carried.items()):
        out = body[k].output
        readers = [
            (j, m)
            for (j, m), slot in run.slots.items()
            if slot.kind == "prev" and slot.position == k
        ]
        direct = all(j < k or (j == k and _inplace_ok(body[j].op)) for j, _ in readers)
        reusable = (
            init.role is Role.TEMP
            and id(init) not in run.protected
            and all(c in {s + j for j, _ in readers} or c < s for c in consumers.get(id(init), []))
            and not any(init is v for v in carry_var.values())
        )
        if direct:
            carry = out
            if reusable:
                # The body writes position k straight into the carried value's variable.
                carry = init
                body[k].output = init
                _replace_output(body, out, init)
                substitute[id(out)] = init
            else:
                before.append(Step(TRANSFER, (init,), (), out, body[k].node))
        else:
            carry = (
                init
                if reusable
                else Tensor(out.dtype, out.shape, out.hint + "_prev", Role.TEMP, dims=out.dims)
            )
            if not reusable:
                before.append(Step(TRANSFER, (init,), (), carry, body[k].node))
            tail.append(Step(TRANSFER, (body[k].output,), (), carry, body[k].node))
        carry_var[k] = carry
        for j, m in readers:
            inputs = list(body[j].inputs)
            inputs[m] = carry
            body[j].inputs = tuple(inputs)
    body.extend(tail)
    _name_body(run, body)
    last = run.window(run.count - 1)
    for j, step in enumerate(last):
        substitute.setdefault(id(step.output), body[j].output)
    tables = list(dict.fromkeys(run.tables.values()))
    return LoopItem(body, run.count, tables, refs, before)


def _replace_output(body: list[Step], old: Tensor, new: Tensor) -> None:
    for step in body:
        if any(t is old for t in step.inputs):
            step.inputs = tuple(new if t is old else t for t in step.inputs)


def _inplace_ok(op: str) -> bool:
    if op == TRANSFER:
        return False
    from openinfer_jax.ops import registry

    opdef = registry.get(op)
    return opdef is not None and opdef.inplace


def _name_body(run: _Run, body: list[Step]) -> None:
    """Body variables named without the layer number (``layers_0_attn_q`` -> ``layers_attn_q``)."""
    second = run.window(1)
    for j, step in enumerate(body[: run.period]):
        out = step.output
        if out.role is not Role.TEMP:
            continue
        merged = _merge_hints(out.hint, second[j].output.hint)
        if merged is not None:
            out.hint = merged


def _merge_hints(a: str, b: str) -> str | None:
    pa, pb = re.split(r"(\d+)", a), re.split(r"(\d+)", b)
    if len(pa) != len(pb):
        return None
    diff = [i for i, (x, y) in enumerate(zip(pa, pb, strict=True)) if x != y]
    if len(diff) != 1 or diff[0] % 2 == 0:
        return None
    merged = pa[: diff[0]] + pa[diff[0] + 1 :]
    return "".join(merged)


def _rewrite(items: list[Step | LoopItem], substitute: dict[int, Tensor], program: Program) -> None:
    """Point reads of last-window values (after their loop) at the body's variables."""
    if not substitute:
        return

    def sub(t: Tensor) -> Tensor:
        while id(t) in substitute and substitute[id(t)] is not t:
            t = substitute[id(t)]
        return t

    for item in items:
        if isinstance(item, Step):
            item.inputs = tuple(sub(t) for t in item.inputs)
    outputs = []
    for name, t in program.outputs:
        body_var = sub(t)
        if body_var is not t:
            body_var.hint = name  # the loop's variable holds this output after the loop
        outputs.append((name, body_var))
    program.outputs = outputs
    for pair in program.state:
        pair.output = sub(pair.output)
