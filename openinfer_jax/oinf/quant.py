"""Quantization parameters of a tensor and their on-disk payload (format v2, docs/oinf.md §Quant).

Payload: ``u32 scheme; u32 scale_mode; u32 zp_mode; u32 reserved; u64 scale_axis;
u64 scale_count; u64 zp_axis; u64 zp_count; f32 scales[scale_count]; i32 zps[zp_count]``,
zero-padded to a multiple of 8.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import OinfFormatError
from openinfer_jax.oinf import spec
from openinfer_jax.oinf.blockquant import SCALE_MODE_BLOCK, BlockQuant, decode_block_quant
from openinfer_jax.oinf.checks import Checker

__all__ = [
    "QuantMode",
    "QuantParams",
    "QuantScale",
    "QuantScheme",
    "QuantZeroPoint",
    "decode_quant",
    "encode_quant",
    "quant_payload_size",
]


class QuantScheme(enum.IntEnum):
    """Quantization scheme code (u32 `scheme`)."""

    SYMMETRIC = 1
    ASYMMETRIC = 2


class QuantMode(enum.IntEnum):
    """Granularity code of scales and zero points (u32 `scale_mode` / `zp_mode`)."""

    NONE = 0  # zero points only
    PER_TENSOR = 1
    PER_CHANNEL = 2


def _as_f32_tuple(values: Sequence[float] | np.ndarray) -> tuple[float, ...]:
    # Stored as f32 on disk, so keep the f32-rounded value: a round trip then compares equal.
    return tuple(float(v) for v in np.asarray(values, dtype=np.float32).reshape(-1))


def _as_i32_tuple(values: Sequence[int] | np.ndarray) -> tuple[int, ...]:
    arr = np.asarray(values).reshape(-1)
    if arr.size and (arr.dtype.kind not in "iu" or arr.min() < -(2**31) or arr.max() > 2**31 - 1):
        raise OinfFormatError("zero points must be integers in the i32 range")
    return tuple(int(v) for v in arr)


@dataclass(frozen=True)
class QuantScale:
    """Scales: one per tensor, or one per index of `axis` (per channel)."""

    mode: QuantMode
    values: tuple[float, ...]
    axis: int = 0

    @classmethod
    def per_tensor(cls, value: float) -> QuantScale:
        """One scale for the whole tensor."""
        return cls(QuantMode.PER_TENSOR, _as_f32_tuple([value]), 0)

    @classmethod
    def per_channel(cls, axis: int, values: Sequence[float] | np.ndarray) -> QuantScale:
        """One scale per index along `axis` (len(values) must equal dims[axis])."""
        return cls(QuantMode.PER_CHANNEL, _as_f32_tuple(values), int(axis))


@dataclass(frozen=True)
class QuantZeroPoint:
    """Zero points (i32): one per tensor, or one per index of `axis`."""

    mode: QuantMode
    values: tuple[int, ...]
    axis: int = 0

    @classmethod
    def per_tensor(cls, value: int) -> QuantZeroPoint:
        """One zero point for the whole tensor."""
        return cls(QuantMode.PER_TENSOR, _as_i32_tuple([value]), 0)

    @classmethod
    def per_channel(cls, axis: int, values: Sequence[int] | np.ndarray) -> QuantZeroPoint:
        """One zero point per index along `axis`."""
        return cls(QuantMode.PER_CHANNEL, _as_i32_tuple(values), int(axis))


@dataclass(frozen=True)
class QuantParams:
    """How a tensor's integers map to reals: ``real = scale * (q - zero_point)``."""

    scheme: QuantScheme
    scale: QuantScale
    zero_point: QuantZeroPoint | None = field(default=None)

    def __post_init__(self) -> None:
        # Accept "symmetric"/"asymmetric" or the codes 1/2 as well as the enum.
        scheme = self.scheme
        try:
            if isinstance(scheme, str):
                scheme = QuantScheme[scheme.strip().upper()]
            object.__setattr__(self, "scheme", QuantScheme(scheme))
        except (KeyError, ValueError):
            raise OinfFormatError(
                f"quant scheme must be 'symmetric' or 'asymmetric', got {self.scheme!r}"
            ) from None
        if not isinstance(self.scale, QuantScale):
            raise OinfFormatError(
                f"quant scale must be a QuantScale, got {type(self.scale).__name__}"
            )
        if self.zero_point is not None and not isinstance(self.zero_point, QuantZeroPoint):
            raise OinfFormatError(
                f"quant zero_point must be a QuantZeroPoint, got {type(self.zero_point).__name__}"
            )

    @classmethod
    def symmetric(cls, scale: QuantScale) -> QuantParams:
        """Symmetric quantization (no zero point)."""
        return cls(QuantScheme.SYMMETRIC, scale, None)

    @classmethod
    def asymmetric(cls, scale: QuantScale, zero_point: QuantZeroPoint | None = None) -> QuantParams:
        """Asymmetric quantization with an optional zero point."""
        return cls(QuantScheme.ASYMMETRIC, scale, zero_point)

    def problems(self, dims: Sequence[int]) -> list[str]:
        """The R30/R31 rules this object breaks for a tensor of shape `dims` ([] when fine)."""
        found: list[str] = []
        ndim = len(dims)
        scale, zp = self.scale, self.zero_point
        if scale.mode is QuantMode.PER_TENSOR:
            if scale.axis != 0 or len(scale.values) != 1:
                found.append(
                    f"a per-tensor scale needs axis 0 and 1 value, got axis {scale.axis} and {len(scale.values)}"
                )
        elif scale.mode is QuantMode.PER_CHANNEL:
            if not 0 <= scale.axis < ndim:
                found.append(
                    f"per-channel scale axis {scale.axis} is outside the tensor's {ndim} dims"
                )
            elif len(scale.values) != dims[scale.axis]:
                found.append(
                    f"per-channel scale has {len(scale.values)} values, dims[{scale.axis}] is {dims[scale.axis]}"
                )
        else:
            found.append(f"scale mode must be per-tensor or per-channel, got {scale.mode!r}")
        if zp is not None:
            if self.scheme is QuantScheme.SYMMETRIC:
                found.append("symmetric quantization has no zero point; use asymmetric or drop it")
            if zp.mode is not scale.mode:
                found.append(
                    f"zero point mode {zp.mode.name} must match scale mode {scale.mode.name}"
                )
            elif zp.mode is QuantMode.PER_TENSOR and (zp.axis != 0 or len(zp.values) != 1):
                found.append("a per-tensor zero point needs axis 0 and 1 value")
            elif zp.mode is QuantMode.PER_CHANNEL:
                if zp.axis != scale.axis:
                    found.append(f"zero point axis {zp.axis} must equal scale axis {scale.axis}")
                elif 0 <= zp.axis < ndim and len(zp.values) != dims[zp.axis]:
                    found.append(
                        f"per-channel zero point has {len(zp.values)} values, dims[{zp.axis}] is {dims[zp.axis]}"
                    )
        return found

    def describe(self) -> str:
        """A short human description, e.g. ``asymmetric per_channel(axis=0, 16 scales) zp per_channel``."""
        scale = self.scale
        text = f"{self.scheme.name.lower()} scale {scale.mode.name.lower()}"
        text += (
            f"(axis={scale.axis}, n={len(scale.values)})"
            if scale.mode is QuantMode.PER_CHANNEL
            else f"={scale.values[0]:.6g}"
        )
        if self.zero_point is not None:
            zp = self.zero_point
            text += f" zp {zp.mode.name.lower()}"
            text += (
                f"(axis={zp.axis}, n={len(zp.values)})"
                if zp.mode is QuantMode.PER_CHANNEL
                else f"={zp.values[0]}"
            )
        return text


