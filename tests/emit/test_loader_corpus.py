"""The emitted C .oinf loader rejects every file of the Python bad-file corpus (tests/oinf/corpus),
citing the same rule as the manifest, and accepts the files our writer produces."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.emit.runtime_files import RUNTIME_DIR
from openinfer_jax.oinf import DType, OinfWriter, QuantParams, QuantScale, quantize
from tests.emit.harness import CC, CFLAGS

CORPUS = Path(__file__).resolve().parents[1] / "oinf" / "corpus"

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")

CHECKER = r"""
#include "oi_runtime.h"
#include <stdio.h>
int main(int argc, char **argv) {
    int i;
    for (i = 1; i < argc; i++) {
        oi_model m;
        int rc = oi_model_open_file(&m, argv[i]);
        if (rc == OI_OK) { printf("ok\n"); oi_model_close(&m); }
        else printf("%d %s\n", rc, oi_last_error());
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def checker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("loader")
    (work / "check.c").write_text(CHECKER)
    for src in RUNTIME_DIR.glob("oi_runtime.*"):
        shutil.copy(src, work / src.name)
    subprocess.run(
        [CC, *CFLAGS, "-I.", "check.c", "oi_runtime.c", "-lm", "-o", "check"], cwd=work, check=True
    )
    return work / "check"


def _run(checker: Path, files: list[Path]) -> list[str]:
    out = subprocess.run(
        [str(checker), *map(str, files)], capture_output=True, text=True, check=True
    )
    return out.stdout.splitlines()


def test_every_corpus_file_is_rejected_with_its_rule(checker: Path) -> None:
    manifest = json.loads((CORPUS / "manifest.json").read_text())
    files = [CORPUS / f"{name}.oinf" for name in sorted(manifest)]
    lines = _run(checker, files)
    assert len(lines) == len(files) == len(manifest) > 60
    wrong = []
    for name, line in zip(sorted(manifest), lines):
        code, _, message = line.partition(" ")
        if code != "2" or not message.startswith(manifest[name]["rule"] + " "):
            wrong.append(f"{name}: expected {manifest[name]['rule']}, got {line!r}")
    assert not wrong, "\n".join(wrong)


def test_valid_files_load(checker: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    paths = []
    for version in (1, 2):
        path = tmp_path / f"v{version}.oinf"
        with OinfWriter(path, version=version, overwrite=True) as w:
            w.add_sizevar("B", 3)
            w.add_metadata("name", "hello world")
            w.add_metadata("flags", np.arange(5, dtype=np.int16))
            w.add_tensor("a", rng.standard_normal((3, 4)).astype(np.float32))
            w.add_tensor("p", rng.integers(-8, 8, 7).astype(np.int8), dtype=DType.I4)
            w.add_tensor("d", dtype=DType.F16, shape=(2, 2))
            if version == 2:
                w.add_tensor(
                    "q",
                    rng.integers(-2, 2, 5).astype(np.int8),
                    dtype=DType.I2,
                    quant=QuantParams.symmetric(QuantScale.per_tensor(0.5)),
                )
                values = rng.standard_normal((3, 64)).astype(np.float32)
                for scheme in ("q8_0", "q4_0", "q4_1"):  # per-block payloads (docs/oinf.md 5.1)
                    w.add_tensor(f"b_{scheme}", quantize(values, scheme))
                w.add_tensor("b_f32", quantize(values, "q4_1", 16, scale_dtype=DType.F32))
        paths.append(path)
    assert _run(checker, paths) == ["ok", "ok"]


def test_edge_files_load(checker: Path) -> None:
    """Valid files at the edges of the rules (u1[2^64-1], empty tensors with huge dims, ...)."""
    from tests.oinf.make_corpus import VALID_CASES, VALID_DIR

    files = [VALID_DIR / f"{case.name}.oinf" for case in VALID_CASES]
    assert _run(checker, files) == ["ok"] * len(files)
