"""Tensor naming: rename rules, `--pattern` presets, include/exclude globs, the name rule.

A rule is ``REGEX=REPLACEMENT``: the regex must match the whole source name, and the
replacement refers to groups as ``{1}`` or ``{name}``. Rules are tried in order and the
first that matches renames the tensor (user rules before the preset's). Presets map a
model family's per-layer names to ``<stem>.<param>.{l}`` so that a DSL prefix table
``Wq(l): f32[D, D] @pattern("q.weight.{l}")`` addresses them, and they bring flax
checkpoints to the PyTorch layout (Dense kernels transposed to (out, in)) so one graph
serves both.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from openinfer_jax.core.errors import ConversionError

__all__ = [
    "NAME_RULE",
    "PATTERNS",
    "RenameRule",
    "check_name",
    "parse_rule",
    "rename",
    "rules_for",
    "selected",
]

NAME_RULE = re.compile(r"[A-Za-z0-9._-]+")
_GROUP_REF = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class RenameRule:
    """One rename rule: a full-match regex, a replacement, and whether to transpose a 2-D tensor."""

    pattern: re.Pattern[str]
    replacement: str
    transpose: bool = False

    def apply(self, name: str) -> str | None:
        """The new name if the rule matches `name` entirely, else None."""
        match = self.pattern.fullmatch(name)
        if match is None:
            return None

        def group(ref: re.Match[str]) -> str:
            key = ref.group(1)
            value = match.group(int(key) if key.isdigit() else key)
            return value if value is not None else ""

        return _GROUP_REF.sub(group, self.replacement)

    def __str__(self) -> str:
        return f"{self.pattern.pattern}={self.replacement}" + (
            " (transpose)" if self.transpose else ""
        )


def parse_rule(text: str) -> RenameRule:
    """Parse ``REGEX=REPLACEMENT`` (split at the last ``=``).

    Raises:
        ConversionError: for a missing ``=``, an invalid regex, or a replacement naming a
            group the regex does not define.
    """
    regex, sep, replacement = text.rpartition("=")
    if not sep or not regex:
        raise ConversionError(
            f"rename rule {text!r} must look like REGEX=REPLACEMENT, e.g. 'blk\\.(\\d+)\\.x=x.{{1}}'"
        )
    try:
        pattern = re.compile(regex)
    except re.error as err:
        raise ConversionError(f"rename rule {text!r}: invalid regex: {err}") from None
    for ref in _GROUP_REF.findall(replacement):
        known = ref in pattern.groupindex if not ref.isdigit() else 0 < int(ref) <= pattern.groups
        if not known:
            raise ConversionError(
                f"rename rule {text!r}: replacement refers to group {{{ref}}} but the regex has "
                f"{pattern.groups} group(s){' named ' + ', '.join(pattern.groupindex) if pattern.groupindex else ''}"
            )
    return RenameRule(pattern, replacement)


# ---- presets ------------------------------------------------------------------------------
# Parameter suffixes of PyTorch/HF and flax, -> (dest suffix, transpose). Flax Dense kernels are
# (in, out); PyTorch Linear weights are (out, in): transposing makes both sources identical.
_PARAM_SUFFIXES: tuple[tuple[str, str, bool], ...] = (
    ("weight", "weight", False),
    ("bias", "bias", False),
    ("kernel", "weight", True),
    ("scale", "weight", False),
    ("embedding", "weight", False),
    ("gamma", "weight", False),
    ("beta", "bias", False),
)


def _family(
    prefix: str, layer_path: str, per_layer: dict[str, str], global_: dict[str, str]
) -> tuple[RenameRule, ...]:
    """Rules for one family: per-layer modules -> ``stem.param.{l}``, globals -> ``stem.param``."""
    rules: list[RenameRule] = []
    for module, stem in per_layer.items():
        for src_suffix, dst_suffix, transpose in _PARAM_SUFFIXES:
            regex = rf"{prefix}{layer_path}\.(?P<l>\d+)\.{re.escape(module)}\.{src_suffix}"
            rules.append(RenameRule(re.compile(regex), f"{stem}.{dst_suffix}.{{l}}", transpose))
    for module, stem in global_.items():
        for src_suffix, dst_suffix, transpose in _PARAM_SUFFIXES:
            regex = rf"{prefix}{re.escape(module)}\.{src_suffix}"
            rules.append(RenameRule(re.compile(regex), f"{stem}.{dst_suffix}", transpose))
    return tuple(rules)


_BERT = (
    *_family(
        r"(?:bert\.)?",
        r"encoder\.layer",
        {
            "attention.self.query": "q", "attention.self.key": "k", "attention.self.value": "v",
            "attention.output.dense": "attn_out", "attention.output.LayerNorm": "attn_ln",
            "intermediate.dense": "ffn_in", "output.dense": "ffn_out", "output.LayerNorm": "ffn_ln",
        },
        {
            "embeddings.word_embeddings": "tok_emb", "embeddings.position_embeddings": "pos_emb",
            "embeddings.token_type_embeddings": "type_emb", "embeddings.LayerNorm": "emb_ln",
            "pooler.dense": "pooler",
        },
    ),
    RenameRule(re.compile(r"(?:bert\.)?embeddings\.position_ids"), "position_ids"),
)  # fmt: skip

_LLAMA_GGUF = _family(
    "",
    r"blk",
    {
        "attn_q": "q", "attn_k": "k", "attn_v": "v", "attn_output": "o", "attn_norm": "attn_norm",
        "ffn_gate": "gate", "ffn_up": "up", "ffn_down": "down", "ffn_norm": "ffn_norm",
    },
    {"token_embd": "tok_emb", "output_norm": "norm", "output": "lm_head"},
)  # fmt: skip

_LLAMA_HF = _family(
    r"(?:model\.)?",
    r"layers",
    {
        "self_attn.q_proj": "q", "self_attn.k_proj": "k", "self_attn.v_proj": "v",
        "self_attn.o_proj": "o", "input_layernorm": "attn_norm", "mlp.gate_proj": "gate",
        "mlp.up_proj": "up", "mlp.down_proj": "down", "post_attention_layernorm": "ffn_norm",
    },
    {"embed_tokens": "tok_emb", "norm": "norm", "lm_head": "lm_head"},
)  # fmt: skip

# Generic: move the first numeric path component to the end (a.3.b.c -> a.b.c.3).
_LAYER_SUFFIX = (
    RenameRule(re.compile(r"(?P<head>.*?)\.(?P<l>\d+)\.(?P<tail>.+)"), "{head}.{tail}.{l}"),
)

PATTERNS: dict[str, tuple[RenameRule, ...]] = {
    "bert": _BERT,
    "llama": _LLAMA_GGUF + _LLAMA_HF,
    "layer-suffix": _LAYER_SUFFIX,
}


def rules_for(
    rename_rules: Sequence[str | RenameRule] = (), pattern: str | None = None
) -> list[RenameRule]:
    """The ordered rule list: user rules first, then the preset's.

    Raises:
        ConversionError: for an unknown preset name or a malformed rule.
    """
    rules = [r if isinstance(r, RenameRule) else parse_rule(r) for r in rename_rules]
    if pattern is not None:
        if pattern not in PATTERNS:
            raise ConversionError(
                f"unknown --pattern {pattern!r}; choose one of {', '.join(PATTERNS)}"
            )
        rules.extend(PATTERNS[pattern])
    return rules


def rename(name: str, rules: Iterable[RenameRule]) -> tuple[str, bool]:
    """``(new_name, transpose)`` from the first matching rule, or ``(name, False)``."""
    for rule in rules:
        new = rule.apply(name)
        if new is not None:
            return new, rule.transpose
    return name, False


def check_name(name: str, source: str) -> None:
    """Check that a destination name follows the `.oinf` name rule ``[A-Za-z0-9._-]+``.

    Raises:
        ConversionError: naming the source tensor and suggesting a --rename rule.
    """
    if not NAME_RULE.fullmatch(name):
        raise ConversionError(
            f"tensor {source!r} would be named {name!r}, which breaks the .oinf name rule "
            "[A-Za-z0-9._-]+; add a --rename rule that maps it to a valid name"
        )


def selected(name: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """True if `name` matches some include glob (or there are none) and no exclude glob."""
    if include and not any(fnmatch.fnmatchcase(name, g) for g in include):
        return False
    return not any(fnmatch.fnmatchcase(name, g) for g in exclude)
