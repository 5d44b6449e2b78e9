"""Which ONNX ops the importer leaves out, and why (for error messages and docs/onnx.md)."""

from __future__ import annotations

__all__ = ["EXCLUDED_KINDS", "excluded_kind", "unsupported_reason"]

# Ops outside the standard inference set: the conformance target does not count them.
# (The losses SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss are default-domain ops
# with a function body: they import, and count.)
_TRAINING = frozenset({"Gradient", "Momentum", "Adagrad", "Adam"})
_SEQUENCE = frozenset(
    {"SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert",
     "SequenceLength", "SequenceMap", "SplitToSequence", "ConcatFromSequence", "ReverseSequence_"}
)  # fmt: skip
_STRING = frozenset(
    {"StringNormalizer", "StringSplit", "StringConcat", "RegexFullMatch", "TfIdfVectorizer",
     "ImageDecoder", "LabelEncoder"}
)  # fmt: skip
_OPTIONAL = frozenset({"Optional", "OptionalGetElement", "OptionalHasElement"})
_RANDOM = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
     "Multinomial"}
)  # fmt: skip

#: kind -> (ops, why they are left out). The kinds are not part of the inference target.
EXCLUDED_KINDS: dict[str, tuple[frozenset[str], str]] = {
    "training": (_TRAINING, "a training op (gradients, optimizers): not part of inference"),
    "sequence": (_SEQUENCE, "works on ONNX sequence values; programs hold tensors only"),
    "string": (_STRING, "works on strings; the package has no string tensors"),
    "optional": (_OPTIONAL, "works on ONNX optional values; programs hold tensors only"),
}

_REASONS: dict[str, str] = {
    **{op: "random numbers: a program step must be deterministic" for op in _RANDOM},
    "NonMaxSuppression": "the number of boxes it selects depends on the data, and program "
    "shapes are static (with every input known at import it is folded)",
    "Unique": "the number of distinct values depends on the data, and program shapes are "
    "static (with its input known at import it is folded)",
    "NonZero": "the number of non-zero elements depends on the data, and program shapes are "
    "static (with its input known at import it is folded)",
    "Dropout": "training-mode Dropout (training_mode true, ratio above 0) draws random numbers: "
    "a program step must be deterministic (export in inference mode)",
}


def excluded_kind(op_type: str) -> str | None:
    """The kind (training, sequence, string, optional) of an op outside the inference set."""
    for kind, (ops, _) in EXCLUDED_KINDS.items():
        if op_type in ops:
            return kind
    return None


def unsupported_reason(op_type: str) -> str:
    """Why `op_type` cannot be imported, for the error message."""
    kind = excluded_kind(op_type)
    if kind is not None:
        return f"op {op_type} is not supported: {EXCLUDED_KINDS[kind][1]}"
    if op_type in _REASONS:
        return f"op {op_type} is not supported: {_REASONS[op_type]}"
    return f"op {op_type} is not supported by the importer (no converter for it)"
