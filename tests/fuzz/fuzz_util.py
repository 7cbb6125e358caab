"""Helpers shared by the fuzz targets (a module of its own: `conftest` is not importable by name
when several test folders have one)."""
from __future__ import annotations

from hypothesis import settings


def scaled(fraction: float, minimum: int = 5) -> int:
    """max_examples for an expensive target: a fraction of the active profile's."""
    return max(minimum, int(settings().max_examples * fraction))
