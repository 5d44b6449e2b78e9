"""Sharded simulation on 1, 2, 4 and 8 emulated CPU devices matches the single-device simulator.

XLA's host device count is fixed when jax starts, so each test runs this file as a script in
a subprocess with ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` (the rest of the
suite keeps its one CPU device). The script runs one group of cases on a mesh of the first
N devices and exits non-zero on the first mismatch, printing what differed.

Cases: every simulator example under an automatic tensor-parallel plan (each example checks
itself against NumPy), a MiniLM-shaped encoder and a SmolLM2/llama-shaped decoder (GQA,
rope, KV cache) written with random weights and run through the examples' own graph{}
programs, and the generated batched decoder of openinfer_jax.sim.sharding_models with its
Megatron plan; all compared with the single-device simulator step by step.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(group: str, devices: tuple[int, ...]) -> None:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, str(Path(__file__)), group, ",".join(map(str, devices))],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    for n in devices:
        assert f"OK {group} on {n} devices" in proc.stdout, proc.stdout


# Two device counts per subprocess: the four halves spread over pytest-xdist workers.
@pytest.mark.parametrize("devices", [(1, 2), (4, 8)])
def test_models_match_single_device(devices: tuple[int, ...]) -> None:
    _run("models", devices)


@pytest.mark.parametrize("devices", [(1, 2), (4, 8)])
def test_examples_run_sharded(devices: tuple[int, ...]) -> None:
    _run("examples", devices)


def test_placement_trace_and_errors() -> None:
    _run("behaviour", (8,))


def test_cli_run_devices(tmp_path: Path) -> None:
    """`openinfer run --devices 4` (XLA_FLAGS set by the CLI itself) prints the placement."""
    import numpy as np

    from openinfer_jax.sim.sharding_models import DecoderConfig, decoder_graph, write_decoder

    cfg = DecoderConfig(layers=1, d=64, heads=8, kv_heads=4, ffn=128, batch=2)
    write_decoder(tmp_path / "d.oinf", cfg)
    (tmp_path / "d.graph").write_text(decoder_graph(cfg))
    np.save(tmp_path / "x.npy", np.ones((2, 64), np.float32))
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    base = [sys.executable, "-m", "openinfer_jax", "run", "--model", "d.oinf", "--graph",
            "d.graph", "--input", "x=x.npy", "--devices", "4"]  # fmt: skip
    ok = subprocess.run(
        [*base, "--shard", "w[qkvgu]=None,model", "--shard", "K=None,None,None,model",
         "--trace", "t.json", "--fetch", "y"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr[-3000:]
    assert "sharded over cpu mesh(model=4): 6 variable(s) split" in ok.stdout
    assert "K: [None, None, None, model]" in ok.stdout
    assert "all-reduce" in ok.stdout and "us standalone" in ok.stdout
    bad = subprocess.run(
        [*base, "--shard", "wq=None,tensor"], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert bad.returncode == 1
    assert "'wq'" in bad.stderr and "dim 1" in bad.stderr and "'tensor'" in bad.stderr
    assert "Traceback" not in bad.stderr


# ---- the script side (runs in the subprocess) ------------------------------------------------
def _random_model(path: Path, sizevars: dict[str, int], tables: tuple, layers: int,
                  singles: dict[str, str], metadata: dict) -> None:  # fmt: skip
    """Random f32 weights for the examples' `LAYER_TABLES` (name, pattern, dims) layouts."""
    import numpy as np

    from openinfer_jax.oinf import OinfWriter

    rng = np.random.default_rng(0)

    def shape(dims: str) -> tuple[int, ...]:
        return tuple(int(eval(d, {}, dict(sizevars))) for d in dims.split(","))

    with OinfWriter(path, overwrite=True) as writer:
        for name, value in sizevars.items():
            writer.add_sizevar(name, value)
        for key, value in metadata.items():
            writer.add_metadata(key, value)
        tensors = {p.format(l=layer): dims for _n, p, dims in tables for layer in range(layers)}
        tensors.update(singles)
        for name, dims in tensors.items():
            dims_t = shape(dims)
            scale = 1.0 / np.sqrt(dims_t[-1]) if len(dims_t) > 1 else 0.1
            data = rng.standard_normal(dims_t).astype(np.float32) * np.float32(scale)
            if "norm" in name or "ln" in name:
                data += np.float32(1.0)
            writer.add_tensor(name, data)


def _tables(layer_tensors: dict) -> tuple:
    """(name, pattern, dims) rows for `_random_model` from a builder's layer-tensor table."""
    dims = {"hidden": "hidden_size", "intermediate": "intermediate_size",
            "q_rows": "num_attention_heads*head_dim", "kv_rows": "num_key_value_heads*head_dim"}  # fmt: skip
    return tuple(
        (name, pattern, ", ".join(dims[d] for d in fields))
        for name, (pattern, fields) in layer_tensors.items()
    )


