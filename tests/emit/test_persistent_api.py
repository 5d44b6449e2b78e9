"""`oi_reset` / `oi_set_persistent` of the emitted C (and Vulkan) program against the
simulator's `Executor.reset` / `Executor.set_persistent`: the same script of steps, resets and
persistent writes gives the same outputs after every step, and the same bad calls are
refused (unknown name, wrong size, over capacity) with the state left as it was."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.emit import Synthesizer
from openinfer_jax.errors import SimulationError
from openinfer_jax.oinf import DType, ModelLoader, write_oinf
from openinfer_jax.sim import Simulator
from tests.emit.harness import CC, CFLAGS, assert_close, read_tensor, write_tensor
from tests.emit.test_vulkan import HAVE_VULKAN

pytestmark = pytest.mark.skipif(shutil.which(CC) is None, reason="no C compiler")

GRAPH = """
graph {
  dynamic { x: f32[D]; }
  volatile { a: f32[D]; ks: f32[8, D]; mm: f32[2, 3, D]; y: f32[D]; m: f32[D]; }
  persistent {
    step: i32 @init(0);
    acc: f32[D] @init(1.0);
    bias: f32[D];
    K(t): f32[D] @table @fixed(t=8);
    M(l, t): f32[D] @table @fixed(l=2, t=3);
  }
  block entry {
    cache.read acc >> a;
    op add(a, x) >> a;
    cache.write a >> acc;
    cache.write x >> K[step];
    cache.read K >> ks;
    op sum_axis(ks, axes=[0]) >> y;
    cache.write x >> M[0, 0];
    cache.read M >> mm;
    op sum_axis(mm, axes=[0, 1]) >> m;
    op add(y, m) >> y;
    cache.read bias >> m;
    op add(y, m) >> y;
    cache.increment step;
    return;
  }
}
"""
OUTPUTS = ("K", "M", "acc", "step", "y")
D = 4


def _script(rng: np.random.Generator) -> list[tuple]:
    """(kind, ...) actions; `bad` ones must be refused by both sides."""
    x = [rng.standard_normal(D).astype(np.float32) for _ in range(8)]
    return [
        ("step", x[0]),
        ("step", x[1]),
        ("set", "acc", np.arange(D, dtype=np.float32)),
        ("set", "bias", np.full(D, 0.5, np.float32)),
        ("step", x[2]),
        ("reset",),
        ("step", x[3]),
        ("set", "K", rng.standard_normal((3, D)).astype(np.float32)),  # a prefill of 3
        ("set", "step", np.int32(3)),
        ("set", "M", rng.standard_normal((2, 2, D)).astype(np.float32)),
        ("step", x[4]),
        ("bad", "nope", np.zeros(D, np.float32), "ARGUMENT"),
        ("bad", "acc", np.zeros(D + 1, np.float32), "SHAPE"),
        ("bad", "K", rng.standard_normal((9, D)).astype(np.float32), "CACHE_FULL"),
        ("step", x[5]),
        ("reset",),
        ("reset",),
        ("step", x[6]),
    ]


def _c_main(script: list[tuple], data: Path) -> str:
    """A main() that runs `script` through the emitted API, writing outputs after each step."""
    body = []
    for k, action in enumerate(script):
        kind = action[0]
        if kind == "step":
            body.append(f'    CHECK(insert("{data}/x.{k}.bin"));')
            body.append("    CHECK(oi_step());")
            body.append(f'    CHECK(fetch_all("{data}", {k}));')
        elif kind == "reset":
            body.append("    CHECK(oi_reset());")
        elif kind == "set" and action[1] == "M":  # a table of two indices: the typed setter
            body.append(f'    CHECK(set_typed_{action[1]}("{data}/{action[1]}.{k}.bin"));')
        else:
            want = "OI_OK" if kind == "set" else f"OI_ERR_{action[3]}"
            body.append(
                f'    EXPECT(set_bytes("{action[1]}", "{data}/{action[1]}.{k}.bin"), {want});'
            )
    typed = "\n".join(
        f"""static int set_typed_{name}(const char *path) {{
    int nd; int64_t dims[8]; void *buf = load(path, &nd, dims, NULL); int rc;
    if (!buf) return OI_ERR_IO;
    rc = oi_set_persistent_{name}((const float *)buf, nd, dims); free(buf); return rc;
}}"""
        for name in ("M",)
    )
    fetches = "\n".join(
        f"    if (!rc) rc = oi_fetch_{v}(({'int32_t' if v == 'step' else 'float'} *)buf, 1 << 16, &nd, dims);\n"
        f'    if (!rc) rc = fetch_one("{v}", dir, k, buf, nd, dims);'
        for v in OUTPUTS
    )
    return f"""#include "prog.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(e) do {{ int rc_ = (e); if (rc_) {{ fprintf(stderr, "%s: %s\\n", #e, oi_last_error()); return 1; }} }} while (0)