def quant_payload_size(scale_count: int, zp_count: int) -> int:
    """Bytes of a quant payload: align8(48 + 4*scale_count + 4*zp_count) (R29)."""
    return spec.align_up(spec.QUANT_FIXED_SIZE + 4 * scale_count + 4 * zp_count)


def encode_quant(quant: QuantParams) -> bytes:
    """The payload bytes of `quant` (validate it with `problems` first)."""
    zp = quant.zero_point
    fixed = spec.QUANT_FIXED.pack(
        int(quant.scheme),
        int(quant.scale.mode),
        int(zp.mode) if zp else int(QuantMode.NONE),
        0,
        quant.scale.axis,
        len(quant.scale.values),
        zp.axis if zp else 0,
        len(zp.values) if zp else 0,
    )
    body = np.asarray(quant.scale.values, dtype="<f4").tobytes()
    if zp:
        body += np.asarray(zp.values, dtype="<i4").tobytes()
    size = quant_payload_size(len(quant.scale.values), len(zp.values) if zp else 0)
    return (fixed + body).ljust(size, b"\x00")


# Over 80 lines on purpose: the quant payload's fields in file order, each check next to
# the field it guards with its rule number, as the reader's other tables are read.
def decode_quant(
    buf: memoryview,
    offset: int,
    nbytes: int,
    dims: Sequence[int],
    checker: Checker,
    field_name: str,
    dtype: DType | None = None,
    has_data: bool = True,
) -> QuantParams | BlockQuant | None:
    """Parse the payload at `buf[offset:offset+nbytes]` (already bounds-checked by R29's offset part).

    A payload with `scale_mode` 3 is a per-block payload (`BlockQuant`, rules R33-R36; it
    needs the tensor's `dtype`). Returns None (after reporting) when the payload breaks a rule.
    """
    if nbytes < spec.QUANT_FIXED_SIZE:
        checker.fail(
            "R29",
            f"quant_nbytes {nbytes} is below the 48-byte fixed part",
            offset=offset,
            field=f"{field_name}.quant_nbytes",
        )
        return None
    fixed = spec.QUANT_FIXED.unpack_from(buf, offset)
    scheme, scale_mode, zp_mode, reserved, scale_axis, scale_count, zp_axis, zp_count = fixed
    if scale_mode == SCALE_MODE_BLOCK and dtype is not None:
        return decode_block_quant(
            buf, offset, nbytes, fixed, dtype, dims, has_data, checker, field_name
        )
    # Counts are checked against nbytes before any array is built (bounded allocation).
    if nbytes != quant_payload_size(scale_count, zp_count):
        checker.fail(
            "R29",
            f"quant_nbytes {nbytes} != align8(48 + 4*{scale_count} + 4*{zp_count})",
            offset=offset,
            field=f"{field_name}.quant_nbytes",
        )
        return None
    bad_codes = []
    if scheme not in QuantScheme._value2member_map_:
        bad_codes.append(f"scheme {scheme}")
    if scale_mode not in (QuantMode.PER_TENSOR, QuantMode.PER_CHANNEL):
        bad_codes.append(f"scale_mode {scale_mode}")
    if zp_mode not in QuantMode._value2member_map_:
        bad_codes.append(f"zp_mode {zp_mode}")
    if reserved != 0:
        bad_codes.append(f"reserved {reserved}")
    if bad_codes:
        checker.fail(
            "R30",
            "bad quant codes: " + ", ".join(bad_codes),
            offset=offset,
            field=f"{field_name}.quant",
        )
        return None
    base = offset + spec.QUANT_FIXED_SIZE
    padding = base + 4 * (scale_count + zp_count)
    if any(buf[padding : offset + nbytes]):  # R37
        checker.fail(
            "R37",
            "quant payload padding bytes are not 0",
            offset=padding,
            field=f"{field_name}.quant",
        )
        return None
    scales = np.frombuffer(buf, dtype="<f4", count=scale_count, offset=base)
    zps = np.frombuffer(buf, dtype="<i4", count=zp_count, offset=base + 4 * scale_count)
    scale = QuantScale(QuantMode(scale_mode), tuple(float(v) for v in scales), int(scale_axis))
    zero_point = None
    if zp_mode != QuantMode.NONE:
        zero_point = QuantZeroPoint(QuantMode(zp_mode), tuple(int(v) for v in zps), int(zp_axis))
    elif zp_axis != 0 or zp_count != 0:
        checker.fail(
            "R31",
            f"zp_mode 0 needs zp_axis 0 and zp_count 0, got {zp_axis} and {zp_count}",
            offset=offset,
            field=f"{field_name}.quant",
        )
        return None
    params = QuantParams(QuantScheme(scheme), scale, zero_point)
    problems = params.problems(dims)
    if problems:
        checker.fail("R31", "; ".join(problems), offset=offset, field=f"{field_name}.quant")
        return None
    return params
