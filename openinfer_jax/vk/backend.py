"""The Vulkan backend: device tensors and op dispatch through Kompute (`kp`).

This module is the only place in the package that imports `kp`, and it imports it
lazily, so the rest of the package works without Kompute installed.

Tensors stay on the device between ops: `upload` copies once, `run` allocates the output
on the device and dispatches a generated kernel, `download` copies back.

Reuse across steps (vk/reuse.py): a tensor nobody references any more gives its buffer
back to a pool, the next tensor of that size gets it, and a dispatch that binds the same
buffers with the same kernel and grid reuses its `kp.Algorithm` (pipeline and descriptor
set), so a streaming step that repeats builds no pipeline after its first steps.
`VulkanBackend.stats` counts pipelines created/reused and buffers allocated/reused.

Ordering: stock kp 0.9's Python binding exposes no shader-to-shader memory barrier, so
several dispatches recorded into one kp.Sequence would not be ordered on a real GPU. With
stock kp each dispatch is therefore its own submission, and the next one waits for it.
With kp patched by openinfer_jax/vk/kp-0.9.0-shader-barrier.patch (kp.OpShaderBarrier),
dispatches are recorded into one sequence with a barrier before each, and submitted
together at `sync`/`download` (or every 256 dispatches): one submission per chain of ops, the
uploads it reads included. With batching, a run of dispatches can also be recorded as a
`Tape` (`start_tape`/`stop_tape`) and replayed in one call (`replay_tape`): the simulator
replays a step's op walk that way (sim/vulkan_replay.py).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import BackendError, OpenInferError
from openinfer_jax.vk import kernels, launch, nn_kernels, selection
from openinfer_jax.vk.capabilities import DeviceCapabilities, query_capabilities
from openinfer_jax.vk.compiler import compile_glsl, compile_many
from openinfer_jax.vk.quant_kernels import DeviceQuantized, quant_kernel, quantized_reason
from openinfer_jax.vk.reuse import BufferPool, PipelineCache, Tape
from openinfer_jax.vk.storage import decode_words, encode_words, storage_words

__all__ = ["DeviceTensor", "VulkanBackend", "vulkan_available"]

_SERIALS = itertools.count()
_MAX_BATCH = 256  # dispatches per submission before the batch is flushed
_REPLAYS = 16  # recorded batches kept for resubmission (VulkanBackend._flush)
_POOL_BYTES = 256 << 20  # free buffers kept for reuse (OPENINFER_VK_POOL_MB overrides)
# Pipelines kept (OPENINFER_VK_PIPELINES overrides): a repeating step needs two per dispatch
# (its results alternate between two buffers); one holds about 1.5-2.5 MB on lavapipe.
_PIPELINES = 256
_PLAN_CACHE = 4096  # op plans and selections kept (cleared when full)
_FEATURE_NAMES = {"shader_int64": "shaderInt64", "shader_float64": "shaderFloat64"}
_INSTALL_KP = (
    "install Kompute's Python binding `kp` with `python -m openinfer_jax.vk.build_kp` (it builds "
    "the kp==0.9.0 sdist against the system Vulkan headers; docs/vulkan.md, Installation)"
)


def _import_kp() -> Any:
    try:
        import kp
    except ImportError as exc:
        raise BackendError(f"the Vulkan backend needs `kp` ({exc}); {_INSTALL_KP}") from None
    return kp


@cache
def vulkan_available(device_index: int = 0) -> tuple[bool, str]:
    """Whether the Vulkan backend can run here: (True, device name) or (False, reason).

    Checks that `kp` imports and that the Vulkan loader reports device `device_index`.
    Never raises.
    """
    try:
        _import_kp()
        caps = query_capabilities(device_index)
    except OpenInferError as exc:
        return False, str(exc)
    except Exception as exc:  # a broken driver must not break the CPU path
        return False, f"Vulkan probe failed: {type(exc).__name__}: {exc}"
    return True, caps.device_name


@dataclass(eq=False)
class DeviceTensor:
    """A tensor resident in a device buffer (32-bit words, layout of vk/storage.py).

    Created by `VulkanBackend.upload` / `run` / `read_slice`; read back with
    `VulkanBackend.download`. `dtype` and `shape` describe the logical tensor.

    A tensor made by the backend gives its buffer back to the backend's pool when it is
    garbage (vk/reuse.py); a view of another tensor's buffer (`base`) keeps that tensor
    alive, so the buffer cannot be reused while the view is.
    """

    dtype: DType
    shape: tuple[int, ...]
    handle: Any = field(repr=False)
    #: Size of the device buffer in 32-bit words (results get a bucketed size: at least
    #: the data's, `nbytes`).
    words: int = 0
    serial: int = field(default_factory=lambda: next(_SERIALS), repr=False)
    #: Identity of the device buffer, shared by views; pipelines are cached per buffer.
    buffer: int = field(default_factory=lambda: next(_SERIALS), repr=False)
    #: The tensor whose buffer this one views (kept alive by the view), or None.
    base: DeviceTensor | None = field(default=None, repr=False)
    pool: BufferPool | None = field(default=None, repr=False)

    def __del__(self) -> None:
        # The last reference is gone: no value, snapshot or pending dispatch holds this
        # buffer any more (the batch keeps its tensors until it has finished).
        if self.pool is not None:
            self.pool.give(self.words, self.buffer, self.handle)

    def view(self, dtype: DType, shape: tuple[int, ...]) -> DeviceTensor:
        """The same buffer seen as another dtype/shape of the same words."""
        return DeviceTensor(dtype, shape, self.handle, self.words, buffer=self.buffer, base=self)

    # A copy is a view: two owners would give the one buffer back to the pool twice.
    def __copy__(self) -> DeviceTensor:
        return self.view(self.dtype, self.shape)

    def __deepcopy__(self, memo: dict[int, Any]) -> DeviceTensor:
        return self.view(self.dtype, self.shape)

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of the tensor's data (its buffer may be larger: `words` is its size)."""
        return storage_words(self.dtype, self.numel) * 4


