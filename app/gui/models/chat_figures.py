"""What the status bar says about the chat on screen, and a chat's overflow policy (pure, no Qt).

Every figure comes from the chat shown: its last reply's figures, its own KV state; nothing of
another chat (or of the previous turn while one streams) stays on screen.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    from engine.api import ChatEngine

from app.chat.overflow import (DEFAULT_OVERFLOW, OVERFLOW_CHOICES, OVERFLOW_VALUES,  # noqa: F401
                               overflow_policy)

from .turn_figures import count


def last_figures(items: Iterable[Any]) -> dict[str, Any] | None:
    """The figures of the chat's latest reply (what its last turn cost), if any."""
    for m in reversed(list(items)):
        if m.role == "assistant" and m.figures:
            return m.figures
    return None


def window(engine: ChatEngine | None, figures: dict[str, Any] | None) -> int:
    """The context window of the model loaded now (a reply's figures may be another model's)."""
    w = engine.context_window if engine is not None else 0
    return w or int((figures or {}).get("context_window") or 0)


def kv_text(row: Any) -> str:
    """The sidebar's idea of where this chat's KV is, before the engine has said more."""
    if row is None or getattr(row, "temporary", False):
        return ""
    state = getattr(row, "kv_state", "none")
    if state == "disk":
        return "KV cache on disk — resumes without prefill"
    if state == "memory":
        return "KV cache in memory"
    return ""


def info_text(info: Any) -> str:
    """What the engine said about this chat's session (`SessionInfo`)."""
    tokens = int(getattr(info, "tokens", 0) or 0)
    if not tokens:
        return ""
    where = getattr(info.kv_location, "value", str(info.kv_location))
    disk = int(getattr(info, "kv_bytes_disk", 0) or 0)
    if where == "disk" or (disk and where != "memory"):
        return f"{count(tokens)} on disk — resumes without prefill"
    if where == "memory":
        return f"{count(tokens)} in memory"
    return ""
