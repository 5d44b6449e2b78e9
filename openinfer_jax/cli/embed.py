"""`openinfer embed MODEL.oinf "text" ...`: sentence embeddings from a BERT-family model.

    openinfer embed M.oinf TEXT [TEXT ...] [--output emb.npy] [--device cpu|gpu|vulkan]
                    [--tokenizer tokenizer.json] [--no-compile-cache]

Prints each text's token count and the cosine similarities between the texts; --output
saves the embeddings ([texts, hidden] float32, unit length) as .npy.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

__all__ = ["embed_command", "register"]


def register(subparsers: Any) -> None:
    """Add the `embed` subcommand."""
    parser = subparsers.add_parser(
        "embed",
        help="sentence embeddings with a BERT-family .oinf model",
        description="Tokenize texts, run the bert encoder, print their similarities "
        "(docs/generate.md, Embeddings).",
    )
    parser.add_argument("model", metavar="MODEL.oinf")
    parser.add_argument("texts", nargs="+", metavar="TEXT")
    parser.add_argument("--output", metavar="OUT.npy", help="save the embeddings (.npy)")
    parser.add_argument("--device", default="cpu", help="simulator device: cpu, gpu or vulkan")
    parser.add_argument("--tokenizer", metavar="FILE", help="a tokenizer.json to use instead")
    parser.add_argument("--no-compile-cache", action="store_true",
                        help="do not use JAX's persistent compilation cache")  # fmt: skip
    parser.set_defaults(handler=embed_command)


def embed_command(args: argparse.Namespace) -> int:
    """Handler of `openinfer embed`; returns the exit code."""
    from openinfer_jax.generate import Embedder

    with Embedder(
        args.model, device=args.device, tokenizer=args.tokenizer,
        compile_cache=False if args.no_compile_cache else None,
    ) as embedder:  # fmt: skip
        _ids, mask = embedder.encode(args.texts)
        vectors = embedder.embed(args.texts)
    if args.output:
        np.save(args.output, vectors)
    for i, (text, count) in enumerate(zip(args.texts, mask.sum(1), strict=True)):
        print(f"[{i}] {int(count)} tokens: {text}")
    print(f"embeddings: {vectors.shape[0]} x {vectors.shape[1]} (unit length)")
    if len(args.texts) > 1:
        sims = vectors @ vectors.T
        print("cosine similarity:")
        for i in range(len(args.texts)):
            print("  " + " ".join(f"{sims[i, j]:+.4f}" for j in range(len(args.texts))))
    if args.output:
        print(f"saved {args.output}")
    return 0
