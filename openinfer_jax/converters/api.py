"""The library entry points: open any supported checkpoint, plan, and convert it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from openinfer_jax.converters.checkpoint import Checkpoint
from openinfer_jax.converters.flax_reader import is_orbax_dir, open_flax_msgpack, open_orbax
from openinfer_jax.converters.gguf_reader import open_gguf
from openinfer_jax.converters.naming import RenameRule
from openinfer_jax.converters.plan import ConversionPlan, build_plan
from openinfer_jax.converters.safetensors_reader import INDEX_NAME, open_safetensors
from openinfer_jax.converters.write import (
    ConversionReport,
    ProgressHook,
    check_destination,
    write_plan,
)
from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import ConversionError

__all__ = ["FORMATS", "convert", "detect_format", "open_checkpoint", "plan_conversion"]

# Format name -> reader. "flax" is the msgpack file format; "orbax" is a checkpoint directory.
FORMATS: dict[str, Callable[[Path], Checkpoint]] = {
    "safetensors": open_safetensors,
    "flax": open_flax_msgpack,
    "orbax": open_orbax,
    "gguf": open_gguf,
}

_SUFFIXES = {
    ".safetensors": "safetensors",
    ".gguf": "gguf",
    ".msgpack": "flax",
    ".json": "safetensors",
}


def detect_format(src: Path) -> str:
    """Tell the format of `src` from its name, its directory contents or its magic bytes.

    Raises:
        ConversionError: if `src` does not exist or matches no known format.
    """
    if not src.exists():
        raise ConversionError(f"{src}: no such file or directory")
    if src.is_dir():
        if (src / INDEX_NAME).is_file() or any(src.glob("*.safetensors")):
            return "safetensors"
        if is_orbax_dir(src):
            return "orbax"
        for pattern, fmt in (("*.msgpack", "flax"), ("*.gguf", "gguf")):
            found = sorted(src.glob(pattern))
            if len(found) == 1:
                return fmt
        raise ConversionError(
            f"{src}: no safetensors, msgpack, orbax or GGUF checkpoint found in this directory"
        )
    if src.suffix in _SUFFIXES:
        return _SUFFIXES[src.suffix]
    with src.open("rb") as f:
        if f.read(4) == b"GGUF":
            return "gguf"
    raise ConversionError(f"{src}: cannot tell the checkpoint format from the name; pass --format")


def open_checkpoint(src: str | Path, format: str | None = None) -> Checkpoint:
    """Open a checkpoint of any supported format (detected when `format` is None).

    Raises:
        ConversionError: for an unknown format name or any reader error.
    """
    path = Path(src)
    fmt = format or detect_format(path)
    if fmt not in FORMATS:
        raise ConversionError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if path.is_dir() and fmt in ("flax", "gguf"):
        suffix = ".msgpack" if fmt == "flax" else ".gguf"
        found = sorted(path.glob(f"*{suffix}"))
        if len(found) != 1:
            raise ConversionError(f"{path}: expected exactly one {suffix} file, found {len(found)}")
        path = found[0]
    return FORMATS[fmt](path)


def plan_conversion(
    src: str | Path,
    *,
    format: str | None = None,
    dtype: str | DType | None = None,
    rename: Sequence[str | RenameRule] = (),
    pattern: str | None = None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    sizevars: Mapping[str, int] | None = None,
    quantize: Sequence[str] | str | None = None,
    block_size: int = 32,
    keep: Sequence[str] = (),
) -> ConversionPlan:
    """Open `src` and plan its conversion (no tensor data is read). See `build_plan`.

    Raises:
        ConversionError: for any problem found while opening or planning.
    """
    checkpoint = open_checkpoint(src, format)
    try:
        return build_plan(
            checkpoint,
            dtype=dtype,
            rename_rules=rename,
            pattern=pattern,
            include=include,
            exclude=exclude,
            sizevars=sizevars,
            quantize=quantize,
            block_size=block_size,
            keep=keep,
        )
    except BaseException:
        checkpoint.close()
        raise


def convert(
    src: str | Path,
    output: str | Path,
    *,
    format: str | None = None,
    dtype: str | DType | None = None,
    rename: Sequence[str | RenameRule] = (),
    pattern: str | None = None,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    sizevars: Mapping[str, int] | None = None,
    quantize: Sequence[str] | str | None = None,
    block_size: int = 32,
    keep: Sequence[str] = (),
    force: bool = False,
    on_tensor: ProgressHook | None = None,
) -> ConversionReport:
    """Convert the checkpoint at `src` into the `.oinf` file `output`, streaming and atomic.

    GGUF Q8_0/Q4_0/Q4_1 tensors stay packed unless `dtype` asks for floats; `quantize`
    (``"q4_1"``) block-quantizes floating tensors (`report.quant_errors` has the error of
    each). `sizevars` adds or replaces sizevars (``{"B": 2}``); the other options are
    `build_plan`'s.

    Raises:
        ConversionError: for any problem; no file is left at `output` then.
    """
    output = Path(output)
    check_destination(output, force=force)  # before opening the source: a mistake costs nothing
    plan = plan_conversion(
        src,
        format=format,
        dtype=dtype,
        rename=rename,
        pattern=pattern,
        include=include,
        exclude=exclude,
        sizevars=sizevars,
        quantize=quantize,
        block_size=block_size,
        keep=keep,
    )
    try:
        return write_plan(plan, output, force=force, on_tensor=on_tensor)
    finally:
        plan.checkpoint.close()
