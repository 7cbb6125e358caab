"""A chat's overflow policy: what happens when its history no longer fits the model."""
from __future__ import annotations

from typing import Any

from engine.api import OverflowPolicy

OVERFLOW_CHOICES = [
    ("Truncate the middle (keep the system prompt and the latest turns)",
     OverflowPolicy.TRUNCATE_MIDDLE.value),
    ("Rolling window (keep the latest turns)", OverflowPolicy.ROLLING.value),
    ("Stop at the limit", OverflowPolicy.STOP.value),
]
OVERFLOW_VALUES = frozenset(v for _, v in OVERFLOW_CHOICES)
DEFAULT_OVERFLOW = OverflowPolicy.TRUNCATE_MIDDLE.value   # the conversation keeps going


def overflow_policy(overrides: dict[str, Any] | None, settings: Any) -> str:
    """The chat's own policy if it has one, else the default from the settings."""
    own = (overrides or {}).get("overflow")
    if own in OVERFLOW_VALUES:
        return str(own)
    default = getattr(settings, "overflow", DEFAULT_OVERFLOW)
    return default if default in OVERFLOW_VALUES else DEFAULT_OVERFLOW
