"""The package's arrows point one way: each subpackage imports only the layers below it.

Every import in `openinfer_jax/` is read with `ast` (module-level and function-level ones,
and `importlib.import_module("openinfer_jax....")` calls with a literal name) and checked
against `ALLOWED`. A new subpackage must be given its place here. CONTRIBUTING.md
("Layout and layering") explains the order.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "openinfer_jax"

# Bottom to top: a package may import itself and the packages listed for it, nothing else.
_CORE = {"core"}
_MODEL = _CORE | {"ops", "ir"}
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "oinf": _CORE,
    "ops": _CORE,
    "ir": _CORE | {"ops"},
    "trace": _MODEL,
    "passes": _MODEL,
    "converters": _CORE | {"oinf"},
    "vk": _MODEL | {"passes"},
    "sim": _MODEL | {"oinf", "trace", "passes", "vk"},
    "emit": _MODEL | {"oinf", "trace", "passes", "vk"},
    "onnx": _MODEL | {"oinf", "trace", "passes", "converters"},
    "models": _MODEL | {"oinf", "trace", "passes", "converters", "vk", "sim", "emit"},
    "generate": _MODEL | {"oinf", "trace", "models", "sim", "emit"},
    "cli": {"*"},
    # Top-level modules: the lazy public facade, `python -m`, and the public errors alias.
    "__init__": {"*"},
    "__main__": {"cli"},
    "errors": _CORE,
    "docs": set(),
}


def _owner(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted module) of every import of an `openinfer_jax` module in `tree`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "openinfer_jax":
                # `from openinfer_jax import ir` imports the subpackage, `__version__` the top.
                found += [(node.lineno, f"openinfer_jax.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("import_module", "find_spec")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return [(line, name) for line, name in found if name.split(".")[0] == "openinfer_jax"]


def _target(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1] if (PACKAGE / parts[1]).is_dir() or parts[1] in ALLOWED else "__init__"


def _check(owner: str, tree: ast.AST, where: str) -> list[str]:
    """The imports in `tree` (a module of package `owner`) that break the layer order."""
    allowed = ALLOWED[owner]
    out: list[str] = []
    for line, module in _imported(tree):
        target = _target(module)
        if module == "openinfer_jax.errors" and owner != "__init__":
            out.append(
                f"{where}:{line}: import openinfer_jax.core.errors (errors is the public alias)"
            )
        elif target != owner and "*" not in allowed and target not in allowed:
            out.append(
                f"{where}:{line}: {owner} must not import {module} ({target} is not below it)"
            )
    return out


def _violations() -> list[str]:
    out: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        owner, where = _owner(path), str(path.relative_to(PACKAGE.parent))
        if owner not in ALLOWED:
            out.append(f"{where}: package {owner!r} has no layer in tests/test_layering.py")
        else:
            out += _check(owner, ast.parse(path.read_text(encoding="utf-8")), where)
    return out


def test_imports_follow_the_layer_order() -> None:
    assert _violations() == []


def test_every_subpackage_has_a_layer() -> None:
    missing = [
        p.name
        for p in PACKAGE.iterdir()
        if p.is_dir() and (p / "__init__.py").exists()
        if p.name not in ALLOWED
    ]
    assert missing == []


def test_layers_have_no_cycle() -> None:
    """The declared order itself is acyclic (so the check above cannot pass a cycle)."""
    graph = {k: {t for t in v if t != "*"} for k, v in ALLOWED.items() if "*" not in v}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(
            nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt}))
            for nxt in graph.get(start, ())
        )

    assert [k for k in graph if reaches(k, k, set())] == []


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("from openinfer_jax.ir.nodes import Graph\n", "ops must not import openinfer_jax.ir"),
        ("from openinfer_jax import ir\n", "ops must not import openinfer_jax.ir"),
        ("def f():\n    from openinfer_jax.sim import Simulator\n", "ops must not import"),
        ("import importlib\nimportlib.import_module('openinfer_jax.emit')\n", "ops must not"),
        ("from openinfer_jax.errors import SimulationError\n", "errors is the public alias"),
    ],
)
def test_the_checker_catches_upward_imports(source: str, problem: str) -> None:
    assert any(problem in found for found in _check("ops", ast.parse(source), "ops/x.py")), source
