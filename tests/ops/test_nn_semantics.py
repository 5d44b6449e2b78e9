"""Model-building ops against values and properties computed independently of both implementations.

Known constants (gelu(1)), ONNX spec examples (Slice, Pad, MaxPool), direct loops (conv2d,
attention per head) and algebraic properties (softmax sums to 1, rope preserves norms and
depends only on relative positions, GQA equals repeated KV heads, a decode step equals the
last row of full causal attention).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import jax
import numpy as np
import pytest

from openinfer_jax.ops import registry

RNG = np.random.default_rng(20261122)


def lower(name: str, *arrays: Any, **params: Any) -> np.ndarray:
    """The JAX lowering of `name`, jitted, as a NumPy array."""
    op = registry.get(name)
    assert op is not None
    return np.asarray(jax.jit(lambda *xs: op.lower_jax(*xs, **params))(*arrays))


def reference(name: str, *arrays: Any, **params: Any) -> np.ndarray:
    """The NumPy reference of `name`."""
    op = registry.get(name)
    assert op is not None
    return op.reference(*arrays, **params)


def both(name: str, *arrays: Any, **params: Any) -> list[np.ndarray]:
    """Lowering and reference results, for checks that must hold for each."""
    return [lower(name, *arrays, **params), reference(name, *arrays, **params)]


def normal(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


# ---- elementwise math ----------------------------------------------------------------------------


def test_gelu_known_values() -> None:
    x = np.array([1.0, -1.0, 0.0])
    tanh_form = 0.5 * (1 + math.tanh(math.sqrt(2 / math.pi) * (1 + 0.044715)))
    for got in both("gelu", x):
        np.testing.assert_allclose(got, [0.8413447460685429, -0.15865525393145707, 0.0], rtol=1e-14)
    for got in both("gelu", x, approximate="tanh"):
        np.testing.assert_allclose(got[0], tanh_form, rtol=1e-14)


def test_activation_known_values() -> None:
    x = np.array([0.0, 1.0, 4.0])
    expected = {
        "sigmoid": [0.5, 1 / (1 + math.e**-1), 1 / (1 + math.e**-4)],
        "silu": [0.0, 1 / (1 + math.e**-1), 4 / (1 + math.e**-4)],
        "tanh": [0.0, math.tanh(1.0), math.tanh(4.0)],
        "exp": [1.0, math.e, math.e**4],
        "sqrt": [0.0, 1.0, 2.0],
        "rsqrt": [math.inf, 1.0, 0.5],
    }
    for name, values in expected.items():
        for got in both(name, x):
            np.testing.assert_allclose(got, values, rtol=1e-14, err_msg=name)


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "silu", "gelu"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_edge_values(name: str, dtype: Any) -> None:
    """NaN, infinities, signed zero, tiny and overflowing inputs agree with the reference.

    XLA flushes subnormals to zero (results and intermediates such as sigmoid(-88) in silu),
    hence an absolute tolerance far below the smallest normal's square root.
    """
    x = np.array(
        [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-30, -1e-30, 88.0, -88.0, 1e30, -1e30], dtype=dtype
    )
    got, want = both(name, x)
    np.testing.assert_allclose(
        got, want, rtol=1e-5, atol=float(np.finfo(dtype).tiny) ** 0.8, equal_nan=True
    )
    assert np.array_equal(np.signbit(got[np.isinf(got)]), np.signbit(want[np.isinf(want)]))


def test_log_and_sqrt_domains() -> None:
    got = lower("log", np.array([0.0, -1.0, 1.0]))
    assert got[0] == -np.inf and np.isnan(got[1]) and got[2] == 0.0
    assert np.isnan(lower("sqrt", np.array([-1.0])))[0]


# ---- softmax and norms ---------------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_rows_sum_to_one_and_ignore_shifts(axis: int) -> None:
    x = normal(3, 4, 5, dtype=np.float64) * 10
    for got in both("softmax", x, axis=axis):
        np.testing.assert_allclose(got.sum(axis=axis), 1.0, rtol=1e-12)
        assert np.all(got >= 0)
    np.testing.assert_allclose(
        lower("softmax", x + 1000.0, axis=axis), lower("softmax", x, axis=axis), rtol=1e-12
    )
    np.testing.assert_allclose(
        lower("log_softmax", x, axis=axis),
        np.log(lower("softmax", x, axis=axis)),
        rtol=1e-12,
        atol=1e-12,
    )


def test_softmax_with_masked_logits() -> None:
    """-inf logits get weight 0; a row of only -inf is NaN (as in ONNX and NumPy)."""
    x = np.array([[0.0, -np.inf, 1.0], [-np.inf, -np.inf, -np.inf]])
    for got in both("softmax", x):
        np.testing.assert_allclose(
            got[0], [1 / (1 + math.e), 0.0, math.e / (1 + math.e)], rtol=1e-14
        )
        assert np.isnan(got[1]).all()
    for got in both("log_softmax", x[:1]):
        assert got[0, 1] == -np.inf


def test_narrow_floats_compute_in_f32() -> None:
    """f16 squares of 1000 overflow f16 (max 65504) but not the f32 compute type."""
    x = np.full((2, 4), 1000.0, np.float16)
    for got in both("rms_norm", x):
        assert got.dtype == np.float16
        np.testing.assert_array_equal(got, np.ones((2, 4), np.float16))
    for got in both("softmax", np.array([0.0, 12.0], np.float16)):
        np.testing.assert_allclose(
            got.astype(np.float64),
            [math.exp(-12) / (1 + math.exp(-12)), 1 / (1 + math.exp(-12))],
            rtol=2**-10,
        )


def test_layer_norm_standardizes_then_applies_affine() -> None:
    x = normal(4, 3, 8, dtype=np.float64) * 5 + 2
    scale, bias = normal(8, dtype=np.float64), normal(8, dtype=np.float64)
    for got in both("layer_norm", x, epsilon=0.0):
        np.testing.assert_allclose(got.mean(axis=-1), 0.0, atol=1e-12)
        np.testing.assert_allclose(got.var(axis=-1), 1.0, rtol=1e-12)
    plain = lower("layer_norm", x, epsilon=0.0)
    np.testing.assert_allclose(
        lower("layer_norm", x, scale, bias, epsilon=0.0), plain * scale + bias, rtol=1e-12
    )
    # axis=1 normalizes the trailing 3 x 8 block as one group
    grouped = lower("layer_norm", x, axis=1, epsilon=0.0)
    np.testing.assert_allclose(grouped.reshape(4, -1).var(axis=-1), 1.0, rtol=1e-12)


def test_rms_norm_gives_unit_root_mean_square() -> None:
    x = normal(5, 16, dtype=np.float64) * 3
    scale = normal(16, dtype=np.float64)
    for got in both("rms_norm", x, epsilon=0.0):
        np.testing.assert_allclose(np.sqrt(np.mean(got**2, axis=-1)), 1.0, rtol=1e-12)
    np.testing.assert_allclose(
        lower("rms_norm", x, scale, epsilon=0.0), lower("rms_norm", x, epsilon=0.0) * scale
    )


def test_batch_norm_onnx_example() -> None:
    """ONNX BatchNormalization example values, evaluated by hand per channel."""
    x = np.array([[[[-1.0, 0.0, 1.0]], [[2.0, 3.0, 4.0]]]], dtype=np.float32)
    s, b = np.array([1.0, 1.5], np.float32), np.array([0.0, 1.0], np.float32)
    mean, var = np.array([0.0, 3.0], np.float32), np.array([1.0, 1.5], np.float32)
    c0 = [v / math.sqrt(1.0 + 1e-5) for v in (-1.0, 0.0, 1.0)]
    c1 = [1.5 * (v - 3.0) / math.sqrt(1.5 + 1e-5) + 1.0 for v in (2.0, 3.0, 4.0)]
    for got in both("batch_norm", x, s, b, mean, var):
        np.testing.assert_allclose(got.reshape(2, 3), [c0, c1], rtol=1e-6)


# ---- data movement ----------------------------------------------------------------------------------------


def test_gather_wraps_negative_and_clamps_out_of_range() -> None:
    data = np.arange(5) * 10
    for got in both("gather", data, np.array([-1, 5, -7, 2, 99])):
        np.testing.assert_array_equal(got, [40, 40, 0, 20, 40])
    for got in both("gather", data, np.array([3, 255], np.uint8)):
        np.testing.assert_array_equal(got, [30, 40])
    big = np.array([2**64 - 1, 1], np.uint64)
    for got in both("gather", data, big):
        np.testing.assert_array_equal(got, [40, 10])


@pytest.mark.parametrize("index_dtype", [np.uint8, np.uint64, np.int8, np.int64])
def test_gather_empty_indices_on_an_empty_axis(index_dtype: Any) -> None:
    for got in both("gather", np.zeros((0, 2), np.float32), np.zeros((0, 3), index_dtype)):
        assert got.shape == (0, 3, 2)


def test_gather_onnx_example_axis1() -> None:
    data = np.array([[1.0, 1.2, 1.9], [2.3, 3.4, 3.9], [4.5, 5.7, 5.9]])
    indices = np.array([[0, 2]])
    for got in both("gather", data, indices, axis=1):
        np.testing.assert_array_equal(got, [[[1.0, 1.9]], [[2.3, 3.9]], [[4.5, 5.9]]])


def test_embedding_picks_rows() -> None:
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    ids = np.array([[3, 0], [1, 1]], np.int32)
    for got in both("embedding", table, ids):
        assert got.shape == (2, 2, 3)
        np.testing.assert_array_equal(got[0, 0], [9, 10, 11])


def test_reshape_zero_copies_and_minus_one_infers() -> None:
    x = np.arange(24).reshape(2, 3, 4)
    for got in both("reshape", x, shape=(0, -1)):
        assert got.shape == (2, 12)
    for got in both("reshape", x, shape=(4, 0, -1)):
        assert got.shape == (4, 3, 2)
        np.testing.assert_array_equal(got.reshape(-1), np.arange(24))


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"starts": (1, 0), "ends": (2, 3), "axes": (0, 1), "steps": (1, 2)}, [[5, 7]]),
        ({"starts": (0, 1), "ends": (-1, 1000)}, [[2, 3, 4]]),
        (
            {"starts": (-1,), "ends": (-(2**62),), "axes": (1,), "steps": (-1,)},
            [[4, 3, 2, 1], [8, 7, 6, 5]],
        ),
        ({"starts": (20,), "ends": (0,), "axes": (-1,), "steps": (-2,)}, [[4, 2], [8, 6]]),
        ({"starts": (2,), "ends": (1,), "axes": (1,)}, np.zeros((2, 0), int)),
    ],
)
def test_slice_onnx_examples(params: dict[str, Any], expected: Any) -> None:
    data = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    for got in both("slice", data, **params):
        np.testing.assert_array_equal(got, np.asarray(expected).reshape(got.shape))
        assert got.shape == np.asarray(expected).shape


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("constant", [[0.0, 0.0, 1.0, 1.2], [0.0, 0.0, 2.3, 3.4], [0.0, 0.0, 4.5, 5.7]]),
        ("reflect", [[1.0, 1.2, 1.0, 1.2], [2.3, 3.4, 2.3, 3.4], [4.5, 5.7, 4.5, 5.7]]),
        ("edge", [[1.0, 1.0, 1.0, 1.2], [2.3, 2.3, 2.3, 3.4], [4.5, 4.5, 4.5, 5.7]]),
        ("wrap", [[1.0, 1.2, 1.0, 1.2], [2.3, 3.4, 2.3, 3.4], [4.5, 5.7, 4.5, 5.7]]),
    ],
)
def test_pad_onnx_examples(mode: str, expected: list[list[float]]) -> None:
    x = np.array([[1.0, 1.2], [2.3, 3.4], [4.5, 5.7]])
    for got in both("pad", x, pads=(0, 2, 0, 0), mode=mode):
        np.testing.assert_array_equal(got, expected)


def test_pad_reflect_and_wrap_past_the_axis_length_and_constant_value() -> None:
    x = np.array([1, 2, 3, 4], np.int16)
    for got in both("pad", x, pads=(3, 2), mode="reflect"):
        np.testing.assert_array_equal(got, [4, 3, 2, 1, 2, 3, 4, 3, 2])
    for got in both("pad", x, pads=(7, 1), mode="reflect"):
        np.testing.assert_array_equal(got, [2, 1, 2, 3, 4, 3, 2, 1, 2, 3, 4, 3])
    for got in both("pad", x, pads=(5, 6), mode="wrap"):
        np.testing.assert_array_equal(got, [4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2])
    for got in both("pad", x, pads=(1, 1), value=-7):
        np.testing.assert_array_equal(got, [-7, 1, 2, 3, 4, -7])


def test_where_broadcasts_all_three() -> None:
    cond = np.array([[True], [False]])
    for got in both("where", cond, np.array([1, 2, 3], np.int8), np.int8(-1)):
        np.testing.assert_array_equal(got, [[1, 2, 3], [-1, -1, -1]])


def test_concat_variadic_and_transpose_default() -> None:
    parts = [np.full((2, k), k, np.int32) for k in (1, 2, 3)]
    for got in both("concat", *parts, axis=-1):
        np.testing.assert_array_equal(got[0], [1, 2, 2, 3, 3, 3])
    x = np.arange(24).reshape(2, 3, 4)
    for got in both("transpose", x):
        assert got.shape == (4, 3, 2)
    for got in both("permute", x, perm=(1, -1, 0)):
        np.testing.assert_array_equal(got, x.transpose(1, 2, 0))


# ---- rope -----------------------------------------------------------------------------------------------------


def hf_rope(x: np.ndarray, positions: np.ndarray, theta: float) -> np.ndarray:
    """HF llama apply_rotary_pos_emb: x*cos + rotate_half(x)*sin, cos/sin = cat(freqs, freqs)."""
    d = x.shape[-1]
    inv_freq = 1.0 / theta ** (np.arange(0, d, 2) / d)
    freqs = positions[:, None].astype(np.float64) * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    rotate_half = np.concatenate([-x[..., d // 2 :], x[..., : d // 2]], axis=-1)
    return x * np.cos(emb) + rotate_half * np.sin(emb)


def test_rope_matches_hf_llama_formula() -> None:
    """SmolLM2-like settings: theta 1e5, head_dim 64, a prefill of 7 tokens at offset 0."""
    x = normal(3, 7, 64, dtype=np.float64)
    expected = hf_rope(x, np.arange(7), 1e5)
    for got in both("rope", x, np.int64(0), theta=1e5):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_rope_decode_offset_equals_position_vector() -> None:
    x = normal(4, 3, 16)
    by_offset = lower("rope", x, np.int32(41), theta=1e5)
    by_vector = lower("rope", x, np.arange(41, 44, dtype=np.int64), theta=1e5)
    np.testing.assert_array_equal(by_offset, by_vector)
    # the decode step for position 42 equals row 1 of the prefill of positions 41..43
    step = lower("rope", x[:, 1:2], np.int32(42), theta=1e5)
    np.testing.assert_allclose(step[:, 0], by_offset[:, 1], rtol=1e-6)


def test_rope_head_dim_two_is_a_plane_rotation() -> None:
    x = np.array([[1.0, 0.0], [0.0, 1.0]])
    for got in both("rope", x, np.array([0, 3])):
        np.testing.assert_allclose(got, [[1.0, 0.0], [-math.sin(3.0), math.cos(3.0)]], atol=1e-15)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_keeps_norms_and_depends_on_relative_position(interleaved: bool) -> None:
    q, k = normal(1, 8, dtype=np.float64), normal(1, 8, dtype=np.float64)

    def score(m: int, n: int) -> float:
        rq = lower("rope", q, np.int64(m), interleaved=interleaved)
        rk = lower("rope", k, np.int64(n), interleaved=interleaved)
        return float(np.sum(rq * rk))

    np.testing.assert_allclose(
        np.linalg.norm(lower("rope", q, np.int64(17), interleaved=interleaved)),
        np.linalg.norm(q),
        rtol=1e-12,
    )
    np.testing.assert_allclose(score(5, 2), score(105, 102), rtol=1e-9)
    np.testing.assert_allclose(score(0, 0), float(np.sum(q * k)), rtol=1e-12)


def test_rope_interleaved_is_half_split_on_permuted_dims() -> None:
    """(2i, 2i+1) pairs become (i, i+d/2) pairs after moving even dims first, odd dims second."""
    x = normal(2, 5, 12, dtype=np.float64)
    order = np.concatenate([np.arange(0, 12, 2), np.arange(1, 12, 2)])
    inter = lower("rope", x, np.int64(3), interleaved=True)
    split = lower("rope", x[..., order], np.int64(3), interleaved=False)
    np.testing.assert_allclose(inter[..., order], split, rtol=1e-12, atol=1e-12)


def test_rope_partial_rotary_dim_passes_the_tail_through() -> None:
    x = normal(2, 4, 10)
    for got in both("rope", x, np.int64(9), rotary_dim=4):
        np.testing.assert_array_equal(got[..., 4:], x[..., 4:])
        np.testing.assert_allclose(
            got[..., :4], lower("rope", x[..., :4], np.int64(9)), rtol=1e-6, atol=1e-6
        )


# ---- attention -------------------------------------------------------------------------------------------------


def loop_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    """Per-head softmax(q k^T / sqrt(d)) v with explicit loops; kv head = q head // group."""
    hq, sq, d = q.shape
    hkv, skv, _ = k.shape
    out = np.zeros((hq, sq, v.shape[-1]))
    for h in range(hq):
        kv = h // (hq // hkv)
        for i in range(sq):
            scores = [float(q[h, i] @ k[kv, j]) / math.sqrt(d) for j in range(skv)]
            allowed = [not causal or j <= skv - sq + i for j in range(skv)]
            if not any(allowed):
                continue
            peak = max(s for s, a in zip(scores, allowed) if a)
            weights = [math.exp(s - peak) if a else 0.0 for s, a in zip(scores, allowed)]
            total = sum(weights)
            out[h, i] = sum(w / total * v[kv, j] for j, w in enumerate(weights))
    return out


