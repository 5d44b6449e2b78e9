"""Step patterns rewritten after conversion: a bias add folded into its `linear`, the
scaled-dot-product chain folded into one `attention`, reshape chains merged.

These read better (`op linear(x, W, b)`, `op attention(q, k, v, mask, scale=0.125)`) and run
on the backends' fused kernels. Every rewrite needs the intermediate values to have no other
reader and not to be graph outputs; the results are bit-for-bit the same ops' definitions.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import numpy as np

from openinfer_jax.onnx.program import Program
from openinfer_jax.onnx.values import Role, Step, Tensor

__all__ = ["optimize"]


class _Uses:
    """Who produces and who reads each variable of a program (kept current by the rewrites)."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.producer: dict[int, Step] = {id(s.output): s for s in program.steps}
        self.readers: dict[int, int] = collections.Counter(
            id(t) for s in program.steps for t in s.inputs
        )
        for _, t in program.outputs:
            self.readers[id(t)] += 1_000_000  # never folded away
        for pair in program.state:
            self.readers[id(pair.output)] += 1_000_000

    def only(self, t: Tensor) -> Step | None:
        """The step producing `t` if `t` has exactly one reader, else None."""
        if self.readers.get(id(t), 0) != 1:
            return None
        return self.producer.get(id(t))

    def single_reader(self, t: Tensor, op: str) -> Step | None:
        """The one step reading `t`, if it is an `op` step."""
        if self.readers.get(id(t), 0) != 1:
            return None
        for step in self.program.steps:
            if step.op == op and any(x is t for x in step.inputs):
                return step
        return None


def _scalar_value(t: Tensor) -> float | None:
    if t.role not in (Role.SCALAR, Role.WEIGHT) or t.data is None or np.size(t.data) != 1:
        return None
    return float(np.asarray(t.data).reshape(-1)[0])


def _fuse_linear_bias(program: Program, uses: _Uses) -> int:
    """add(linear(x, W), b) / add(b, linear(x, W)) with b a [out] constant -> linear(x, W, b)."""
    count = 0
    drop: set[int] = set()
    for step in program.steps:
        if step.op != "add" or len(step.inputs) != 2:
            continue
        for lin_in, bias in ((step.inputs[0], step.inputs[1]), (step.inputs[1], step.inputs[0])):
            lin = uses.only(lin_in)
            if (
                lin is None
                or lin.op != "linear"
                or len(lin.inputs) != 2
                or bias.role is not Role.WEIGHT
                or bias.shape != (lin.inputs[1].shape[0],)
                or bias.dtype is not lin.output.dtype
            ):
                continue
            lin.inputs = (*lin.inputs, bias)
            # The add's result becomes the linear's: later readers see the same variable.
            _rebind(program, step.output, lin.output)
            drop.add(id(step))
            count += 1
            break
    program.steps = [s for s in program.steps if id(s) not in drop]
    return count


def _rebind(program: Program, old: Tensor, new: Tensor) -> None:
    """Every read of `old` reads `new` instead (outputs included)."""
    if old.dims is not None and new.dims is None:
        new.dims = old.dims
    for s in program.steps:
        if any(t is old for t in s.inputs):
            s.inputs = tuple(new if t is old else t for t in s.inputs)
    program.outputs = [(n, new if t is old else t) for n, t in program.outputs]
    for pair in program.state:
        if pair.output is old:
            pair.output = new
    if old.hint and new.role is Role.TEMP and any(t is new for _, t in program.outputs):
        for name, t in program.outputs:
            if t is new:
                new.hint = name


