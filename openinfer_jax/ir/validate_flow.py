"""Validation of control flow between blocks: yield/await rules and branch cycles.

Terms (reference §3, docs/semantics.md): a *branch target* is a block some `branch`
names; a *consumer* is any other non-entry block. When entry yields, the consumers run on
a snapshot of the yielded variables; entry's `await` takes them back.
"""

from __future__ import annotations

from openinfer_jax.ir.nodes import (
    Await,
    Block,
    Branch,
    Loop,
    Node,
    SourceLoc,
    Yield,
)
from openinfer_jax.ir.validate_context import Context
from openinfer_jax.ir.validate_nodes import used_blocks
from openinfer_jax.ir.walk import walk

__all__ = ["check_flow"]


def _loc(node: Node | None) -> SourceLoc | None:
    """A node's source location (the base class declares none; every node kind has one)."""
    return getattr(node, "loc", None)


def _where(block: Block, node: Node | None = None) -> str:
    if node is None:
        return f"block '{block.name}'"
    kind = type(node).__name__.lower()
    return f"block '{block.name}' ({kind})"


def _check_entry_sequence(ctx: Context, entry: Block, awaited_by_consumers: set[str]) -> None:
    """Walk entry in execution order, tracking what is yielded and not yet awaited.

    A loop body is walked twice, so a yield that repeats without an await is seen. Walking
    a body from the same outstanding set gives the same result and the same errors, so each
    (loop, outstanding set) pair is walked once: nested loops cost linear, not 2**depth.
    """
    walked: dict[tuple[int, frozenset[str]], dict[str, Yield]] = {}

    def run(nodes: tuple[Node, ...], outstanding: dict[str, Yield]) -> dict[str, Yield]:
        for node in nodes:
            if isinstance(node, Loop):
                for _ in range(2):
                    key = (id(node), frozenset(outstanding))
                    if key not in walked:
                        walked[key] = run(node.body, dict(outstanding))
                    outstanding = dict(walked[key])
            else:
                _step(ctx, entry, node, outstanding, awaited_by_consumers)
        return outstanding

    run(entry.nodes, {})


def _step(
    ctx: Context,
    entry: Block,
    node: Node,
    outstanding: dict[str, Yield],
    awaited_by_consumers: set[str],
) -> None:
    """One non-loop node of entry: update `outstanding` and report what it breaks."""
    if isinstance(node, Yield):
        if outstanding:
            names = ", ".join(outstanding)
            ctx.error(
                f"entry yields again while {names} {'is' if len(outstanding) == 1 else 'are'} still "
                f"with the consumers; `await {names};` is required before the next yield",
                _loc(node),
                _where(entry, node),
            )
        for name in node.vars:
            outstanding[name] = node
            if name not in awaited_by_consumers:
                ctx.error(
                    f"entry yields '{name}' but no consumer block awaits it; add a block that "
                    f"starts with `await {name};` or drop it from the yield",
                    node.loc,
                    _where(entry, node),
                )
    elif isinstance(node, Await):
        for name in node.vars:
            if name not in outstanding:
                ctx.error(
                    f"entry awaits '{name}' but has not yielded it; `yield {name};` first",
                    node.loc,
                    _where(entry, node),
                )
            outstanding.pop(name, None)
    else:
        for written in node.writes():
            if written in outstanding:
                ctx.error(
                    f"entry writes '{written}' while it is yielded to the consumers; "
                    f"`await {written};` before writing it",
                    _loc(node),
                    _where(entry, node),
                )


