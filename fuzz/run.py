"""Run the fuzzers for a set time and the differential Python-vs-C reader check (`make fuzz`).

Targets:
  oinf_reader    atheris, the Python .oinf reader and verifier (fuzz/oinf_reader.py)
  dsl_frontends  atheris, the graph{} parser and the graph JSON reader (fuzz/dsl_frontends.py)
  oinf_loader    libFuzzer + ASan + UBSan (clang), the emitted C loader (fuzz/oinf_loader.c)
  driver_input   libFuzzer + ASan + UBSan, the generated driver's input-file reader
                 (fuzz/driver_input.c over a synthesized program's driver)
  differential   the Python and C readers on every corpus file (seeds and what the fuzzers
                 kept): both accept or both reject, and on the committed bad-file corpus
                 both cite the manifest's rule

Seeds come from tests/oinf/corpus (bad and valid files), files our writer makes, and the
DSL test programs. Usage: python fuzz/run.py [--seconds 60] [--targets a,b] [--work DIR].
Prints one line per target (executions, seconds, findings) and a JSON summary; exits 1 if
any target has a finding (crash inputs are kept under WORK/artifacts/).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ORACLE = r"""
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
TARGETS = ("oinf_reader", "dsl_frontends", "oinf_loader", "driver_input", "differential")


def _oinf_seeds(out: Path) -> None:
    import numpy as np

    from openinfer_jax.oinf import Bitset, DType, TensorSpec, write_oinf

    out.mkdir(parents=True, exist_ok=True)
    corpus = ROOT / "tests" / "oinf" / "corpus"
    for path in [*corpus.glob("*.oinf"), *(corpus / "valid").glob("*.oinf")]:
        shutil.copy(path, out / path.name)
    for version in (1, 2):
        write_oinf(
            out / f"writer_v{version}.oinf",
            version=version,
            sizevars={"B": 2, "D": 3},
            metadata={"s": "txt", "n": 7, "bits": Bitset([1, 0, 1]), "arr": np.arange(3.0)},
            tensors={
                "w": np.arange(6, dtype=np.float32).reshape(2, 3),
                "p": TensorSpec(np.array([-8, 7, 3]), dtype=DType.I4),
                "kv": TensorSpec(dtype=DType.F16, shape=(2, 2)),
            },
        )


def _dsl_seeds(out: Path) -> None:
    from openinfer_jax.ir.serialize import to_json_text
    from openinfer_jax.trace import parse

    out.mkdir(parents=True, exist_ok=True)
    sources = [
        *(ROOT / "tests" / "trace" / "bad_syntax").glob("*.graph"),
        *(ROOT / "tests" / "ir" / "bad_programs").glob("*.graph"),
        *(ROOT / "tests" / "ir" / "corpus").glob("*.graph"),
    ]
    for k, path in enumerate(sources):
        text = path.read_bytes()
        (out / f"text_{k}").write_bytes(b"\x00" + text)
        try:
            graph = parse(text.decode("utf-8"))
        except Exception:  # a bad-syntax seed: the text form is enough
            continue
        (out / f"json_{k}").write_bytes(b"\x01" + to_json_text(graph).encode())


def _libfuzzer_stats(output: str) -> int:
    match = re.search(r"stat::number_of_executed_units:\s*(\d+)", output)
    if match:
        return int(match.group(1))
    done = re.findall(r"#(\d+)\s", output)
    return int(done[-1]) if done else 0


