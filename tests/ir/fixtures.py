"""Paths of the seed programs (tests/fixtures/seeds/*.graph) shared by the IR and parser tests."""

from __future__ import annotations

from pathlib import Path

SEED_DIR = Path(__file__).resolve().parent.parent / "fixtures" / "seeds"
SEED_FILES = sorted(SEED_DIR.glob("*.graph"))
