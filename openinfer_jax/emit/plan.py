"""`Plan`: the synthesized sources, held in memory until `emit` writes them.

`emit(dir)` never deletes or overwrites a file it did not write. Every emitted directory
holds a manifest (`MANIFEST`, one file name a line) of the files emit wrote there:

* a directory that does not exist (or is empty) is written into a fresh temporary
  directory next to it, then renamed into place: it appears whole or not at all;
* a directory with a manifest is updated: the new files replace the old ones (each file
  renamed into place), files of the old manifest that the new program no longer has are
  removed, and every other file (a model, a build output, notes) is kept;
* a non-empty directory without a manifest was not written by emit: `SynthesisError`,
  unless ``force=True``, which writes the files into it and still deletes nothing else.

Any failure before the files are renamed into place leaves the directory as it was. The
files are byte-identical for the same graph, model and device JSON: sorted iteration, no
timestamps, no paths.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from openinfer_jax.core.errors import SynthesisError
from openinfer_jax.emit.memory import MemoryPlan
from openinfer_jax.emit.vk_program import VkReport
from openinfer_jax.passes import PassReport

__all__ = ["MANIFEST", "Plan"]

#: The file listing what emit wrote into a directory (so a later emit may replace them).
MANIFEST = ".openinfer-emit"


@dataclass(frozen=True)
class Plan:
    """What `Synthesizer.synthesize` returns: target, program name, files and the memory plan.

    `vulkan` (Vulkan target only) says which op nodes run on the GPU and why the others
    run on the host. `passes` says which weight transposes were folded and which nodes fused.
    """

    target: str
    name: str
    files: Mapping[str, str]
    memory: MemoryPlan
    kernels: int
    outputs: tuple[str, ...]
    vulkan: VkReport | None = None
    passes: PassReport = field(default_factory=PassReport)

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
        lines += self.passes.lines()
        if self.vulkan is not None:
            lines += self.vulkan.summary()
        return "\n".join(lines)

    def emit(self, directory: str | os.PathLike[str], *, force: bool = False) -> Path:
        """Write the sources into `directory` (see the module docstring); returns its path.

        Raises:
            SynthesisError: the parent directory does not exist, `directory` is a file, it
                is a non-empty directory that emit did not write (without ``force``), or a
                file cannot be written (the directory is left as it was).
        """
        target = Path(directory)
        parent = target.parent if str(target.parent) else Path(".")
        if not parent.is_dir():
            raise SynthesisError(
                f"cannot emit into {target}: parent directory {parent} does not exist"
            )
        if target.exists() and not target.is_dir():
            raise SynthesisError(f"cannot emit into {target}: it exists and is not a directory")
        names = sorted(self.files)
        if not target.exists() or not any(target.iterdir()):
            self._write_new(target, parent, names)
        else:
            self._update(target, parent, names, force)
        return target

    def _stage(self, parent: Path, prefix: str, names: list[str]) -> Path:
        """Every file plus the manifest, written into a new temporary directory in `parent`."""
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        try:
            for fname in names:
                (tmp / fname).write_bytes(self.files[fname].encode("utf-8"))
            (tmp / MANIFEST).write_text("".join(f"{n}\n" for n in names), encoding="utf-8")
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return tmp

    def _write_new(self, target: Path, parent: Path, names: list[str]) -> None:
        """A directory that does not exist or is empty: staged, then renamed into place."""
        tmp: Path | None = None
        try:
            tmp = self._stage(parent, f".{target.name}.tmp-", names)
            os.chmod(tmp, 0o755)
            os.replace(tmp, target)  # replaces an empty directory too
        except OSError as err:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            raise SynthesisError(f"cannot emit into {target}: {err.strerror or err}") from None

    def _update(self, target: Path, parent: Path, names: list[str], force: bool) -> None:
        """A directory with files: replace what emit wrote there before, keep the rest."""
        previous = _manifest(target)
        if previous is None and not force:
            shown = ", ".join(sorted(p.name for p in target.iterdir())[:5])
            raise SynthesisError(
                f"cannot emit into {target}: it is not empty ({shown}...) and was not written by "
                "openinfer emit (no manifest); choose an empty or new directory, or pass "
                "--force (force=True) to add the files and keep the others"
            )
        owned = set(previous or ())
        clash = [n for n in names if n not in owned and (target / n).exists()]
        if clash and not force:
            raise SynthesisError(
                f"cannot emit into {target}: {', '.join(clash)} would be overwritten but was not "
                "written by openinfer emit; move it away or pass --force (force=True)"
            )
        try:
            tmp = self._stage(target, ".emit.tmp-", names)
        except OSError as err:
            raise SynthesisError(f"cannot emit into {target}: {err.strerror or err}") from None
        try:
            for fname in names:
                os.replace(tmp / fname, target / fname)
            for stale in sorted(owned - set(names)):
                path = target / stale
                if path.is_file() and not path.is_symlink():
                    path.unlink()
            os.replace(tmp / MANIFEST, target / MANIFEST)
        except OSError as err:
            raise SynthesisError(f"cannot emit into {target}: {err.strerror or err}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


def _manifest(directory: Path) -> list[str] | None:
    """The files a previous emit wrote into `directory` (None: no manifest). Only plain
    names count: a manifest cannot make emit touch anything outside the directory."""
    try:
        text = (directory / MANIFEST).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    names = [line for line in text.splitlines() if line]
    return [n for n in names if n == Path(n).name and n not in (".", "..", MANIFEST)]
