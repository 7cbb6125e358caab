"""Errors in the window's words: no errno numbers, chat ids or Amber's own file paths."""
from __future__ import annotations

import errno
import uuid

from app.gui.error_words import in_words

CID = str(uuid.uuid4())


def test_os_errors_say_the_cause():
    full = OSError(errno.ENOSPC, "No space left on device", f"/home/u/.local/share/amber/state/{CID}.kv")
    assert str(full).startswith("[Errno 28]")
    assert in_words(full) == "the disk is full"
    assert in_words(PermissionError(errno.EACCES, "Permission denied", "/data/models/qwen.gguf")) == \
        "permission denied (qwen.gguf)"
    assert in_words(OSError(errno.EADDRINUSE, "Address already in use")) == "Address already in use"


def test_chat_ids_and_errno_tags_leave_the_text():
    assert in_words(f"session {CID} is not open") == "this chat is not open"
    assert in_words(f"no conversation {CID}") == "this chat no longer exists"
    assert in_words(f"saving the session failed: [Errno 5] Input/output error: '/x/state/{CID}.kv'") == \
        "saving the session failed: the disk could not be read or written"
    assert in_words("couldn't save: [Errno 28] No space left on device: 'sessions/x.json'") == \
        "couldn't save: the disk is full (x.json)"
    assert in_words("[Errno 98] Address already in use") == "Address already in use"
    assert in_words(KeyError()) == "KeyError"
    for text in (in_words(f"session {CID} is busy"), in_words(OSError(errno.EIO, "I/O", f"/s/{CID}"))):
        assert CID not in text and "Errno" not in text


def test_a_base_models_refusal_to_chat_says_what_to_do():
    """The engine's (or a remote server's) message for a model without a chat template."""
    said = in_words("Gemma-3-270M has no chat template; use /v1/completions")
    assert said.startswith("Gemma-3-270M has no chat template: it is a base model, which continues text")
    assert "Choose a chat (instruct) model" in said and "/v1/completions" in said
