"""The typed statements of an emitted step function, and their rendering to C text.

Lowering (`openinfer_jax.emit.c_lower`) turns the graph's nodes into these statements; each
records the buffer accesses it makes (`Access`: execution position, buffer, read or write),
so the lifetime pass (`openinfer_jax.emit.lifetimes`) can place buffers and decide which
`assign`s only need to set a shape, before anything is rendered. Rendering is the last
stage: `render(statements, ctx)` indents nested statements by their depth and reads the
lifetime decisions from `ctx`; nothing is patched in text afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

__all__ = [
    "Access",
    "AssignZero",
    "CacheStmt",
    "Conditional",
    "Copy",
    "ForLoop",
    "Guarded",
    "OpCall",
    "Raw",
    "RenderContext",
    "Stmt",
    "render",
    "walk",
]

INDENT = "    "


@dataclass(frozen=True)
class Access:
    """One use of a buffer at an execution position (`pos` numbers nodes as they run)."""

    pos: int
    key: str  # the buffer: a variable name, or a consumer's shadow copy (``S_<block>_<var>``)
    write: bool


@dataclass(frozen=True)
class RenderContext:
    """Decisions rendering needs: which `AssignZero`s are dead (only set the shape)."""

    dead_assigns: frozenset[int] = frozenset()
    vulkan: bool = False


@dataclass(frozen=True)
class Stmt:
    """A statement of the step function; `accesses` are the buffer uses it makes itself
    (nested statements carry their own)."""

    accesses: tuple[Access, ...] = field(default=(), kw_only=True)

    def children(self) -> tuple[Stmt, ...]:
        """Nested statements, in execution order."""
        return ()

    def render(self, depth: int, ctx: RenderContext) -> list[str]:
        """The C lines of this statement at indentation `depth`."""
        raise NotImplementedError


def _ind(depth: int) -> str:
    return INDENT * depth


@dataclass(frozen=True)
class Raw(Stmt):
    """C lines at the statement's depth (a line may carry further indentation itself)."""

    lines: tuple[str, ...]

    def render(self, depth: int, ctx: RenderContext) -> list[str]:
        ind = _ind(depth)
        return [ind + line for line in self.lines]


@dataclass(frozen=True)
class OpCall(Stmt):
    """A kernel call for an op node: ``OI_TRY(fn(dst, args...))``.

    `setup` declares and fills prefix-entry tensors and run-time params first. With
    `scratch_elems`, the output aliases an input the kernel still reads: the kernel writes
    the scratch tensor, which is then copied into `dst` (`elem` bytes per element).
    `trace` are the trace records of the results (`c_trace`), inside the node's C block.
    """

    fn: str
    dst: str
    args: tuple[str, ...]
    where: str
    setup: tuple[str, ...] = ()
    scratch_elems: int | None = None
    elem: int = 0
    trace: tuple[str, ...] = ()

    def render(self, depth: int, ctx: RenderContext) -> list[str]:
        ind = _ind(depth)
        args = ", ".join(self.args)
        trace = [f"{ind}    {line}" for line in self.trace]
        if self.scratch_elems is not None:
            return [
                *(ind + line for line in ("{", *self.setup)),
                f"{ind}    oi_tensor T = oi_scratch_tensor({self.scratch_elems});",
                f'{ind}    OI_TRY({self.fn}(&T, {args}), "{self.where}");',
                f'{ind}    OI_TRY(oi_copy({self.dst}, &T, {self.elem}), "{self.where}");',
                *trace,
                f"{ind}}}",
            ]
        call = f'OI_TRY({self.fn}({self.dst}, {args}), "{self.where}");'
        if self.setup:
            return [
                *(ind + line for line in ("{", *self.setup)),
                f"{ind}    {call}",
                *trace,
                f"{ind}}}",
            ]
        return [ind + call, *(ind + line for line in self.trace)]


@dataclass(frozen=True)
class AssignZero(Stmt):
    """An `assign`: zero the buffer at its declared shape, or, when the lifetime pass finds
    the zeros overwritten before any read (`index` in `ctx.dead_assigns`), only set the
    shape (so it does not write memory another buffer may share). On the Vulkan target a
    zeroing writes the arena on the host, so it first waits for pending dispatches."""

    index: int
    tensor: str
    ndim: int
    dims: str
    elem: int
    where: str

    def render(self, depth: int, ctx: RenderContext) -> list[str]:
        ind = _ind(depth)
        if self.index in ctx.dead_assigns:
            return [
                f'{ind}OI_TRY(oi_set_shape(&{self.tensor}, {self.ndim}, {self.dims}), "{self.where}");'
            ]
        sync = [f'{ind}OI_TRY(oi_vk_sync(), "{self.where}");'] if ctx.vulkan else []
        return [
            *sync,
            f'{ind}OI_TRY(oi_zero(&{self.tensor}, {self.ndim}, {self.dims}, {self.elem}), "{self.where}");',
        ]