@pytest.mark.parametrize(
    ("hq", "hkv", "sq", "skv"), [(4, 4, 3, 3), (6, 2, 2, 5), (3, 1, 4, 4), (2, 1, 5, 3)]
)
@pytest.mark.parametrize("causal", [False, True])
def test_attention_matches_explicit_loops(
    hq: int, hkv: int, sq: int, skv: int, causal: bool
) -> None:
    q, k, v = (
        normal(hq, sq, 8, dtype=np.float64),
        normal(hkv, skv, 8, dtype=np.float64),
        normal(hkv, skv, 3, dtype=np.float64),
    )
    expected = loop_attention(q, k, v, causal)
    for got in both("attention", q, k, v, causal=causal):
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_grouped_kv_equals_repeated_kv_heads() -> None:
    q, k, v = normal(2, 8, 5, 16), normal(2, 2, 7, 16), normal(2, 2, 7, 16)
    grouped = lower("attention", q, k, v, causal=True)
    repeated = lower("attention", q, np.repeat(k, 4, axis=1), np.repeat(v, 4, axis=1), causal=True)
    np.testing.assert_allclose(grouped, repeated, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kv_dtype", [np.float16, "bfloat16"])
def test_f32_queries_over_a_narrow_cache_compute_in_f32(kv_dtype: Any) -> None:
    """k and v stored narrow (an f16/bf16 cache), q f32: the result is f32 and equals f32
    attention over the cache's values widened exactly (both the decode path and the
    general one), not a result rounded to the cache's dtype."""
    import ml_dtypes

    dtype = np.dtype(ml_dtypes.bfloat16) if kv_dtype == "bfloat16" else np.dtype(kv_dtype)
    q = normal(9, 1, 64)
    k, v = normal(3, 40, 64).astype(dtype), normal(3, 40, 64).astype(dtype)
    wide = k.astype(np.float32), v.astype(np.float32)
    for queries in (q, np.repeat(q, 3, axis=1)):  # the decode path, then the general one
        expected = reference("attention", queries, *wide, causal=True)
        for got in both("attention", queries, k, v, causal=True):
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-6)


