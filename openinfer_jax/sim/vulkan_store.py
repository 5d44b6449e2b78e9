"""The variable store of a `device="vulkan"` executor: op results stay on the Vulkan device.

A Vulkan-executed op leaves its output in a device buffer (`DeviceResident`); the next
Vulkan op reads that buffer directly. The host copy is made only when something on the
host side reads the entry (a CPU-fallback op, `fetch`, a branch condition or loop bound,
a yield) — that is, on the first ordinary dict read — and is then kept next to the
buffer, so each value crosses to the host at most once.

Persistent memory stays on the device too: cache tables are device tensors
(vulkan_tables.py), `cache.read` of a table puts a `DeviceResident` in the store, and
`cache.write` of a resident value copies it on the device (a persistent tensor just keeps
the `DeviceResident`: device buffers are never written in place, so sharing is safe).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import jax.numpy as jnp
import numpy as np

from openinfer_jax.sim.values import Ragged, bucket_size

__all__ = ["DeviceResident", "DeviceStore"]


@dataclass(eq=False)
class DeviceResident:
    """A store entry held in a Vulkan device tensor; `host` is its copy once downloaded."""

    tensor: Any  # openinfer_jax.vk.DeviceTensor (vk is optional, so no import here)
    host: Any = field(default=None, repr=False)
    #: (axis, valid length) when this is a growing cache slice (vulkan_tables.py): the host
    #: copy is then zero-padded along `axis` to its bucket and returned as a `Ragged`.
    growing: tuple[int, int] | None = None

    # Shape and dtype as an array would show them, so the shape/dtype checks of cache
    # writes apply to resident values without downloading them.
    @property
    def shape(self) -> tuple[int, ...]:
        """The tensor's logical shape."""
        return tuple(self.tensor.shape)

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype of the simulator representation (packed types: int8/uint8)."""
        return np.dtype(self.tensor.dtype.numpy)


def _bucketed(value: Any, axis: int, length: int) -> Ragged:
    """`value` zero-padded along `axis` from `length` to its bucket, as a `Ragged`."""
    pad = [(0, 0)] * value.ndim
    pad[axis] = (0, bucket_size(length) - length)
    return Ragged(jnp.pad(value, pad), axis, length)


class DeviceStore(dict[str, Any]):
    """A dict of variable values in which some entries may live on the Vulkan device.

    Ordinary reads (`[]`, `get`, `pop`, `values`, `items`) return host values, downloading a
    `DeviceResident` entry the first time through `download` (which returns the host value
    in the simulator's representation). `device_tensor` reads the device buffer without a
    round trip. `copy` keeps entries resident (snapshots for rollback and consumer forks);
    the buffers are never written in place, so sharing them between snapshots is safe.
    """

    def __init__(self, download: Callable[[Any], Any]) -> None:
        super().__init__()
        self._download = download

    def _host(self, key: str, raw: Any) -> Any:
        return self.host_value(raw)

    def host_value(self, raw: Any) -> Any:
        """The host value of a raw entry: a `DeviceResident` is downloaded once, then kept.

        Also for resident values held outside the dict (persistent tensors, see caches.py).
        """
        if isinstance(raw, DeviceResident):
            if raw.host is None:
                raw.host = self._download(raw.tensor)
                if raw.growing is not None:
                    raw.host = _bucketed(raw.host, *raw.growing)
            return raw.host
        return raw

    def raw(self, key: str) -> Any:
        """The entry as stored (a `DeviceResident` stays one), or None; never downloads."""
        return dict.get(self, key)

    def __getitem__(self, key: str) -> Any:
        return self._host(key, super().__getitem__(key))

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        """The host value of `key` (downloaded if it is device resident), else `default`."""
        if key not in self:
            return default
        return self[key]

    def pop(self, key: str, *default: Any) -> Any:  # type: ignore[override]
        """Remove `key`; returns its host value, or the `DeviceResident` if never downloaded.

        The executor pops only to drop values (volatile reset, inserted inputs at step
        end); downloading a value about to be discarded would be a wasted round trip.
        """
        if key not in self and default:
            return default[0]
        raw = super().pop(key)
        if isinstance(raw, DeviceResident) and raw.host is not None:
            return raw.host
        return raw

    def values(self) -> Iterator[Any]:  # type: ignore[override]
        """Host values (downloading resident entries)."""
        return (self[k] for k in list(self.keys()))

    def items(self) -> Iterator[tuple[str, Any]]:  # type: ignore[override]
        """(name, host value) pairs (downloading resident entries)."""
        return ((k, self[k]) for k in list(self.keys()))

    def copy(self) -> DeviceStore:
        """A shallow copy that keeps resident entries on the device."""
        other = DeviceStore(self._download)
        for key in self.keys():
            dict.__setitem__(other, key, dict.__getitem__(self, key))
        return other

    def device_tensor(self, key: str) -> Any | None:
        """The device tensor holding `key`, or None if the entry is (only) a host value."""
        raw = dict.get(self, key)
        return raw.tensor if isinstance(raw, DeviceResident) else None

    def keep_resident(self, key: str, host: Any, tensor: Any) -> None:
        """Record that `key`'s current host value `host` also lives in `tensor` on the device."""
        dict.__setitem__(self, key, DeviceResident(tensor, host))