@dataclass(eq=False)
class _Pipeline:
    """A cached `kp.Algorithm` and, by push-constant bytes, its recorded sequences (without
    batching) or its (barrier, dispatch) ops (with batching: kp ops can be recorded into
    any number of sequences, so a repeating step makes no new ones)."""

    algo: Any
    sequences: dict[bytes, Any] = field(default_factory=dict)
    ops: dict[bytes, tuple[Any, Any]] = field(default_factory=dict)


def _env_int(name: str, default: int) -> int:
    """A non-negative integer setting from the environment.

    Raises:
        BackendError: the variable is set but is not a non-negative integer.
    """
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit():
        raise BackendError(f"{name}={text!r}: expected a non-negative integer")
    return int(text)


def _frozen(value: Any) -> Any:
    """A hashable stand-in for a param value (type-tagged: 1, 1.0 and True differ)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_frozen(v) for v in value))
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    hash(value)  # TypeError for anything else unhashable
    return (type(value).__name__, value)


def _call_key(op_name: str, in_dtypes: Sequence[DType], params: Mapping[str, Any]) -> Any:
    """The cache key of an op call's selection, or None if a param cannot be keyed."""
    try:
        return (op_name, tuple(in_dtypes), _frozen(params))
    except TypeError:
        return None


class VulkanBackend:
    """Runs registry ops on one Vulkan device through Kompute.

    Args:
        device_index: physical device, in the Vulkan loader's order.
        disable_features: capability names (``shader_int64``, ``shader_float64``) to treat
            as missing even if the device has them, to exercise the CPU fallback on a
            capable device; also read from ``OPENINFER_VK_DISABLE`` (comma-separated).
        matmul_tiles: ``"large"`` (128x128 tiles, for GPUs) or ``"small"`` (64x64, for
            CPUs); default: small on a CPU device (lavapipe), large otherwise.

    Raises:
        BackendError: `kp` missing, no Vulkan loader/device, or the index out of range;
            the message says what to install or change.
    """

    def __init__(
        self,
        device_index: int = 0,
        *,
        disable_features: Sequence[str] = (),
        matmul_tiles: str | None = None,
    ) -> None:
        self._kp = _import_kp()
        self.capabilities: DeviceCapabilities = query_capabilities(device_index)
        env = os.environ.get("OPENINFER_VK_DISABLE", "")
        disabled = {f.strip() for f in (*disable_features, *env.split(",")) if f.strip()}
        unknown = disabled - set(_FEATURE_NAMES)
        if unknown:
            raise BackendError(
                f"unknown feature(s) to disable: {', '.join(sorted(unknown))}; "
                f"known: {', '.join(_FEATURE_NAMES)}"
            )
        self._features = {k: v and k not in disabled for k, v in self.capabilities.features.items()}
        try:
            self._manager = self._kp.Manager(device_index)
        except RuntimeError as exc:
            raise BackendError(
                f"Kompute could not open Vulkan device {device_index}: {exc}; check the driver "
                "(`vulkaninfo --summary`), or VK_DRIVER_FILES for a non-default ICD"
            ) from None
        if matmul_tiles is None:
            matmul_tiles = "small" if self.capabilities.device_type == "cpu" else "large"
        if matmul_tiles != "generic" and kernels.tile_config(matmul_tiles) is None:
            raise BackendError(
                f"matmul_tiles={matmul_tiles!r}; use one of "
                f"{', '.join(kernels.MATMUL_TILES)}, generic, or 'BMxBNxBKxTMxTN'"
            )
        self.matmul_tiles = matmul_tiles
        #: Split decode-step attention over key ranges (GPUs; slower on CPU devices).
        self.split_attention = self.capabilities.device_type != "cpu"
        self._pending: list[tuple[Any, ...]] = []
        self._constants: dict[tuple[Any, ...], DeviceTensor] = {}
        #: The open batch: the kp operations to record (in order) and what they keep alive.
        self._open: tuple[list[Any], list[Any]] | None = None
        #: Recorded batches by their operations' identities (see _flush), oldest first.
        self._replays: OrderedDict[tuple[int, ...], tuple[Any, list[Any]]] = OrderedDict()
        self._syncs: dict[tuple[bool, int], tuple[Any, Any]] = {}  # see _sync_op
        self._kernels: dict[int, tuple[Any, ...]] = {}  # see _algorithm
        self._tape: Tape | None = None  # the tape being recorded (start_tape)
        self.replayed = 0  # batches submitted again without recording
        #: Dispatches recorded and queue submissions made (a batch is one submission).
        self.dispatch_count = 0
        self.submit_count = 0
        self._pipelines = PipelineCache(_env_int("OPENINFER_VK_PIPELINES", _PIPELINES))
        limit = _env_int("OPENINFER_VK_POOL_MB", _POOL_BYTES >> 20) << 20
        self._pool = BufferPool(limit, self._pipelines.forget_buffer)
        self._spirv: dict[str, tuple[bytes, bytes]] = {}  # source -> (SPIR-V, digest)
        self._site = 0  # allocations since `begin_step`: the pool's site of the next one
        self._upload_site = -1  # uploads since `begin_step` (their own sites, see _tensor)
        self._selections: dict[Any, selection.Selection | str] = {}
        self._plans: dict[Any, tuple[selection.Selection, nn_kernels.NnPlan]] = {}
        self._by_params: dict[int, tuple[Any, ...]] = {}
        self._shapes: dict[Any, tuple[selection.Selection, tuple[int, ...]]] = {}
        self._calls: dict[Any, tuple[Any, Any, tuple[int, ...]]] = {}  # checked calls, see run
        self._checked: dict[int, nn_kernels.NnPlan] = {}  # plans whose bindings fit the device
        # Batching needs a shader-to-shader barrier, which stock kp 0.9 lacks; the patch
        # openinfer_jax/vk/kp-0.9.0-shader-barrier.patch adds kp.OpShaderBarrier.
        self.batching = (
            hasattr(self._kp, "OpShaderBarrier")
            and os.environ.get("OPENINFER_VK_BATCH", "1") != "0"
        )

    # ---- device description ----------------------------------------------------------------
    @property
    def properties(self) -> dict[str, Any]:
        """Device name, vendor, type, limits and features (after `disable_features`)."""
        props = self.capabilities.as_dict()
        props["features"] = dict(self._features)
        return props

    @property
    def stats(self) -> dict[str, int]:
        """Counters since this backend started: dispatches, submissions (and those that
        resubmitted a recorded batch), pipelines (`kp.Algorithm`) created and reused, buffers
        allocated and reused from the pool."""
        return {
            "dispatches": self.dispatch_count,
            "submits": self.submit_count,
            "replayed": self.replayed,
            "pipelines_created": self._pipelines.created,
            "pipelines_reused": self._pipelines.reused,
            "buffers_allocated": self._pool.allocated,
            "buffers_reused": self._pool.reused,
        }

    @property
    def device_name(self) -> str:
        """The device's name as the driver reports it (``llvmpipe (...)``, ``NVIDIA H100``)."""
        return self.capabilities.device_name

    # ---- memory --------------------------------------------------------------------------------
    def _allocate_words(self, words: np.ndarray, what: str) -> Any:
        limit = self.capabilities.limits["max_storage_buffer_range"]
        if words.nbytes > limit:
            raise BackendError(
                f"{what} needs a {words.nbytes}-byte buffer, above this device's "
                f"maxStorageBufferRange of {limit} bytes; run it on the CPU or split the tensor"
            )
        try:
            return self._manager.tensor_t(words)
        except RuntimeError as exc:
            raise BackendError(
                f"allocating {words.nbytes} bytes for {what} on {self.device_name} failed "
                f"({exc}); free device tensors or use a smaller model"
            ) from None

    def upload(self, array: Any, dtype: DType) -> DeviceTensor:
        """Copy a host array (simulator representation of `dtype`) into a new device tensor.

        Raises:
            BackendError: a dtype that cannot be a tensor, packed values out of range, or an
                allocation failure.
        """
        host = np.asarray(array)
        words = encode_words(host, dtype)
        return self._upload_words(words, dtype, tuple(int(d) for d in host.shape))

    def _upload_words(
        self, words: np.ndarray, dtype: DType, shape: tuple[int, ...]
    ) -> DeviceTensor:
        """A device tensor holding `words`, in a pooled buffer when one fits.

        No wait for earlier dispatches: the buffer is new or came back from the pool, so no
        pending dispatch binds it. With batching the copy is recorded into the open batch
        (the dispatches after it wait for it through kp's transfer-to-shader barriers), so
        a step's input uploads cost no submission of their own; otherwise it is submitted
        and has finished when this returns.
        """
        tensor = self._tensor(dtype, shape, int(words.size), words)
        sync = self._sync_op(tensor, to_device=True)
        if self.batching:
            ops, refs = self._batch()
            ops.append(sync)
            refs.append((sync, [tensor]))
            return tensor
        self._eval(self._manager.sequence().record(sync), "upload")
        return tensor

    def _tensor(
        self,
        dtype: DType,
        shape: tuple[int, ...],
        n: int,
        words: np.ndarray | None = None,
        sized: bool = False,
    ) -> DeviceTensor:
        """A tensor of `n` words in a pooled buffer (host side set to `words` if given),
        or in a new one; its buffer goes back to the pool when it is garbage. A result's
        `n` is bucketed here unless `sized` says it already is (`_result_words`)."""
        # Sites: outputs and scratch count up from 0, uploads down from -1, so the weights
        # uploaded in a first step do not shift the sites of the step's results.
        if words is None:
            site, self._site = self._site, self._site + 1
            if not sized:
                n = self._result_words(n)
        else:
            site, self._upload_site = self._upload_site, self._upload_site - 1
        taken = self._pool.take(n, site)
        if taken is None:
            init = words if words is not None else np.zeros(n, np.uint32)
            handle = self._allocate_words(init, f"a {dtype.short}{list(shape)} tensor")
            self._pool.allocated += 1
            tensor = DeviceTensor(dtype, shape, handle, n, pool=self._pool)
            self._pool.note(site, tensor.buffer)
        else:
            buffer, handle = taken
            if words is not None:
                handle.data()[:] = words
            tensor = DeviceTensor(dtype, shape, handle, n, buffer=buffer, pool=self._pool)
        tape = self._tape
        if tape is not None and words is None:  # results and scratch; uploads are the caller's
            tape.allocs.append((n, tensor.buffer, dtype, shape))
            assert tape.made is not None
            tape.made.append(tensor)
        return tensor

    def _result_words(self, n: int) -> int:
        """The buffer size of a result of `n` words: bucketed (a result that grows a little
        every step keeps its buffer, and so the pipelines bound to it), but not past the
        device's buffer limit (the exact size may still fit)."""
        bucketed = launch.bucket(n)
        if 4 * bucketed <= self.capabilities.limits["max_storage_buffer_range"]:
            return bucketed
        return n

    def upload_quantized(self, value: Any) -> DeviceQuantized:
        """Put a block-quantized weight (`openinfer_jax.ops.quantized.QuantizedArray`) on the
        device as it is stored: its codes, scales and offsets, never expanded.

        Raises:
            BackendError: an allocation failure.
        """
        layout = value.layout
        numel = int(np.prod(value.shape, dtype=np.int64))
        blocks = numel // layout.block_size
        codes = self._upload_raw(np.asarray(value.quants), layout.data_dtype, (numel,))
        scales = self._upload_raw(np.asarray(value.scales), layout.scale_dtype, (blocks,))
        offsets = None
        if value.offsets is not None:
            offsets = self._upload_raw(np.asarray(value.offsets), layout.scale_dtype, (blocks,))
        return DeviceQuantized(layout, tuple(value.shape), codes, scales, offsets)

    def _upload_raw(self, plane: np.ndarray, dtype: DType, shape: tuple[int, ...]) -> DeviceTensor:
        """A device tensor of `dtype` whose words are `plane`'s bytes (already in the layout)."""
        raw = np.ascontiguousarray(plane).reshape(-1).view(np.uint8)
        words = np.zeros(storage_words(dtype, int(np.prod(shape, dtype=np.int64))), np.uint32)
        words.view(np.uint8)[: raw.size] = raw
        return self._upload_words(words, dtype, shape)

    def empty(self, dtype: DType, shape: Sequence[int]) -> DeviceTensor:
        """A new device tensor of `shape` whose contents are undefined until written."""
        shape = tuple(int(d) for d in shape)
        return self._tensor(dtype, shape, storage_words(dtype, math.prod(shape)))

    def download(self, tensor: DeviceTensor) -> np.ndarray:
        """Copy a device tensor back: the simulator representation (packed -> int8/uint8)."""
        self._check_own(tensor)
        sync = self._sync_op(tensor, to_device=False)
        if self._open is not None:
            # The copy ends the open batch (kp records its compute -> transfer -> host
            # barriers): one submission for the chain and its read-back.
            ops, refs = self._open
            ops.append(sync)
            refs.append((sync, [tensor]))
            self._wait()
        else:
            self._wait()
            self._eval(self._manager.sequence().record(sync), "download")
        return decode_words(
            np.array(tensor.handle.data(), dtype=np.uint32), tensor.dtype, tensor.shape
        )

    def begin_step(self) -> None:
        """Mark the start of a step: the k-th allocation of every step is one site, so a
        step that repeats gets back the buffers of the step before (and their pipelines).

        Work of the step before that nothing has read back yet is submitted and waited for
        here: until then its batch holds every tensor it binds, and the step would get new
        buffers (and build new pipelines) instead of those of the step before.
        """
        if self._open is not None or self._pending:
            self._wait()
        self._site, self._upload_site = 0, -1

    def sync(self) -> None:
        """Wait until every submitted dispatch has finished."""
        self._wait()

    def write_slice(self, dst: DeviceTensor, offset: int, src: DeviceTensor) -> None:
        """Copy all of `src` into `dst` at flat element `offset`, on the device.

        For cache tables: appending a row is ``write_slice(table, row * row_numel, row)``.

        Raises:
            BackendError: dtypes differ or the slice does not fit.
        """
        self._check_own(dst, src)
        if src.dtype is not dst.dtype:
            raise BackendError(
                f"write_slice: source is {src.dtype.short}, destination {dst.dtype.short}"
            )
        if offset < 0 or offset + src.numel > dst.numel:
            raise BackendError(
                f"write_slice: {src.numel} elements at offset {offset} do not fit in a tensor "
                f"of {dst.numel} elements"
            )
        if src.numel:
            self._launch(kernels.copy_kernel(src.dtype, 0, offset, src.numel), [src, dst])

    def read_slice(
        self, src: DeviceTensor, start: int, length: int, shape: Sequence[int] | None = None
    ) -> DeviceTensor:
        """A new device tensor holding flat elements ``start .. start+length`` of `src`.

        `shape` (default ``(length,)``) must hold `length` elements.

        Raises:
            BackendError: the range leaves the tensor, or `shape` does not match `length`.
        """
        self._check_own(src)
        out_shape = (length,) if shape is None else tuple(int(d) for d in shape)
        if math.prod(out_shape) != length:
            raise BackendError(f"read_slice: shape {out_shape} does not hold {length} elements")
        if start < 0 or length < 0 or start + length > src.numel:
            raise BackendError(
                f"read_slice: elements {start}..{start + length} are outside a tensor of "
                f"{src.numel} elements"
            )
        out = self.empty(src.dtype, out_shape)
        if length:
            self._launch(kernels.copy_kernel(src.dtype, start, 0, length), [src, out])
        return out

    # ---- ops -------------------------------------------------------------------------------------
    def supports(
        self,
        op_name: str,
        in_dtypes: Sequence[DType],
        params: Mapping[str, Any],
        quantized: Sequence[bool] = (),
    ) -> bool | str:
        """True if `op_name` runs on this device for these dtypes/params, else the reason.

        The reason is meant for the simulator's trace when it falls back to the CPU
        (for example a device without ``shaderInt64`` and an i64 input). `quantized` marks
        the inputs that are block-quantized weights (vk/quant_kernels.py).
        """
        for index, flag in enumerate(quantized):
            if flag:
                reason = quantized_reason(op_name, index, params)
                return True if reason is None else reason
        try:
            self._select(op_name, list(in_dtypes), params)
        except OpenInferError as exc:
            return str(exc)
        return True

    def _select(
        self, op_name: str, in_dtypes: list[DType], params: Mapping[str, Any]
    ) -> selection.Selection:
        """The call as `selection.select` accepts it on this device.

        Raises:
            BackendError: unknown op, or the reason it cannot run here.
            GraphValidationError: (`OpCheckError`) params or dtypes break the op's rules.
        """

        # The simulator passes the same (cached) params dict for a node every step: found by
        # identity first, without hashing the params (held here, so the id stays theirs).
        dtypes = tuple(in_dtypes)
        memo = self._by_params.get(id(params))
        if memo is not None and memo[0] is params and memo[1] == op_name and memo[2] == dtypes:
            chosen = memo[3]
        else:
            chosen = self._select_keyed(op_name, in_dtypes, params)
            if len(self._by_params) >= _PLAN_CACHE:
                self._by_params.clear()
            self._by_params[id(params)] = (params, op_name, dtypes, chosen)
        if isinstance(chosen, str):
            raise BackendError(chosen if chosen.startswith(op_name) else f"{op_name}: {chosen}")
        return chosen

    def _select_keyed(
        self, op_name: str, in_dtypes: list[DType], params: Mapping[str, Any]
    ) -> selection.Selection | str:
        """`selection.select` on this device, cached by the call's value (op, dtypes, params)."""
        from openinfer_jax.ops import registry  # lazy: importing ops loads JAX

        key = _call_key(op_name, in_dtypes, params)
        chosen = self._selections.get(key) if key is not None else None
        if chosen is None:
            if registry.get(op_name) is None:
                raise BackendError(f"unknown op {op_name!r}")

            def missing(feature: str) -> str:
                return (f"{op_name}: device {self.device_name} lacks "
                        f"{_FEATURE_NAMES[feature]}, needed for this call's dtypes; this node "
                        "runs on the CPU")  # fmt: skip

            # Raises OpCheckError for a bad call (not cached: the error is raised anew).
            chosen = selection.select(op_name, in_dtypes, params, self._features, missing)
            if key is not None:
                if len(self._selections) >= _PLAN_CACHE:
                    self._selections.clear()
                self._selections[key] = chosen
        return chosen

    def run(
        self,
        op_name: str,
        inputs: Sequence[DeviceTensor],
        params: Mapping[str, Any],
        out_dtype: DType,
        out_shape: Sequence[int],
        *,
        out: DeviceTensor | None = None,
    ) -> DeviceTensor:
        """Dispatch `op_name` on device tensors; returns the output (still on the device).

        `out` writes into an existing tensor instead of a new one: in-place when it is one
        of `inputs` (allowed only for ops whose declaration permits in-place writes).
        Without `out`, a `reshape` returns a view of its input's buffer (`DeviceTensor.view`,
        no dispatch): a later write into that input with `out=` shows through the view.

        Raises:
            BackendError: unsupported op/dtypes/capability (see `supports`), an output
                dtype/shape that disagrees with the registry, or a device failure.
            GraphValidationError: (`OpCheckError`) params or dtypes break the op's rules.
        """
        if DeviceQuantized in map(type, inputs):  # (no subclasses; a C-level scan)
            return self._run_quantized(op_name, inputs, params, out_dtype, out_shape)
        call = None
        if out is None:
            # The simulator passes a node's cached params dict every step: a call seen
            # before with these dtypes and shapes passed its checks and has its plan.
            call = (op_name, id(params), out_dtype, tuple(out_shape),
                    tuple([t.shape for t in inputs]), tuple([t.dtype for t in inputs]))  # fmt: skip
            known = self._calls.get(call)
            if known is not None and known[0] is params:
                return self._result(known[1], inputs, out_dtype, known[2], known[3])
        self._check_own(*inputs)
        in_dtypes = [t.dtype for t in inputs]
        chosen = self._select(op_name, in_dtypes, params)
        opdef, expected = chosen.opdef, chosen.out
        in_shapes = tuple(t.shape for t in inputs)
        shape = self._output_shape(chosen, in_shapes)
        out_shape = tuple(int(d) for d in out_shape)
        if expected is not out_dtype or shape != out_shape:
            raise BackendError(
                f"{op_name}: asked for {out_dtype.short}{list(out_shape)}, but the op gives "
                f"{expected.short}{list(shape)} for these inputs"
            )
        if out is not None:
            self._check_own(out)
            if out.dtype is not out_dtype or out.shape != out_shape:
                raise BackendError(
                    f"{op_name}: output tensor is {out.dtype.short}{list(out.shape)}, "
                    f"expected {out_dtype.short}{list(out_shape)}"
                )
            if any(out is t for t in inputs) and not opdef.inplace_ok:
                raise BackendError(f"op {op_name} does not support inplace writes")
        if call is not None:
            plan: nn_kernels.NnPlan | str | None = None  # None: an empty result
            if op_name == "reshape" and inputs[0].dtype is out_dtype:
                plan = "view"  # the same row-major words: no dispatch
            elif math.prod(out_shape):
                plan = self._op_plan(chosen, in_shapes, out_shape)
            if len(self._calls) >= _PLAN_CACHE:
                self._calls.clear()
            words = self._result_words(storage_words(out_dtype, math.prod(out_shape)))
            self._calls[call] = (params, plan, out_shape, words)
            return self._result(plan, inputs, out_dtype, out_shape, words)
        assert out is not None
        if math.prod(out_shape) == 0:
            return out
        self._run_plan(self._op_plan(chosen, in_shapes, out_shape, out in inputs), inputs, out)
        return out

    def _result(
        self,
        plan: nn_kernels.NnPlan | str | None,
        inputs: Sequence[DeviceTensor],
        out_dtype: DType,
        out_shape: tuple[int, ...],
        words: int,
    ) -> DeviceTensor:
        """A new result of a checked call: a view of the input (a reshape: results are never
        written in place), an empty tensor, or the plan's dispatches into a new tensor of
        `words` words (its bucketed size, kept with the call)."""
        if isinstance(plan, str):
            return inputs[0].view(out_dtype, out_shape)
        target = self._tensor(out_dtype, out_shape, words, sized=True)
        if plan is not None:
            self._run_plan(plan, inputs, target)  # type: ignore[arg-type]
        return target

    def _output_shape(
        self, chosen: selection.Selection, in_shapes: tuple[tuple[int, ...], ...]
    ) -> tuple[int, ...]:
        """The registry's output shape of a selected call (kept per selection and shapes)."""
        key = (id(chosen), in_shapes)
        cached = self._shapes.get(key)
        if cached is not None and cached[0] is chosen:
            return cached[1]
        shape = tuple(chosen.opdef.output_shape(list(in_shapes), chosen.params))
        if len(self._shapes) >= _PLAN_CACHE:
            self._shapes.clear()
        self._shapes[key] = (chosen, shape)
        return shape

    def _run_quantized(
        self,
        op_name: str,
        inputs: Sequence[Any],
        params: Mapping[str, Any],
        out_dtype: DType,
        out_shape: Sequence[int],
    ) -> DeviceTensor:
        """`run` with a block-quantized weight among the inputs (vk/quant_kernels.py)."""
        from openinfer_jax.ops import registry

        opdef = registry.get(op_name)
        if opdef is None:
            raise BackendError(f"unknown op {op_name!r}")
        resolved = opdef.resolve_params(params)
        shape = opdef.output_shape([tuple(t.shape) for t in inputs], resolved)
        out_shape = tuple(int(d) for d in out_shape)
        if out_dtype is not DType.F32 or shape != out_shape:
            raise BackendError(
                f"{op_name}: asked for {out_dtype.short}{list(out_shape)}, but the op gives "
                f"f32{list(shape)} for these inputs"
            )
        kernel, bound = quant_kernel(op_name, inputs, resolved, out_shape)
        self._check_own(*bound)
        target = self.empty(DType.F32, out_shape)
        if math.prod(out_shape):
            self._launch(kernel, [*bound, target])
        return target

    def _op_plan(
        self, chosen: selection.Selection, in_shapes: Sequence[tuple[int, ...]],
        out_shape: tuple[int, ...], inplace: bool = False,
    ) -> nn_kernels.NnPlan:  # fmt: skip
        """The dispatches of a call at these shapes; plans are pure functions of their
        arguments, so they are kept (the same kernels every step)."""
        key = (id(chosen), tuple(in_shapes), out_shape, inplace, self.matmul_tiles,
               self.split_attention)  # fmt: skip
        cached = self._plans.get(key)
        if cached is not None and cached[0] is chosen:
            return cached[1]
        plan = selection.plan(chosen, in_shapes, out_shape, tiles=self.matmul_tiles,
                              inplace=inplace, shared_memory=self._shared_memory,
                              split_attention=self.split_attention)  # fmt: skip
        if len(self._plans) >= _PLAN_CACHE:
            self._plans.clear()
        self._plans[key] = (chosen, plan)
        return plan

    @property
    def _shared_memory(self) -> int:
        """Compute shared memory per work group in bytes (the Vulkan minimum if unknown)."""
        return int(self.capabilities.limits.get("max_compute_shared_memory_size", 16384))

    def _run_plan(
        self, plan: nn_kernels.NnPlan, inputs: Sequence[DeviceTensor], target: DeviceTensor
    ) -> None:
        """Allocate a plan's scratch tensors and constants, then launch its dispatches.

        Raises:
            BackendError: a dispatch binds more storage buffers than the device allows per
                stage (checked before anything is launched, so the node can fall back).
        """
        if self._checked.get(id(plan)) is not plan:  # a cached plan is checked once
            limit = self.capabilities.limits.get("max_per_stage_storage_buffers", 0)
            widest = max(len(d.bindings) for d in plan.dispatches)
            if limit and widest > limit:
                raise BackendError(
                    f"{plan.dispatches[0].kernel.label} binds {widest} storage buffers; "
                    f"{self.device_name} allows {limit} per shader stage; this node runs on the CPU"
                )
            if len(self._checked) >= _PLAN_CACHE:
                self._checked.clear()
            self._checked[id(plan)] = plan
        scratch = [self.empty(dtype, shape) for dtype, shape in plan.scratch]
        constants = [self._constant(dtype, values) for dtype, values in plan.constants]
        if self._tape is not None:
            self._tape.keep += constants
        pools = {"input": list(inputs), "output": [target], "scratch": scratch,
                 "constant": constants}  # fmt: skip
        for dispatch in plan.dispatches:
            bound = [pools[b.kind][b.index] for b in dispatch.bindings]
            self._launch(dispatch.kernel, bound)

    def _constant(self, dtype: DType, values: np.ndarray) -> DeviceTensor:
        """A device copy of a small host constant (rope frequencies), uploaded once."""
        key = (dtype, values.shape, values.tobytes())
        cached = self._constants.get(key)
        if cached is None:
            if len(self._constants) >= 64:  # bound the cache; constants are tiny
                self._constants.clear()
            cached = self._constants[key] = self.upload(values, dtype)
        return cached

    def precompile(
        self,
        calls: Sequence[tuple[str, Sequence[DType], Sequence[Sequence[int]], Mapping[str, Any]]],
    ) -> int:
        """Compile the kernels of many op calls at once; returns how many were compiled.

        Each call is ``(op_name, in_dtypes, in_shapes, params)``. Calls that this device
        does not support are skipped (`run` would report them). Kernel sources do not
        depend on shapes, so any representative shapes will do.
        """
        sources = []
        for op_name, in_dtypes, in_shapes, params in calls:
            try:
                chosen = self._select(op_name, list(in_dtypes), params)
                shapes = [tuple(int(d) for d in s) for s in in_shapes]
                out_shape = chosen.opdef.output_shape(shapes, chosen.params)
                plan = self._op_plan(chosen, shapes, tuple(out_shape))
                sources += [d.kernel.source for d in plan.dispatches]
            except OpenInferError:
                continue
        return compile_many(sources)

    # ---- dispatch ----------------------------------------------------------------------------------
    def _check_own(self, *tensors: DeviceTensor) -> None:
        for t in tensors:
            if not isinstance(t, DeviceTensor):
                raise BackendError(
                    f"expected a DeviceTensor from this backend, got {type(t).__name__}"
                )

    def _algorithm(self, kernel: kernels.Kernel, tensors: Sequence[DeviceTensor]) -> Any:
        """The `_Pipeline` for `kernel` bound to these tensors' buffers: reused when the same
        buffers (a step that repeats gets them back from the pool, vk/reuse.py), else built.
        """
        # A plan's kernels are the same objects every step (plans are cached): their SPIR-V
        # and grid are looked up by identity (the entry holds the kernel: its id stays its).
        known = self._kernels.get(id(kernel))
        if known is None or known[0] is not kernel:
            spirv, digest = self._shader(kernel)
            # kp fixes an algorithm's grid: a flat kernel gets a bucketed one (its extra
            # groups return at once), so a count that grows every step keeps its pipeline.
            grid = launch.bucket_grid(kernel.grid) if kernel.flat else kernel.grid
            if len(self._kernels) >= _PLAN_CACHE:
                self._kernels.clear()
            known = self._kernels[id(kernel)] = (kernel, spirv, digest, grid)
        _kernel, spirv, digest, grid = known
        buffers = tuple([t.buffer for t in tensors])
        key = (digest, buffers, grid, kernel.push.size)

        def make() -> _Pipeline:
            handles = [t.handle for t in tensors]
            return _Pipeline(self._manager.algorithm(handles, spirv, list(grid), [], kernel.push))

        return self._pipelines.get(key, buffers, make)

    def _shader(self, kernel: kernels.Kernel) -> tuple[bytes, bytes]:
        """SPIR-V of a kernel source and its digest (looked up by the source string)."""
        found = self._spirv.get(kernel.source)
        if found is None:
            spirv = compile_glsl(kernel.source, kernel.label)
            if len(self._spirv) >= _PLAN_CACHE:
                self._spirv.clear()
            found = self._spirv[kernel.source] = (spirv, hashlib.sha1(spirv).digest())
        return found

    def _launch(self, kernel: kernels.Kernel, tensors: Sequence[DeviceTensor]) -> None:
        kp = self._kp
        try:
            pipeline = self._algorithm(kernel, tensors)
            if self.batching:
                self._record_batched(pipeline, kernel, tensors)
                return
            self._wait()
            # A recorded sequence is resubmitted as is when the push constants match too.
            push = kernel.push.tobytes()
            seq = pipeline.sequences.get(push)
            if seq is None:
                seq = self._manager.sequence().record(kp.OpAlgoDispatch(pipeline.algo, kernel.push))
                if len(pipeline.sequences) < 8:
                    pipeline.sequences[push] = seq
            seq.eval_async()
        except RuntimeError as exc:
            raise BackendError(
                f"dispatch of {kernel.label} failed on {self.device_name}: {exc}"
            ) from None
        # Keep the sequence, algorithm and buffers alive until the work has finished.
        self._pending.append((seq, pipeline, tensors))
        self.dispatch_count += 1
        self.submit_count += 1

    def _record_batched(
        self, pipeline: _Pipeline, kernel: kernels.Kernel, tensors: Sequence[DeviceTensor]
    ) -> None:
        """Append a dispatch to the open sequence, after a barrier on its buffers.

        The barrier (compute writes/reads before -> compute reads/writes after, on the
        buffers this dispatch binds) orders it after every earlier dispatch that wrote or
        read them, so a chain of ops is one submission. Needs kp's OpShaderBarrier.
        """
        batch, refs = self._batch()
        push = kernel.push.tobytes()
        ops = pipeline.ops.get(push)
        if ops is None:
            kp = self._kp
            # The pipeline binds these tensors' buffers, so the barrier's buffers are fixed too.
            ops = (kp.OpShaderBarrier([t.handle for t in tensors]),
                   kp.OpAlgoDispatch(pipeline.algo, kernel.push))  # fmt: skip
            if len(pipeline.ops) < 8:
                pipeline.ops[push] = ops
        batch += ops
        refs.append((pipeline.algo, tensors))
        self.dispatch_count += 1
        tape = self._tape
        if tape is not None:
            tape.ops += ops
            tape.dispatches += 1
        if len(refs) >= _MAX_BATCH:
            self._flush()

    # ---- tapes: a recorded run of dispatches, replayed in one call -------------------------------
    def start_tape(self) -> bool:
        """Start recording the dispatches and result allocations that follow into a `Tape`
        (vk/reuse.py); False (nothing recorded) without batching, or while recording."""
        if not self.batching or self._tape is not None:
            return False
        self._tape = Tape()
        return True

    def stop_tape(self) -> Tape:
        """The tape recorded since `start_tape`; recording stops. Its `made` still holds the
        result tensors (the caller matches its values against them, then sets it to None).

        Raises:
            BackendError: no tape is being recorded.
        """
        tape, self._tape = self._tape, None
        if tape is None:
            raise BackendError("stop_tape without start_tape")
        return tape

    def replay_tape(self, tape: Tape) -> list[DeviceTensor] | None:
        """Run a recorded tape again: its results get the buffers they had (taken back from
        the pool) and its kp operations are appended to the open batch, as recorded.

        The operations read whatever their input buffers hold now: the caller checks that
        its inputs are in the recorded buffers, with the recorded shapes and dtypes. Returns
        the new result tensors in the tape's allocation order, or None, with nothing changed,
        when one of the buffers is not free (a live tensor holds it, or the pool let it go).
        """
        pool = self._pool
        if not pool.all_free(tape.allocs):
            return None
        take = pool.take_buffer
        made = [DeviceTensor(dtype, shape, take(words, buffer), words, buffer=buffer, pool=pool)
                for words, buffer, dtype, shape in tape.allocs]  # fmt: skip
        # The allocations after these keep their sites (the pool's memory of these sites is
        # the recording walk's, which took these buffers).
        self._site += len(made)
        ops, refs = self._batch()
        ops += tape.ops
        refs.append((tape, made))  # until the batch has finished
        self.dispatch_count += tape.dispatches
        if len(ops) >= 2 * _MAX_BATCH:
            self._flush()
        return made

    def _batch(self) -> tuple[list[Any], list[Any]]:
        """The open batch (kp operations, references it keeps alive), opened if needed."""
        if self._open is None:
            self._open = ([], [])
        return self._open

    def _sync_op(self, tensor: DeviceTensor, to_device: bool) -> Any:
        """The host -> device (or device -> host) copy of a tensor's buffer: one kp operation
        per pooled buffer, so a step that repeats records the same operations (see _flush).
        It copies whatever the buffer's host side holds when it runs."""
        key = (to_device, tensor.buffer)
        found = self._syncs.get(key)
        if found is None or found[0] is not tensor.handle:
            kp = self._kp
            make = kp.OpTensorSyncDevice if to_device else kp.OpTensorSyncLocal
            if len(self._syncs) >= _PLAN_CACHE:
                self._syncs.clear()
            found = self._syncs[key] = (tensor.handle, make([tensor.handle]))
        return found[1]

    def _flush(self) -> None:
        """Submit the open batch, if any (asynchronously).

        A batch whose operations are the very ones of a batch recorded before (a step that
        repeats: the same pipelines, pushes and buffers) submits that recorded command
        buffer again instead of recording a new one (kp runs a recorded sequence as often
        as it is evaluated); the operations carry everything the commands depend on (a
        dispatch's push constants, a copy's buffer), so the same operations are the same
        commands. A recorded batch still running is not reused.
        """
        if self._open is None:
            return
        ops, refs = self._open
        self._open = None
        key = tuple(map(id, ops))  # the entry keeps its operations alive: ids stay theirs
        found = self._replays.get(key)
        try:
            if found is not None and not found[0].is_running():
                seq = found[0]
                self._replays.move_to_end(key)
                self.replayed += 1
            else:
                seq = self._manager.sequence()
                for op in ops:
                    seq.record(op)
                self._replays[key] = (seq, ops)
                if len(self._replays) > _REPLAYS:
                    self._replays.popitem(last=False)
            seq.eval_async()
        except RuntimeError as exc:
            raise BackendError(f"submitting {len(refs)} dispatches failed: {exc}") from None
        self._pending.append((seq, refs))
        self.submit_count += 1

    def _wait(self) -> None:
        self._flush()
        pending, self._pending = self._pending, []
        for seq, *_ in pending:
            try:
                seq.eval_await()
            except RuntimeError as exc:
                raise BackendError(f"waiting for the device failed: {exc}") from None

    def _eval(self, seq: Any, what: str) -> None:
        try:
            seq.eval()
        except RuntimeError as exc:
            raise BackendError(f"{what} failed on {self.device_name}: {exc}") from None

    # ==== cache-table support (issue 7: tables resident on the device) ==========================
    # Added for openinfer_jax/sim/vulkan_tables.py; device-side copies and zero fills that a
    # growable table buffer needs, built on the existing copy/fill/movement kernels.
    def copy_elements(
        self, src: DeviceTensor, src_offset: int, dst: DeviceTensor, dst_offset: int, count: int
    ) -> None:
        """Copy flat elements ``src_offset .. +count`` of `src` to `dst` at `dst_offset`.

        `src` and `dst` may be the same tensor only if the ranges do not overlap (one
        dispatch reads and writes concurrently).

        Raises:
            BackendError: dtypes differ, a range leaves its tensor, or ranges overlap.
        """
        self._check_own(src, dst)
        if src.dtype is not dst.dtype:
            raise BackendError(
                f"copy_elements: source is {src.dtype.short}, destination {dst.dtype.short}"
            )
        for what, tensor, offset in (("source", src, src_offset), ("destination", dst, dst_offset)):
            if offset < 0 or count < 0 or offset + count > tensor.numel:
                raise BackendError(
                    f"copy_elements: {what} elements {offset}..{offset + count} are outside a "
                    f"tensor of {tensor.numel} elements"
                )
        if src is dst and src_offset < dst_offset + count and dst_offset < src_offset + count:
            raise BackendError("copy_elements: overlapping ranges within one tensor")
        if count:
            self._launch(kernels.copy_kernel(src.dtype, src_offset, dst_offset, count), [src, dst])

    def zero_fill(self, dst: DeviceTensor) -> None:
        """Set every bit of `dst`'s buffer to zero, on the device (one dispatch)."""
        self._check_own(dst)
        # All-zero words are the zero of every dtype, so the buffer is filled as u32 words:
        # no 64-bit shader capability is needed, whatever `dst` holds.
        words = dst.view(DType.U32, (dst.words,))
        self._launch(kernels.fill_kernel(DType.U32, (dst.words,), 0), [words])

    def read_strided(
        self, src: DeviceTensor, offset: int, strides: Sequence[int], shape: Sequence[int]
    ) -> DeviceTensor:
        """A new tensor of `shape`: ``out[c] = src[offset + sum(c_d * strides_d)]`` (one dispatch).

        For a block of a larger buffer (a table slice that is not contiguous).

        Raises:
            BackendError: a rank too deep for the gather kernel after merging contiguous
                dims, or an element outside `src`.
        """
        self._check_own(src)
        shape = tuple(int(d) for d in shape)
        strides = [int(s) for s in strides]
        if len(strides) != len(shape):
            raise BackendError(
                f"read_strided: {len(strides)} strides for a rank-{len(shape)} shape"
            )
        last = offset + sum((d - 1) * s for d, s in zip(shape, strides) if d > 0)
        if math.prod(shape) and (offset < 0 or last >= src.numel or min(strides, default=0) < 0):
            raise BackendError(
                f"read_strided: the block reaches element {last}, outside a tensor of "
                f"{src.numel} elements"
            )
        out = self.empty(src.dtype, shape)
        if not math.prod(shape):
            return out
        dtype, view_src, view_out = src.dtype, src, out
        if src.dtype.bits == 64:
            # 64-bit elements move as pairs of u32 words: no shaderInt64/Float64 needed.
            dtype = DType.U32
            shape, strides, offset = (*shape, 2), [2 * s for s in strides] + [1], 2 * offset
            view_src = src.view(DType.U32, (src.words,))
            view_out = out.view(DType.U32, shape)
        kernel = kernels.movement_kernel("slice", dtype, shape, strides, offset)
        self._launch(kernel, [view_src, view_out])
        return out
