"""Text generation: tokenizers, chat templates, sampling and the `Generator`; sentence
embeddings with the `Embedder` (docs/generate.md)."""

from openinfer_jax.generate.chat import apply_chat_template
from openinfer_jax.generate.embed import Embedder
from openinfer_jax.generate.generator import GenerationResult, Generator
from openinfer_jax.generate.sampling import Sampler, SamplingConfig
from openinfer_jax.generate.tokenizer import TextTokenizer, load_tokenizer

__all__ = [
    "Embedder",
    "GenerationResult",
    "Generator",
    "Sampler",
    "SamplingConfig",
    "TextTokenizer",
    "apply_chat_template",
    "load_tokenizer",
]
