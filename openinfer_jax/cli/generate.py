"""`openinfer generate MODEL.oinf "prompt"`: text from a llama-family model.

    openinfer generate M.oinf "prompt" [--max-new-tokens N] [--temperature T] [--top-k K]
                       [--top-p P] [--seed S] [--chat [--system TEXT]] [--no-stop]
                       [--device cpu|gpu|vulkan] [--devices N] [--target sim|c] [--chunk N]
                       [--context N] [--kv-dtype f32|f16|bf16]
                       [--tokenizer tokenizer.json] [--no-compile-cache] [--ids]

Tokens are printed as they come; a summary (prompt tokens, prefill and decode tokens/s,
why it stopped) follows on stderr.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["generate_command", "register"]


def register(subparsers: Any) -> None:
    """Add the `generate` subcommand."""
    from openinfer_jax.models.llama import KV_DTYPES

    parser = subparsers.add_parser(
        "generate",
        help="generate text with a llama-family .oinf model",
        description="Tokenize a prompt, prefill it, and decode new tokens (docs/generate.md).",
    )
    parser.add_argument("model", metavar="MODEL.oinf")
    parser.add_argument("prompt", help="the prompt text")
    parser.add_argument("-n", "--max-new-tokens", type=int, default=64, metavar="N")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-k", type=int, default=0, metavar="K", help="0 = no limit")
    parser.add_argument("--top-p", type=float, default=1.0, metavar="P", help="1.0 = no limit")
    parser.add_argument("--seed", type=int, default=None, help="random seed for sampling")
    parser.add_argument("--chat", action="store_true", help="wrap the prompt in the chat template")
    parser.add_argument("--system", help="with --chat: a system message")
    parser.add_argument("--no-stop", action="store_true", help="do not stop at end-of-sequence")
    parser.add_argument("--device", default="cpu", help="simulator device: cpu, gpu or vulkan")
    parser.add_argument("--devices", type=int, default=None, metavar="N",
                        help="tensor-parallel over N devices of --device (cpu: emulated)")  # fmt: skip
    parser.add_argument("--target", choices=("sim", "c"), default="sim",
                        help="sim: the simulator (default); c: the emitted C program")  # fmt: skip
    parser.add_argument("--chunk", type=int, default=16, help="prompt tokens per prefill step")
    parser.add_argument("--context", type=int, default=None, help="cache capacity in tokens")
    parser.add_argument("--kv-dtype", choices=KV_DTYPES, default=None,
                        help="the K/V cache's type (default the activations', f32; f16 halves it)")  # fmt: skip
    parser.add_argument("--tokenizer", metavar="FILE", help="a tokenizer.json to use instead")
    parser.add_argument("--no-compile-cache", action="store_true",
                        help="do not use JAX's persistent compilation cache")  # fmt: skip
    parser.add_argument("--ids", action="store_true", help="print token ids instead of text")
    parser.set_defaults(handler=generate_command)


def generate_command(args: argparse.Namespace) -> int:
    """Handler of `openinfer generate`; returns the exit code."""
    import time

    from openinfer_jax.generate import Generator, SamplingConfig

    start = time.perf_counter()
    generator = Generator(
        args.model, device=args.device, target=args.target, chunk=args.chunk,
        context=args.context, kv_dtype=args.kv_dtype, tokenizer=args.tokenizer,
        compile_cache=False if args.no_compile_cache else None, devices=args.devices,
    )  # fmt: skip
    ready = time.perf_counter() - start
    sharded = getattr(getattr(generator.runner, "sim", None), "sharded", None)
    if sharded is not None:
        print(f"[tensor-parallel over {sharded.text}]", file=sys.stderr)
    sampling = SamplingConfig(args.temperature, args.top_k, args.top_p, args.seed)
    options = dict(
        max_new_tokens=args.max_new_tokens, sampling=sampling, chat=args.chat,
        system=args.system, stop_at_eos=not args.no_stop,
    )  # fmt: skip
    try:
        if args.ids:
            result = None
            for item in generator.tokens(args.prompt, **options):
                if isinstance(item, int):
                    print(item, flush=True)
                else:
                    result = item
        else:
            result = generator.generate(
                args.prompt, on_text=lambda piece: print(piece, end="", flush=True), **options
            )
            print()
    finally:
        generator.close()
    assert result is not None
    err = sys.stderr
    for note in result.notes:
        print(f"note: {note}", file=err)
    # The simulator's executables: compiled in this process, or loaded from the cache.
    stats = getattr(getattr(generator.runner, "ex", None), "stats", None)
    compiled = (
        f"compiled {stats['compilations']}, cached {stats['compile_cache_hits']} | "
        if stats is not None
        else ""
    )
    print(
        f"[{result.prompt_tokens} prompt tokens in {result.prefill_steps} step(s): "
        f"{result.prefill_s:.2f} s, {result.prefill_tokens_per_s:.1f} tok/s | "
        f"{len(result.tokens)} new tokens, decode {result.decode_tokens_per_s:.1f} tok/s | "
        f"per CPU second: prefill {result.prefill_tokens_per_cpu_s:.1f}, decode "
        f"{result.decode_tokens_per_cpu_s:.1f} tok/s | "
        f"stop: {result.stop} | first token {result.first_token_s:.2f} s | {compiled}"
        f"load {ready:.2f} s, total {time.perf_counter() - start:.2f} s]",
        file=err,
    )
    return 0
