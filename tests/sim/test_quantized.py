"""The simulator with block-quantized weights: packed on the device, the same results on XLA and the
NumPy interpreter as the f32 program on the dequantized weights, prefix tables in wide regions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.core.errors import GraphValidationError
from openinfer_jax.oinf import OinfWriter, quantize
from openinfer_jax.ops.quantized import QuantizedArray
from openinfer_jax.sim import Simulator

LAYERS = 3

PROGRAM = """
graph {
  dynamic { ids: i32[1]; }
  constant { W: $W[32, 64]; E: $E[10, 64]; L(l): $L[64, 64] @pattern("L.{l}"); }
  volatile { h: f32[1, 64]; g: f32[1, 64]; y: f32[1, 32]; }
  block entry {
    op embedding(E, ids) >> h;
    loop layers (l in 0..NL) {
      op linear(h, L[l]) >> g;
      op tanh(g) >> h;
    }
    op linear(h, W) >> y;
    return;
  }
}
"""


def _program(types: dict[str, str]) -> str:
    text = PROGRAM
    for key, value in types.items():
        text = text.replace(f"${key}", value)
    return text


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same weights block-quantized, and dequantized to f32."""
    rng = np.random.default_rng(0)
    weights = {
        "W": quantize(rng.standard_normal((32, 64)), "q4_1"),
        "E": quantize(rng.standard_normal((10, 64)), "q8_0"),
        **{f"L.{i}": quantize(rng.standard_normal((64, 64)) * 0.2, "q4_0") for i in range(LAYERS)},
    }
    root = tmp_path_factory.mktemp("qsim")
    packed, dense = root / "q.oinf", root / "f.oinf"
    for path, as_floats in ((packed, False), (dense, True)):
        with OinfWriter(path) as w:
            w.add_sizevar("NL", LAYERS)
            for name, qt in weights.items():
                w.add_tensor(name, qt.dequantize() if as_floats else qt)
    return packed, dense


QUANT = {"W": "q4_1", "E": "q8_0", "L": "q4_0"}
DENSE = {"W": "f32", "E": "f32", "L": "f32"}


def _run(model: Path, text: str, device: str, tokens: list[int]) -> list[np.ndarray]:
    sim = Simulator(model, text, device=device)
    ex = sim.make_executor()
    out = []
    for token in tokens:
        ex.insert(ids=np.array([token], np.int32))
        ex.step()
        out.append(np.asarray(ex.fetch("y")))
    return out


@pytest.mark.parametrize("device", ["cpu", "numpy"])
def test_quantized_program_equals_the_dense_one(models: tuple[Path, Path], device: str) -> None:
    packed, dense = models
    tokens = [3, 9, 0]
    got = _run(packed, _program(QUANT), device, tokens)
    want = _run(dense, _program(DENSE), device, tokens)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_weights_stay_packed_on_the_device(models: tuple[Path, Path]) -> None:
    packed, _ = models
    sim = Simulator(packed, _program(QUANT))
    decl = next(d for d in sim.graph.vars if d.name == "W")
    value = sim.load_tensor("W", decl, sim.jax_device)
    assert isinstance(value, QuantizedArray) and value.shape == (32, 64)
    assert value.quants.dtype == np.uint32 and value.quants.shape == (32, 8)
    assert value.scales.dtype == np.float16 and value.offsets is not None


def test_a_dense_declaration_of_a_packed_tensor_is_rejected(models: tuple[Path, Path]) -> None:
    packed, _ = models
    with pytest.raises(GraphValidationError, match=r"declare it q4_1\[32, 64\]"):
        Simulator(packed, _program({"W": "f32", "E": "q8_0", "L": "q4_0"}))
