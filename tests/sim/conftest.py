"""Fixtures for simulator tests: models written with the real OinfWriter into tmp dirs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from openinfer_jax.oinf import ModelLoader, write_oinf


@pytest.fixture
def make_model(tmp_path: Path) -> Callable[..., ModelLoader]:
    """`make_model(sizevars=..., metadata=..., tensors=...)` -> an open ModelLoader."""
    opened: list[ModelLoader] = []
    counter = [0]

    def make(
        sizevars: dict[str, int] | None = None,
        metadata: dict[str, Any] | None = None,
        tensors: dict[str, Any] | None = None,
    ) -> ModelLoader:
        counter[0] += 1
        path = tmp_path / f"model{counter[0]}.oinf"
        write_oinf(path, sizevars=sizevars or {}, metadata=metadata or {}, tensors=tensors or {})
        model = ModelLoader.open(path)
        opened.append(model)
        return model

    yield make
    for model in opened:
        model.close()
