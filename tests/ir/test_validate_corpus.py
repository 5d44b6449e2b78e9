"""The bad-program corpus (tests/ir/bad_programs/): every program breaks one rule.

Each file's header declares the expected location and message substring:
  text:   `// expect: LINE:COL: substring`       (a .graph file, parsed with the text parser)
  Python: `# expect: LINE: substring`           (a .py file whose `build()` returns a Graph)
and optionally `model: NAME` (validate against one of the models of `MODELS`). The test
checks the error type (DslSyntaxError or GraphValidationError, never anything else), the
location, the snippet with a caret, and the message.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from openinfer_jax.core.errors import DslSyntaxError, GraphValidationError
from openinfer_jax.ir.nodes import Graph
from openinfer_jax.ir.validate import validate
from openinfer_jax.oinf import ModelLoader, write_oinf
from openinfer_jax.trace import parse_file

CORPUS = Path(__file__).resolve().parent / "bad_programs"
PROGRAMS = sorted([*CORPUS.glob("*.graph"), *CORPUS.glob("*.py")])
_HEADER = re.compile(r"^(?://|#)\s*(expect|model):\s*(.*)$")

# Small models the corpus validates against (real .oinf files written by the real writer).
MODELS: dict[str, dict[str, Any]] = {
    "basic": {
        "sizevars": {"B": 2, "D": 4, "H": 2, "Dh": 4, "num_layers": 3},
        "metadata": {"n_heads": 2},
        "tensors": {
            "a": np.zeros(2, np.float32),
            "alpha": np.float32(0.5),
            "wq": np.zeros((4, 4), np.float32),
            **{f"W.{i}": np.zeros((4, 4), np.float32) for i in range(3)},
        },
    },
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModelLoader]:
    out = {}
    for name, spec in MODELS.items():
        path = write_oinf(tmp_path_factory.mktemp("models") / f"{name}.oinf", **spec)
        out[name] = ModelLoader.open(path)
    yield out
    for model in out.values():
        model.close()


def _header(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines()[:6]:
        match = _HEADER.match(line.strip())
        if match:
            found[match.group(1)] = match.group(2).strip()
    return found


def _load(path: Path) -> Graph:
    if path.suffix == ".graph":
        return parse_file(path)
    spec = importlib.util.spec_from_file_location(f"bad_program_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build()  # type: ignore[no-any-return]


def test_corpus_size() -> None:
    python = [p for p in PROGRAMS if p.suffix == ".py"]
    assert len(PROGRAMS) >= 30 and len(python) >= 8


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.name for p in PROGRAMS])
def test_bad_program(path: Path, models: dict[str, ModelLoader]) -> None:
    header = _header(path)
    assert "expect" in header, f"{path.name} has no `expect:` header"
    if path.suffix == ".graph":
        line, column, expected = header["expect"].split(":", 2)
        where = f"{path}:{int(line)}:{int(column)}:"
    else:
        line, expected = header["expect"].split(":", 1)
        where = f"{path}:{int(line)}:"
    expected = expected.strip()
    model = models[header["model"]] if "model" in header else None
    source_line = path.read_text().splitlines()[int(line) - 1]
    try:
        graph = _load(path)
        validate(graph, model)
    except (DslSyntaxError, GraphValidationError) as err:
        blocks = [str(err)] if not hasattr(err, "errors") else [i.render() for i in err.errors]
        matching = [b for b in blocks if expected in b]
        assert matching, f"no error mentions {expected!r}; got:\n{err}"
        text = matching[0]
        assert text.startswith(where), f"expected location {where}, got:\n{text}"
        lines = text.splitlines()
        assert lines[-2].strip() == source_line.strip(), text
        caret = lines[-1]
        assert caret.strip() == "^" and len(caret) - 1 < len(lines[-2]), text
        return
    pytest.fail(f"{path.name} validated without error; expected {expected!r}")