def _check_consumers(ctx: Context, consumers: list[Block], entry_yields: set[str]) -> set[str]:
    mutators: dict[str, tuple[Block, Node]] = {}
    awaited_all: set[str] = set()
    for block in consumers:
        last = block.nodes[-1] if block.nodes else None
        if not isinstance(last, Yield):
            ctx.error(
                f"block '{block.name}' is never branched to, so it is a consumer of entry's yield and "
                f"must end with `yield ...;` (or branch to it from another block)",
                _loc(last) or block.loc,
                _where(block),
            )
        awaited: set[str] = set()
        for node in walk(block.nodes):
            if isinstance(node, Await):
                for name in node.vars:
                    awaited.add(name)
                    if name not in entry_yields:
                        ctx.error(
                            f"consumer '{block.name}' awaits '{name}', which entry never yields; "
                            f"add `yield {name};` to entry",
                            node.loc,
                            _where(block, node),
                        )
        awaited_all |= awaited
        if isinstance(last, Yield):
            given_back = set(last.vars)
            for name in sorted(awaited - given_back):
                ctx.error(
                    f"consumer '{block.name}' awaits '{name}' but does not yield it back; end with "
                    f"`yield {', '.join(sorted(awaited))};`",
                    last.loc,
                    _where(block, last),
                )
            for name in last.vars:
                if name not in awaited:
                    ctx.error(
                        f"consumer '{block.name}' yields '{name}' without awaiting it; start with "
                        f"`await {name};`",
                        last.loc,
                        _where(block, last),
                    )
        for node in walk(block.nodes):
            for written in node.writes():
                if written not in entry_yields:
                    continue
                if written in mutators and mutators[written][0] is not block:
                    first = mutators[written][0]
                    ctx.error(
                        f"'{written}' is mutated by consumers '{first.name}' and '{block.name}'; "
                        f"only one consumer may mutate a variable (others may read it)",
                        _loc(node),
                        _where(block, node),
                    )
                else:
                    mutators.setdefault(written, (block, node))
    return awaited_all


def _check_yield_last(ctx: Context, block: Block) -> None:
    last = block.nodes[-1] if block.nodes else None
    for node in walk(block.nodes):
        if isinstance(node, Yield) and node is not last:
            ctx.error(
                f"in block '{block.name}' `yield` ends the block, so it must be its last node",
                node.loc,
                _where(block, node),
            )


def _check_cycles(ctx: Context, blocks: dict[str, Block]) -> None:
    edges: dict[str, list[Branch]] = {
        name: [n for n in walk(b.nodes) if isinstance(n, Branch)] for name, b in blocks.items()
    }
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    reported: set[frozenset[str]] = set()

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for branch in edges.get(name, []):
            for target in (branch.then_block, branch.else_block):
                if target is None or target not in blocks:
                    continue
                if state.get(target) == 1:
                    cycle = [*path[path.index(target) :], target]
                    key = frozenset(cycle)
                    if key not in reported:
                        reported.add(key)
                        ctx.error(
                            f"branch to '{target}' makes a cycle {' -> '.join(cycle)}; a branch is a call "
                            f"that returns, so this would never end (use a loop)",
                            branch.loc,
                            _where(blocks[name], branch),
                        )
                elif target not in state:
                    visit(target, [*path, target])
        state[name] = 2

    for name in blocks:
        if name not in state:
            visit(name, [name])


def check_flow(ctx: Context) -> None:
    """Yield/await rules and branch cycles (see docs/validation.md, "Control flow")."""
    blocks = {b.name: b for b in ctx.graph.blocks}
    targets = used_blocks(ctx.graph.blocks)
    entry = blocks.get("entry")
    consumers = [b for b in ctx.graph.blocks if b.name != "entry" and b.name not in targets]
    entry_yields = (
        {v for n in walk(entry.nodes) if isinstance(n, Yield) for v in n.vars} if entry else set()
    )
    for block in ctx.graph.blocks:
        if block.name != "entry":
            _check_yield_last(ctx, block)
    if entry is not None:  # without entry there is no yield to consume (reported elsewhere)
        awaited = _check_consumers(ctx, consumers, entry_yields)
        _check_entry_sequence(ctx, entry, awaited)
    _check_cycles(ctx, blocks)
