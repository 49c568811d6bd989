"""Shared test fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"


def shared_file(rel: str) -> Path:
    """A file of ../shared/data, or skip the test when it is absent."""
    path = SHARED_DATA / rel
    if not path.exists():
        pytest.skip(f"{path} is absent (real third-party data lives in ../shared/data beside the project)")
    return path
