"""The example graphs (examples/) with the models and inputs the parity tests run them on.

Each case writes its model (the same tensors the example's main() builds) and returns the
graph and several steps of inputs. Table-driven: `CASES` maps the example name to its builder.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from openinfer_jax.oinf import DType, OinfWriter, write_oinf

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    """Import examples/<name>.py as a module (registered while loading, for dataclasses)."""
    spec = importlib.util.spec_from_file_location(f"emit_example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class Case:
    """A graph, its model file and the inputs of each step."""

    graph: Any
    model: Path
    steps: list[dict[str, np.ndarray]]
    arch: Any = "c"


def _f32(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def minimal(tmp: Path) -> Case:
    rng = np.random.default_rng(0)
    path = tmp / "m.oinf"
    write_oinf(path, sizevars={"B": 64}, metadata={}, tensors={"a": _f32(rng, 64)})
    return Case(load_example("minimal").GRAPH, path, [{"x": _f32(rng, 64)} for _ in range(3)])


def mlp(tmp: Path) -> Case:
    rng = np.random.default_rng(1)
    path = tmp / "m.oinf"
    tensors = {"w1": _f32(rng, 16, 32, scale=0.3), "b1": _f32(rng, 32, scale=0.1),
               "w2": _f32(rng, 32, 4, scale=0.3), "b2": _f32(rng, 4, scale=0.1)}  # fmt: skip
    write_oinf(path, sizevars={"B": 8, "I": 16, "H": 32, "O": 4}, metadata={}, tensors=tensors)
    return Case(
        load_example("mlp").build_graph(), path, [{"x": _f32(rng, 8, 16)} for _ in range(3)]
    )


def residual_mlp_stack(tmp: Path) -> Case:
    rng = np.random.default_rng(2)
    path = tmp / "m.oinf"
    weights = {f"W.{i}": _f32(rng, 16, 16, scale=0.2) for i in range(6)}
    write_oinf(path, sizevars={"B": 4, "D": 16}, metadata={"num_layers": 6}, tensors=weights)
    return Case(
        load_example("residual_mlp_stack").build_graph(),
        path,
        [{"x": _f32(rng, 4, 16)} for _ in range(2)],
    )


def condensed(tmp: Path) -> Case:
    rng = np.random.default_rng(62846)
    path = tmp / "m.oinf"
    weights = {f"W.{i}": _f32(rng, 8, 8, scale=0.4) for i in range(3)}
    write_oinf(path, sizevars={"B": 2, "D": 8}, metadata={"num_layers": 3},
               tensors={**weights, "alpha_value": np.float32(0.5)})  # fmt: skip
    steps = [{"x": rng.uniform(-10, 10, (2, 8)).astype(np.float32)} for _ in range(3)]
    return Case(load_example("condensed").GRAPH, path, steps, {**_ARCH, "cache_capacity": 8})


def kv_cache_decode(tmp: Path) -> Case:
    mod = load_example("kv_cache_decode")
    cfg = mod.Config(layers=2, d=32, heads=4)
    path = tmp / "m.oinf"
    mod.write_model(path, cfg)
    rng = np.random.default_rng(1)
    steps = [{"x": _f32(rng, 1, cfg.d)} for _ in range(3)]
    return Case(
        mod.graph_text(cfg),
        path,
        steps,
        {**_ARCH, "cache_capacity": {"K": {"l": 2, "t": 8}, "V": {"l": 2, "t": 8}}},
    )


def cache_window_slice(tmp: Path) -> Case:
    rng = np.random.default_rng(3)
    path = tmp / "m.oinf"
    write_oinf(path, sizevars={"D": 5}, metadata={}, tensors={})
    return Case(load_example("cache_window_slice").GRAPH, path, [{"x": _f32(rng, 5)} for _ in range(5)],
                {**_ARCH, "cache_capacity": 16})  # fmt: skip


def streaming_pipeline(tmp: Path) -> Case:
    rng = np.random.default_rng(4)
    path = tmp / "m.oinf"
    write_oinf(
        path,
        sizevars={"N": 8},
        metadata={},
        tensors={"scale": rng.uniform(0.5, 2.0, 8).astype(np.float32)},
    )
    return Case(
        load_example("streaming_pipeline").GRAPH, path, [{"x": _f32(rng, 8)} for _ in range(3)]
    )


def stability_guard(tmp: Path) -> Case:
    path = tmp / "m.oinf"
    write_oinf(
        path,
        sizevars={"N": 6},
        metadata={},
        tensors={"w": np.linspace(0.5, 1.5, 6).astype(np.float32)},
    )
    clean = np.array([1, -2, 3, -4, 5, -6], np.float32)
    poisoned = clean.copy()
    poisoned[2] = np.nan
    return Case(
        load_example("stability_guard").GRAPH, path, [{"x": clean}, {"x": poisoned}, {"x": -clean}]
    )


def moe_routing(tmp: Path) -> Case:
    rng = np.random.default_rng(5)
    path = tmp / "m.oinf"
    tensors = {"gate": _f32(rng, 8, 1), "E0": _f32(rng, 8, 8), "E1": _f32(rng, 8, 8)}
    write_oinf(path, sizevars={"D": 8}, metadata={}, tensors=tensors)
    return Case(load_example("moe_routing").GRAPH, path, [{"x": _f32(rng, 1, 8)} for _ in range(6)])


def online_weight_update(tmp: Path) -> Case:
    rng = np.random.default_rng(6)
    path = tmp / "m.oinf"
    write_oinf(path, sizevars={"D": 4}, metadata={},
               tensors={"W": np.zeros((4, 1), np.float32), "lr": np.full((1, 1), 0.1, np.float32)})  # fmt: skip
    true_w = _f32(rng, 4, 1)
    steps = []
    for _ in range(6):
        x = _f32(rng, 1, 4)
        steps.append({"x": x, "target": (x @ true_w).astype(np.float32)})
    return Case(load_example("online_weight_update").GRAPH, path, steps)


def quantized_linear(tmp: Path) -> Case:
    rng = np.random.default_rng(7)
    b, i, o = 4, 32, 8
    wq = rng.integers(-8, 8, (i, o)).astype(np.int8)
    path = tmp / "m.oinf"
    with OinfWriter(path, overwrite=True) as writer:
        for name, value in (("B", b), ("I", i), ("O", o)):
            writer.add_sizevar(name, value)
        writer.add_metadata("x_scale", 0.05)
        writer.add_metadata("w_scale", 0.1)
        writer.add_tensor("wq", wq, dtype=DType.I4)
    steps = [{"xq": rng.integers(-8, 8, (b, i)).astype(np.int8)} for _ in range(2)]
    return Case(load_example("quantized_linear").GRAPH, path, steps)


_ARCH: dict[str, Any] = {
    "device": {"type": "cpu", "api": "c", "vendor": "test", "name": "test-cpu", "architecture": "x", "driver": "none"},
    "limits": {"max_workgroup_size": [1, 1, 1], "max_shared_memory_bytes": 0, "max_push_constants_bytes": 0,
               "max_storage_buffer_range_bytes": 1 << 30},
    "features": {"fp16": True, "int8": True, "subgroup_ops": False, "cooperative_matrix": False},
    "memory": {"global_bytes": 1 << 30, "shared_bytes_per_sm": 0, "l2_bytes": 1 << 20},
    "preferences": {"default_precision": "fp32", "prefer_fusion": False, "prefer_persistent_kv": True,
                    "max_kernel_ops": 1},
}  # fmt: skip

CASES: dict[str, Callable[[Path], Case]] = {
    "minimal": minimal,
    "mlp": mlp,
    "residual_mlp_stack": residual_mlp_stack,
    "condensed": condensed,
    "kv_cache_decode": kv_cache_decode,
    "cache_window_slice": cache_window_slice,
    "streaming_pipeline": streaming_pipeline,
    "stability_guard": stability_guard,
    "moe_routing": moe_routing,
    "online_weight_update": online_weight_update,
    "quantized_linear": quantized_linear,
}


def test_arch(**overrides: Any) -> dict[str, Any]:
    """A valid CPU device JSON (as a dict) with top-level keys replaced by `overrides`."""
    return {**_ARCH, **overrides}


test_arch.__test__ = False  # type: ignore[attr-defined]  # a helper, not a pytest test
