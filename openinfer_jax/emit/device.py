"""The device-architecture JSON (seed 002): parsing and validation into a `DeviceArch`.

Keys: ``device``, ``limits``, ``features``, ``memory``, ``preferences`` (all required, with
the fields of `SCHEMA`; the C target also reads the optional ``preferences.threads``,
``preferences.gemm_block``, ``preferences.gemv_max_rows`` and ``limits.max_threads``, see
`openinfer_jax.emit.c_options`), plus the optional ``cache_capacity``: the capacity used for cache
table axes that have no ``@fixed`` size (an int for every axis, or ``{"K": 64}`` /
``{"K": {"t": 64}}`` per table or per table axis). Every problem raises `SynthesisError`
naming the JSON path of the field and what it should hold.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openinfer_jax.core.errors import SynthesisError
from openinfer_jax.emit.c_options import DenseOptions

__all__ = [
    "PACKAGED_ARCH_DIR",
    "SCHEMA",
    "DeviceArch",
    "host_arch",
    "load_arch",
    "packaged_arch",
    "packaged_arch_names",
]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _nonneg_int(value: Any) -> bool:
    return _is_int(value) and value >= 0


def _string(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _three_ints(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 3 and all(_nonneg_int(v) for v in value)


# (check, what it must be) per field; the order is the order fields are reported in.
_Check = tuple[Callable[[Any], bool], str]
SCHEMA: dict[str, dict[str, _Check]] = {
    "device": {
        "type": (lambda v: v in ("cpu", "gpu"), '"cpu" or "gpu"'),
        "api": (lambda v: v in ("c", "vulkan"), '"c" or "vulkan"'),
        "vendor": (_string, "a non-empty string"),
        "name": (_string, "a non-empty string"),
        "architecture": (_string, "a non-empty string"),
        "driver": (_string, "a non-empty string"),
    },
    "limits": {
        "max_workgroup_size": (_three_ints, "a list of 3 non-negative ints"),
        "max_shared_memory_bytes": (_nonneg_int, "a non-negative int"),
        "max_push_constants_bytes": (_nonneg_int, "a non-negative int"),
        "max_storage_buffer_range_bytes": (_nonneg_int, "a non-negative int"),
    },
    "features": {
        "fp16": (_flag, "true or false"),
        "int8": (_flag, "true or false"),
        "subgroup_ops": (_flag, "true or false"),
        "cooperative_matrix": (_flag, "true or false"),
    },
    "memory": {
        "global_bytes": (_nonneg_int, "a non-negative int"),
        "shared_bytes_per_sm": (_nonneg_int, "a non-negative int"),
        "l2_bytes": (_nonneg_int, "a non-negative int"),
    },
    "preferences": {
        "default_precision": (lambda v: v in ("fp16", "fp32", "fp64"), '"fp16", "fp32" or "fp64"'),
        "prefer_fusion": (_flag, "true or false"),
        "prefer_persistent_kv": (_flag, "true or false"),
        "max_kernel_ops": (lambda v: _is_int(v) and v >= 1, "an int >= 1"),
    },
}


@dataclass(frozen=True)
class DeviceArch:
    """A validated device description. `raw` keeps the sections as given (plain JSON values)."""

    raw: Mapping[str, Mapping[str, Any]]
    cache_capacity: int | Mapping[str, Any] | None = None
    source: str = field(default="<dict>", compare=False)

    @property
    def name(self) -> str:
        """The device's display name."""
        return str(self.raw["device"]["name"])

    @property
    def api(self) -> str:
        """``"c"`` or ``"vulkan"``."""
        return str(self.raw["device"]["api"])

    def limit(self, key: str) -> Any:
        """A value of the ``limits`` section."""
        return self.raw["limits"][key]

    def memory(self, key: str) -> int:
        """A value of the ``memory`` section (bytes)."""
        return int(self.raw["memory"][key])

    def feature(self, key: str) -> bool:
        """A flag of the ``features`` section."""
        return bool(self.raw["features"][key])

    def capacity_for(self, table: str, axis: str) -> int | None:
        """The configured capacity of `table`'s index `axis`, or None when not configured."""
        cap = self.cache_capacity
        if cap is None:
            return None
        if _is_int(cap):
            return int(cap)  # type: ignore[arg-type]
        assert isinstance(cap, Mapping)
        entry: Any = cap.get(table)
        if _is_int(entry):
            return int(entry)
        if isinstance(entry, Mapping) and _is_int(entry.get(axis)):
            return int(entry[axis])
        return None

    @property
    def dense(self) -> DenseOptions:
        """Threads and cache blocking of the C target's dense kernels (optional
        ``preferences.threads`` / ``gemm_block`` / ``gemv_max_rows``, ``limits.max_threads``)."""
        return DenseOptions.from_preferences(
            self.raw["preferences"], self.raw["limits"], self.source
        )

    def describe(self) -> str:
        """One line for generated comments: name, type, api (no paths, so output is reproducible)."""
        dev = self.raw["device"]
        return f"{dev['name']} ({dev['type']}, {dev['api']}, {dev['architecture']})"


