"""Automatic titles: the first user message, shortened."""
from __future__ import annotations

DEFAULT_TITLE = "New chat"
MAX_TITLE_CHARS = 60


def title_from_message(content: str, limit: int = MAX_TITLE_CHARS) -> str | None:
    """The first line of `content`, whitespace collapsed, cut at a word boundary; None if blank."""
    for line in content.splitlines():
        words = line.split()
        if words:
            break
    else:
        return None
    title = " ".join(words)
    if len(title) <= limit:
        return title
    cut = title[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit // 2:  # keep whole words unless that throws away too much
        cut = cut[:space]
    return cut.rstrip(" ,.;:-") + "\u2026"


def chat_title(content: str, limit: int = MAX_TITLE_CHARS) -> str:
    """The title a chat gets from its first user message (both stores and the window use it),
    or DEFAULT_TITLE when the message is blank."""
    return title_from_message(content, limit) or DEFAULT_TITLE