def test_decode_step_equals_last_row_of_causal_prefill() -> None:
    q, k, v = normal(9, 6, 64), normal(3, 6, 64), normal(3, 6, 64)
    full = lower("attention", q, k, v, causal=True)
    step = lower("attention", q[:, -1:], k, v, causal=True)
    np.testing.assert_allclose(step[:, 0], full[:, -1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("skv", [1, 300, 600])
def test_decode_path_equals_partitioned_path(skv: int) -> None:
    """Few query rows per kv head (a GQA decode step) take the storage-order path, 256 keys
    per product with a short last block; inside `partitioned()` (a sharded simulator's
    regions) attention keeps heads a batch axis. Both match the loops and each other."""
    from openinfer_jax.ops import nn_jax

    q = normal(9, 1, 16, dtype=np.float64)
    k, v = normal(3, skv, 16, dtype=np.float64), normal(3, skv, 8, dtype=np.float64)
    fast = lower("attention", q, k, v, causal=True)
    with nn_jax.partitioned():
        batched = lower("attention", q, k, v, causal=True)
    expected = loop_attention(q, k, v, True)
    np.testing.assert_allclose(fast, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(batched, expected, rtol=1e-10, atol=1e-12)


def test_attention_masks() -> None:
    q, k, v = normal(2, 3, 4), normal(2, 5, 4), normal(2, 5, 2)
    keep = RNG.random((3, 5)) < 0.6
    keep[:, 0] = True
    additive = np.where(keep, 0.0, -np.inf).astype(np.float32)
    by_bool, by_float = lower("attention", q, k, v, keep), lower("attention", q, k, v, additive)
    np.testing.assert_allclose(by_bool, by_float, rtol=1e-6, atol=1e-7)
    # causal plus a mask keeps only keys both allow; a row with none gives zeros, not NaN
    none = np.zeros((3, 5), bool)
    for got in both("attention", q, k, v, none):
        np.testing.assert_array_equal(got, 0.0)
    for got in both("attention", q, k[:, :0], v[:, :0]):
        np.testing.assert_array_equal(got, 0.0)
    for got in both("attention", normal(1, 4, 4), normal(1, 2, 4), normal(1, 2, 2), causal=True):
        np.testing.assert_array_equal(got[0, :2], 0.0)  # queries before the first key


def test_attention_scale_param() -> None:
    q, k, v = normal(1, 2, 4), normal(1, 3, 4), normal(1, 3, 4)
    np.testing.assert_allclose(
        lower("attention", q, k, v, scale=0.25),
        lower("attention", q * np.float32(0.5), k, v),
        rtol=1e-6,
    )


# ---- convolution and pooling -------------------------------------------------------------------------------------


def test_linear_equals_transpose_then_matmul_plus_bias() -> None:
    """linear(x, w, b) with w [out, in] is the registry's transpose + matmul + add."""
    x, w, b = (
        normal(2, 3, 8, dtype=np.float64),
        normal(5, 8, dtype=np.float64),
        normal(5, dtype=np.float64),
    )
    wt = lower("transpose", w, perm=(1, 0))
    expected = lower("add", lower("matmul", x, wt), b)
    for got in both("linear", x, w, b):
        np.testing.assert_allclose(got, expected, rtol=1e-12)
    for got in both("linear", x, w):
        np.testing.assert_allclose(got, lower("matmul", x, wt), rtol=1e-12)


def loop_conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: tuple[int, int],
                pads: tuple[int, int, int, int], dil: tuple[int, int], groups: int) -> np.ndarray:  # fmt: skip
    """Direct seven-loop convolution (ONNX Conv semantics)."""
    n, _, h, wd = x.shape
    m, cg, kh, kw = w.shape
    oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, m, oh, ow))
    mg = m // groups
    for bi, oc, i, j in itertools.product(range(n), range(m), range(oh), range(ow)):
        g = oc // mg
        acc = 0.0 if b is None else float(b[oc])
        for ic, p, q in itertools.product(range(cg), range(kh), range(kw)):
            y = i * stride[0] + p * dil[0] - pads[0]
            z = j * stride[1] + q * dil[1] - pads[1]
            if 0 <= y < h and 0 <= z < wd:
                acc += float(x[bi, g * cg + ic, y, z]) * float(w[oc, ic, p, q])
        out[bi, oc, i, j] = acc
    return out