def _check_capacity(value: Any, where: str) -> None:
    if _is_int(value):
        if value < 1:
            raise SynthesisError(f"{where}: must be >= 1, got {value}")
        return
    if not isinstance(value, dict):
        raise SynthesisError(f"{where}: must be an int or an object {{table: int | {{axis: int}}}}")
    for table, entry in value.items():
        if isinstance(entry, dict):
            for axis, n in entry.items():
                if not _is_int(n) or n < 1:
                    raise SynthesisError(f"{where}.{table}.{axis}: must be an int >= 1, got {n!r}")
        elif not _is_int(entry) or entry < 1:
            raise SynthesisError(
                f"{where}.{table}: must be an int >= 1 or {{axis: int}}, got {entry!r}"
            )


def parse_arch(data: Any, source: str = "<dict>") -> DeviceArch:
    """Validate a decoded device JSON object.

    Raises:
        SynthesisError: a missing section or field, a value of the wrong kind, or an unknown
            top-level key, naming the JSON path (e.g. ``limits.max_workgroup_size``).
    """
    if not isinstance(data, dict):
        raise SynthesisError(f"{source}: a device architecture must be a JSON object")
    known = set(SCHEMA) | {"cache_capacity"}
    for key in sorted(data):
        if key not in known:
            raise SynthesisError(
                f"{source}: unknown top-level key {key!r}; expected {', '.join(sorted(known))}"
            )
    sections: dict[str, dict[str, Any]] = {}
    for section, fields in SCHEMA.items():
        if section not in data:
            raise SynthesisError(
                f"{source}: missing section {section!r} (fields: {', '.join(fields)})"
            )
        body = data[section]
        if not isinstance(body, dict):
            raise SynthesisError(f"{source}: {section} must be an object")
        for name, (check, what) in fields.items():
            if name not in body:
                raise SynthesisError(f"{source}: missing field {section}.{name} (must be {what})")
            if not check(body[name]):
                raise SynthesisError(
                    f"{source}: {section}.{name} must be {what}, got {body[name]!r}"
                )
        sections[section] = dict(body)
    cap = data.get("cache_capacity")
    if cap is not None:
        _check_capacity(cap, f"{source}: cache_capacity")
    arch = DeviceArch(sections, cap, source)
    arch.dense  # noqa: B018 - checks the optional thread/blocking keys now, naming the field
    return arch


# Device descriptions shipped in the package, selectable by name (`--arch cortex-a53`).
PACKAGED_ARCH_DIR = Path(__file__).parent / "devices"


def packaged_arch_names() -> list[str]:
    """Names of the device JSONs shipped in the package (``cortex-a53``, ``ada-mock``)."""
    return sorted(p.stem.replace("_", "-") for p in PACKAGED_ARCH_DIR.glob("*.json"))


def packaged_arch(name: str | os.PathLike[str]) -> Path | None:
    """The packaged device JSON called `name` (``cortex-a53`` or ``cortex_a53``), else None.

    A value that looks like a path (a separator or a ``.json`` suffix) is never a name.
    """
    text = os.fspath(name)
    if os.sep in text or "/" in text or text.endswith(".json"):
        return None
    path = PACKAGED_ARCH_DIR / f"{text.replace('-', '_')}.json"
    return path if path.is_file() else None


def load_arch(arch: str | os.PathLike[str] | Mapping[str, Any] | DeviceArch) -> DeviceArch:
    """A `DeviceArch` from a path to a JSON file, a decoded dict, or an existing arch.

    Raises:
        SynthesisError: the file cannot be read or is not JSON, or a field is missing/invalid.
    """
    if isinstance(arch, DeviceArch):
        return arch
    if isinstance(arch, Mapping):
        return parse_arch(dict(arch))
    path = packaged_arch(arch) or Path(arch)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SynthesisError(
            f"cannot read device architecture {path.name}: {err.strerror}; give a device JSON "
            f"file or a packaged device name ({', '.join(packaged_arch_names())})"
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise SynthesisError(
            f"{path.name}:{err.lineno}:{err.colno}: not valid JSON: {err.msg}"
        ) from None
    return parse_arch(data, path.name)


def host_arch(api: str = "c") -> DeviceArch:
    """A generic host description for `Synthesizer("c")` / `Synthesizer("vulkan")` (no cache capacity)."""
    kind = "cpu" if api == "c" else "gpu"
    return parse_arch(
        {
            "device": {
                "type": kind,
                "api": api,
                "vendor": "generic",
                "name": f"generic-{api}",
                "architecture": "generic",
                "driver": "none",
            },
            "limits": {
                "max_workgroup_size": [256, 256, 64],
                "max_shared_memory_bytes": 32768,
                "max_push_constants_bytes": 128,
                "max_storage_buffer_range_bytes": 2**31 - 1,
            },
            "features": {
                "fp16": True,
                "int8": True,
                "subgroup_ops": False,
                "cooperative_matrix": False,
            },
            "memory": {"global_bytes": 2**34, "shared_bytes_per_sm": 32768, "l2_bytes": 2**22},
            "preferences": {
                "default_precision": "fp32",
                "prefer_fusion": False,
                "prefer_persistent_kv": True,
                "max_kernel_ops": 1,
            },
        },
        f"generic-{api}",
    )