def _fuse_attention(program: Program, uses: _Uses) -> int:
    """matmul(q, kT) [/ c or * c] [+ mask] -> softmax(last) -> matmul(., v) as one attention."""
    count = 0
    drop: set[int] = set()
    for out in list(program.steps):
        if out.op != "matmul" or id(out) in drop:
            continue
        probs, v = out.inputs
        soft = uses.only(probs)
        if soft is None or soft.op != "softmax":
            continue
        rank = len(probs.shape)
        if dict(soft.params).get("axis", -1) not in (-1, rank - 1):
            continue
        chain = [out, soft]
        scores = soft.inputs[0]
        mask: Tensor | None = None
        step = uses.only(scores)
        if step is not None and step.op == "add":
            chain.append(step)
            a, b = step.inputs
            inner = uses.only(a)
            if inner is not None and inner.op in ("div", "mul", "matmul"):
                mask, scores = b, a
            else:
                inner = uses.only(b)
                if inner is None or inner.op not in ("div", "mul", "matmul"):
                    continue
                mask, scores = a, b
            step = uses.only(scores)
        scale = 1.0
        if step is not None and step.op in ("div", "mul"):
            factor = _scalar_value(step.inputs[1])
            if factor is None or factor == 0:
                continue
            scale = 1.0 / factor if step.op == "div" else factor
            chain.append(step)
            scores = step.inputs[0]
            step = uses.only(scores)
        if step is None or step.op != "matmul":
            continue
        chain.append(step)
        q, k_t = step.inputs
        if len(q.shape) < 3 or q.shape[:-2] != v.shape[:-2] or k_t.shape[:-2] != q.shape[:-2]:
            continue
        if mask is not None and mask.dtype is not q.dtype:
            continue
        k, new_transpose = _untransposed(uses, k_t)
        identity = _identity_transpose(uses, k) if new_transpose is None else None
        if identity is not None:
            k = identity.inputs[0]
        inputs = [q, k, v] + ([mask] if mask is not None else [])
        fused = Step("attention", tuple(inputs), (("scale", scale),), out.output, out.node)
        try:
            _check(fused)
        except Exception:  # a shape the attention op does not take: leave the chain
            if new_transpose is None:
                _swap_last(uses, k_t)  # undo
            continue
        position = program.steps.index(out)
        program.steps[position] = fused
        if identity is not None:
            drop.add(id(identity))
        if new_transpose is not None:
            program.steps.insert(position, new_transpose)
        drop.update(id(s) for s in chain[1:])
        count += 1
    program.steps = [s for s in program.steps if id(s) not in drop]
    return count


def _untransposed(uses: _Uses, k_t: Tensor) -> tuple[Tensor, Step | None]:
    """k for kT: when kT = transpose(k4, perm) has no other reader, that transpose with its
    last two axes swapped (no new step); else a new transpose of kT (returned, not placed)."""
    rank = len(k_t.shape)
    step = uses.only(k_t)
    if (
        step is not None
        and step.op == "transpose"
        and len(dict(step.params).get("perm", ())) == rank
    ):
        _swap_last(uses, k_t)
        return k_t, None
    swap = (*range(rank - 2), rank - 1, rank - 2)
    out = Tensor(
        k_t.dtype, (*k_t.shape[:-2], k_t.shape[-1], k_t.shape[-2]), k_t.hint + "_k", Role.TEMP
    )
    return out, Step("transpose", (k_t,), (("perm", swap),), out, "attention")


def _identity_transpose(uses: _Uses, t: Tensor) -> Step | None:
    """The transpose producing `t` if its perm keeps every axis in place."""
    step = uses.producer.get(id(t))
    if step is None or step.op != "transpose":
        return None
    perm = list(dict(step.params).get("perm", ()))
    return step if perm == list(range(len(perm))) else None


def _swap_last(uses: _Uses, k_t: Tensor) -> None:
    """Swap the last two axes of the transpose producing `k_t` (and of `k_t`'s type)."""
    step = uses.producer[id(k_t)]
    perm = list(dict(step.params)["perm"])
    perm[-1], perm[-2] = perm[-2], perm[-1]
    step.params = tuple((n, tuple(perm) if n == "perm" else v) for n, v in step.params)
    shape = list(k_t.shape)
    shape[-1], shape[-2] = shape[-2], shape[-1]
    k_t.shape = tuple(shape)
    if k_t.dims is not None:
        dims = list(k_t.dims)
        dims[-1], dims[-2] = dims[-2], dims[-1]
        k_t.dims = tuple(dims)


def _check(step: Step) -> None:
    from openinfer_jax.ops import registry

    opdef = registry.get(step.op)
    assert opdef is not None
    opdef.infer([t.dtype for t in step.inputs], [t.shape for t in step.inputs], dict(step.params))


def _merge_reshapes(program: Program, uses: _Uses) -> int:
    """reshape(reshape(x)) -> reshape(x) when the middle value has no other reader."""
    count = 0
    drop: set[int] = set()
    for step in program.steps:
        if step.op != "reshape":
            continue
        inner = uses.only(step.inputs[0])
        if inner is None or inner.op != "reshape" or id(inner) in drop:
            continue
        step.inputs = inner.inputs
        step.params = (("shape", tuple(step.output.shape)),)
        drop.add(id(inner))
        count += 1
    program.steps = [s for s in program.steps if id(s) not in drop]
    return count


_PASSES: dict[str, Callable[[Program, _Uses], int]] = {
    "linear+bias": _fuse_linear_bias,
    "attention": _fuse_attention,
    "reshape chains": _merge_reshapes,
}


def optimize(program: Program) -> collections.Counter[str]:
    """Apply every rewrite (each with fresh use counts); returns how many of each."""
    done: collections.Counter[str] = collections.Counter()
    for name, rewrite in _PASSES.items():
        n = rewrite(program, _Uses(program))
        if n:
            done[name] = n
    return done
