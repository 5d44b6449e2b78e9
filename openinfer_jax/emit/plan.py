"""`Plan`: the synthesized sources, held in memory until `emit` writes them atomically.

`emit(dir)` writes every file into a fresh temporary directory next to `dir`, then renames
it into place (an existing `dir` is moved aside first and removed after). On any failure
the temporary directory is removed, so a failed emit leaves no half-written output. The
files are byte-identical for the same graph, model and device JSON: sorted iteration, no
timestamps, no absolute paths.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from openinfer_jax.emit.memory import MemoryPlan
from openinfer_jax.emit.vk_program import VkReport
from openinfer_jax.errors import SynthesisError

__all__ = ["Plan"]


@dataclass(frozen=True)
class Plan:
    """What `Synthesizer.synthesize` returns: target, program name, files and the memory plan.

    `vulkan` (Vulkan target only) says which op nodes run on the GPU and why the others
    run on the host.
    """

    target: str
    name: str
    files: Mapping[str, str]
    memory: MemoryPlan
    kernels: int
    outputs: tuple[str, ...]
    vulkan: VkReport | None = None

    @property
    def arena_bytes(self) -> int:
        """Size of the one arena the program uses."""
        return self.memory.arena_bytes

    @property
    def buffer_bytes(self) -> int:
        """Sum of all buffers, the arena size without lifetime reuse."""
        return self.memory.total_bytes

    def summary(self) -> str:
        """A few lines for humans and the CLI: files, kernels, the memory plan (and for the
        Vulkan target the GPU/host placement of the op nodes)."""
        lines = [
            f"{self.target} program {self.name!r}: {len(self.files)} files, {self.kernels} kernels"
        ]
        lines.append(f"memory: {self.memory.summary()}")
        if self.vulkan is not None:
            lines += self.vulkan.summary()
        return "\n".join(lines)

    def emit(self, directory: str | os.PathLike[str]) -> Path:
        """Write the sources into `directory` (created or replaced atomically); returns its path.

        Raises:
            SynthesisError: the parent directory does not exist or a file cannot be written
                (nothing is left behind in that case).
        """
        target = Path(directory)
        parent = target.parent if str(target.parent) else Path(".")
        if not parent.is_dir():
            raise SynthesisError(
                f"cannot emit into {target}: parent directory {parent} does not exist"
            )
        if target.exists() and not target.is_dir():
            raise SynthesisError(f"cannot emit into {target}: it exists and is not a directory")
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=parent))
        old: Path | None = None
        try:
            for fname in sorted(self.files):
                data = self.files[fname].encode("utf-8")
                with open(tmp / fname, "wb") as fh:
                    fh.write(data)
            os.chmod(tmp, 0o755)
            if target.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=parent))
                old.rmdir()
                os.replace(target, old)
            os.replace(tmp, target)
        except OSError as err:
            shutil.rmtree(tmp, ignore_errors=True)
            if old is not None and old.exists() and not target.exists():
                os.replace(old, target)
            raise SynthesisError(f"cannot emit into {target}: {err.strerror or err}") from None
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return target
