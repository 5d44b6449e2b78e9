"""CPU time per GPT-2-small decode step: the simulator vs the hand-written jax.jit.

bench_sim.py compares wall times, which a loaded machine distorts. This measures the
process CPU time of each step (all of XLA's threads included), the two sides interleaved
in 3 rounds of 12 steps, and keeps the lower quartile of each round's best. Usage:
`PYTHONPATH=. OPENINFER_COMPILE_CACHE=0 python bench/bench_sim_cpu.py [CONTEXT ...]`
(default 128 1024). Prints one line per context; writes nothing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))

from bench_sim import PureDecode, SimDecode, make_pure_jax  # noqa: E402
from kv_cache_decode import Config, graph_text, write_model  # noqa: E402

from openinfer_jax.sim import Simulator  # noqa: E402
from openinfer_jax.sim.values import bucket_size  # noqa: E402


def _cpu_ms(fn: Callable[[], Any], steps: int) -> float:
    """Lower-quartile process CPU time of `steps` calls, in ms."""
    times = []
    for _ in range(steps):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    times.sort()
    return times[len(times) // 4] * 1e3


def main(argv: list[str]) -> int:
    """Print simulator vs jax.jit CPU ms per decode step at each context."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("contexts", nargs="*", type=int, default=[128, 1024], help="contexts")
    contexts = parser.parse_args(argv).contexts
    cfg = Config(layers=12, d=768, heads=12)
    steps, rounds = 12, 3
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gpt.oinf"
        write_model(path, cfg)
        sim = Simulator(path, graph_text(cfg), device="cpu")
        params = {n: jax.device_put(np.array(sim.model.tensor(n))) for n in sim.model.tensors}
        ours = SimDecode(sim, cfg)
        pure = PureDecode(make_pure_jax(cfg), params, cfg)
        for ctx in contexts:
            ours.prefill(ctx)
            pure.prefill(ctx, bucket_size(ctx + rounds * steps + 4))
            for _ in range(2):
                ours.step()
                pure.step()
            sim_rounds, jit_rounds = [], []
            for _ in range(rounds):  # interleaved: both sides see the same load
                sim_rounds.append(_cpu_ms(ours.step, steps))
                jit_rounds.append(_cpu_ms(pure.step, steps))
            sim_ms, jit_ms = min(sim_rounds), min(jit_rounds)
            print(
                f"context {ctx}: simulator {sim_ms:.2f} ms CPU, jax.jit {jit_ms:.2f} ms CPU, "
                f"ratio {sim_ms / jit_ms:.3f}",
                flush=True,
            )
        sim.model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
