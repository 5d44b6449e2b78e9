"""Text <-> token ids for a converted model, through the `tokenizers` library.

Where the tokenizer comes from, in order:

1. a `tokenizer.json` file given by the caller (`--tokenizer FILE`);
2. the model's ``tokenizer.json`` metadata (the converter keeps it from a Hugging Face
   directory, as a JSON string);
3. the GGUF tokenizer metadata the converter keeps (``tokenizer.ggml.model``, ``.tokens``,
   ``.merges``, ``.token_type``, ``.pre``, the special token ids): a byte-level BPE
   (``gpt2``-style, the model SmolLM2, GPT-2, Llama 3 and Qwen use) is rebuilt from its
   vocabulary and merges.

Anything else is a `TokenizerError` naming what to give instead. The chat template
(``tokenizer.chat_template``) is kept for `openinfer_jax.generate.chat`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from openinfer_jax.core.errors import TokenizerError
from openinfer_jax.oinf import ModelLoader

__all__ = ["GGUF_PRE_TOKENIZERS", "TextTokenizer", "load_tokenizer"]

# GGUF token types (llama.cpp's llama_token_type): control and user-defined tokens are
# special: never split, and matched in the text as a whole.
_CONTROL, _USER_DEFINED = 3, 4

# `tokenizer.ggml.pre` values -> the pre-tokenizer regex of that family (None: GPT-2's, as
# the ByteLevel pre-tokenizer has it built in). Individual digits for SmolLM's family.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
GGUF_PRE_TOKENIZERS: dict[str, tuple[str | None, bool]] = {
    # name: (split regex or None for GPT-2's, split digits one by one)
    "default": (None, False),
    "gpt2": (None, False),
    "smollm": (None, True),
    "llama-bpe": (_LLAMA3_SPLIT, False),
    "llama3": (_LLAMA3_SPLIT, False),
    "qwen2": (_LLAMA3_SPLIT, True),
}


@dataclass
class TextTokenizer:
    """A `tokenizers.Tokenizer` plus what generation needs from the model's metadata."""

    tokenizer: Any
    source: str
    eos_ids: frozenset[int] = frozenset()
    bos_id: int | None = None
    add_bos: bool = False
    chat_template: str | None = None
    notes: list[str] = field(default_factory=list)
    # tokenizer.json files carry their own post-processor (BOS, [CLS]/[SEP]): let it run.
    add_special: bool = False

    @property
    def vocab_size(self) -> int:
        """Number of ids, added tokens included."""
        return int(self.tokenizer.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` (special tokens in it are recognized); BOS first when the
        model asks for one."""
        ids = list(self.tokenizer.encode(text, add_special_tokens=self.add_special).ids)
        if self.add_bos and self.bos_id is not None and (not ids or ids[0] != self.bos_id):
            ids.insert(0, self.bos_id)
        return ids

    def decode(self, ids: list[int], *, skip_special: bool = False) -> str:
        """The text of `ids`."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=skip_special))


def _metadata_text(value: Any) -> str:
    """A metadata string (ASCII str, or UTF-8 bytes stored as a u8 array)."""
    if isinstance(value, np.ndarray):
        return value.tobytes().decode("utf-8")
    return str(value)


def _json_list(model: ModelLoader, key: str) -> list[Any]:
    try:
        items = json.loads(_metadata_text(model.metadata[key]))
    except (KeyError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise TokenizerError(f"{model.path}: metadata {key!r} is not a JSON list: {err}") from None
    if not isinstance(items, list):
        raise TokenizerError(f"{model.path}: metadata {key!r} is not a JSON list")
    return items


def _require_tokenizers() -> Any:
    try:
        import tokenizers
    except ModuleNotFoundError:
        raise TokenizerError(
            "tokenizing needs the Python package 'tokenizers': pip install 'tokenizers>=0.15'"
        ) from None
    return tokenizers


def _from_gguf(model: ModelLoader) -> TextTokenizer:
    tk = _require_tokenizers()
    kind = str(model.metadata["tokenizer.ggml.model"])
    if kind != "gpt2":
        raise TokenizerError(
            f"{model.path}: tokenizer.ggml.model is {kind!r}; only byte-level BPE ('gpt2': "
            "GPT-2, SmolLM2, Llama 3, Qwen) is rebuilt from GGUF metadata. Give the model's "
            "tokenizer.json with --tokenizer FILE (Generator(tokenizer=...))"
        )
    tokens = _json_list(model, "tokenizer.ggml.tokens")
    merges = _json_list(model, "tokenizer.ggml.merges")
    types = np.asarray(model.metadata.get("tokenizer.ggml.token_type", np.ones(len(tokens))))
    if len(types) != len(tokens):
        raise TokenizerError(
            f"{model.path}: {len(tokens)} tokens but {len(types)} token types; the metadata is inconsistent"
        )
    notes: list[str] = []
    pre = str(model.metadata.get("tokenizer.ggml.pre", "default"))
    if pre not in GGUF_PRE_TOKENIZERS:
        notes.append(f"unknown tokenizer.ggml.pre {pre!r}: GPT-2's pre-tokenizer used")
    split, digits = GGUF_PRE_TOKENIZERS.get(pre, (None, False))
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    bpe = tk.models.BPE(
        vocab={t: i for i, t in enumerate(tokens)}, merges=pairs, ignore_merges=False
    )
    tokenizer = tk.Tokenizer(bpe)
    steps: list[Any] = []
    if digits:
        steps.append(tk.pre_tokenizers.Digits(individual_digits=True))
    if split is not None:
        steps.append(tk.pre_tokenizers.Split(tk.Regex(split), behavior="isolated"))
    steps.append(tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split is None))
    tokenizer.pre_tokenizer = tk.pre_tokenizers.Sequence(steps)
    tokenizer.decoder = tk.decoders.ByteLevel()
    special = [t for t, kind in zip(tokens, types.tolist()) if kind in (_CONTROL, _USER_DEFINED)]
    tokenizer.add_special_tokens(
        [tk.AddedToken(t, special=True, normalized=False) for t in special]
    )
    eos = model.metadata.get("tokenizer.ggml.eos_token_id")
    eot = model.metadata.get("tokenizer.ggml.eot_token_id")
    bos = model.metadata.get("tokenizer.ggml.bos_token_id")
    template = model.metadata.get("tokenizer.chat_template")
    return TextTokenizer(
        tokenizer=tokenizer,
        source="GGUF metadata (byte-level BPE)",
        eos_ids=frozenset(int(i) for i in (eos, eot) if i is not None),
        bos_id=None if bos is None else int(bos),
        add_bos=bool(model.metadata.get("tokenizer.ggml.add_bos_token", False)),
        chat_template=None if template is None else _metadata_text(template),
        notes=notes,
    )


def _from_json(text: str, source: str, model: ModelLoader | None) -> TextTokenizer:
    tk = _require_tokenizers()
    try:
        tokenizer = tk.Tokenizer.from_str(text)
    except Exception as err:  # the Rust side raises plain Exception for bad JSON
        raise TokenizerError(f"{source}: not a tokenizers JSON file: {err}") from None
    # Generation encodes one prompt: no padding to a fixed length, no truncation.
    tokenizer.no_padding()
    tokenizer.no_truncation()
    config: dict[str, Any] = {}
    if model is not None and "tokenizer_config.json" in model.metadata:
        try:
            config = json.loads(_metadata_text(model.metadata["tokenizer_config.json"]))
        except json.JSONDecodeError:
            config = {}
    eos_ids: set[int] = set()
    for key in ("eos_token", "sep_token"):
        token = config.get(key)
        token = token.get("content") if isinstance(token, dict) else token
        if isinstance(token, str) and tokenizer.token_to_id(token) is not None:
            eos_ids.add(int(tokenizer.token_to_id(token)))
            break
    if model is not None and not eos_ids:
        for key in ("eos_token_id", "tokenizer.ggml.eos_token_id"):
            if key in model.metadata:
                eos_ids.add(int(model.metadata[key]))
    template = config.get("chat_template")
    if template is None and model is not None and "tokenizer.chat_template" in model.metadata:
        template = _metadata_text(model.metadata["tokenizer.chat_template"])
    return TextTokenizer(
        tokenizer=tokenizer,
        source=source,
        eos_ids=frozenset(eos_ids),
        chat_template=template if isinstance(template, str) else None,
        add_special=True,
    )


def load_tokenizer(model: ModelLoader, tokenizer_file: str | Path | None = None) -> TextTokenizer:
    """The tokenizer of `model`: `tokenizer_file`, else its metadata (see the module doc).

    Raises:
        TokenizerError: an unreadable file, a model without tokenizer metadata, or a GGUF
            tokenizer type that cannot be rebuilt (names what to give instead).
    """
    if tokenizer_file is not None:
        path = Path(tokenizer_file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as err:
            raise TokenizerError(
                f"{path}: cannot read the tokenizer file: {err.strerror or err}"
            ) from None
        return _from_json(text, str(path), model)
    if "tokenizer.json" in model.metadata:
        return _from_json(
            _metadata_text(model.metadata["tokenizer.json"]),
            f"{model.path} (tokenizer.json)",
            model,
        )
    if "tokenizer.ggml.model" in model.metadata:
        return _from_gguf(model)
    raise TokenizerError(
        f"{model.path} holds no tokenizer (no tokenizer.json or tokenizer.ggml.* metadata); "
        "convert from a directory that has tokenizer.json, or give --tokenizer FILE"
    )