def _trimmed(spec) -> tuple:
    """A spec without trailing Nones (JAX drops them in the shardings it returns)."""
    items = list(spec)
    while items and items[-1] is None:
        items.pop()
    return tuple(items)


def _check_model(name: str, path: Path, text: str, plans: dict, feeds: list[dict],
                 outputs: list[str], meshes: list, atol: float,
                 prefill: dict | None = None) -> list:  # fmt: skip
    """Run `feeds` (one dict of inputs per step) on one device, then on every mesh with
    every plan, after `set_persistent(**prefill)`; every output after every step must
    match. Returns the sharded executors."""
    import numpy as np

    from openinfer_jax.sim import Simulator

    ref = Simulator(path, text).make_executor()
    for key, value in (prefill or {}).items():
        ref.set_persistent(key, value)
    want = []
    for feed in feeds:
        ref.insert(**feed)
        ref.step()
        want.append({out: np.asarray(ref.fetch(out)) for out in outputs})
    ref.sim.model.close()
    last = []
    for mesh in meshes:
        for label, plan in plans.items():
            start = time.perf_counter()
            ex = Simulator(path, text, mesh=mesh, sharding=plan).make_executor()
            for key, value in (prefill or {}).items():
                ex.set_persistent(key, value)
            for step, feed in enumerate(feeds):
                ex.insert(**feed)
                ex.step()
                for out in outputs:
                    got = np.asarray(ex.fetch(out))
                    if got.shape != want[step][out].shape or not np.allclose(
                        got, want[step][out], rtol=1e-4, atol=atol
                    ):
                        diff = np.max(np.abs(got.astype(np.float64) - want[step][out]))
                        raise AssertionError(
                            f"{name} ({label}, {mesh.devices.size} devices) step {step}: {out} "
                            f"differs from one device (max |diff| {diff})"
                        )
            ex.sim.model.close()
            last.append(ex)
            print(f"{name} {label} on {mesh.devices.size}: {time.perf_counter() - start:.1f}s")
    return last


def _minilm(tmp: Path, meshes: list) -> None:
    import numpy as np
    from jax.sharding import PartitionSpec as P

    from openinfer_jax.models import build_graph
    from openinfer_jax.models.bert import BERT_LAYER_TENSORS

    sizes = {"hidden_size": 64, "intermediate_size": 128, "vocab_size": 96,
             "max_position_embeddings": 32, "type_vocab_size": 2, "num_hidden_layers": 2,
             "num_attention_heads": 8, "head_dim": 8}  # fmt: skip
    singles = {"tok_emb.weight": "vocab_size, hidden_size",
               "pos_emb.weight": "max_position_embeddings, hidden_size",
               "type_emb.weight": "type_vocab_size, hidden_size",
               "emb_ln.weight": "hidden_size", "emb_ln.bias": "hidden_size"}  # fmt: skip
    path = tmp / "minilm.oinf"
    _random_model(path, sizes, _tables(BERT_LAYER_TENSORS), 2, singles, {"layer_norm_eps": 1e-12})
    batch, seq = 8, 8
    # Torch layout (out, in): Q/K/V and the MLP input split by output row, the attention
    # output and MLP output by input column, the embedding table by hidden column.
    plan = {"W[qkvi]": P("model", None), "W[of]": P(None, "model"), "tok_emb": P(None, "model")}
    rng = np.random.default_rng(2)
    mask = (rng.random((batch, seq)) > 0.2).astype(np.float32)
    mask[:, 0] = 1
    feed = dict(
        ids=rng.integers(0, 96, (batch, seq)).astype(np.int32),
        types=rng.integers(0, 2, (batch, seq)).astype(np.int32),
        positions=np.broadcast_to(np.arange(seq, dtype=np.int32), (batch, seq)).copy(),
        mask=((1.0 - mask) * -1e9).reshape(batch, 1, 1, seq).astype(np.float32),
        pool=(mask / mask.sum(1, keepdims=True)).reshape(batch, seq, 1).astype(np.float32),
    )
    text = build_graph(path, "bert", batch=batch, seq=seq)
    _check_model("minilm-shaped", path, text, {"plan": plan, "auto": "auto"}, [feed], ["y"],
                 meshes, 1e-5)  # fmt: skip


