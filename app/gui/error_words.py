"""An error as the window says it: the cause in words, without errno numbers, chat ids or the
paths of Amber's own files (those stay in the log, which gets the error whole)."""
from __future__ import annotations

import errno
import re
from pathlib import Path

_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_ERRNO_TAG = re.compile(r"\[(?:Errno|WinError) -?\d+\]\s*")
# an OSError as text: "[Errno 28] No space left on device: '/path/file'"
_OS_TEXT = re.compile(r"\[Errno (\d+)\] [^:;'\"\n]*(?::\s*(['\"])([^'\"]*)\2)?")
_GONE = re.compile(rf"\bno (?:session|conversation|chat) {_UUID}\b")
_NAMED = re.compile(rf"\b(?:the )?(?:session|conversation|chat) {_UUID}\b", re.IGNORECASE)
_QUOTED_PATH = re.compile(rf"""(?::\s*)?(['"])[^'"]*{_UUID}[^'"]*\1""")
_BARE = re.compile(_UUID)
# the engine's (and the API server's) refusal to chat with a base model
_NO_TEMPLATE = re.compile(r"(\S+) has no chat template; use /v1/completions")
_NO_TEMPLATE_WORDS = (r"\1 has no chat template: it is a base model, which continues text but does not chat. "
                      r"Choose a chat (instruct) model for this chat; \1 still completes text through the API "
                      r"server's /v1/completions")

_OS_WORDS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "the disk is read-only",
    errno.ENOENT: "a file or folder is missing",
    errno.EIO: "the disk could not be read or written",
    errno.EMFILE: "too many files are open",
}


def in_words(error: BaseException | str) -> str:
    """“the disk is full (notes.gguf)” for OSError(ENOSPC, …), “this chat is not open” for
    “session 3f2a…-… is not open”."""
    if isinstance(error, OSError) and error.errno in _OS_WORDS:
        return _os_words(error.errno, str(error.filename) if error.filename else "")
    text = str(error) if not isinstance(error, str) else error
    if isinstance(error, BaseException) and not text:
        text = type(error).__name__
    text = _NO_TEMPLATE.sub(_NO_TEMPLATE_WORDS, text)
    text = _OS_TEXT.sub(_os_text, text)
    text = _ERRNO_TAG.sub("", text)
    text = _GONE.sub("this chat no longer exists", text)
    text = _NAMED.sub("this chat", text)
    text = _QUOTED_PATH.sub("", text)
    text = _BARE.sub("this chat", text)
    return " ".join(text.split()) or "an unknown error"


def _os_words(number: int, path: str) -> str:
    name = Path(path).name if path else ""
    words = _OS_WORDS[number]
    return f"{words} ({name})" if name and not _BARE.search(name) else words


def _os_text(m: re.Match[str]) -> str:
    if int(m[1]) in _OS_WORDS:
        return _os_words(int(m[1]), m[3] or "")
    return _ERRNO_TAG.sub("", m[0])
