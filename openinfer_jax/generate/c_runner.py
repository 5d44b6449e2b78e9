"""Generation through the emitted C program: the `llama` graph as C, plus a generate-driver.

The driver (`driver_source`) uses only the program's C API (oi_init, oi_insert_tokens,
oi_insert_count, oi_step, oi_fetch_logits, oi_reset, oi_free). It takes token ids, not text, in two
modes:

- ``llm_generate MODEL.oinf --serve``: a step server for `CRunner`. Each request on stdin is
  an int32 ``n`` and ``n`` int32 token ids (1 <= n <= chunk): one step, answered on stdout
  by an int32 status and, when it is 0, the logits (vocab float32); any other status is
  followed by an int32 length and the error text. ``n = -1`` starts a new sequence
  (``oi_reset``: the cache and ``step`` back to their initial values), ``n = 0`` ends the
  process.
- ``llm_generate MODEL.oinf MAX_NEW EOS ID...``: greedy generation on the device itself,
  without Python: prefill, then one generated id per line as soon as it is chosen.

The sources and the executable are built once per graph and compiler flags and kept under
``$XDG_CACHE_HOME/openinfer-jax/c/<hash>/`` (the weights are read from the model at run
time, so one build serves every model of the same sizes).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from openinfer_jax.core.errors import GenerationError

__all__ = ["DEFAULT_FLAGS", "CRunner", "build_generate_program", "driver_source"]

NAME = "llm"
DEFAULT_FLAGS = ("-O2", "-march=native")

_DRIVER = r"""/* llm_generate.c: generate-driver of the emitted decoder (openinfer_jax.generate). */
#include "@NAME@.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK @CHUNK@
#define CONTEXT @CONTEXT@

static float logits[OI_BOUND_logits];

/* One step on 1..CHUNK tokens; the logits of the last one land in `logits`. */
static int run_step(const int32_t *ids, int n) {
    int32_t buf[CHUNK];
    int64_t dims[OI_MAX_DIMS] = {CHUNK};
    int nd, rc;
    memset(buf, 0, sizeof buf);
    memcpy(buf, ids, (size_t)n * sizeof(int32_t));
    rc = oi_insert_tokens(buf, 1, dims);
#if CHUNK > 1
    if (!rc) {
        int32_t count = n;
        rc = oi_insert_count(&count, 0, dims);
    }
#endif
    if (!rc) rc = oi_step();
    if (!rc) rc = oi_fetch_logits(logits, OI_BOUND_logits, &nd, dims);
    return rc;
}

