"""GLSL templates to SPIR-V: render, compile with glslc, cache by source hash.

Kernels are generated at first use (a kernel exists per op x dtypes x variant, far too
many to ship prebuilt), then compiled once with ``glslc`` and kept in a cache directory
keyed by the SHA-256 of the final source, so a second process never recompiles:
``$OPENINFER_VK_CACHE`` or ``~/.cache/openinfer_jax/spv/<hash>.spv``. Only GLSL ships with
the package (openinfer_jax/vk/shaders/); nothing generated is checked in, so nothing can
go stale.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from openinfer_jax.core.errors import BackendError

__all__ = ["cache_dir", "compile_glsl", "compile_many", "render", "shader_source"]

_SHADER_DIR = Path(__file__).with_name("shaders")
_INCLUDE = '#include "common.glsl"'


@cache
def shader_source(name: str) -> str:
    """The text of a shipped GLSL template (``elementwise.comp``, ``common.glsl``...)."""
    return (_SHADER_DIR / name).read_text()


def render(template: str, **fields: object) -> str:
    """Fill ``{{NAME}}`` slots of template file `template` and inline common.glsl.

    Raises:
        BackendError: if a slot is left unfilled (a bug in a kernel generator).
    """
    text = shader_source(template).replace(_INCLUDE, shader_source("common.glsl"))
    for key, value in fields.items():
        text = text.replace("{{" + key + "}}", str(value))
    if "{{" in text:
        start = text.index("{{")
        raise BackendError(
            f"{template}: slot {text[start : text.index('}}', start) + 2]} not filled"
        )
    return text


def cache_dir() -> Path:
    """Where compiled SPIR-V is kept ($OPENINFER_VK_CACHE, else ~/.cache/openinfer_jax/spv)."""
    env = os.environ.get("OPENINFER_VK_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "openinfer_jax" / "spv"


def _glslc() -> str:
    path = shutil.which(os.environ.get("GLSLC") or "glslc")
    if not path:
        raise BackendError(
            "glslc (the GLSL to SPIR-V compiler) was not found; install it "
            "(`apt-get install glslc`, or the Vulkan SDK) or set GLSLC=/path/to/glslc"
        )
    return path


_memory: dict[str, bytes] = {}


def compile_glsl(source: str, label: str = "kernel") -> bytes:
    """SPIR-V of a compute shader source, from the in-process or on-disk cache if present.

    Raises:
        BackendError: glslc is missing, or the source does not compile (the message holds
            glslc's diagnostics and the path of the failing source, kept for inspection).
    """
    digest = hashlib.sha256(source.encode()).hexdigest()[:32]
    if digest in _memory:
        return _memory[digest]
    directory = cache_dir()
    target = directory / f"{digest}.spv"
    if target.is_file():
        spirv = target.read_bytes()
        _memory[digest] = spirv
        return spirv
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BackendError(
            f"cannot create the SPIR-V cache directory {directory}: {exc}; "
            "set OPENINFER_VK_CACHE to a writable directory"
        ) from None
    src_path = directory / f"{digest}.comp"
    src_path.write_text(source)
    # Compile to a temporary file and rename: concurrent processes never see a partial file.
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".spv.tmp")
    os.close(fd)
    try:
        proc = subprocess.run(
            [_glslc(), "-fshader-stage=compute", "--target-env=vulkan1.1", "-O",
             str(src_path), "-o", tmp],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise BackendError(
                f"shader compile failed for {label} (source kept at {src_path}):\n"
                f"{proc.stderr.strip()}"
            )
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    spirv = target.read_bytes()
    _memory[digest] = spirv
    return spirv


def compile_many(sources: list[str]) -> int:
    """Compile every source not yet cached with ONE glslc process; returns how many compiled.

    glslc's start-up dominates a small shader's compile time, so compiling a graph's (or a
    test matrix's) kernels together is several times faster than one by one. A source that
    fails is left for `compile_glsl` to report with its own diagnostics.
    """
    directory = cache_dir()
    directory.mkdir(parents=True, exist_ok=True)
    todo: dict[str, str] = {}
    for source in sources:
        digest = hashlib.sha256(source.encode()).hexdigest()[:32]
        if digest not in _memory and not (directory / f"{digest}.spv").is_file():
            todo[digest] = source
    if not todo:
        return 0
    with tempfile.TemporaryDirectory(dir=directory) as work:
        names = []
        for digest, source in todo.items():
            (Path(work) / f"{digest}.comp").write_text(source)
            names.append(f"{digest}.comp")
        # glslc still writes the outputs of the sources that compile when one fails.
        subprocess.run(
            [_glslc(), "-fshader-stage=compute", "--target-env=vulkan1.1", "-O", "-c", *names],
            cwd=work, capture_output=True, text=True, check=False,
        )  # fmt: skip
        done = 0
        for digest in todo:
            built = Path(work) / f"{digest}.comp.spv"
            if built.is_file():
                os.replace(built, directory / f"{digest}.spv")
                done += 1
    return done