def _smollm(tmp: Path, meshes: list) -> None:
    import numpy as np
    from jax.sharding import PartitionSpec as P

    from openinfer_jax.models import build_graph
    from openinfer_jax.models.llama import LLAMA_LAYER_TENSORS

    sizes = {"hidden_size": 128, "intermediate_size": 256, "vocab_size": 128,
             "num_hidden_layers": 1, "num_attention_heads": 16, "num_key_value_heads": 8,
             "head_dim": 8}  # fmt: skip
    singles = {"tok_emb.weight": "vocab_size, hidden_size", "norm.weight": "hidden_size"}
    path = tmp / "smollm.oinf"
    _random_model(path, sizes, _tables(LLAMA_LAYER_TENSORS), 1, singles, {"model_type": "llama"})
    plan = {
        "W[qkvgu]": P("model", None),
        "W[od]": P(None, "model"),
        "[KV]": P(None, None, "model", None),  # [layer, token, kv head, head dim]
    }
    # A cache prefilled with 14 tokens (loaded onto the mesh sharded), then 3 decode steps:
    # the K/V tables outgrow their first capacity (16) while sharded.
    rng = np.random.default_rng(4)
    prefill = {
        "K": rng.standard_normal((1, 14, 8, 8)).astype(np.float32),
        "V": rng.standard_normal((1, 14, 8, 8)).astype(np.float32),
        "step": np.asarray(14, np.int32),
    }
    feeds = [{"tokens": np.asarray([t], np.int32)} for t in (3, 100, 17)]
    text = build_graph(path, "llama", chunk=1, context=32)
    for ex in _check_model("smollm2-shaped", path, text, {"plan": plan}, feeds,
                           ["logits", "K", "step"], meshes, 1e-4, prefill):  # fmt: skip
        buf = ex.persistent.tables["K"].buffer
        if buf.sharding.mesh.devices.size > 1:  # a 1-device mesh drops the spec
            assert _trimmed(buf.sharding.spec) == (None, None, "model"), buf.sharding


def _decoder(tmp: Path, meshes: list) -> None:
    import numpy as np

    from openinfer_jax.sim.sharding_models import (
        DecoderConfig,
        decoder_graph,
        decoder_plan,
        write_decoder,
    )

    cfg = DecoderConfig(layers=1, d=64, heads=8, kv_heads=8, ffn=128, batch=4)
    path = tmp / "decoder.oinf"
    write_decoder(path, cfg)
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.standard_normal((cfg.batch, cfg.d)).astype(np.float32)} for _ in range(3)]
    _check_model("decoder", path, decoder_graph(cfg), {"megatron": decoder_plan()}, feeds,
                 ["y"], meshes, 1e-4)  # fmt: skip


def _examples(meshes: list) -> None:
    import importlib.util
    import io
    from contextlib import redirect_stdout

    from openinfer_jax.sim.sharding import AUTO, sharding_scope

    sys.path.insert(0, str(ROOT / "tests" / "sim"))
    from test_examples import EXAMPLES, SIM_EXAMPLES

    for name in SIM_EXAMPLES:
        spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        try:
            spec.loader.exec_module(module)
            for mesh in meshes:
                with sharding_scope(mesh, AUTO), redirect_stdout(io.StringIO()):
                    assert module.main() == 0, (name, mesh.devices.size)
        finally:
            sys.modules.pop(spec.name, None)


