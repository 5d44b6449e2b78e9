"""Reuse of device buffers and pipelines across steps (the bookkeeping; no `kp` here).

A `kp.Algorithm` is a compute pipeline plus a descriptor set bound to fixed buffers, and
creating one is the costly part of a dispatch (lavapipe compiles the pipeline to machine
code: about 14 ms, against 0.2 ms for recording a dispatch of an existing one). Kompute
cannot rebind an algorithm's buffers without rebuilding its pipeline, so reuse works the
other way round: the same buffers come back.

* `BufferPool` keeps the device buffer of a tensor nobody references any more, keyed by
  its size in words, and hands it to the next tensor of that size. A buffer returns to the
  pool only when its last `DeviceTensor` is garbage: no variable, snapshot, pending
  dispatch or view (views hold their base) can still see it, so reuse never aliases a
  live value. A take names its site (the backend uses the allocation's position in the
  step), and the pool prefers the buffers it gave that site before, so a streaming step that
  allocates the same sizes in the same order gets the same buffers every step (three per
  site remembered: a persistent value written each step alternates between two buffers,
  or three when the step also holds it under another name).
* `PipelineCache` maps (kernel, bound buffers, grid, push-constant size) to the algorithm,
  least recently used first out, and forgets the algorithms of a buffer that leaves the
  pool (they would keep its memory alive).
* `Tape` is a recorded run of dispatches (`VulkanBackend.start_tape`): the buffers its
  results were given and the kp operations that computed them. Replaying it
  (`VulkanBackend.replay_tape`) takes those very buffers back from the pool and appends the
  same operations, so a step that repeats skips the per-op work entirely; it is refused
  (nothing changed) when one of the buffers is not free.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BufferPool", "PipelineCache", "Tape"]


class PipelineCache:
    """Algorithms by key (kernel digest, buffer ids, grid, push words), at most `capacity`."""

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self._by_buffer: dict[int, set[Hashable]] = {}
        #: Algorithms created (misses) and reused (hits) since the backend started.
        self.created = 0
        self.reused = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable, buffers: tuple[int, ...], make: Callable[[], Any]) -> Any:
        """The algorithm for `key`, made with `make()` on a miss; `buffers` are the ids
        of the buffers it binds (to forget it with `forget_buffer`)."""
        algo = self._entries.get(key)
        if algo is not None:
            self._entries.move_to_end(key)
            self.reused += 1
            return algo
        algo = make()
        self.created += 1
        self._entries[key] = algo
        for buffer in buffers:
            self._by_buffer.setdefault(buffer, set()).add(key)
        if len(self._entries) > self.capacity:
            old_key, _ = self._entries.popitem(last=False)
            self._unindex(old_key)
        return algo

    def forget_buffer(self, buffer: int) -> None:
        """Drop every algorithm bound to `buffer` (its memory is being released)."""
        for key in self._by_buffer.pop(buffer, ()):
            if self._entries.pop(key, None) is not None:
                self._unindex(key, skip=buffer)

    def _unindex(self, key: Hashable, skip: int | None = None) -> None:
        for buffer in key[1]:  # type: ignore[index]  # key = (digest, buffers, ...)
            if buffer == skip:
                continue
            keys = self._by_buffer.get(buffer)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_buffer[buffer]


_SITES = 1 << 16  # remembered sites (forgotten all at once beyond this)


class BufferPool:
    """Device buffers of dead tensors by word count, up to `limit_bytes` in all."""

    def __init__(self, limit_bytes: int, on_drop: Callable[[int], None]) -> None:
        self.limit_bytes = limit_bytes
        self._free: dict[int, dict[int, Any]] = {}  # words -> {buffer id: handle}
        self._sites: dict[Hashable, tuple[int, ...]] = {}  # site -> its last buffers
        self._bytes = 0
        self._on_drop = on_drop
        #: Buffers allocated anew and taken from the pool since the backend started.
        self.allocated = 0
        self.reused = 0

    @property
    def held_bytes(self) -> int:
        """Bytes of the buffers waiting in the pool."""
        return self._bytes

    def take(self, words: int, site: Hashable = None) -> tuple[int, Any] | None:
        """A free (buffer id, handle) of `words` words, or None (then allocate one and
        `note` it): one this `site` had before if free, else the last one given back."""
        free = self._free.get(words)
        if not free:
            return None
        for chosen in self._sites.get(site, ()):
            if chosen in free:
                break
        else:
            chosen = next(reversed(free))
        handle = free.pop(chosen)
        self._bytes -= 4 * words
        self.reused += 1
        self.note(site, chosen)
        return chosen, handle

    def all_free(self, wanted: list[tuple[Any, ...]]) -> bool:
        """Whether every buffer of `wanted` ((words, buffer id, ...) each, no id twice) is
        in the pool."""
        free = self._free
        empty: dict[int, Any] = {}
        return all(buffer in free.get(words, empty) for words, buffer, *_rest in wanted)

    def take_buffer(self, words: int, buffer: int) -> Any | None:
        """The handle of free buffer `buffer` (of `words` words), taken; None if it is not
        free (a live tensor holds it, or it left the pool)."""
        free = self._free.get(words)
        handle = free.pop(buffer, None) if free else None
        if handle is not None:
            self._bytes -= 4 * words
            self.reused += 1
        return handle

    def note(self, site: Hashable, buffer: int) -> None:
        """Remember that `site` got `buffer` (its last three are preferred next time)."""
        if site is None:
            return
        last = self._sites.get(site, ())
        if last[:1] != (buffer,):
            if len(self._sites) >= _SITES:
                self._sites.clear()
            self._sites[site] = (buffer, *[b for b in last if b != buffer][:2])

    def give(self, words: int, buffer: int, handle: Any) -> None:
        """Take back a buffer whose last tensor died; beyond the limit it is released."""
        if self._bytes + 4 * words > self.limit_bytes:
            self._on_drop(buffer)
            return
        self._free.setdefault(words, {})[buffer] = handle
        self._bytes += 4 * words

    def clear(self) -> None:
        """Release every pooled buffer."""
        for free in self._free.values():
            for buffer in free:
                self._on_drop(buffer)
        self._free.clear()
        self._bytes = 0


@dataclass(eq=False)
class Tape:
    """A recorded run of dispatches, replayable while its result buffers are free.

    `allocs` are the results and scratch tensors in allocation order, as (words, buffer
    id, dtype, shape); `ops` the kp operations appended to the batch (barriers and
    dispatches: they bind the buffers, so the buffers must be the same on a replay);
    `keep` what the operations bind besides results and the caller's inputs (uploaded
    constants), held so that their buffers stay theirs. `made` holds the result tensors
    themselves while recording (for the caller to match its values against), then None.
    """

    allocs: list[tuple[int, int, Any, tuple[int, ...]]] = field(default_factory=list)
    ops: list[Any] = field(default_factory=list)
    keep: list[Any] = field(default_factory=list)
    dispatches: int = 0
    made: list[Any] | None = field(default_factory=list)
