"""JAX's persistent compilation cache, so a second process does not compile again.

A 30-layer decoder region takes tens of seconds to compile; with the cache a later process
loads the executable from disk. `enable_compile_cache` is called when a `Simulator` is
created (never at import) and changes JAX's configuration only if the user has not
configured a cache directory:

- ``Simulator(..., compile_cache=False)`` or ``OPENINFER_COMPILE_CACHE=0`` turns it off;
- ``compile_cache="/path"`` or ``OPENINFER_COMPILE_CACHE=/path`` picks the directory;
- the default is ``$XDG_CACHE_HOME/openinfer-jax/jax`` (``~/.cache/openinfer-jax/jax``).

Every executable is cached (JAX's default skips those that compiled in under a second;
a decode step has several such regions and together they are most of a warm start).

JAX's cache saves XLA's work only; the wide regions' finished executables are also kept
in ``regions/`` under the same directory (executable_store.py), so a second process does
not trace them either.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ENV_VAR", "default_cache_dir", "enable_compile_cache"]

ENV_VAR = "OPENINFER_COMPILE_CACHE"
_OFF = {"0", "off", "false", "no"}


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/openinfer-jax/jax``, or ``~/.cache/openinfer-jax/jax``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "openinfer-jax" / "jax"


def enable_compile_cache(setting: bool | str | os.PathLike[str] | None = None) -> Path | None:
    """Point JAX's compilation cache at our directory unless the user configured one.

    `setting`: None follows ``OPENINFER_COMPILE_CACHE`` (default on), False turns it off,
    True uses the default directory, a path uses that directory. Returns the directory in
    use (the user's own when they configured one), or None when off.
    """
    import jax

    env = os.environ.get(ENV_VAR, "")
    if setting is False or (setting is None and env.strip().lower() in _OFF):
        return None
    configured = jax.config.jax_compilation_cache_dir
    if configured:
        return Path(configured)  # the user's choice; leave every setting as it is
    if isinstance(setting, (str, os.PathLike)):
        directory = Path(setting)
    elif setting is None and env.strip():
        directory = Path(env)
    else:
        directory = default_cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None  # a read-only home: run uncached rather than fail
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return directory