def _behaviour(tmp: Path, mesh) -> None:
    import numpy as np
    from jax.sharding import PartitionSpec as P

    from openinfer_jax.core.errors import ShardingError
    from openinfer_jax.sim import Simulator
    from openinfer_jax.sim.sharding import device_mesh
    from openinfer_jax.sim.sharding_models import DecoderConfig, decoder_graph, write_decoder

    cfg = DecoderConfig(layers=2, d=64, heads=8, kv_heads=4, ffn=100, batch=2)
    path = tmp / "decoder.oinf"
    write_decoder(path, cfg)
    text = decoder_graph(cfg)
    bad = [
        ({"wq": P(None, "tensor")}, ["'wq'", "dim 1", "'tensor'"]),
        ({"wg": P(None, "model")}, ["'wg'", "dim 1 of size 100", "divisible by 8"]),
        ({"K": P(None, None, None, "model", None)}, ["'K'", "dim 3 of size 4", "divisible by 8"]),
        ({"layers.*.nothing": P()}, ["'layers.*.nothing'", "matches no declared variable"]),
    ]
    for plan, words in bad:
        try:
            Simulator(path, text, mesh=mesh, sharding=plan)
        except ShardingError as err:
            for word in words:
                assert word in str(err), (word, str(err))
        else:
            raise AssertionError(f"no ShardingError for {plan}")
    for kwargs in (
        {"sharding": {"wq": P()}},
        {"mesh": "8 devices"},
        {"mesh": mesh, "device": "numpy"},
    ):
        try:
            Simulator(path, text, **kwargs)
        except ShardingError:
            pass
        else:
            raise AssertionError(f"no ShardingError for {kwargs}")
    # Weights land shard by shard; the glob matches model tensor names of a prefix table.
    sim = Simulator(
        path,
        text,
        mesh=mesh,
        sharding={
            "layers.*.wq": P(None, "model"),
            "K": P(None, None, None, None, "model"),
            "a": P(None, "model"),  # an `assign`ed activation: constrained where produced
        },
    )
    sim.with_trace().with_timer()
    ex = sim.make_executor()
    x = np.ones((cfg.batch, cfg.d), np.float32)
    ex.insert(x=x)
    ex.step()
    wq = ex.vars.weights["layers.0.wq"]
    assert _trimmed(wq.sharding.spec) == (None, "model")
    assert _trimmed(ex.vars.store["a"].sharding.spec) == (None, "model")
    assert {s.data.shape for s in wq.addressable_shards} == {(64, 64 // 8)}
    events = ex.trace()
    with_sharding = [ev for ev in events if ev.sharding]
    assert len(with_sharding) == len(events), "every event of a sharded run names its placement"
    assert all(ev.sharding["mesh"] == ev.device == "cpu mesh(model=8)" for ev in events)
    region_events = [ev for ev in events if ev.region is not None]
    timed = [ev.sharding["collectives"] for ev in region_events if "collectives" in ev.sharding]
    assert any(c["total"] > 0 and c["time_ns"] > 0 for c in timed), timed
    writes = [
        ev
        for ev in events
        if ev.kind == "CacheWrite" and ev.output and ev.output[0].startswith("K")
    ]
    assert (
        writes
        and writes[0].sharding["outputs"][writes[0].output[0]] == "[None, None, None, None, model]"
    )
    # The cache fetched back from the devices holds the one token written.
    before = ex.fetch("K")
    sim.model.close()
    assert before.shape[1] == 1
    _atomic_step(tmp, mesh)
    try:
        device_mesh(9)
    except ShardingError as err:
        assert "9 devices" in str(err)
    else:
        raise AssertionError("device_mesh(9) on 8 devices must fail")


ATOMIC_GRAPH = """
graph {
  dynamic { x: f32[D]; }
  volatile { w: f32[D]; h: f32[D]; }
  persistent {
    step: i32 @init(0);
    A(t): f32[D] @table;
    B(t): f32[D] @table @fixed(t=2);
  }
  block entry {
    op add(x, w) >> h;
    cache.write h >> A[step];
    cache.increment step;
    cache.write h >> B[step];
    return;
  }
}
"""


def _atomic_step(tmp: Path, mesh) -> None:
    """A step failing mid-way leaves the sharded tables exactly as they were."""
    import numpy as np
    from jax.sharding import PartitionSpec as P

    from openinfer_jax.core.errors import SimulationError
    from openinfer_jax.oinf import write_oinf
    from openinfer_jax.sim import Simulator

    path = tmp / "atomic.oinf"
    write_oinf(path, sizevars={"D": 8}, metadata={}, tensors={"w": np.ones(8, np.float32)})
    plan = {"[AB]": P(None, "model"), "w": P("model")}
    ex = Simulator(path, ATOMIC_GRAPH, mesh=mesh, sharding=plan).make_executor()
    ex.insert(x=np.full(8, 1, np.float32))
    ex.step()  # A[0], step=1, B[1]
    before = {n: ex.fetch(n).copy() for n in ("A", "B", "step")}
    ex.insert(x=np.full(8, 7, np.float32))
    try:
        ex.step()  # writes A[1], bumps step, then B[2] overflows @fixed(t=2)
    except SimulationError as err:
        assert "exceeds fixed size t=2" in str(err)
    else:
        raise AssertionError("the overflowing step did not fail")
    for name, value in before.items():
        np.testing.assert_array_equal(ex.fetch(name), value)
    assert ex.persistent.tables["A"].counts == {"t": 1}
    assert _trimmed(ex.persistent.tables["A"].buffer.sharding.spec) == (None, "model")
    ex.sim.model.close()


def main(argv: list[str]) -> int:
    """Script entry: `test_sharding_devices.py GROUP N[,N...]`."""
    import tempfile

    group, counts = argv[0], [int(n) for n in argv[1].split(",")]
    from openinfer_jax.sim.sharding import device_mesh

    meshes = [device_mesh(n) for n in counts]
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        if group == "models":
            _minilm(tmp, meshes)
            _smollm(tmp, meshes)
            _decoder(tmp, meshes)
        elif group == "examples":
            _examples(meshes)
        elif group == "behaviour":
            _behaviour(tmp, meshes[0])
        else:
            raise SystemExit(f"unknown group {group}")
    for n in counts:
        print(f"OK {group} on {n} devices")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main(sys.argv[1:]))
