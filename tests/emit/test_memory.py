"""The static memory plan: buffers live at the same time never share bytes; pinned buffers
share with nothing; the arena is no larger than the sum of all buffers, no smaller than the
largest set of simultaneously live ones; placement is deterministic."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from openinfer_jax.emit.memory import ALIGN, Buffer, plan_memory

_buffer = st.tuples(
    st.integers(min_value=1, max_value=5000),
    st.one_of(st.none(), st.tuples(st.integers(0, 40), st.integers(0, 20))),
)


def _make(specs: list[tuple[int, tuple[int, int] | None]]) -> list[Buffer]:
    out = []
    for k, (size, live) in enumerate(specs):
        if live is None:
            out.append(Buffer(f"b{k}", size))
        else:
            out.append(Buffer(f"b{k}", size, live[0], live[0] + live[1]))
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(_buffer, min_size=1, max_size=25))
def test_plan_never_overlaps_live_buffers(specs: list[tuple[int, tuple[int, int] | None]]) -> None:
    plan = plan_memory(_make(specs))
    bufs = list(plan.buffers.values())
    for i, a in enumerate(bufs):
        assert a.offset % ALIGN == 0
        assert a.offset + a.nbytes <= plan.arena_bytes
        for b in bufs[i + 1 :]:
            if a.overlaps(b):
                assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset, (a, b)
    assert plan.arena_bytes <= plan.total_bytes
    positions = {
        p for b in bufs if not b.pinned for p in range(b.first or 0, (b.last or 0) + 1)
    } or {0}
    pinned = sum(-(-b.nbytes // ALIGN) * ALIGN for b in bufs if b.pinned)
    peak = max(
        sum(
            -(-b.nbytes // ALIGN) * ALIGN
            for b in bufs
            if not b.pinned and (b.first or 0) <= p <= (b.last or 0)
        )
        for p in positions
    )
    assert plan.arena_bytes >= pinned + peak


def test_disjoint_lifetimes_share_memory_and_order_is_stable() -> None:
    specs = [(1000, (0, 2)), (1000, (3, 2)), (1000, (6, 1)), (64, None)]
    plan = plan_memory(_make(specs))
    assert plan.arena_bytes == 1024 + 64
    again = plan_memory(_make(list(reversed(specs))))
    assert plan.arena_bytes == again.arena_bytes
    assert "reuse saves" in plan.summary()
