"""Sentence embeddings from a BERT-family `.oinf` (MiniLM): texts in, vectors out.

`Embedder` tokenizes with the tokenizer stored in the model (its ``tokenizer.json``
metadata: [CLS]/[SEP] added by its post-processor), pads the batch to its longest text, runs
the `bert` graph of `openinfer_jax.models` in the simulator and returns the L2-normalized
mean-pooled embeddings (sentence-transformers' output). A graph is built and compiled once
per (batch, length) shape and reused.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from openinfer_jax.core.errors import GenerationError
from openinfer_jax.oinf import ModelLoader

__all__ = ["Embedder"]


class Embedder:
    """Embeds texts with a BERT-family model converted with ``--pattern bert``.

    Args:
        model: the `.oinf` file.
        device: simulator device (cpu, gpu, vulkan, numpy).
        tokenizer: a ``tokenizer.json`` to use instead of the model's own.
        compile_cache: as for `Simulator` (None: the default cache, False: off, or a path).

    Raises:
        ArchitectureError: the model is not a `bert` model (names the tensor and the
            ``--pattern`` to convert with).
        TokenizerError: the model holds no tokenizer and none was given.
    """

    def __init__(
        self,
        model: str | os.PathLike[str],
        *,
        device: str = "cpu",
        tokenizer: str | os.PathLike[str] | None = None,
        compile_cache: Any = None,
    ) -> None:
        from openinfer_jax.generate.tokenizer import load_tokenizer
        from openinfer_jax.models.bert import BertConfig

        self.path = Path(model)
        self.device = device
        self.compile_cache = compile_cache
        with ModelLoader.open(self.path) as loader:
            self.max_tokens = BertConfig.from_model(loader).positions
            self.tokenizer = load_tokenizer(loader, tokenizer)
        self._sims: dict[tuple[int, int], Any] = {}

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids ([batch, longest], zero-padded) and the 0/1 attention mask."""
        if isinstance(texts, str) or not texts:
            raise GenerationError("embed takes a non-empty list of texts")
        rows = [self.tokenizer.encode(t) for t in texts]
        longest = max(len(r) for r in rows)
        if longest > self.max_tokens:
            i = max(range(len(rows)), key=lambda k: len(rows[k]))
            raise GenerationError(
                f"text {i} has {longest} tokens; the model reads at most {self.max_tokens} "
                "(max_position_embeddings): shorten it or split it"
            )
        ids = np.zeros((len(rows), longest), np.int32)
        mask = np.zeros((len(rows), longest), np.int32)
        for i, r in enumerate(rows):
            ids[i, : len(r)] = r
            mask[i, : len(r)] = 1
        return ids, mask

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The embeddings of `texts`: float32 [len(texts), hidden_size], unit length each."""
        from openinfer_jax.models.bert import bert_inputs

        ids, mask = self.encode(texts)
        ex = self._simulator(*ids.shape).make_executor()
        ex.insert(bert_inputs(ids, None, mask))
        ex.step()
        return np.asarray(ex.fetch("y"), np.float32)

    def _simulator(self, batch: int, seq: int) -> Any:
        from openinfer_jax.models import build_graph
        from openinfer_jax.sim import Simulator

        key = (batch, seq)
        if key not in self._sims:
            graph = build_graph(self.path, "bert", batch=batch, seq=seq)
            self._sims[key] = Simulator(
                self.path, graph, device=self.device, compile_cache=self.compile_cache
            )
        return self._sims[key]

    def close(self) -> None:
        """Release the model files."""
        for sim in self._sims.values():
            sim.model.close()
        self._sims.clear()

    def __enter__(self) -> Embedder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
