"""The converted real models of tests/models (SmolLM2, MiniLM), shared by the generate tests."""

from tests.models.conftest import minilm_oinf, smollm_oinf

__all__ = ["minilm_oinf", "smollm_oinf"]
