"""Tensor-parallel generation: `Generator(devices=N)` / `openinfer generate --devices N` on
emulated CPU devices gives the one-device tokens, with the Megatron minimum of collectives
(one all-reduce per block half), and impossible plans fail with a `ShardingError` naming the
variable and the dim.

XLA's host device count is fixed when jax starts, so the multi-device cases run this file as
a script in a subprocess with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from openinfer_jax.core.errors import ShardingError
from openinfer_jax.models.llama import LlamaConfig
from openinfer_jax.models.tensor_parallel import llama_plan
from openinfer_jax.oinf import ModelLoader

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "the cat sat on a mat"
# Tiny llama with 4 query heads, 2 KV heads, intermediate 48: 1 and 2 devices divide it.
SHAPE = {"layers": 2, "heads": 4, "kv_heads": 2, "inter": 48}


def _env(devices: int) -> dict[str, str]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).strip(os.pathsep)
    return env


def _config(path: Path) -> LlamaConfig:
    with ModelLoader.open(path) as m:
        return LlamaConfig.from_model(m)


def test_plan_splits_heads_and_mlp(tmp_path: Path) -> None:
    from tests.models.tiny import write_tiny_llama

    cfg = _config(write_tiny_llama(tmp_path / "tiny.oinf", **SHAPE))
    plan = llama_plan(cfg, 2)
    assert plan["Wq"] == plan["Wg"] == "model, None"
    assert plan["Wo"] == plan["Wd"] == "None, model"
    assert plan["K"] == plan["V"] == "None, None, model, None"
    assert "tok_emb" not in plan and "AttnNorm" not in plan


def test_impossible_plans_name_variable_and_dim(tmp_path: Path) -> None:
    from tests.models.tiny import write_tiny_llama

    cfg = _config(write_tiny_llama(tmp_path / "tiny.oinf", **SHAPE))
    with pytest.raises(ShardingError, match=r"'Wq' dim 0 \(size 32, 4 attention heads\).*by 3"):
        llama_plan(cfg, 3)
    with pytest.raises(ShardingError, match=r"'Wk' dim 0 \(size 16, 2 key/value heads\).*by 4"):
        llama_plan(cfg, 4)
    with pytest.raises(ShardingError, match=r"device counts that fit this model: 1, 2$"):
        llama_plan(cfg, 4)
    odd = _config(write_tiny_llama(tmp_path / "odd.oinf", **{**SHAPE, "inter": 51}))
    with pytest.raises(ShardingError, match=r"'Wg' dim 0 \(size 51.*by 2"):
        llama_plan(odd, 2)
    with pytest.raises(ShardingError, match="devices must be >= 1"):
        llama_plan(cfg, 0)


def test_devices_with_c_target_is_refused(tmp_path: Path) -> None:
    from openinfer_jax.errors import GenerationError
    from openinfer_jax.generate import Generator
    from tests.models.tiny import write_tiny_llama

    path = write_tiny_llama(tmp_path / "tiny.oinf", **SHAPE)
    with pytest.raises(GenerationError, match="one device"):
        Generator(path, target="c", devices=2)


def test_two_devices_match_one(tmp_path: Path) -> None:
    """Greedy tokens on a 2-device mesh equal the unsharded run (Generator and CLI)."""
    proc = subprocess.run(
        [sys.executable, str(Path(__file__)), str(tmp_path)],
        cwd=ROOT,
        env=_env(2),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "OK generator" in proc.stdout, proc.stdout
    one = proc.stdout.split("tokens 1: ")[1].splitlines()[0]
    cli = subprocess.run(
        [sys.executable, "-m", "openinfer_jax", "generate", str(tmp_path / "tiny.oinf"),
         PROMPT, "--devices", "2", "--ids", "-n", "6", "--no-stop", "--chunk", "4",
         "--context", "32", "--no-compile-cache"],
        cwd=ROOT, env=_env(2), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr[-4000:]
    assert cli.stdout.split() == one.split(), (cli.stdout, one)
    assert "tensor-parallel over cpu mesh(model=2)" in cli.stderr


def _main(out: Path) -> None:
    """Subprocess: 1 device vs 2 devices through the Generator; collectives per region."""
    import numpy as np

    from openinfer_jax.generate import Generator
    from tests.models.tiny import write_tiny_llama

    path = write_tiny_llama(out / "tiny.oinf", **SHAPE)
    runs: dict[int, list[int]] = {}
    for devices in (None, 2):
        gen = Generator(path, chunk=4, context=32, devices=devices, compile_cache=False)
        try:
            if devices:
                gen.runner.sim.with_trace()  # records each region's compiled collectives
            runs[devices or 1] = gen.generate(PROMPT, max_new_tokens=6, stop_at_eos=False).tokens
            if devices:
                k = gen.runner.ex.persistent.tables["K"].buffer
                spec = tuple(k.sharding.spec)
                assert spec[:3] == (None, None, "model"), spec
                shard = k.addressable_shards[0].data.shape
                assert shard[2] * 2 == k.shape[2], (shard, k.shape)
                regions = gen.runner.sim.sharded.regions
                counts = [r["collectives"]["counts"] for r in regions.values()]
                layers = SHAPE["layers"]
                # Prefill and decode regions: exactly 2 all-reduces per layer, nothing else.
                stacks = [c for c in counts if c]
                assert len(stacks) == 2, counts
                for c in stacks:
                    assert c == {"all-reduce": 2 * layers}, counts
        finally:
            gen.close()
    print("tokens 1:", " ".join(map(str, runs[1])))
    print("tokens 2:", " ".join(map(str, runs[2])))
    assert runs[1] == runs[2], runs
    assert np.asarray(runs[1]).size == 6
    print("OK generator")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    _main(Path(sys.argv[1]))