@dataclass(frozen=True)
class Copy(Stmt):
    """A `transfer`: copy `src` into `dst` (`elem` bytes per element) after `setup`, then
    the `trace` record."""

    dst: str
    src: str
    elem: int
    where: str
    setup: tuple[str, ...] = ()
    trace: str = ""

    def render(self, depth: int, ctx: RenderContext) -> list[str]:
        ind = _ind(depth)
        return [
            *(ind + line for line in ("{", *self.setup)),
            f'{ind}OI_TRY(oi_copy({self.dst}, {self.src}, {self.elem}), "{self.where}");',
            *([ind + self.trace] if self.trace else []),
            f"{ind}}}",
        ]


@dataclass(frozen=True)
class CacheStmt(Stmt):
    """A cache access (`cache.read/write/reset`): its lines inside one C block."""

    lines: tuple[str, ...]

    def render(self, depth: int, ctx: RenderContext) -> list[str]:
        ind = _ind(depth)
        return [f"{ind}{{", *(f"{ind}    {line}" for line in self.lines), f"{ind}}}"]


@dataclass(frozen=True)
class ForLoop(Stmt):
    """A `loop`: ``for (var = lo; var < hi; var++)`` over `body`.

    `start`/`end` are the execution positions of the loop node and of the last node inside
    it: the lifetime pass stretches buffers carried between iterations over that span.
    """

    var: str
    lo: str
    hi: str
    body: tuple[Stmt, ...]
    start: int
    end: int

    def children(self) -> tuple[Stmt, ...]:
        return self.body

    def render(self, depth: int, ctx: RenderContext) -> list[str]:
        ind, v = _ind(depth), self.var
        return [
            f"{ind}{{",
            f"{ind}    int64_t {v};",
            f"{ind}    const int64_t {v}_hi = {self.hi};",
            f"{ind}    for ({v} = {self.lo}; {v} < {v}_hi; {v}++) {{",
            *render(self.body, ctx, depth + 1),
            f"{ind}    }}",
            f"{ind}}}",
        ]


@dataclass(frozen=True)
class Arm:
    """One arm of a `Conditional`: the target block's statements and its end label (for
    `return` inside it), None when nothing jumps there."""

    body: tuple[Stmt, ...]
    end_label: str | None


@dataclass(frozen=True)
class Conditional(Stmt):
    """A `branch`: the target block(s) inlined, under ``if (cond != 0)`` when conditional."""

    cond: str | None
    arms: tuple[Arm, ...]

    def children(self) -> tuple[Stmt, ...]:
        return tuple(s for arm in self.arms for s in arm.body)

    def render(self, depth: int, ctx: RenderContext) -> list[str]:
        ind = _ind(depth)
        out = [f"{ind}if (({self.cond}) != 0) {{" if self.cond is not None else f"{ind}{{"]
        for k, arm in enumerate(self.arms):
            if k == 1:
                out.append(f"{ind}}} else {{")
            out += render(arm.body, ctx, depth + 1)
            if arm.end_label is not None:
                out.append(f"{ind}    {arm.end_label}:;")
        out.append(f"{ind}}}")
        return out


@dataclass(frozen=True)
class Guarded(Stmt):
    """``head {`` `body` ``}``: a consumer run when its run-time condition holds."""

    head: str
    body: tuple[Stmt, ...]

    def children(self) -> tuple[Stmt, ...]:
        return self.body

    def render(self, depth: int, ctx: RenderContext) -> list[str]:
        ind = _ind(depth)
        return [f"{ind}{self.head} {{", *render(self.body, ctx, depth + 1), f"{ind}}}"]


def render(stmts: Sequence[Stmt], ctx: RenderContext, depth: int) -> list[str]:
    """The C lines of `stmts` at indentation `depth`."""
    out: list[str] = []
    for stmt in stmts:
        out += stmt.render(depth, ctx)
    return out


def walk(stmts: Sequence[Stmt]) -> Iterator[Stmt]:
    """Every statement, nested ones included, in execution (and access) order."""
    for stmt in stmts:
        yield stmt
        yield from walk(stmt.children())
