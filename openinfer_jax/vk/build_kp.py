"""Build and install Kompute's Python binding `kp` into the running Python, offline-safe.

`kp` 0.9.0 is a source distribution only, and a plain ``pip install kp`` fails: its CMake
fetches Vulkan-Headers, fmt and pybind11 from GitHub, it declares ``numpy<2`` (which would
downgrade NumPy under JAX), and its setup.py glues two CMake flags together. This does
what works (docs/vulkan.md, "Installation"):

    python -m openinfer_jax.vk.build_kp            # needs: cmake, a C++ compiler, patch,
                                                   # the Vulkan and fmt headers (Debian:
                                                   # libvulkan-dev libfmt-dev), glslc

1. ``pip install "pybind11>=2.12"`` (pybind11 2.10 makes kp return wrong data with NumPy 2);
2. download the kp 0.9.0 sdist from the package index (or use ``--sdist FILE``);
3. fix the setup.py comma and apply the package's patch (adds ``kp.OpShaderBarrier``, so a
   chain of dispatches records into one submission; gives each sequence one fence, reset
   per evaluation instead of created and destroyed; makes ``eval_async()`` return without
   waiting; ``kp.openinfer_patch`` says its revision, 2);
4. ``pip install --no-deps --no-build-isolation`` with every ``KOMPUTE_OPT_*`` switch set to
   use the system headers and PyPI's pybind11 instead of fetching.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

__all__ = ["KP_VERSION", "build_kp", "main"]

KP_VERSION = "0.9.0"
PATCH = Path(__file__).with_name(f"kp-{KP_VERSION}-shader-barrier.patch")
_CMAKE_ENV = {
    "KOMPUTE_OPT_INSTALL": "OFF",
    "KOMPUTE_OPT_USE_BUILT_IN_VULKAN_HEADER": "OFF",
    "KOMPUTE_OPT_USE_BUILT_IN_FMT": "OFF",
    "KOMPUTE_OPT_USE_BUILT_IN_PYBIND11": "OFF",
    "KOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK": "ON",
}
_GLUED = "'-DKOMPUTE_OPT_DISABLE_VULKAN_VERSION_CHECK=ON'\n"


def _run(cmd: list[str], **kwargs: object) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kwargs)  # type: ignore[call-overload]


def build_kp(sdist: Path | None = None, target: Path | None = None) -> None:
    """Build kp from `sdist` (default: downloaded) and install it (into `target` if given).

    Raises:
        RuntimeError: a missing tool (cmake, patch) or a failed step, with what to install.
    """
    for tool in ("cmake", "patch"):
        if shutil.which(tool) is None:
            raise RuntimeError(
                f"building kp needs {tool!r} on PATH (Debian: apt-get install {tool})"
            )
    pip = [sys.executable, "-m", "pip"]
    _run([*pip, "install", "-q", "pybind11>=2.12", "setuptools", "wheel"])
    pybind_dir = subprocess.run(
        [sys.executable, "-m", "pybind11", "--cmakedir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="kp-build-") as work:
        root = Path(work)
        if sdist is None:
            _run([*pip, "download", "-q", "--no-deps", "--no-binary", ":all:",
                  f"kp=={KP_VERSION}", "-d", str(root)])  # fmt: skip
            sdist = root / f"kp-{KP_VERSION}.tar.gz"
        with tarfile.open(sdist) as archive:
            archive.extractall(root, filter="data")
        source = root / f"kp-{KP_VERSION}"
        setup = source / "setup.py"
        text = setup.read_text()
        # The flag lacks its trailing comma, which glues -DPYTHON_EXECUTABLE onto it.
        setup.write_text(text.replace(_GLUED, _GLUED.replace("'\n", "',\n"), 1))
        _run(["patch", "-s", "-p1", "-d", str(source), "-i", str(PATCH)])
        env = {**os.environ, **_CMAKE_ENV, "pybind11_DIR": pybind_dir}
        cmd = [*pip, "install", "-q", "--no-deps", "--no-build-isolation", str(source)]
        if target is not None:
            cmd += ["--target", str(target)]
        _run(cmd, env=env)


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m openinfer_jax.vk.build_kp [--sdist FILE] [--target DIR]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sdist", type=Path, help=f"a kp-{KP_VERSION}.tar.gz to build instead of downloading"
    )
    parser.add_argument("--target", type=Path, help="install into this directory (pip --target)")
    args = parser.parse_args(argv)
    try:
        build_kp(args.sdist, args.target)
    except (RuntimeError, subprocess.CalledProcessError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("kp built and installed; check with: python -c 'import kp; kp.Manager()'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
