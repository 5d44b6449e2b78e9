"""How the C target's dense kernels are built for one device: threads and cache blocking.

Read from optional keys of the device JSON (``preferences.threads``, ``preferences.gemm_block``,
``preferences.gemv_max_rows``, ``limits.max_threads``); `openinfer_jax.emit.device` checks
them when the JSON is loaded, `openinfer_jax.emit.c_dense` renders with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from openinfer_jax.core.errors import SynthesisError

__all__ = ["MAX_THREADS", "DenseOptions"]

#: The most threads any program may ask for (the pool's static worker table).
MAX_THREADS = 64

# Runtime constants mirrored from oi_gemm.h (sizes of the per-thread pack buffer).
_MR = 6
_NR_MAX = 32  # 2 vectors of 16 lanes (AVX-512), the widest OI_NR of any build


@dataclass(frozen=True)
class DenseOptions:
    """How the dense kernels are built for one device.

    `threads`: the most threads the program uses (``preferences.threads``, default 1; at run
    time ``OI_THREADS`` may ask for fewer); 1 emits no thread code at all. `kc`/`nc`: the
    GEMM's cache block of B (``preferences.gemm_block``, default 256 x 256 floats, 256 KiB
    per thread: sized for a 512 KiB-1 MiB L2). `gemv_max_rows`: products with W [N, K] and
    fewer rows than this take the GEMV kernel (``preferences.gemv_max_rows``, default 4).
    `prepack`: a model weight the GEMM reads is packed once, on first use, into its panel
    layout (``preferences.prepack_weights``, default true; false saves that copy's memory and
    packs on every call instead).
    """

    threads: int = 1
    kc: int = 256
    nc: int = 256
    gemv_max_rows: int = 4
    prepack: bool = True

    @classmethod
    def from_preferences(
        cls, prefs: Mapping[str, Any], limits: Mapping[str, Any], source: str = "device JSON"
    ) -> DenseOptions:
        """Read the optional keys of a device JSON's ``preferences`` (checked against
        ``limits.max_threads`` when given).

        Raises:
            SynthesisError: a value of the wrong kind, or more threads than the device allows,
                naming the JSON field.
        """

        def positive(key: str, value: Any) -> int:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SynthesisError(
                    f"{source}: preferences.{key} must be an int >= 1, got {value!r}"
                )
            return value

        threads = positive("threads", prefs.get("threads", 1))
        allowed = limits.get("max_threads")
        if allowed is not None and (
            not isinstance(allowed, int) or isinstance(allowed, bool) or allowed < 1
        ):
            raise SynthesisError(
                f"{source}: limits.max_threads must be an int >= 1, got {allowed!r}"
            )
        if allowed is not None and threads > allowed:
            raise SynthesisError(
                f"{source}: preferences.threads is {threads} but limits.max_threads is {allowed}; "
                f"ask for at most {allowed}"
            )
        if threads > MAX_THREADS:
            raise SynthesisError(
                f"{source}: preferences.threads is {threads} but the C runtime supports at most "
                f"{MAX_THREADS} threads"
            )
        block = prefs.get("gemm_block", {"kc": 256, "nc": 256})
        if not isinstance(block, Mapping) or set(block) - {"kc", "nc"}:
            raise SynthesisError(
                f'{source}: preferences.gemm_block must be {{"kc": int, "nc": int}}, got {block!r}'
            )
        kc = positive("gemm_block.kc", block.get("kc", 256))
        nc = positive("gemm_block.nc", block.get("nc", 256))
        if nc % _NR_MAX:
            raise SynthesisError(
                f"{source}: preferences.gemm_block.nc must be a multiple of {_NR_MAX}, got {nc}"
            )
        rows = positive("gemv_max_rows", prefs.get("gemv_max_rows", 4))
        prepack = prefs.get("prepack_weights", True)
        if not isinstance(prepack, bool):
            raise SynthesisError(
                f"{source}: preferences.prepack_weights must be true or false, got {prepack!r}"
            )
        return cls(threads, kc, nc, rows, prepack)

    @property
    def pack_floats(self) -> int:
        """Floats of GEMM scratch per thread (OI_GEMM_PACK_FLOATS)."""
        return self.kc * (self.nc + _NR_MAX) + _MR * self.kc
