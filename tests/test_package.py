"""Importing the package is cheap and changes nothing global.

`import openinfer_jax` imports no JAX (names load on first use, PEP 562); `openinfer_jax.oinf`,
`openinfer verify` and `openinfer inspect` never import it. Each check runs in a fresh
interpreter, since this test process has long imported everything.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import openinfer_jax
from openinfer_jax.oinf import write_oinf

INIT = Path(openinfer_jax.__file__)


def _python(code: str) -> str:
    """Run `code` in a fresh interpreter (this checkout first on the path); its stdout."""
    root = str(INIT.parents[1])
    done = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {root!r})\n{code}"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_import_openinfer_jax_imports_no_jax() -> None:
    out = _python(
        "import openinfer_jax, sys\n"
        "print('jax' in sys.modules, 'openinfer_jax.sim' in sys.modules)\n"
        "openinfer_jax.DType, openinfer_jax.OinfWriter, openinfer_jax.Graph, openinfer_jax.parse\n"
        "print('jax' in sys.modules)"
    )
    assert out.split() == ["False", "False", "False"]


def test_oinf_imports_no_jax_nor_the_ir() -> None:
    out = _python(
        "import sys\nfrom openinfer_jax.oinf import OinfWriter, ModelLoader, verify_file\n"
        "print(sorted(m for m in sys.modules if m == 'jax' or m.startswith(('openinfer_jax.ir',"
        " 'openinfer_jax.ops', 'openinfer_jax.sim', 'openinfer_jax.emit', 'openinfer_jax.vk'))))"
    )
    assert out.strip() == "[]"


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_verify_and_inspect_import_no_jax(tmp_path: Path, command: str) -> None:
    path = tmp_path / "two.oinf"
    write_oinf(path, tensors={"a": np.ones(4, np.float32), "b": np.arange(3, dtype=np.int32)})
    out = _python(
        "import contextlib, io, sys\nfrom openinfer_jax.cli import main\n"
        f"with contextlib.redirect_stdout(io.StringIO()):\n    code = main([{command!r}, {str(path)!r}])\n"
        "print(code, 'jax' in sys.modules)"
    )
    assert out.split() == ["0", "False"]


def test_every_public_name_resolves() -> None:
    for name in openinfer_jax.__all__:
        assert getattr(openinfer_jax, name) is not None, name
    assert set(openinfer_jax.__all__) <= set(dir(openinfer_jax))
    assert openinfer_jax.ir.validate is openinfer_jax.validate  # subpackages as attributes
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = openinfer_jax.nope


def test_lazy_table_matches_the_type_checking_imports() -> None:
    """`_EXPORTS` (what runs) and the TYPE_CHECKING imports (what type checkers see) agree."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If))
    typed = {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert typed == openinfer_jax._EXPORTS
    assert set(openinfer_jax.__all__) == set(typed) | {"__version__"}
