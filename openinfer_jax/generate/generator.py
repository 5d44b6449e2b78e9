"""`Generator`: text in, text out, with a llama-family `.oinf` model.

The prompt is tokenized (`tokenizer.py`), optionally wrapped in the model's chat template
(`chat.py`), prefilled `chunk` tokens per step through the `llama` graph of
`openinfer_jax.models` (one step for a prompt that fits a chunk), then decoded one token per
step with the chosen sampling (`sampling.py`) until EOS, `max_new_tokens` or the end of the
cache. Steps run in the simulator (``target="sim"``, any of its devices) or in the emitted C
program (``target="c"``, `c_runner.py`); the sampling is the same Python code either way.

    gen = Generator("smollm2.oinf")
    for piece in gen.stream("The capital of France is", max_new_tokens=20):
        print(piece, end="", flush=True)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from openinfer_jax.core.errors import GenerationError
from openinfer_jax.generate.chat import apply_chat_template
from openinfer_jax.generate.sampling import Sampler, SamplingConfig
from openinfer_jax.generate.tokenizer import TextTokenizer, load_tokenizer
from openinfer_jax.models.llama import DEFAULT_CHUNK, DEFAULT_CONTEXT
from openinfer_jax.oinf import ModelLoader

__all__ = ["GenerationResult", "Generator", "StepRunner"]

TARGETS = ("sim", "c")


class StepRunner(Protocol):
    """Runs the decoder graph one step at a time (the simulator or an emitted program)."""

    def reset(self) -> None:
        """Start a new sequence: an empty cache."""

    def step(self, tokens: list[int]) -> np.ndarray:
        """Feed 1..chunk tokens; the logits after the last one ([vocab])."""

    def close(self) -> None:
        """Release what the runner holds."""

    def cpu_seconds(self) -> float:
        """CPU time spent outside this process so far (a child program), else 0."""


def _cpu() -> float:
    return time.process_time()


class SimRunner:
    """Steps through the simulator (device cpu, gpu or vulkan)."""

    def __init__(
        self,
        model: Path,
        graph: Any,
        chunk: int,
        device: str,
        compile_cache: Any,
        plan: dict[str, str] | None = None,
        devices: int | None = None,
    ) -> None:
        from openinfer_jax.sim import Simulator

        self.chunk = chunk
        mesh = None
        if devices is not None:
            from openinfer_jax.sim.sharding import device_mesh
            from openinfer_jax.sim.sharding_cli import emulate_cpu_devices, mesh_platform

            platform = mesh_platform(device)
            if platform == "cpu":
                emulate_cpu_devices(devices)
            mesh = device_mesh(devices, platform=platform)
        self.sim = Simulator(
            model,
            graph,
            device=device,
            compile_cache=compile_cache,
            mesh=mesh,
            sharding=plan if mesh is not None else None,
        )
        self.ex = self.sim.make_executor()

    def reset(self) -> None:
        self.ex = self.sim.make_executor()  # compiled regions are shared by executors

    def step(self, tokens: list[int]) -> np.ndarray:
        padded = np.zeros(self.chunk, np.int32)
        padded[: len(tokens)] = tokens
        feed = {"tokens": padded}
        if self.chunk > 1:
            feed["count"] = np.asarray(len(tokens), np.int32)
        self.ex.insert(feed)
        self.ex.step()
        return np.asarray(self.ex.fetch("logits")).reshape(-1)

    def close(self) -> None:
        self.sim.model.close()

    def cpu_seconds(self) -> float:
        return 0.0  # everything runs in this process


@dataclass
class GenerationResult:
    """What one generation produced, and how long its parts took."""

    text: str
    tokens: list[int]
    prompt_tokens: int
    stop: str  # "eos", "length" or "context"
    prefill_s: float
    prefill_steps: int
    decode_s: float
    decode_steps: int
    first_token_s: float
    prefill_cpu_s: float = 0.0
    decode_cpu_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def prefill_tokens_per_s(self) -> float:
        """Prompt tokens per second of prefill."""
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else float("inf")

    @property
    def decode_tokens_per_s(self) -> float:
        """Generated tokens per second after the first (each one a decode step)."""
        return self.decode_steps / self.decode_s if self.decode_s > 0 else float("inf")

    @property
    def decode_tokens_per_cpu_s(self) -> float:
        """Decode steps per CPU second (this process and a C child): steadier on a busy machine."""
        return self.decode_steps / self.decode_cpu_s if self.decode_cpu_s > 0 else float("inf")

    @property
    def prefill_tokens_per_cpu_s(self) -> float:
        """Prompt tokens per CPU second of prefill."""
        return self.prompt_tokens / self.prefill_cpu_s if self.prefill_cpu_s > 0 else float("inf")


class Generator:
    """Generates text with a llama-family `.oinf` model (see the module doc).

    Args:
        model: the `.oinf` file (converted with ``--pattern llama``).
        device: the simulator's device (``cpu``, ``gpu``, ``vulkan``); ignored for ``c``.
        target: ``"sim"`` (the simulator) or ``"c"`` (the emitted C program, built once
            and kept in the user's cache directory).
        chunk: prompt tokens per prefill step (1 prefills token by token).
        context: cache capacity in tokens (default: the model's, at most 1024).
        kv_dtype: the K/V cache's type, one of ``f32``, ``f16``, ``bf16`` (default the
            activations', f32); ``f16`` halves the cache and what a step reads of it.
        tokenizer: a ``tokenizer.json`` file to use instead of the model's metadata.
        compile_cache: the simulator's JAX compilation cache setting (see `Simulator`).
        devices: run the simulator tensor-parallel over this many devices of `device`
            (`openinfer_jax.models.tensor_parallel.llama_plan`; on ``cpu`` they are
            emulated when JAX has not started yet). None: one device, no mesh.

    Raises:
        ArchitectureError: the model is not a llama-family model. TokenizerError: no
            tokenizer can be built. GenerationError: an unknown target, bad sizes, or
            `devices` with ``target="c"``. ShardingError: a device count that does not
            divide the heads or the intermediate size, or more devices than there are.
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        device: str = "cpu",
        target: str = "sim",
        chunk: int = DEFAULT_CHUNK,
        context: int | None = None,
        kv_dtype: str | None = None,
        tokenizer: str | os.PathLike[str] | None = None,
        compile_cache: Any = None,
        c_flags: tuple[str, ...] | None = None,
        devices: int | None = None,
    ) -> None:
        from openinfer_jax.models import build_graph
        from openinfer_jax.models.llama import KV_DTYPES, LlamaConfig
        from openinfer_jax.models.tensor_parallel import llama_plan

        if target not in TARGETS:
            raise GenerationError(f"unknown target {target!r}; use one of {', '.join(TARGETS)}")
        if chunk < 1:
            raise GenerationError(f"chunk must be >= 1, got {chunk}")
        if kv_dtype is not None and kv_dtype not in KV_DTYPES:
            raise GenerationError(
                f"kv_dtype must be one of {', '.join(KV_DTYPES)}, got {kv_dtype!r}"
            )
        if devices is not None and target != "sim":
            raise GenerationError(
                f"devices={devices} shards the simulator; target {target!r} runs on one device"
            )
        plan = None
        self.path = Path(model)
        with ModelLoader.open(self.path) as loader:
            limit = int(loader.sizevars.get("max_position_embeddings", DEFAULT_CONTEXT))
            self.context = context if context is not None else min(limit, DEFAULT_CONTEXT)
            if self.context < 1:
                raise GenerationError(f"context must be >= 1, got {self.context}")
            if self.context > limit:
                raise GenerationError(
                    f"context {self.context} exceeds the model's {limit} positions "
                    f"(max_position_embeddings); choose --context <= {limit}"
                )
            self.chunk = min(chunk, self.context)
            self.graph = build_graph(
                loader, "llama", chunk=self.chunk, context=self.context, kv_dtype=kv_dtype
            )
            self.tokenizer: TextTokenizer = load_tokenizer(loader, tokenizer)
            if devices is not None:
                plan = llama_plan(LlamaConfig.from_model(loader), devices)
        self.target = target
        self.runner: StepRunner
        if target == "sim":
            self.runner = SimRunner(
                self.path, self.graph, self.chunk, device, compile_cache, plan, devices
            )
        else:
            from openinfer_jax.generate.c_runner import CRunner

            self.runner = CRunner(self.path, self.graph, self.chunk, flags=c_flags)

    # ---- generation -------------------------------------------------------------------------
    def prompt_ids(
        self, prompt: str | list[int], *, chat: bool = False, system: str | None = None
    ) -> list[int]:
        """Token ids of `prompt` (a string, optionally in the chat template, or ids as given)."""
        if not isinstance(prompt, str):
            return [int(t) for t in prompt]
        if chat:
            messages = ([{"role": "system", "content": system}] if system else []) + [
                {"role": "user", "content": prompt}
            ]
            prompt = apply_chat_template(self.tokenizer.chat_template, messages)
        return self.tokenizer.encode(prompt)

    def _check_fits(self, n: int) -> None:
        if n == 0:
            raise GenerationError("the prompt is empty; give at least one token")
        if n >= self.context:
            raise GenerationError(
                f"the prompt has {n} tokens but the cache holds {self.context} (context); "
                f"raise --context (Generator(context=...)) above {n}, or shorten the prompt"
            )

    def _prefill(self, ids: list[int]) -> tuple[np.ndarray, int]:
        """Feed the prompt: full chunks while a padded chunk still fits the cache, then the
        rest token by token. Returns the last logits and the number of steps."""
        pos, steps, logits = 0, 0, np.empty(0)
        while pos < len(ids):
            take = min(self.chunk, len(ids) - pos)
            if take > 1 and pos + self.chunk > self.context:
                take = 1  # a chunk writes `chunk` cache rows even when it holds fewer tokens
            logits = self.runner.step(ids[pos : pos + take])
            pos += take
            steps += 1
        return logits, steps

    def tokens(
        self,
        prompt: str | list[int],
        *,
        max_new_tokens: int = 64,
        sampling: SamplingConfig | None = None,
        chat: bool = False,
        system: str | None = None,
        stop_at_eos: bool = True,
    ) -> Iterator[int | GenerationResult]:
        """Yield each new token id as it is chosen, then the `GenerationResult`."""
        sampler = Sampler(sampling or SamplingConfig())
        if max_new_tokens < 0:
            raise GenerationError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        ids = self.prompt_ids(prompt, chat=chat, system=system)
        self._check_fits(len(ids))
        self.runner.reset()
        start, cpu0 = time.perf_counter(), _cpu() + self.runner.cpu_seconds()
        logits, prefill_steps = self._prefill(ids)
        prefill_s = time.perf_counter() - start
        prefill_cpu = _cpu() + self.runner.cpu_seconds() - cpu0
        decode_cpu = 0.0
        generated: list[int] = []
        stop, decode_s, decode_steps, first_s = "length", 0.0, 0, 0.0
        position = len(ids)
        while len(generated) < max_new_tokens:
            token = sampler(logits)
            generated.append(token)
            if not first_s:
                first_s = time.perf_counter() - start
            yield token
            if stop_at_eos and token in self.tokenizer.eos_ids:
                stop = "eos"
                break
            if len(generated) == max_new_tokens:
                break
            if position >= self.context:
                stop = "context"
                break
            t0, c0 = time.perf_counter(), _cpu() + self.runner.cpu_seconds()
            logits = self.runner.step([token])
            decode_s += time.perf_counter() - t0
            decode_cpu += _cpu() + self.runner.cpu_seconds() - c0
            decode_steps += 1
            position += 1
        yield GenerationResult(
            text=self.tokenizer.decode(generated, skip_special=True),
            tokens=generated,
            prompt_tokens=len(ids),
            stop=stop,
            prefill_s=prefill_s,
            prefill_steps=prefill_steps,
            decode_s=decode_s,
            decode_steps=decode_steps,
            first_token_s=first_s,
            prefill_cpu_s=prefill_cpu,
            decode_cpu_s=decode_cpu,
            notes=list(self.tokenizer.notes),
        )

    def stream(self, prompt: str | list[int], **options: Any) -> Iterator[str]:
        """Yield the text as it grows (pieces end on whole characters); options as `generate`."""
        for item in self._text_pieces(prompt, options):
            if isinstance(item, str):
                yield item

    def generate(
        self,
        prompt: str | list[int],
        *,
        on_text: Callable[[str], None] | None = None,
        **options: Any,
    ) -> GenerationResult:
        """Generate to the end; `on_text` gets each new piece of text as it comes.

        Options: `max_new_tokens`, `sampling` (`SamplingConfig`), `chat`, `system`,
        `stop_at_eos`.

        Raises:
            GenerationError: a prompt that does not fit the cache, bad sampling settings.
        """
        result = None
        for item in self._text_pieces(prompt, options):
            if isinstance(item, str):
                if on_text is not None:
                    on_text(item)
            else:
                result = item
        assert result is not None
        return result

    def _text_pieces(
        self, prompt: str | list[int], options: dict[str, Any]
    ) -> Iterator[str | GenerationResult]:
        """Incremental detokenization: decode all tokens so far, emit the new suffix once it
        no longer ends in a partial UTF-8 character."""
        tokens: list[int] = []
        shown = ""
        for item in self.tokens(prompt, **options):
            if isinstance(item, GenerationResult):
                if item.text != shown and item.text.startswith(shown):
                    yield item.text[len(shown) :]
                yield item
                return
            tokens.append(item)
            text = self.tokenizer.decode(tokens, skip_special=True)
            if text.endswith("\ufffd") or not text.startswith(shown):
                continue
            if len(text) > len(shown):
                yield text[len(shown) :]
                shown = text

    def close(self) -> None:
        """Release the model (and the C program's process)."""
        self.runner.close()

    def __enter__(self) -> Generator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
