"""Read GGUF files (llama.cpp's format) through the `gguf` package.

Q8_0, Q4_0 and Q4_1 tensors are offered packed (`SourceTensor.load_block`: GGUF's
interleaved blocks split into the `.oinf` codes/scales/offsets planes, docs/oinf.md §5.1,
no dequantization) and dequantized; every other quantized type (the K-quants, Q5_x, the
IQ types...) is dequantized one tensor at a time by `gguf.quants.dequantize` (to f32).
Plain types are taken as they are. GGUF lists dims fastest-first; the reader's arrays are already in
NumPy (row-major) order, so shapes here are ``reversed(tensor.shape)``. llama.cpp's
converter permutes the rows of attn_q/attn_k for its rotary layout; for the llama family
that permutation is undone so that weights and names match the Hugging Face model.

Metadata: every scalar key is kept under its GGUF name (``llama.rope.freq_base``); numeric
arrays become NDARRAY metadata; string arrays (tokenizer tokens and merges) are stored as
one JSON-encoded (ASCII-escaped) string each, since `.oinf` has no string-array type. The architecture's
sizes are also mapped to the Hugging Face sizevar names (table below) so that one graph
serves a model converted from safetensors or from GGUF.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np

from openinfer_jax.converters.checkpoint import Checkpoint, SourceTensor
from openinfer_jax.converters.extras import import_extra
from openinfer_jax.converters.hf_config import check_shapes
from openinfer_jax.core.dtypes import DType
from openinfer_jax.core.errors import ConversionError
from openinfer_jax.oinf.blockquant import BlockLayout, BlockScheme
from openinfer_jax.oinf.quantized import QuantizedTensor

__all__ = [
    "PERMUTED_ARCHITECTURES",
    "SIZEVAR_MAP",
    "open_gguf",
    "split_gguf_blocks",
    "unpermute_rows",
]

# GGUF key (after "<arch>.") -> Hugging Face sizevar name.
SIZEVAR_MAP: dict[str, str] = {
    "block_count": "num_hidden_layers",
    "embedding_length": "hidden_size",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "context_length": "max_position_embeddings",
    "feed_forward_length": "intermediate_size",
    "vocab_size": "vocab_size",
    "attention.key_length": "head_dim",
}

# GGUF key (after "<arch>.") -> Hugging Face metadata name.
METADATA_MAP: dict[str, str] = {
    "rope.freq_base": "rope_theta",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "attention.layer_norm_epsilon": "layer_norm_eps",
}

# Architectures whose GGUF converter permutes Q/K rows (llama.cpp's convert_hf_to_gguf).
PERMUTED_ARCHITECTURES = frozenset({"llama", "mistral"})

# GGML types that are plain arrays in the reader (no dequantization) -> .oinf dtype.
_PLAIN: dict[str, DType] = {
    "F32": DType.F32, "F16": DType.F16, "F64": DType.F64,
    "I8": DType.I8, "I16": DType.I16, "I32": DType.I32, "I64": DType.I64,
}  # fmt: skip


@functools.cache
def _can_dequantize(qtype: Any) -> bool:
    """Probe once whether this gguf package implements dequantization for `qtype`."""
    import gguf

    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    try:
        gguf.quants.dequantize(np.zeros((1, type_size), np.uint8), qtype)
    except NotImplementedError:
        return False
    return block > 0


def unpermute_rows(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation of a (rows, in) matrix for `n_head` heads.

    llama.cpp interleaves each head's two rotary halves: GGUF row ``2*j + k`` of a head is
    Hugging Face row ``k*hd/2 + j``; this restores the halves. Raises ConversionError if the rows do not split into heads.
    """
    rows = weight.shape[0]
    if n_head <= 0 or rows % (2 * n_head):
        raise ConversionError(f"cannot un-permute {rows} rows into {n_head} heads of pairs")
    tail = weight.shape[1:]
    return (
        weight.reshape(n_head, rows // n_head // 2, 2, *tail).swapaxes(1, 2).reshape(weight.shape)
    )


def _field_value(field: Any) -> Any:
    """A GGUF field as a Python value: scalar, str, or a list for arrays."""
    return field.contents()


def _metadata_entry(key: str, field: Any, value: Any) -> Any:
    """The `.oinf` metadata form of one GGUF field, or None to skip it."""
    import gguf

    kind = field.types[0]
    if kind == gguf.GGUFValueType.ARRAY:
        if not value:
            return None
        if all(isinstance(v, str) for v in value):
            return json.dumps(value)
        if all(isinstance(v, bool | int | float) for v in value):
            sub = field.types[-1]
            dtype = (
                np.float64
                if sub in (gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.FLOAT64)
                else np.int64
            )
            return np.asarray(value, dtype=dtype)
        return json.dumps(value)
    if kind == gguf.GGUFValueType.FLOAT32:
        return (float(value), DType.F32)
    if kind == gguf.GGUFValueType.FLOAT64:
        return (float(value), DType.F64)
    return value


def open_gguf(path: str | Path, *, unpermute: bool = True) -> Checkpoint:
    """Open a GGUF file: lazy dequantizing tensors, sizevars and typed metadata.

    With `unpermute` (default) attn_q/attn_k rows of llama-family models are restored to
    the Hugging Face order using ``attention.head_count`` / ``head_count_kv``.

    Raises:
        ConversionError: for a truncated or corrupt file, or a tensor whose quantization
            type the installed gguf package cannot dequantize (names tensor and type), or
            when the `gguf` package (extra ``gguf``) is not installed.
    """
    gguf = import_extra("gguf", "gguf", "reading a GGUF file")

    path = Path(path)
    if not path.is_file():
        raise ConversionError(f"{path}: no such file")
    try:
        reader = gguf.GGUFReader(str(path), "r")
    except Exception as err:  # the reader raises ValueError/IndexError/struct errors on bad input
        raise ConversionError(
            f"{path}: not a valid GGUF file ({type(err).__name__}: {err}); the file is truncated or corrupt"
        ) from None
    checkpoint = Checkpoint(format="gguf", path=path, tensors=[])
    fields = {key: (field, _field_value(field)) for key, field in reader.fields.items()}
    arch = str(fields.get("general.architecture", (None, "unknown"))[1])
    for key, (field, value) in fields.items():
        if key.startswith("GGUF."):
            continue  # header fields of the container, not model metadata
        entry = _metadata_entry(key, field, value)
        if entry is not None:
            checkpoint.metadata[key] = entry
    for suffix, name in SIZEVAR_MAP.items():
        if f"{arch}.{suffix}" in fields:
            checkpoint.sizevars[name] = int(fields[f"{arch}.{suffix}"][1])
    for suffix, name in METADATA_MAP.items():
        if f"{arch}.{suffix}" in fields:
            checkpoint.metadata[name] = checkpoint.metadata[f"{arch}.{suffix}"]
    checkpoint.metadata["model_type"] = arch
    if "vocab_size" not in checkpoint.sizevars and "tokenizer.ggml.tokens" in fields:
        checkpoint.sizevars["vocab_size"] = len(fields["tokenizer.ggml.tokens"][1])
    heads = checkpoint.sizevars.get("num_attention_heads")
    hidden = checkpoint.sizevars.get("hidden_size")
    if "head_dim" not in checkpoint.sizevars and heads and hidden and hidden % heads == 0:
        checkpoint.sizevars["head_dim"] = hidden // heads
    names = {t.name for t in reader.tensors}
    checkpoint.metadata["tie_word_embeddings"] = "output.weight" not in names
    permute_heads = {}
    if unpermute and arch in PERMUTED_ARCHITECTURES and heads:
        permute_heads = {
            "attn_q": heads,
            "attn_k": checkpoint.sizevars.get("num_key_value_heads", heads),
        }
        checkpoint.notes.append(
            f"attn_q/attn_k rows un-permuted to the Hugging Face order ({arch})"
        )
    for tensor in reader.tensors:
        checkpoint.tensors.append(_source_tensor(path, tensor, permute_heads))
    check_shapes(checkpoint.sizevars, checkpoint.tensors, source=f"{path} (GGUF metadata)")
    return checkpoint


# Rows dequantized per call: gguf's dequantize makes several temporaries of its input's
# size, so large tensors (the 49152-row embedding) are done in slices into one output.
_CHUNK_ELEMENTS = 1 << 22


def _dequantize_in_chunks(data: np.ndarray, qtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Dequantize `data` (rows of quantized bytes) to f32 of `shape`, a slice of rows at a time."""
    import gguf

    rows = data.reshape(-1, data.shape[-1]) if data.ndim > 1 else data.reshape(1, -1)
    row_elements = int(np.prod(shape, dtype=np.int64)) // rows.shape[0]
    out = np.empty((rows.shape[0], row_elements), dtype=np.float32)
    step = max(1, _CHUNK_ELEMENTS // max(1, row_elements))
    for start in range(0, rows.shape[0], step):
        out[start : start + step] = gguf.quants.dequantize(rows[start : start + step], qtype)
    return out.reshape(shape)


# GGML block types `.oinf` stores as they are -> (scheme, bytes of the f16 fields before the codes).
_BLOCKED: dict[str, tuple[BlockScheme, int]] = {
    "Q8_0": (BlockScheme.Q8_0, 2),
    "Q4_0": (BlockScheme.Q4_0, 2),
    "Q4_1": (BlockScheme.Q4_1, 4),
}


def split_gguf_blocks(
    data: np.ndarray, scheme: BlockScheme, shape: tuple[int, ...]
) -> QuantizedTensor:
    """GGUF's interleaved 32-element blocks -> the `.oinf` planes (docs/oinf.md §5.1).

    A GGUF block is ``f16 d; [f16 m;] codes``; 4-bit codes hold element ``j`` in the low and
    ``j + 16`` in the high nibble of byte ``j``, Q4_0 codes are stored plus 8. The `.oinf`
    codes are consecutive nibble pairs (and two's complement for q4_0), scales a plane.
    """
    head = _BLOCKED[scheme.value.upper()][1]
    lead, k = shape[:-1], shape[-1]
    blocks = np.ascontiguousarray(data).reshape(
        *lead, k // 32, head + (32 if scheme is BlockScheme.Q8_0 else 16)
    )
    scales = blocks[..., 0:2].copy().view(np.float16)[..., 0]
    offsets = blocks[..., 2:4].copy().view(np.float16)[..., 0] if head == 4 else None
    codes = blocks[..., head:]
    if scheme is BlockScheme.Q8_0:
        quants = codes.reshape(*lead, k).copy()
    else:
        if scheme is BlockScheme.Q4_0:
            codes = codes ^ np.uint8(0x88)  # stored q + 8 -> two's complement nibbles of q
        ordered = np.concatenate([codes & 0xF, codes >> 4], axis=-1)  # elements 0..31 of each block
        quants = (ordered[..., 0::2] | (ordered[..., 1::2] << 4)).reshape(*lead, k // 2)
    return QuantizedTensor(BlockLayout(scheme, 32), shape, quants, scales, offsets)


def _source_tensor(path: Path, tensor: Any, permute_heads: dict[str, int]) -> SourceTensor:
    import gguf

    qtype = tensor.tensor_type
    shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))
    if qtype.name in _PLAIN:
        dtype = _PLAIN[qtype.name]
    elif qtype == gguf.GGMLQuantizationType.BF16:
        dtype = DType.BF16
    elif _can_dequantize(qtype):
        dtype = DType.F32
    else:
        raise ConversionError(
            f"{path}: tensor {tensor.name!r} has quantization type {qtype.name}, which the installed "
            f"gguf package cannot dequantize; re-quantize the model (e.g. Q8_0, Q4_K) or exclude the tensor"
        )
    parts = tensor.name.split(".")
    n_head = (
        permute_heads.get(parts[2])
        if len(parts) == 4 and parts[0] == "blk" and parts[3] == "weight"
        else None
    )

    blocked = _BLOCKED.get(qtype.name)
    load_block = None
    if blocked is not None:
        scheme = blocked[0]

        def load_block() -> QuantizedTensor:
            packed = split_gguf_blocks(tensor.data, scheme, shape)
            if n_head is None:
                return packed
            # llama Q/K rows: the permutation moves whole rows, and blocks run along a row
            planes = [
                unpermute_rows(p, n_head) if p is not None else None
                for p in (packed.quants, packed.scales, packed.offsets)
            ]
            return QuantizedTensor(packed.layout, shape, *planes)  # type: ignore[arg-type]

    def load() -> np.ndarray:
        data = tensor.data
        if dtype is DType.BF16:
            array = np.asarray(data).view(np.uint16).view(DType.BF16.numpy)
        elif qtype.name in _PLAIN:
            array = np.asarray(data)
        else:
            array = _dequantize_in_chunks(data, qtype, shape)
        array = array.reshape(shape)
        if n_head is not None:
            array = unpermute_rows(array, n_head)
        return array

    return SourceTensor(
        name=tensor.name, dtype=dtype, shape=shape, load=load, origin=path.name,
        stored_as=qtype.name, stored_nbytes=int(tensor.n_bytes),
        block=BlockLayout(blocked[0], 32) if blocked else None, load_block=load_block,
    )  # fmt: skip
