"""A chat to a file and back: export as Markdown, JSON or plain text (written atomically), and
the reading of a JSON file to import (untrusted: a regular file, bounded in size).

Runs on worker threads; knows nothing of Qt. The formats themselves are `app.store.export`.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from engine.base.safefs import atomic_write
from app.store import export
from engine.base.oneline import one_line

FORMATS = {"markdown": ".md", "json": ".json", "text": ".txt"}


class TransferError(Exception):
    """A chat could not be exported or imported; the message (one line) says why."""


def render(store: Any, chat_id: str, fmt: str) -> str:
    """The chat as the file's text: Markdown or text (the path on screen), or JSON (every
    alternative, so that an import gives the same chat back)."""
    if fmt == "json":
        return json.dumps(store.export_json(chat_id), ensure_ascii=False, indent=2) + "\n"
    detail, path = store.get_conversation(chat_id), store.active_path(chat_id)
    if fmt == "markdown":
        return export.to_markdown(detail, path)
    if fmt == "text":
        return export.to_text(detail, path)
    raise ValueError(f"unknown export format {fmt!r} (choose from {', '.join(FORMATS)})")


def export_chat(store: Any, chat_id: str, fmt: str, path: Path) -> Path:
    """Writes the chat to `path` (temp file + fsync + rename: a crash leaves the old file or the
    new one); TransferError with a one-line reason when the file cannot be written."""
    text = render(store, chat_id, fmt)
    try:
        atomic_write(path, text, private=True, parents=True)
    except OSError as exc:
        raise TransferError(f"could not write {_name(path)}: {exc.strerror or exc}") from None
    return path


def read_import(path: Path, limit: int | None = None) -> bytes:
    """The bytes of a file to import: a regular file (never a FIFO or a device, which could
    block or never end) of at most `limit` bytes (default `export.MAX_IMPORT_BYTES`)."""
    limit = export.MAX_IMPORT_BYTES if limit is None else limit
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise TransferError(f"could not open {_name(path)}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise TransferError(f"{_name(path)} is not a regular file")
        if st.st_size > limit:
            raise TransferError(f"{_name(path)} is too large ({st.st_size:,} bytes; at most {limit:,})")
        try:
            os.set_blocking(fh.fileno(), True)
            data = fh.read(limit + 1)
        except OSError as exc:
            raise TransferError(f"could not read {_name(path)}: {exc.strerror or exc}") from None
    if len(data) > limit:       # it grew while being read
        raise TransferError(f"{_name(path)} is too large (more than {limit:,} bytes)")
    return data


def import_chat(store: Any, path: Path) -> Any:
    """A new chat from an exported JSON file (new id, no KV); its `ConversationDetail`.
    TransferError naming the file and the problem when it is not one."""
    data = read_import(path)
    try:
        return store.import_json(data)
    except ValueError as exc:
        raise TransferError(f"{_name(path)}: {_one_line(str(exc))}") from None


def _name(path: Path) -> str:
    return one_line(Path(path).name)      # control characters escaped: the name as it is


def _one_line(text: str, limit: int = 300) -> str:
    """One line, bounded: a message quoting a file (or its bad values) stays readable."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 1] + "\u2026"
