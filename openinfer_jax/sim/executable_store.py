"""Compiled wide-region executables kept on disk, so a new process neither traces nor
compiles a region it has run before.

JAX's persistent compilation cache (compile_cache.py) saves XLA's work only: a new process
still traces every wide region (tens of thousands of primitives for a 30-layer decoder) and
lowers it to StableHLO before the cache can be asked. This store keeps the finished
executable itself (``jax.experimental.serialize_executable``) with what tracing told the
runner about the outputs, under a key computed from the region's host program alone:

- the program's static steps, with node identities replaced by what the traced function
  reads from them (the op name and its resolved params);
- the inputs' pytree structure, shapes, dtypes and padding; the tables' buffer shapes;
- the output layout's inputs (which written variables are read later, lean or not);
- the environment: JAX and jaxlib versions, the backend and its devices, 64-bit mode,
  ``XLA_FLAGS``, and a digest of the package's sources that shape a traced region (core,
  ir, ops, passes, sim: a changed op lowering or simulator must not load an executable
  built by the old one).

A program whose description is not reproducible across processes (a param without a stable
``repr``) is never stored. A file that cannot be read or loaded is ignored (and the region
traced and compiled as usual); files are written atomically (a temporary file, then
``os.replace``). The store lives in ``regions/`` under the compile-cache directory and is
on or off with it.

Loading runs code from the file, like JAX's own cache: the directory must be the user's.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["ExecutableStore", "StoredRegion", "loaded_copy", "source_digest"]

_FORMAT = 1
_PACKAGE = Path(__file__).resolve().parents[1]

# Executables loaded in this process, by a digest of their serialized bytes: regions often
# share one (the undo reads of two length buckets), loaded once.
_LOADED: dict[str, Any] = {}


# The packages whose code shapes a traced region: op definitions and lowerings, the IR and
# its passes, dtypes and dims, the simulator. (Converters, emitters or the CLI changing does
# not make a stored executable stale.)
_TRACED_PACKAGES = ("core", "ir", "ops", "passes", "sim")


@lru_cache(maxsize=1)
def source_digest() -> str:
    """A digest of the Python sources that shape a traced region (paths and contents)."""
    digest = hashlib.sha256()
    files = [p for name in _TRACED_PACKAGES for p in (_PACKAGE / name).rglob("*.py")]
    for path in sorted(files):
        digest.update(str(path.relative_to(_PACKAGE)).encode())
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"?")
    return digest.hexdigest()


def _environment() -> tuple[Any, ...]:
    import jax
    import jaxlib

    devices = jax.devices()
    backend = devices[0].client
    return (
        _FORMAT,
        jax.__version__,
        jaxlib.__version__,
        backend.platform,
        backend.platform_version,
        tuple(d.device_kind for d in devices),
        bool(jax.config.jax_enable_x64),
        os.environ.get("XLA_FLAGS", ""),
        source_digest(),
    )


def _load_once(serialized: tuple[bytes, Any, Any]) -> Any:
    """`deserialize_and_load` of (bytes, in_tree, out_tree), at most once per process."""
    from jax.experimental.serialize_executable import deserialize_and_load

    digest = hashlib.sha256(serialized[0]).hexdigest()
    compiled = _LOADED.get(digest)
    if compiled is None:
        compiled = _LOADED[digest] = deserialize_and_load(*serialized)
    return compiled


def loaded_copy(compiled: Any) -> Any:
    """Another loaded copy of a compiled executable (`jax.stages.Compiled`): the same code
    with state of its own (on a GPU, its own command buffers; wide.py's lanes)."""
    from jax.experimental.serialize_executable import deserialize_and_load, serialize

    return deserialize_and_load(*serialize(compiled))


class StoredRegion:
    """What the store gives back: the region's executable, its undo-read executable (or
    None) and the runner's notes from tracing (`meta`); `copy()` loads the region's
    executable again, as a copy of its own."""

    def __init__(self, fn: Any, olds: Any, meta: Any, serialized: Any = None) -> None:
        self.fn = fn
        self.olds = olds
        self.meta = meta
        self._serialized = serialized

    def copy(self) -> Any:
        """A second loaded copy of `fn` (not shared through the per-process memo)."""
        from jax.experimental.serialize_executable import deserialize_and_load

        return deserialize_and_load(*self._serialized)


class ExecutableStore:
    """Serialized executables under `directory`, one file per key (see the module doc)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.loaded = 0
        self.saved = 0

    def key(self, description: Any) -> str | None:
        """The file key of a program description, or None if it would not be the same in
        another process (its text holds an object address)."""
        text = repr((_environment(), description))
        if " at 0x" in text:
            return None
        return hashlib.sha256(text.encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.region"

    def load(self, key: str) -> StoredRegion | None:
        """The stored region of `key`, or None (absent, unreadable, or made elsewhere)."""
        path = self._path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        try:
            record = pickle.loads(data)
            if record.get("format") != _FORMAT:
                return None
            fn = _load_once(record["fn"])
            olds = _load_once(record["olds"]) if record["olds"] else None
        except Exception:  # a damaged or foreign file: compile instead
            return None
        self.loaded += 1
        return StoredRegion(fn, olds, record["meta"], record["fn"])

    def save(self, key: str, fn: Any, olds: Any, meta: Any) -> bool:
        """Store compiled executables (`jax.stages.Compiled`) and `meta`; False when they
        cannot be serialized or written (the run goes on either way)."""
        from jax.experimental.serialize_executable import serialize

        try:
            record = {
                "format": _FORMAT,
                "fn": serialize(fn),
                "olds": serialize(olds) if olds is not None else None,
                "meta": meta,
            }
            data = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # e.g. closed-over constants: not serializable
            return False
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.replace(tmp, self._path(key))
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError:
            return False
        self.saved += 1
        return True
