"""Ops with a block-quantized weight: the JAX lowering and the NumPy reference agree with each other
and with the same op on the dequantized f32 values; the weight stays packed in the compiled region."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from openinfer_jax.core.blocks import BlockScheme
from openinfer_jax.oinf import QuantizedTensor, quantize
from openinfer_jax.ops import registry
from openinfer_jax.ops.quantized import QuantizedArray, dequantize

SCHEMES = [s.value for s in BlockScheme]


def _weight(scheme: str, shape: tuple[int, ...], block: int = 32, seed: int = 0) -> QuantizedTensor:
    rng = np.random.default_rng(seed)
    return quantize(rng.standard_normal(shape).astype(np.float32), scheme, block)


def _host(qt: QuantizedTensor) -> QuantizedArray:
    return QuantizedArray.from_planes(qt.layout, qt.shape, qt.quants, qt.scales, qt.offsets)


def _device(qt: QuantizedTensor) -> QuantizedArray:
    return jax.device_put(_host(qt))


def _jit(op: str, **params: object):  # type: ignore[no-untyped-def]
    opdef = registry.get(op)
    return jax.jit(lambda *xs: opdef.lower_jax(*xs, **params))


@pytest.mark.parametrize("block", [32, 64, 2])
@pytest.mark.parametrize("scheme", SCHEMES)
def test_dequantize_matches_the_file_planes(scheme: str, block: int) -> None:
    qt = _weight(scheme, (3, 5, 64 if block != 2 else 6), block)
    host = _host(qt)
    # 4-bit rows of whole 32-bit words are read as words (8 codes per word), others as bytes
    assert host.words == (scheme != "q8_0" and qt.shape[-1] % 8 == 0)
    np.testing.assert_array_equal(dequantize(host), qt.dequantize())
    np.testing.assert_array_equal(np.asarray(jax.jit(dequantize)(_device(qt))), qt.dequantize())


@pytest.mark.parametrize("scheme", SCHEMES)
def test_linear_matmul_parity(scheme: str) -> None:
    rng = np.random.default_rng(1)
    w = _weight(scheme, (48, 96))
    dense = w.dequantize()
    x = rng.standard_normal((3, 96)).astype(np.float32)
    bias = rng.standard_normal(48).astype(np.float32)
    linear = registry.get("linear")
    want = linear.reference(x, dense, bias)
    got_ref = linear.reference(x, _host(w), bias)
    got_jax = np.asarray(_jit("linear")(x, _device(w), bias))
    np.testing.assert_array_equal(got_ref, want)  # the reference is the op on the values
    np.testing.assert_allclose(got_jax, want, rtol=1e-5, atol=1e-5)
    matmul = registry.get("matmul")
    a = rng.standard_normal((2, 4, 48)).astype(np.float32)
    np.testing.assert_allclose(
        np.asarray(_jit("matmul")(a, _device(w))), matmul.reference(a, dense), rtol=1e-5, atol=1e-5
    )
    b = rng.standard_normal((96, 7)).astype(np.float32)
    np.testing.assert_allclose(
        np.asarray(_jit("matmul")(_device(w), b)), matmul.reference(dense, b), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_array_equal(matmul.reference(_host(w), b), matmul.reference(dense, b))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_embedding_and_gather_pick_rows_exactly(scheme: str) -> None:
    w = _weight(scheme, (10, 64))
    dense = w.dequantize()
    ids = np.array([[3, 0], [9, -1], [42, 5]], np.int32)  # -1 and 42: the ops' clamping rules
    for op, params in (("embedding", {}), ("gather", {"axis": 0})):
        opdef = registry.get(op)
        want = opdef.reference(dense, ids, **params)
        np.testing.assert_array_equal(opdef.reference(_host(w), ids, **params), want)
        np.testing.assert_array_equal(np.asarray(_jit(op, **params)(_device(w), ids)), want)


def test_the_compiled_region_reads_packed_planes() -> None:
    w = _weight("q4_1", (1536, 576))
    x = jnp.ones((1, 576), jnp.float32)
    lowered = jax.jit(lambda x, w: registry.get("linear").lower_jax(x, w)).lower(x, _device(w))
    params = lowered.as_text().split("\n", 3)[:3]
    head = "".join(params)
    # the weight enters as 4-bit codes in u32 words plus f16 scales/offsets, never as f32[1536,576]
    assert "tensor<1536x72xui32>" in head and "tensor<1536x18xf16>" in head
    assert "tensor<1536x576xf32>" not in head
    compiled = lowered.compile()
    args = compiled.memory_analysis()
    if args is not None:  # bytes of the arguments: packed (~0.55 MB), not 3.5 MB of f32
        assert args.argument_size_in_bytes < 1 << 20
