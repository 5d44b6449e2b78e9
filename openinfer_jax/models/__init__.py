"""Graph builders for the architectures the converter presets know.

`build_graph(model, "llama")` returns the decoder graph of a llama-family model (SmolLM2,
Llama, Mistral-style GQA) with chunked prefill; `build_graph(model, "bert")` the encoder of
a BERT-family model (MiniLM). Each reads its sizes from the `.oinf` and checks the model's
tensors first (`ArchitectureError` names a missing or mismatched one). The graphs are plain
IR: `print(graph)` shows them as graph{} text to read, save and edit.
"""

from openinfer_jax.models.registry import (
    ARCHITECTURES,
    architecture_names,
    build_graph,
    detect_architecture,
)

__all__ = ["ARCHITECTURES", "architecture_names", "build_graph", "detect_architecture"]