static int argmax(void) {
    int i, best = 0;
    for (i = 1; i < OI_BOUND_logits; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

static int serve(void) {
    int32_t n, ids[CHUNK];
    for (;;) {
        int32_t status;
        if (fread(&n, 4, 1, stdin) != 1 || n == 0) return 0;
        if (n == -1) {
            status = oi_reset(); /* persistent state (step, K/V cache) back to its initial values */
        } else if (n < 1 || n > CHUNK || fread(ids, 4, (size_t)n, stdin) != (size_t)n) {
            oi_set_error("bad request: %d tokens (1..%d)", (int)n, CHUNK);
            status = OI_ERR_ARGUMENT;
        } else {
            status = run_step(ids, n);
        }
        fwrite(&status, 4, 1, stdout);
        if (status == 0 && n != -1) {
            fwrite(logits, sizeof(float), OI_BOUND_logits, stdout);
        } else if (status != 0) {
            const char *msg = oi_last_error();
            int32_t len = (int32_t)strlen(msg);
            fwrite(&len, 4, 1, stdout);
            fwrite(msg, 1, (size_t)len, stdout);
        }
        fflush(stdout);
    }
}

static int greedy(int argc, char **argv) {
    int max_new = atoi(argv[2]), eos = atoi(argv[3]), n = argc - 4, pos = 0, i, rc = 0;
    int32_t *ids = (int32_t *)malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (!ids || n < 1 || n >= CONTEXT) {
        fprintf(stderr, "need 1..%d prompt ids\n", CONTEXT - 1);
        free(ids);
        return 2;
    }
    for (i = 0; i < n; i++) ids[i] = (int32_t)atoi(argv[4 + i]);
    while (!rc && pos < n) { /* full chunks while a padded chunk fits, then one by one */
        int take = n - pos < CHUNK ? n - pos : CHUNK;
        if (take > 1 && pos + CHUNK > CONTEXT) take = 1;
        rc = run_step(ids + pos, take);
        pos += take;
    }
    for (i = 0; !rc && i < max_new; i++) {
        int32_t token = argmax();
        printf("%d\n", (int)token);
        fflush(stdout);
        if (token == eos || i + 1 == max_new || pos >= CONTEXT) break;
        rc = run_step(&token, 1);
        pos++;
    }
    free(ids);
    if (rc) fprintf(stderr, "step: %s: %s\n", oi_error_string(rc), oi_last_error());
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    int rc, code;
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.oinf --serve | MODEL.oinf MAX_NEW EOS ID...\n", argv[0]);
        return 2;
    }
    rc = oi_init(argv[1]);
    if (rc) {
        fprintf(stderr, "oi_init: %s: %s\n", oi_error_string(rc), oi_last_error());
        return 1;
    }
    code = strcmp(argv[2], "--serve") == 0 ? serve() : (argc < 5 ? 2 : greedy(argc, argv));
    oi_free();
    return code;
}
"""


def driver_source(chunk: int, context: int) -> str:
    """The generate-driver's C source for a graph of `chunk` tokens and `context` cache rows."""
    return (
        _DRIVER.replace("@NAME@", NAME)
        .replace("@CHUNK@", str(chunk))
        .replace("@CONTEXT@", str(context))
    )


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "openinfer-jax" / "c"


def build_generate_program(
    model: Path, graph: Any, chunk: int, context: int, flags: tuple[str, ...] = DEFAULT_FLAGS
) -> Path:
    """Emit the C program and its generate-driver and compile them (cached); the executable.

    Raises:
        GenerationError: no C compiler, or the build failed (its output in the message).
    """
    from openinfer_jax.emit import Synthesizer
    from openinfer_jax.ir import format_graph

    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        raise GenerationError(f"--target c needs a C compiler; {cc!r} was not found (set CC)")
    driver = driver_source(chunk, context)
    key = hashlib.sha256("\0".join([format_graph(graph), driver, cc, *flags]).encode()).hexdigest()[
        :16
    ]
    root = _cache_root() / key
    exe = root / f"{NAME}_generate"
    if exe.is_file():
        return exe
    plan = Synthesizer("c").synthesize(model, graph, name=NAME, outputs=["logits"])
    build = root.with_name(root.name + f".tmp{os.getpid()}")
    shutil.rmtree(build, ignore_errors=True)
    build.parent.mkdir(parents=True, exist_ok=True)
    plan.emit(build)
    (build / f"{NAME}_generate.c").write_text(driver, encoding="utf-8")
    sources = [f"{NAME}.c", "oi_runtime.c", f"{NAME}_generate.c"]
    sources += [
        f for f in plan.files if f.endswith(".c") and f not in sources and "driver" not in f
    ]
    done = subprocess.run(
        [cc, "-std=c99", *flags, *sources, "-lm", "-o", exe.name],
        cwd=build, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise GenerationError(f"building the C program failed ({cc}):\n{done.stderr[-2000:]}")
    try:
        build.rename(root)
    except OSError:  # another process built it first
        shutil.rmtree(build, ignore_errors=True)
    return exe


class CRunner:
    """Steps through the emitted C program, a child process in ``--serve`` mode."""

    def __init__(
        self, model: Path, graph: Any, chunk: int, *, flags: tuple[str, ...] | None = None
    ) -> None:
        from openinfer_jax.oinf import ModelLoader

        with ModelLoader.open(model) as loader:
            self.vocab = int(loader.sizevars["vocab_size"])
        context = next(int(dict(d.fixed)["t"]) for d in graph.vars if d.name == "K")
        self.chunk = chunk
        self.exe = build_generate_program(model, graph, chunk, context, flags or DEFAULT_FLAGS)
        self.proc = subprocess.Popen(
            [str(self.exe), str(model), "--serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        self._fresh = True

    def _request(self, n: int, ids: list[int]) -> np.ndarray | None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(struct.pack(f"<i{len(ids)}i", n, *ids))
        self.proc.stdin.flush()
        head = self.proc.stdout.read(4)
        if len(head) < 4:
            err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
            raise GenerationError(f"the C program stopped: {err.strip() or 'no output'}")
        (status,) = struct.unpack("<i", head)
        if status != 0:
            (length,) = struct.unpack("<i", self.proc.stdout.read(4))
            message = self.proc.stdout.read(length).decode(errors="replace")
            raise GenerationError(f"the C program failed a step (status {status}): {message}")
        if n == -1:
            return None
        return np.frombuffer(self.proc.stdout.read(4 * self.vocab), np.float32).copy()

    def reset(self) -> None:
        if not self._fresh:
            self._request(-1, [])
        self._fresh = True

    def step(self, tokens: list[int]) -> np.ndarray:
        self._fresh = False
        logits = self._request(len(tokens), tokens)
        assert logits is not None
        return logits

    def cpu_seconds(self) -> float:
        """The child's user + system CPU time (Linux /proc; 0 elsewhere)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(struct.pack("<i", 0))
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