#define EXPECT(e, want) do {{ int rc_ = (e); if (rc_ != (want)) {{ fprintf(stderr, "%s gave %d: %s\\n", #e, rc_, oi_last_error()); return 1; }} if ((want) != OI_OK) printf("refused: %s\\n", oi_last_error()); }} while (0)

static void *load(const char *path, int *nd, int64_t *dims, size_t *bytes) {{
    FILE *f = fopen(path, "rb"); int32_t n; int d; long size; void *buf;
    if (!f) return NULL;
    if (fread(&n, 4, 1, f) != 1) {{ fclose(f); return NULL; }}
    if (n && fread(dims, 8, (size_t)n, f) != (size_t)n) {{ fclose(f); return NULL; }}
    *nd = n;
    fseek(f, 0, SEEK_END); size = ftell(f) - 4 - 8 * n; fseek(f, 4 + 8 * n, SEEK_SET);
    buf = malloc((size_t)size + 1);
    if (size && fread(buf, 1, (size_t)size, f) != (size_t)size) {{ fclose(f); free(buf); return NULL; }}
    fclose(f);
    if (bytes) *bytes = (size_t)size;
    (void)d;
    return buf;
}}

static int insert(const char *path) {{
    int nd; int64_t dims[8]; void *buf = load(path, &nd, dims, NULL); int rc;
    if (!buf) return OI_ERR_IO;
    rc = oi_insert_x((const float *)buf, nd, dims); free(buf); return rc;
}}

static int set_bytes(const char *name, const char *path) {{
    int nd; int64_t dims[8]; size_t bytes; void *buf = load(path, &nd, dims, &bytes); int rc;
    if (!buf) return OI_ERR_IO;
    rc = oi_set_persistent(name, buf, bytes); free(buf); return rc;
}}

{typed}

static int fetch_one(const char *var, const char *dir, int k, const void *buf, int nd, const int64_t *dims) {{
    char path[1024]; FILE *f; int32_t n = nd; int64_t count = 1; int d;
    for (d = 0; d < nd; d++) count *= dims[d];
    snprintf(path, sizeof path, "%s/%s.out.%d.bin", dir, var, k);
    f = fopen(path, "wb"); if (!f) return OI_ERR_IO;
    fwrite(&n, 4, 1, f); if (nd) fwrite(dims, 8, (size_t)nd, f); fwrite(buf, 4, (size_t)count, f);
    return fclose(f) ? OI_ERR_IO : OI_OK;
}}

static int fetch_all(const char *dir, int k) {{
    static float buf[1 << 16]; int nd = 0, rc = 0; int64_t dims[8];
{fetches}
    return rc;
}}

