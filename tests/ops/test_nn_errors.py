"""Bad input to the model-building ops: a typed OpCheckError that says what is allowed.

Each case goes through `OpDef.infer` (what validation calls) and, where arrays can express it,
through `lower_jax`, which must raise the same error before JAX sees anything.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import GraphValidationError
from openinfer_jax.ir.nodes import VarName
from openinfer_jax.ops import registry
from openinfer_jax.ops.registry import OpCheckError

F32, I32 = DType.F32, DType.I32

# (op, input dtypes, input shapes, params, regex the message must match)
CASES: list[tuple[str, list[DType], list[tuple[int, ...]], dict[str, Any], str]] = [
    ("exp", [I32], [(3,)], {}, r"input 0 \(x\) has dtype i32; allowed: f8, bf16, f16, f32, f64"),
    ("exp", [F32, F32], [(3,), (3,)], {}, r"exp takes 1 input \(x\), got 2"),
    ("gelu", [F32], [(3,)], {"approximate": "fast"}, r"approximate is 'fast'; allowed: none, tanh"),
    ("gelu", [F32], [(3,)], {"mode": "tanh"}, r"unknown param 'mode'; known params: approximate"),
    ("softmax", [F32], [(2, 3)], {"axis": 2}, r"softmax: axis=2 is out of range for rank 2; allowed: -2..1"),
    ("softmax", [F32], [()], {}, r"softmax needs an input of rank >= 1"),
    ("softmax", [F32], [(3,)], {"axis": 1.5}, r"param axis must be an integer"),
    ("layer_norm", [F32] * 4, [(2, 3)] * 4, {}, r"layer_norm takes at most 3 inputs \(x, scale, bias\), got 4"),
    ("layer_norm", [F32, F32], [(2, 3), (2,)], {}, r"scale shape \(2,\) must broadcast to the normalized dims \(3,\)"),
    ("layer_norm", [F32, DType.F16], [(2, 3), (3,)], {}, r"inputs 0 and 1 must have the same dtype"),
    ("rms_norm", [F32], [(2, 3)], {"epsilon": "small"}, r"param epsilon must be a number"),
    ("batch_norm", [F32] * 5, [(2, 3, 4), (3,), (3,), (4,), (3,)], {}, r"mean must have shape \(3,\)"),
    ("gather", [F32, F32], [(4, 2), (3,)], {}, r"input 1 \(indices\) has dtype f32; allowed: i8, i16"),
    ("gather", [F32, I32], [(4, 2), (3,)], {"axis": -3}, r"gather: axis=-3 is out of range"),
    ("gather", [F32, I32], [(0, 2), (3,)], {}, r"axis 0 of data \(0, 2\) is empty"),
    ("embedding", [F32, DType.BOOL], [(4, 2), (3,)], {}, r"ids\) has dtype bool; allowed: i8"),
    ("reshape", [F32], [(2, 6)], {}, r"param 'shape' \(int_list\) is required"),
    ("reshape", [F32], [(2, 6)], {"shape": (-1, -1)}, r"more than one -1"),
    ("reshape", [F32], [(2, 6)], {"shape": (5, 2)}, r"element counts must match"),
    ("reshape", [F32], [(2, 6)], {"shape": (2, -3)}, r"dim -3 is invalid; allowed: >= 0, 0 \(copy\), -1 \(infer\)"),
    ("reshape", [F32], [(12,)], {"shape": (3, 0)}, r"0 at position 1 copies a dim the input \(12,\) lacks"),
    ("reshape", [F32], [(2, 6)], {"shape": (5, -1)}, r"cannot infer -1"),
    ("transpose", [F32], [(2, 3, 4)], {"perm": (0, 1)}, r"transpose: perm=\(0, 1\) must be a permutation of 0..2"),
    ("permute", [F32], [(2, 3)], {"perm": (1, 1)}, r"permute: perm=\(1, 1\) must be a permutation"),
    ("concat", [F32, F32], [(2, 3), (3, 3)], {"axis": 1}, r"input 1 has shape \(3, 3\).*all dims except axis 1"),
    ("concat", [F32, I32], [(2, 3), (2, 3)], {"axis": 0}, r"inputs 0 and 1 must have the same dtype, got f32 and i32"),
    ("concat", [F32], [(2, 3)], {}, r"param 'axis' \(int\) is required"),
    ("slice", [F32], [(4,)], {"starts": (0,), "ends": (4,), "steps": (0,)}, r"steps must be non-zero"),
    ("slice", [F32], [(4, 4)], {"starts": (0, 1), "ends": (4,)}, r"starts/ends/axes/steps must have equal lengths"),
    ("slice", [F32], [(4, 4)], {"starts": (0, 1), "ends": (4, 4), "axes": (1, -1)}, r"repeat an axis"),
    ("slice", [F32], [(4,)], {"starts": (0,), "ends": (4,), "axes": (1,)}, r"slice: axis=1 is out of range"),
    ("pad", [F32], [(4,)], {"pads": (1, -1)}, r"negative value; allowed: >= 0 \(use slice to crop\)"),
    ("pad", [F32], [(4, 4)], {"pads": (1, 1)}, r"pads has 2 values; expected 4"),
    ("pad", [F32], [(4,)], {"pads": (1, 1), "mode": "mirror"}, r"allowed: constant, reflect, edge, wrap"),
    ("pad", [F32], [(0,)], {"pads": (1, 1), "mode": "edge"}, r"mode=edge on empty axis 0"),
    ("pad", [DType.I4], [(4,)], {"pads": (1, 1), "value": 8}, r"value=8 does not fit i4; allowed: -8..7"),
    ("pad", [DType.T1], [(4,)], {"pads": (1, 1)}, r"value=0 does not fit t1; allowed: -1 or 1"),
    ("pad", [DType.U8], [(4,)], {"pads": (1, 1), "value": 2.5}, r"value=2.5 is not an integer"),
    ("pad", [DType.BOOL], [(4,)], {"pads": (1, 1), "value": 3}, r"does not fit bool"),
    ("where", [I32, F32, F32], [(3,), (3,), (3,)], {}, r"input 0 \(cond\) has dtype i32; allowed: bool"),
    ("where", [DType.BOOL, F32, I32], [(3,), (3,), (3,)], {}, r"inputs 1 and 2 must have the same dtype"),
    ("where", [DType.BOOL, F32, F32], [(3,), (4,), (3,)], {}, r"where: shapes .* do not broadcast"),
    ("rope", [F32, I32], [(4, 7), ()], {}, r"rotary_dim=7 must be even"),
    ("rope", [F32, I32], [(4, 8), ()], {"rotary_dim": 10}, r"rotary_dim=10 must be even and in 2..8"),
    ("rope", [F32, I32], [(4, 8), (3,)], {}, r"positions must be a scalar offset or a vector of 4 positions"),
    ("rope", [F32, F32], [(4, 8), ()], {}, r"input 1 \(positions\) has dtype f32; allowed: i8"),
    ("rope", [F32, I32], [(8,), ()], {}, r"rope needs x of rank >= 2"),
    ("rope", [F32, I32], [(4, 8), ()], {"theta": -1.0}, r"theta=-1.0 must be > 0"),
    ("rope", [F32, I32], [(4, 8), ()], {"rotary_dim": -2}, r"rotary_dim must be >= 0"),
    ("attention", [F32] * 3, [(3, 4, 8), (2, 4, 8), (2, 4, 8)], {}, r"q heads \(3\) must be a multiple of kv heads \(2\)"),
    ("attention", [F32] * 3, [(2, 4, 8), (2, 4, 6), (2, 4, 8)], {}, r"head dim of k \(6\) must equal that of q \(8\)"),
    ("attention", [F32] * 3, [(2, 4, 8), (2, 4, 8), (2, 5, 8)], {}, r"v heads/seq \(2, 5\) must equal k's \(2, 4\)"),
    ("attention", [F32] * 3, [(4, 8), (4, 8), (4, 8)], {}, r"q must have rank >= 3"),
    ("attention", [F32] * 3, [(1, 2, 4, 8), (2, 2, 4, 8), (2, 2, 4, 8)], {}, r"batch dims differ"),
    ("attention", [F32] * 4, [(2, 4, 8), (2, 5, 8), (2, 5, 8), (4, 4)], {}, r"mask shape \(4, 4\) must broadcast"),
    ("attention", [F32, F32, F32, DType.F16], [(2, 4, 8), (2, 5, 8), (2, 5, 8), (4, 5)], {},
     r"mask has dtype f16; allowed: bool \(true = attend\) or f32"),
    ("attention", [F32, DType.F16, F32], [(2, 4, 8), (2, 5, 8), (2, 5, 8)], {},
     r"inputs 1 and 2 must have the same dtype, got f16 and f32"),
    ("attention", [F32] * 5, [(2, 4, 8)] * 5, {}, r"attention takes at most 4 inputs \(q, k, v, mask\), got 5"),
    ("attention", [F32] * 3, [(2, 4, 8)] * 3, {"causal": 1}, r"param causal must be true or false"),
    ("conv2d", [F32, F32], [(1, 4, 5, 5), (2, 3, 3, 3)], {}, r"weights .* need dim 1 = channels/groups = 4, got 3"),
    ("conv2d", [F32, F32], [(1, 4, 5, 5), (3, 2, 3, 3)], {"groups": 2}, r"groups=2 must divide both input channels \(4\) and output channels \(3\)"),
    ("conv2d", [F32] * 3, [(1, 4, 5, 5), (2, 4, 3, 3), (3,)], {}, r"bias must have shape \(2,\)"),
    ("conv2d", [F32, F32], [(1, 4, 5), (2, 4, 3)], {}, r"conv2d needs x and w of rank 4"),
    ("conv2d", [F32, F32], [(1, 4, 2, 5), (2, 4, 3, 3)], {}, r"spatial dim 0 has 2 .* window spans 3"),
    ("conv2d", [F32, F32], [(1, 4, 5, 5), (2, 4, 3, 3)], {"strides": (1,)}, r"strides=\(1,\) must have 2 values"),
    ("conv2d", [F32, F32], [(1, 4, 5, 5), (2, 4, 3, 3)], {"dilations": (0, 1)}, r"must be >= 1"),
    ("conv1d", [I32, I32], [(1, 4, 5), (2, 4, 3)], {}, r"input 0 \(x\) has dtype i32; allowed: f8"),
    ("linear", [F32, F32], [(2, 8), (4, 6)], {}, r"x's last dim \(8\) must equal w's dim 1 \(in features, 6\)"),
    ("linear", [F32] * 3, [(2, 8), (4, 8), (8,)], {}, r"bias must have shape \(4,\)"),
    ("linear", [F32, F32], [(2, 8), (8,)], {}, r"w of rank 2 \(\[out, in\]\)"),
    ("linear", [F32] * 4, [(2, 8), (4, 8), (4,), (4,)], {}, r"linear takes at most 3 inputs \(x, w, bias\)"),
    ("max_pool", [F32], [(1, 1, 5, 5)], {}, r"param 'kernel_shape' \(int_list\) is required"),
    ("max_pool", [F32], [(1, 1, 5, 5)], {"kernel_shape": (2,)}, r"kernel_shape=\(2,\) needs x of rank 3"),
    ("max_pool", [DType.BOOL], [(1, 1, 5)], {"kernel_shape": (2,)}, r"has dtype bool; allowed: f8"),
    ("avg_pool", [F32], [(1, 1, 1)], {"kernel_shape": (2,), "pads": (1, 1), "dilations": (2,)},
     r"window at output 0 covers padding only"),
    ("avg_pool", [F32], [(1, 1, 4)], {"kernel_shape": (0,)}, r"kernel_shape=\(0,\) must be >= 1"),
    ("global_average_pool", [F32], [(2, 3)], {}, r"needs x of rank >= 3"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "dtypes", "shapes", "params", "message"),
    CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)],
)
def test_infer_rejects_with_a_message_that_lists_what_is_allowed(
    name: str,
    dtypes: list[DType],
    shapes: list[tuple[int, ...]],
    params: dict[str, Any],
    message: str,
) -> None:
    op = registry.get(name)
    assert op is not None
    with pytest.raises(OpCheckError, match=message) as info:
        op.infer(dtypes, shapes, params)
    assert isinstance(info.value, GraphValidationError)


def _zeros(dtype: DType, shape: tuple[int, ...]) -> np.ndarray:
    return np.zeros(shape, dtype.numpy)


@pytest.mark.parametrize(
    ("name", "dtypes", "shapes", "params", "message"),
    [c for c in CASES if all(not d.is_packed for d in c[1])],
    ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES) if all(not d.is_packed for d in c[1])],
)
def test_lowering_raises_the_same_typed_error_before_jax(
    name: str,
    dtypes: list[DType],
    shapes: list[tuple[int, ...]],
    params: dict[str, Any],
    message: str,
) -> None:
    op = registry.get(name)
    assert op is not None
    arrays = [_zeros(d, s) for d, s in zip(dtypes, shapes)]
    with pytest.raises(OpCheckError, match=message):
        op.lower_jax(*arrays, **params)
    with pytest.raises(OpCheckError, match=message):
        op.reference(*arrays, **params)


def test_runtime_scalars_pass_validation_unchecked() -> None:
    """A param naming a variable (epsilon=eps) is bound by the simulator; infer must not choke."""
    op = registry.get("rms_norm")
    assert op is not None
    assert op.infer([F32], [(2, 8)], {"epsilon": VarName("eps")}) == (F32, (2, 8))
    rope = registry.get("rope")
    assert rope is not None
    assert rope.infer([F32, I32], [(3, 4, 8), ()], {"theta": VarName("base")}) == (F32, (3, 4, 8))


def test_declarations_describe_params_and_policies() -> None:
    """The registry entries carry what docs and backends read: categories, params, policies."""
    softmax = registry.get("softmax")
    concat = registry.get("concat")
    where = registry.get("where")
    assert softmax is not None and concat is not None and where is not None
    assert softmax.params["axis"].default == -1 and softmax.inplace_ok and not softmax.broadcast_ok
    assert concat.variadic and concat.arity == 1 and not concat.inplace_ok
    assert where.broadcast_ok and where.infer([DType.BOOL, I32, I32], [(2, 1), (3,), ()], {}) == (
        I32,
        (2, 3),
    )
    for name in ("exp", "gelu", "softmax", "attention", "conv2d", "gather", "pad"):
        op = registry.get(name)
        assert op is not None and op.doc and op.category