@pytest.mark.parametrize(
    ("groups", "stride", "pads", "dil"),
    [
        (1, (1, 1), (0, 0, 0, 0), (1, 1)),
        (2, (2, 1), (1, 2, 0, 1), (1, 2)),
        (4, (1, 2), (1, 1, 1, 1), (2, 1)),
    ],
)
def test_conv2d_matches_direct_loops(groups: int, stride: tuple[int, int], pads: tuple[int, int, int, int],
                                     dil: tuple[int, int]) -> None:  # fmt: skip
    x = normal(2, 4, 6, 7, dtype=np.float64)
    w = normal(4, 4 // groups, 3, 2, dtype=np.float64)
    b = normal(4, dtype=np.float64)
    expected = loop_conv2d(x, w, b, stride, pads, dil, groups)
    params = {"strides": stride, "pads": pads, "dilations": dil, "groups": groups}
    for got in both("conv2d", x, w, b, **params):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


def test_conv1d_is_conv2d_with_unit_height_and_depthwise_is_per_channel() -> None:
    x, w = normal(1, 3, 9), normal(6, 1, 3)
    one = lower("conv1d", x, w, groups=3, pads=(1, 1))
    two = lower("conv2d", x[:, :, None], w[:, :, None], groups=3, pads=(0, 1, 0, 1))
    np.testing.assert_allclose(one, two[:, :, 0], rtol=1e-6)
    # depthwise output channel 2 and 3 read only input channel 1
    single = lower("conv1d", x[:, 1:2], w[2:4], pads=(1, 1))
    np.testing.assert_allclose(one[:, 2:4], single, rtol=1e-6)


def test_max_pool_and_avg_pool_known_values() -> None:
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    for got in both("max_pool", x, kernel_shape=(2, 2), strides=(2, 2)):
        np.testing.assert_array_equal(got[0, 0], [[5, 7], [13, 15]])
    # ONNX averagepool_2d_pads style: 3x3 window, pads 1, corners average 4 real values
    for got in both("avg_pool", x, kernel_shape=(3, 3), pads=(1, 1, 1, 1)):
        assert got[0, 0, 0, 0] == pytest.approx((0 + 1 + 4 + 5) / 4)
    for got in both("avg_pool", x, kernel_shape=(3, 3), pads=(1, 1, 1, 1), count_include_pad=True):
        assert got[0, 0, 0, 0] == pytest.approx((0 + 1 + 4 + 5) / 9)
    negative = -x - 1
    for got in both("max_pool", negative, kernel_shape=(3, 3), pads=(1, 1, 1, 1)):
        assert got[0, 0, 0, 0] == -1.0  # padding never wins the max


def test_global_average_pool() -> None:
    x = normal(2, 3, 4, 5, dtype=np.float64)
    for got in both("global_average_pool", x):
        assert got.shape == (2, 3, 1, 1)
        np.testing.assert_allclose(got[..., 0, 0], x.mean(axis=(2, 3)), rtol=1e-12)