def _fuzz(
    command: list[str], corpus: Path, seeds: Path, work: Path, name: str, seconds: int
) -> dict:
    artifacts = work / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    result = subprocess.run(
        [
            *command,
            str(corpus),
            str(seeds),
            f"-max_total_time={seconds}",
            "-timeout=20",
            "-rss_limit_mb=2048",
            "-print_final_stats=1",
            f"-artifact_prefix={artifacts}/{name}-",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    output = result.stdout + result.stderr
    findings = sorted(p.name for p in artifacts.glob(f"{name}-*"))
    if result.returncode != 0 and not findings:
        findings = [f"exit {result.returncode}: {output[-2000:]}"]
    return {
        "target": name,
        "executions": _libfuzzer_stats(output),
        "seconds": round(time.monotonic() - start, 1),
        "findings": findings,
    }


def _build_loader(work: Path) -> Path:
    from openinfer_jax.emit.runtime_files import RUNTIME_DIR

    exe = work / "oinf_loader"
    flags = ["-g", "-O1", "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all"]
    subprocess.run(
        [
            "clang",
            *flags,
            f"-I{RUNTIME_DIR}",
            str(ROOT / "fuzz" / "oinf_loader.c"),
            str(RUNTIME_DIR / "oi_runtime.c"),
            "-lm",
            "-o",
            str(exe),
        ],
        check=True,
    )
    return exe


def _build_driver(work: Path) -> tuple[Path, Path]:
    """Synthesize a one-input program, build its driver's reader as a fuzz target; also
    write seed input files (a valid one, a truncated one)."""
    import numpy as np

    from openinfer_jax.emit import Synthesizer
    from openinfer_jax.oinf import write_oinf

    build = work / "driver"
    model = write_oinf(work / "driver_model.oinf", tensors={}, overwrite=True)
    graph = "graph { dynamic { x: f32[4]; } volatile { y: f32[4]; } block entry { op add(x, x) >> y; return; } }"
    Synthesizer("c").synthesize(model, graph, name="prog").emit(build, force=True)
    exe = build / "driver_input"
    flags = ["-g", "-O1", "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all"]
    subprocess.run(
        ["clang", *flags, f"-I{build}", str(ROOT / "fuzz" / "driver_input.c"),
         str(build / "prog.c"), str(build / "oi_runtime.c"), "-lm", "-o", str(exe)],
        check=True,
    )  # fmt: skip
    seeds = work / "driver_seeds"
    seeds.mkdir(exist_ok=True)
    good = np.int32(1).tobytes() + np.int64(4).tobytes() + np.arange(4, dtype=np.float32).tobytes()
    (seeds / "good").write_bytes(good)
    (seeds / "truncated").write_bytes(good[:-3])
    return exe, seeds


def _differential(work: Path, corpora: list[Path]) -> dict:
    """Both readers on every file: same verdict; on the manifest's files, its rule."""
    from openinfer_jax.emit.runtime_files import RUNTIME_DIR
    from openinfer_jax.errors import OinfFormatError
    from openinfer_jax.oinf import ModelLoader

    start = time.monotonic()
    build = work / "oracle"
    build.mkdir(parents=True, exist_ok=True)
    (build / "oracle.c").write_text(ORACLE)
    cc = shutil.which("clang") or "cc"
    subprocess.run(
        [cc, "-O1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", f"-I{RUNTIME_DIR}",
         str(build / "oracle.c"), str(RUNTIME_DIR / "oi_runtime.c"), "-lm", "-o", str(build / "oracle")],
        check=True,
    )  # fmt: skip
    files = sorted({p.resolve() for c in corpora if c.exists() for p in c.iterdir() if p.is_file()})
    manifest = json.loads((ROOT / "tests" / "oinf" / "corpus" / "manifest.json").read_text())
    findings: list[str] = []
    for chunk in range(0, len(files), 200):
        batch = files[chunk : chunk + 200]
        run = subprocess.run(
            [str(build / "oracle"), *map(str, batch)], capture_output=True, text=True
        )
        lines = run.stdout.splitlines()
        if run.returncode != 0 or len(lines) != len(batch):
            findings.append(f"C reader failed on a batch: {run.stderr[-1000:]}")
            continue
        for path, line in zip(batch, lines):
            try:
                ModelLoader.from_buffer(path.read_bytes()).close()
                python = "ok"
            except OinfFormatError as err:
                python = str(err)
            if (python == "ok") != (line == "ok"):
                findings.append(f"{path.name}: Python {python[:120]!r}, C {line[:120]!r}")
                continue
            rule = (
                manifest.get(path.stem, {}).get("rule")
                if path.parent.name == "oinf_seeds"
                else None
            )
            if rule and not (
                f"{rule} violated" in python and line.split(" ", 1)[-1].startswith(rule + " ")
            ):
                findings.append(
                    f"{path.name}: expected {rule}, Python {python[:80]!r}, C {line[:80]!r}"
                )
    return {
        "target": "differential",
        "executions": len(files),
        "seconds": round(time.monotonic() - start, 1),
        "findings": findings,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the chosen targets; print a line each and the JSON summary; 1 on any finding."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=60, help="time per fuzz target")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--work", type=Path, help="keep corpora and artifacts here")
    args = parser.parse_args(argv)
    targets = [t for t in args.targets.split(",") if t]
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown:
        parser.error(f"unknown targets {unknown}; known: {', '.join(TARGETS)}")
    work = args.work or Path(tempfile.mkdtemp(prefix="openinfer-fuzz-"))
    oinf_seeds, dsl_seeds = work / "oinf_seeds", work / "dsl_seeds"
    _oinf_seeds(oinf_seeds)
    _dsl_seeds(dsl_seeds)
    python = [sys.executable]
    results = []
    for target in targets:
        if target == "oinf_reader":
            corpus = work / "corpus_oinf_py"
            corpus.mkdir(exist_ok=True)
            cmd = [*python, str(ROOT / "fuzz" / "oinf_reader.py")]
            results.append(_fuzz(cmd, corpus, oinf_seeds, work, target, args.seconds))
        elif target == "dsl_frontends":
            corpus = work / "corpus_dsl"
            corpus.mkdir(exist_ok=True)
            cmd = [*python, str(ROOT / "fuzz" / "dsl_frontends.py")]
            results.append(_fuzz(cmd, corpus, dsl_seeds, work, target, args.seconds))
        elif target == "oinf_loader":
            corpus = work / "corpus_oinf_c"
            corpus.mkdir(exist_ok=True)
            exe = _build_loader(work)
            results.append(_fuzz([str(exe)], corpus, oinf_seeds, work, target, args.seconds))
        elif target == "driver_input":
            corpus = work / "corpus_driver"
            corpus.mkdir(exist_ok=True)
            exe, seeds = _build_driver(work)
            results.append(_fuzz([str(exe)], corpus, seeds, work, target, args.seconds))
        else:
            corpora = [oinf_seeds, work / "corpus_oinf_py", work / "corpus_oinf_c"]
            results.append(_differential(work, corpora))
    for r in results:
        print(f"{r['target']}: {r['executions']} executions in {r['seconds']} s, "
              f"{len(r['findings'])} finding(s)")  # fmt: skip
        for finding in r["findings"][:10]:
            print(f"  {finding}")
    print(json.dumps({"work": str(work), "results": results}))
    return 1 if any(r["findings"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
