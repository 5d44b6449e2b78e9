"""The registry's lowerings compile to the same XLA program as hand-written jax.numpy.

A timing-free performance check: if the optimized HLO instructions are identical, the
registry adds no cost at run time (params, dtype checks and shape rules run at trace time only).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from openinfer_jax.ops import registry

X = jnp.asarray(np.random.default_rng(3).standard_normal((16, 96)).astype(np.float32))
SCALE = jnp.ones((96,), jnp.float32)
BIAS = jnp.zeros((96,), jnp.float32)


def _layer_norm(x: Any, scale: Any, bias: Any) -> Any:
    mean = jnp.mean(x, -1, keepdims=True)
    centered = x - mean
    var = jnp.mean(centered * centered, -1, keepdims=True)
    return centered * jax.lax.rsqrt(var + 1e-5) * scale + bias


def _rms_norm(x: Any, scale: Any) -> Any:
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * scale


HAND_WRITTEN: dict[str, tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = {
    "softmax": (lambda x: jax.nn.softmax(x, axis=-1), (X,), {}),
    "log_softmax": (lambda x: jax.nn.log_softmax(x, axis=0), (X,), {"axis": 0}),
    "layer_norm": (_layer_norm, (X, SCALE, BIAS), {}),
    "rms_norm": (_rms_norm, (X, SCALE), {}),
    "gelu": (lambda x: jax.nn.gelu(x, approximate=True), (X,), {"approximate": "tanh"}),
    "silu": (jax.nn.silu, (X,), {}),
    "exp": (jnp.exp, (X,), {}),
    "linear": (
        lambda x, w, b: jnp.matmul(x, w.T, precision=jax.lax.Precision.HIGHEST) + b,
        (X, X[:8], X[0, :8]),
        {},
    ),
}


def _instructions(fn: Callable[..., Any], args: tuple[Any, ...]) -> list[str]:
    """Optimized HLO instruction lines without source metadata, names numbered by first use."""
    text = jax.jit(fn).lower(*args).compile().as_text()
    names: dict[str, str] = {}

    def canonical(match: re.Match[str]) -> str:
        return names.setdefault(match.group(0), f"%v{len(names)}")

    lines = []
    for line in text.splitlines():
        if " = " in line and not line.lstrip()[:1].isdigit():
            line = re.sub(r", metadata=\{.*?\}", "", line)
            line = re.sub(r"stack_frame_id=\d+", "", line)
            lines.append(re.sub(r"%[\w.\-]+", canonical, line).strip())
    return lines


@pytest.mark.parametrize("name", sorted(HAND_WRITTEN))
def test_lowering_compiles_to_the_hand_written_program(name: str) -> None:
    hand, args, params = HAND_WRITTEN[name]
    op = registry.get(name)
    assert op is not None
    ours = _instructions(lambda *xs: op.lower_jax(*xs, **params), args)
    assert ours == _instructions(hand, args)
