"""The Vulkan backend on a real device (lavapipe in CI): smoke, residency, slices, errors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import BackendError, GraphValidationError
from openinfer_jax.ir.nodes import VarName
from openinfer_jax.vk import VulkanBackend, query_capabilities, vulkan_available
from openinfer_jax.vk.compiler import compile_glsl
from tests.vk.vk_cases import sample

pytestmark = pytest.mark.vulkan


def test_smoke_add_returns_non_constant_correct_data(backend: VulkanBackend) -> None:
    # Guards the pybind11/numpy-2 trap: a kp built against old pybind11 returned all ones.
    a = backend.upload(np.arange(8, dtype=np.float32), DType.F32)
    b = backend.upload(np.ones(8, dtype=np.float32), DType.F32)
    got = backend.download(backend.run("add", [a, b], {}, DType.F32, (8,)))
    np.testing.assert_array_equal(got, np.arange(1, 9, dtype=np.float32))
    assert len(set(got.tolist())) == 8


def test_properties_agree_with_kompute(backend: VulkanBackend) -> None:
    import kp

    props = backend.properties
    kp_props = kp.Manager().get_device_properties()
    assert props["device_name"] == kp_props["device_name"]
    limits = props["limits"]
    assert limits["max_compute_work_group_invocations"] == kp_props["max_work_group_invocations"]
    assert limits["max_compute_work_group_count"] == tuple(kp_props["max_work_group_count"])
    assert limits["max_push_constants_size"] >= 128  # the Vulkan minimum; kernels rely on it
    for key in ("shader_int64", "shader_float64", "shader_float16", "shader_int8", "subgroup"):
        assert isinstance(props["features"][key], bool)


def test_chained_ops_stay_on_the_device_and_run_in_order(backend: VulkanBackend) -> None:
    x = np.linspace(-1, 1, 257).astype(np.float32)
    t = backend.upload(x, DType.F32)
    expected = x.copy()
    for step in range(12):
        op = ("add", "mul", "sub")[step % 3]
        t = backend.run(
            op, [t, t if op != "sub" else backend.upload(x, DType.F32)], {}, DType.F32, x.shape
        )
        expected = {"add": expected + expected, "mul": expected * expected, "sub": expected - x}[op]
    backend.sync()
    np.testing.assert_allclose(backend.download(t), expected, rtol=1e-5)


@pytest.mark.parametrize("dtype", [DType.F32, DType.U4, DType.F64, DType.BOOL, DType.I16, DType.T1])
def test_write_and_read_slices_copy_on_the_device(backend: VulkanBackend, dtype: DType) -> None:
    rng = np.random.default_rng(3)
    table_host = sample(dtype, (50,), rng)
    table = backend.upload(table_host, dtype)
    row_host = sample(dtype, (13,), rng)
    row = backend.upload(row_host, dtype)
    backend.write_slice(table, 7, row)
    table_host[7:20] = row_host
    np.testing.assert_array_equal(backend.download(table).view(np.uint8), table_host.view(np.uint8))
    window = backend.read_slice(table, 3, 21, shape=(3, 7))
    expected = table_host[3:24].reshape(3, 7)
    np.testing.assert_array_equal(backend.download(window).view(np.uint8), expected.view(np.uint8))


def test_slices_out_of_range_are_backend_errors(backend: VulkanBackend) -> None:
    table = backend.upload(np.zeros(10, np.float32), DType.F32)
    row = backend.upload(np.ones(4, np.float32), DType.F32)
    with pytest.raises(BackendError, match="do not fit"):
        backend.write_slice(table, 8, row)
    with pytest.raises(BackendError, match="outside"):
        backend.read_slice(table, 8, 4)
    with pytest.raises(BackendError, match="i32"):
        backend.write_slice(table, 0, backend.upload(np.ones(2, np.int32), DType.I32))


def test_large_dispatch_spans_two_grid_dimensions(backend: VulkanBackend) -> None:
    n = 65535 * 128 + 1000  # more work groups than one grid dimension holds
    x = np.arange(n, dtype=np.float32)
    t = backend.upload(x, DType.F32)
    got = backend.download(backend.run("neg", [t], {}, DType.F32, (n,)))
    assert got[-1] == -x[-1] and got[0] == 0 and got[n // 2] == -x[n // 2]


def test_precompile_builds_kernels_in_one_batch(
    backend: VulkanBackend, fresh_cache: object
) -> None:
    calls = [
        ("add", [DType.F32, DType.F32], [(2,), (2,)], {}),
        ("cast", [DType.I8], [(3,)], {"to": DType.F16}),
        ("softmax", [DType.F32], [(3,)], {}),  # two kernels: statistics and apply
        ("attention", [DType.F64] * 3, [(1, 2, 4)] * 3, {}),  # no f64 kernel: skipped
    ]
    assert backend.precompile(calls) == 4
    assert backend.precompile(calls) == 0  # cached


def test_disabled_capabilities_make_supports_name_the_reason() -> None:
    ok, reason = vulkan_available()
    if not ok:
        pytest.skip(reason)
    be = VulkanBackend(disable_features=["shader_int64", "shader_float64"])
    assert be.properties["features"]["shader_int64"] is False
    why = be.supports("add", [DType.I64, DType.I64], {})
    assert isinstance(why, str) and "shaderInt64" in why and "CPU" in why
    why = be.supports("mul", [DType.F64, DType.F64], {})
    assert isinstance(why, str) and "shaderFloat64" in why
    assert be.supports("add", [DType.I32, DType.I32], {}) is True
    # arg* write i64 indices without 64-bit arithmetic, so they still run
    assert be.supports("argmax_axis", [DType.F32], {"axis": 0}) is True
    with pytest.raises(BackendError, match="shaderInt64"):
        t = be.upload(np.arange(3, dtype=np.int64), DType.I64)
        be.run("add", [t, t], {}, DType.I64, (3,))


def test_disable_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    ok, reason = vulkan_available()
    if not ok:
        pytest.skip(reason)
    monkeypatch.setenv("OPENINFER_VK_DISABLE", "shader_float64")
    be = VulkanBackend()
    assert isinstance(be.supports("abs", [DType.F64], {}), str)
    monkeypatch.setenv("OPENINFER_VK_DISABLE", "shader_int128")
    with pytest.raises(BackendError, match="unknown feature"):
        VulkanBackend()


def test_supports_reports_ops_without_kernels(backend: VulkanBackend) -> None:
    assert "no Vulkan kernel" in str(backend.supports("attention", [DType.F64] * 3, {}))
    assert "no Vulkan kernel" in str(backend.supports("rope", [DType.F64, DType.I32], {}))
    assert "unknown op" in str(backend.supports("frobnicate", [DType.F32], {}))
    assert "variable" in str(backend.supports("clamp", [DType.F32], {"min": VarName("lo")}))
    assert "same dtype" in str(backend.supports("add", [DType.F32, DType.I32], {}))


def test_run_rejects_bad_calls(backend: VulkanBackend) -> None:
    a = backend.upload(np.arange(4, dtype=np.uint8), DType.U8)
    with pytest.raises(BackendError, match="gives u8"):
        backend.run("add", [a, a], {}, DType.F32, (4,))
    with pytest.raises(BackendError, match=r"\[5\]"):
        backend.run("add", [a, a], {}, DType.U8, (5,))
    with pytest.raises(BackendError, match="inplace"):
        backend.run("popcount", [a], {}, DType.U8, (4,), out=a)
    with pytest.raises(GraphValidationError, match="unknown param"):
        backend.run("add", [a, a], {"bogus": 1}, DType.U8, (4,))
    with pytest.raises(BackendError, match="DeviceTensor"):
        backend.run("neg", [np.zeros(3)], {}, DType.F32, (3,))  # type: ignore[list-item]


def test_buffer_above_the_device_limit_is_a_backend_error(backend: VulkanBackend) -> None:
    limit = backend.properties["limits"]["max_storage_buffer_range"]
    with pytest.raises(BackendError, match="maxStorageBufferRange"):
        backend.empty(DType.U8, (limit + 64,))


def test_bad_device_index_is_a_backend_error() -> None:
    ok, reason = vulkan_available()
    if not ok:
        pytest.skip(reason)
    with pytest.raises(BackendError, match="out of range"):
        VulkanBackend(device_index=99)
    with pytest.raises(BackendError, match="out of range"):
        query_capabilities(99)


def test_shader_compile_failure_is_a_backend_error(fresh_cache: object) -> None:
    with pytest.raises(BackendError, match="shader compile failed for broken"):
        compile_glsl("#version 450\nvoid main() { undefined_call(); }\n", "broken")


def test_missing_glslc_says_what_to_install(
    fresh_cache: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GLSLC", "/nonexistent/glslc")
    with pytest.raises(BackendError, match="apt-get install glslc"):
        compile_glsl("#version 450\nvoid main() {}\n", "tiny")


def test_missing_kp_is_a_backend_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kp", None)  # makes `import kp` raise ImportError
    with pytest.raises(BackendError, match=r"openinfer_jax\.vk\.build_kp"):
        VulkanBackend()
    assert vulkan_available.__wrapped__(0)[0] is False


def test_importing_the_package_does_not_import_kp() -> None:
    code = "import sys, openinfer_jax.vk; print('kp' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_chains_are_one_submission_when_kp_has_the_barrier(backend: VulkanBackend) -> None:
    x = backend.upload(np.arange(64, dtype=np.float32), DType.F32)
    y = backend.empty(DType.F32, (64,))
    backend.sync()
    dispatches, submits = backend.dispatch_count, backend.submit_count
    for _ in range(10):
        backend.run("add", [x, x], {}, DType.F32, (64,), out=y)
        backend.run("mul", [y, x], {}, DType.F32, (64,), out=y)
    got = backend.download(y)
    np.testing.assert_array_equal(got, np.arange(64, dtype=np.float32) * 2 * np.arange(64))
    assert backend.dispatch_count - dispatches == 20
    # batching needs kp.OpShaderBarrier (openinfer_jax/vk/kp-0.9.0-shader-barrier.patch)
    expected = 1 if backend.batching else 20
    assert backend.submit_count - submits == expected