int main(int argc, char **argv) {{
    if (argc < 2) return 2;
    CHECK(oi_init(argv[1]));
    EXPECT(oi_set_persistent("step", NULL, 4), OI_ERR_ARGUMENT);
{chr(10).join(body)}
    oi_free();
    EXPECT(oi_reset(), OI_ERR_STATE);
    return 0;
}}
"""


def _simulate(
    model: Path, script: list[tuple]
) -> tuple[dict[int, dict[str, np.ndarray]], list[str]]:
    """Run the script on the simulator: outputs after each step; the messages of refusals."""
    outs: dict[int, dict[str, np.ndarray]] = {}
    refused: list[str] = []
    with ModelLoader.open(model) as loader:
        ex = Simulator(loader, GRAPH).make_executor()
        for k, action in enumerate(script):
            if action[0] == "step":
                ex.insert(x=action[1])
                ex.step()
                outs[k] = {v: np.asarray(ex.fetch(v)) for v in OUTPUTS}
            elif action[0] == "reset":
                ex.reset()
            elif action[0] == "set":
                ex.set_persistent(action[1], action[2])
            else:
                before = {v: np.asarray(ex.fetch(v)) for v in OUTPUTS}
                with pytest.raises(SimulationError) as err:
                    ex.set_persistent(action[1], action[2])
                refused.append(str(err.value))
                after = {v: np.asarray(ex.fetch(v)) for v in OUTPUTS}
                for v in OUTPUTS:  # a refused call changes nothing
                    np.testing.assert_array_equal(before[v], after[v])
    return outs, refused


def _run(tmp: Path, target: str) -> None:
    rng = np.random.default_rng(17)
    model = tmp / "m.oinf"
    write_oinf(model, sizevars={"D": D}, metadata={}, tensors={"bias": np.zeros(D, np.float32)})
    script = _script(rng)
    data = tmp / "data"
    data.mkdir()
    for k, action in enumerate(script):
        if action[0] == "step":
            write_tensor(data / f"x.{k}.bin", action[1])
        elif action[0] in ("set", "bad"):
            write_tensor(data / f"{action[1]}.{k}.bin", np.asarray(action[2]))
    synth = Synthesizer("c") if target == "c" else Synthesizer("vulkan")
    plan = synth.synthesize(model, GRAPH, name="prog", outputs=list(OUTPUTS))
    out = plan.emit(tmp / "src")
    (out / "main.c").write_text(_c_main(script, data))
    sources = ["prog.c", "oi_runtime.c", "main.c"]
    libs = ["-lm"]
    if target == "vulkan":
        sources.append("oi_vulkan.c")
        libs.insert(0, "-lvulkan")
    build = subprocess.run(
        [CC, *CFLAGS, *sources, *libs, "-o", "main"], cwd=out, capture_output=True, text=True
    )
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(out / "main"), str(model)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    want, refused = _simulate(model, script)
    dtypes = {"step": np.int32}
    for k, values in want.items():
        for var, value in values.items():
            dtype = DType.I32 if var in dtypes else DType.F32
            got = read_tensor(data / f"{var}.out.{k}.bin", dtype)
            assert_close(f"action {k} {var}", got, value, dtype)
    c_refused = [line[len("refused: ") :] for line in run.stdout.splitlines()]
    assert len(c_refused) == len(refused) + 2  # + the NULL argument and reset after free
    for sim_msg, c_msg in zip(refused, c_refused[1:]):
        name = sim_msg.split("'")[1]
        assert name in c_msg, (sim_msg, c_msg)
    assert "no persistent variable of that name (persistent: K, M, acc, bias, step)" in c_refused[1]
    assert "no persistent variable of that name (persistent: K, M, acc, bias, step)" in refused[0]
    assert "20 bytes, expected 16 (f32[4])" in c_refused[2] and "shape [5]" in refused[1]
    assert "exceed its capacity 8" in c_refused[3]


def test_reset_and_set_persistent_match_the_simulator(tmp_path: Path) -> None:
    _run(tmp_path, "c")


@pytest.mark.skipif(not HAVE_VULKAN, reason="no libvulkan")
def test_reset_and_set_persistent_on_the_vulkan_target(tmp_path: Path) -> None:
    if not shutil.which("glslc"):
        pytest.skip("glslc missing")
    _run(tmp_path, "vulkan")
