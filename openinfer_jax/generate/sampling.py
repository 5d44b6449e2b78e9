"""Choosing the next token from logits: greedy, or temperature / top-k / top-p with a seed."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from openinfer_jax.core.errors import GenerationError

__all__ = ["Sampler", "SamplingConfig"]


@dataclass(frozen=True)
class SamplingConfig:
    """`temperature` 0 is greedy (argmax); otherwise softmax(logits / temperature) restricted
    to the `top_k` most likely tokens (0: all) and then to the smallest set whose probability
    reaches `top_p` (1.0: all), sampled with a generator seeded by `seed`."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None

    def check(self) -> SamplingConfig:
        """Raises GenerationError naming the setting that is out of range."""
        if not self.temperature >= 0.0:
            raise GenerationError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.top_k < 0:
            raise GenerationError(f"top_k must be >= 0 (0 = no limit), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise GenerationError(f"top_p must be in (0, 1], got {self.top_p}")
        return self


class Sampler:
    """Draws tokens for one generation (its random state advances with every draw)."""

    def __init__(self, config: SamplingConfig) -> None:
        self.config = config.check()
        self.rng = np.random.default_rng(config.seed)

    def __call__(self, logits: np.ndarray) -> int:
        """The next token id for `logits` ([vocab])."""
        c = self.config
        scores = np.asarray(logits, np.float64).reshape(-1)
        if c.temperature == 0.0:
            return int(np.argmax(scores))
        order = np.argsort(-scores, kind="stable")
        if c.top_k:
            order = order[: c.top_k]
        kept = scores[order] / c.temperature
        probs = np.exp(kept - kept.max())
        probs /= probs.sum()
        if c.top_p < 1.0:
            # Keep the smallest prefix whose mass reaches top_p (at least one token).
            cut = int(np.searchsorted(np.cumsum(probs), c.top_p)) + 1
            order, probs = order[:cut], probs[:cut] / probs[:cut].sum()
        return int(order[self.rng.choice(len(order), p=probs)])
