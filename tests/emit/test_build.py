"""Builds: the emitted C for every example compiles cleanly under other compilers and for
aarch64 (cross-compiled, no x86 assumptions); embedded weights and output selection work."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from openinfer_jax.emit import Synthesizer
from tests.emit.cases import CASES
from tests.emit.harness import CC, CFLAGS, build, parity

CROSS = "aarch64-linux-gnu-gcc"


# The examples that together use every node kind and most kernels.
CROSS_EXAMPLES = ("kv_cache_decode", "quantized_linear", "streaming_pipeline", "condensed")


@pytest.mark.skipif(
    shutil.which(CROSS) is None, reason=f"{CROSS} not installed (scripts/setup.sh installs it)"
)
@pytest.mark.parametrize("name", CROSS_EXAMPLES)
def test_examples_cross_compile_for_aarch64(name: str, tmp_path: Path) -> None:
    case = CASES[name](tmp_path)
    plan = Synthesizer(case.arch).synthesize(case.model, case.graph, name=name)
    out = tmp_path / "c"
    plan.emit(out)
    sources = [f"{name}.c", "oi_runtime.c", f"{name}_driver.c"]
    result = subprocess.run(
        [CROSS, *CFLAGS, *sources, "-lm", "-o", "driver"], cwd=out, capture_output=True, text=True
    )
    assert result.returncode == 0, f"{name}: {result.stderr[-3000:]}"
    kind = subprocess.run(["file", "driver"], cwd=out, capture_output=True, text=True).stdout
    assert "aarch64" in kind or "ARM" in kind, kind


@pytest.mark.skipif(
    shutil.which("clang") is None,
    reason="clang not installed (scripts/setup.sh: apt-get install -y clang)",
)
def test_clang_builds_cleanly(tmp_path: Path) -> None:
    case = CASES["kv_cache_decode"](tmp_path)
    plan = Synthesizer(case.arch).synthesize(case.model, case.graph, name="prog")
    build(plan, tmp_path / "c", cc="clang")


@pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")
def test_embedded_weights_run_without_the_model_file(tmp_path: Path) -> None:
    case = CASES["mlp"](tmp_path)
    plan = Synthesizer("c").synthesize(case.model, case.graph, name="prog", embed_weights=True)
    assert "prog_weights.c" in plan.files
    exe = build(plan, tmp_path / "c")
    # The driver passes its MODEL argument to oi_init; a path that does not exist must fail,
    # so run the embedded program through a tiny main that calls oi_init(NULL).
    main = tmp_path / "c" / "embedded_main.c"
    main.write_text(
        '#include "prog.h"\n#include <stdio.h>\n'
        "int main(void) {\n"
        "    float x[8 * 16] = {0}; int64_t dims[2] = {8, 16}; float y[8 * 4]; int nd; int64_t od[OI_MAX_DIMS];\n"
        "    int rc = oi_init(NULL);\n"
        "    if (!rc) rc = oi_insert_x(x, 2, dims);\n"
        "    if (!rc) rc = oi_step();\n"
        "    if (!rc) rc = oi_fetch_y(y, 8 * 4, &nd, od);\n"
        '    if (rc) { printf("error %s\\n", oi_last_error()); return 1; }\n'
        '    printf("%d %lld %lld %.6f\\n", nd, (long long)od[0], (long long)od[1], y[0]);\n'
        "    oi_free();\n    return 0;\n}\n"
    )
    sources = ["embedded_main.c", "prog.c", "oi_runtime.c", "prog_weights.c"]
    subprocess.run([CC, *CFLAGS, *sources, "-lm", "-o", "emb"], cwd=tmp_path / "c", check=True)
    case.model.unlink()  # the program must not need the file
    got = subprocess.run(
        [str(tmp_path / "c" / "emb")], capture_output=True, text=True, check=True
    ).stdout.split()
    assert got[:3] == ["2", "8", "4"]
    assert "oi_prog_weights" in (tmp_path / "c" / "prog.c").read_text()
    assert exe.exists()


@pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")
def test_selected_outputs_share_memory_and_still_match(tmp_path: Path) -> None:
    case = CASES["kv_cache_decode"](tmp_path)
    result = parity(
        tmp_path, case.model, case.graph, case.steps, outputs=["y", "step"], arch=case.arch
    )
    plan = result["plan"]
    assert plan.arena_bytes < plan.buffer_bytes  # lifetimes let temporaries share space
    assert result["compared"] == 2 * len(case.steps)
    text = plan.files["prog.c"]
    assert f"arena {plan.arena_bytes} bytes" in text.splitlines()[1]
