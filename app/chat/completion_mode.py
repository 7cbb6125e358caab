"""Completion mode: a chat with a base model (one without a chat template) as a text to continue.

A base model has never seen a chat format, and a made-up one (ChatML without its special tokens)
only makes it ramble. What it does well is continue a text; so, like a text-completion playground,
the chat's messages are laid out as one plain document and the model's reply continues it. The
system prompt is left out (a base model follows no instructions), a reply follows the text it
continued directly, and each message the user writes starts a new paragraph.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from engine.api import ChatMessage


def transcript(messages: Sequence[ChatMessage | Mapping[str, Any]]) -> str:
    """The chat as the one text the model continues (tool steps a chat kept from a model that
    could call tools are messages in the template's terms: their text is kept, their calls not)."""
    text = ""
    for message in messages:
        role, content = ((message.role, message.content) if isinstance(message, ChatMessage)
                         else (str(message.get("role", "")), str(message.get("content") or "")))
        if role == "system":
            continue
        if role == "assistant" or not text:
            text += content
        else:
            text += "\n\n" + content
    return text


def note(model_name: str) -> str:
    """What the window says of a reply written in completion mode."""
    return (f"Completion mode: {model_name} has no chat template (a base model), so it continues "
            f"the chat's text")
