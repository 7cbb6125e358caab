"""Stored responses (`store: true`): one small JSON file each, naming the Amber session of its chain.

A chain of responses is one pinned Amber session: its KV is on disk, so continuing a chain with
`previous_response_id` after a server restart reloads the KV instead of prefilling the history.
Each record keeps the conversation so far (without the instructions, which OpenAI does not carry
over) and is visible only to the API key that made it.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.base.safefs import make_folder, open_regular, unlink_inside
from engine.kvstore.kvfile import atomic_write
from engine.sessions.manifest import canonical_id
from .errors import ApiError

ID_PATTERN = re.compile(r"resp_[0-9a-f]{48}")
MAX_RECORD_BYTES = 64 << 20
ROLES = ("system", "user", "assistant", "tool")   # what a chain stores (the developer role is the system's)


class RecordError(ValueError):
    """A stored record is unusable; the message says which field."""


def new_response_id() -> str:
    return f"resp_{secrets.token_hex(24)}"


@dataclass
class ResponseRecord:
    id: str
    owner: str                          # the caller's namespace (auth.Caller.namespace)
    session_id: str
    messages: list[dict[str, Any]]      # the conversation including this response's output (template messages)
    created_at: int
    model: str
    previous_response_id: str | None = None
    body: dict[str, Any] = field(default_factory=dict)   # the response object as answered


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise RecordError(what)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def read_owner(data: object) -> str | None:
    """The record's owner when it can be read (a damaged record may still name its owner)."""
    owner = data.get("owner") if isinstance(data, dict) else None
    return owner if isinstance(owner, str) else None


def _tool_call(call: object) -> dict[str, Any]:
    _need(isinstance(call, dict) and isinstance(call.get("id"), str) and isinstance(call.get("function"), dict),
          "bad tool call")
    assert isinstance(call, dict)
    fn = call["function"]
    _need(isinstance(fn.get("name"), str) and isinstance(fn.get("arguments"), (str, dict)), "bad tool call")
    return {"id": call["id"], "type": "function", "function": {"name": fn["name"], "arguments": fn["arguments"]}}


def _message(m: object) -> dict[str, Any]:
    """A stored message, as the chat template takes it: role and text, an assistant's tool calls
    (its content may then be None), a tool result's call id."""
    _need(isinstance(m, dict) and m.get("role") in ROLES, "bad messages")
    assert isinstance(m, dict)
    calls = m.get("tool_calls")
    content = m.get("content")
    _need(isinstance(content, str) or (content is None and m["role"] == "assistant" and bool(calls)), "bad messages")
    out: dict[str, Any] = {"role": m["role"], "content": content}
    if calls is not None:
        _need(m["role"] == "assistant" and isinstance(calls, list), "bad messages")
        out["tool_calls"] = [_tool_call(c) for c in calls]
    if m["role"] == "tool":
        _need(isinstance(m.get("tool_call_id"), str), "bad messages")
        out["tool_call_id"] = m["tool_call_id"]
    return out


def validate(data: object, response_id: str) -> ResponseRecord:
    """A ResponseRecord from parsed JSON, or RecordError naming the first bad field."""
    _need(isinstance(data, dict), "not a JSON object")
    assert isinstance(data, dict)
    _need(data.get("id") == response_id, "id differs from the file's name")
    _need(isinstance(data.get("owner"), str), "bad owner")
    session_id = data.get("session_id")
    _need(isinstance(session_id, str) and canonical_id(session_id) == session_id, "bad session_id")
    assert isinstance(session_id, str)
    messages = data.get("messages")
    _need(isinstance(messages, list), "bad messages")
    assert isinstance(messages, list)
    clean = [_message(m) for m in messages]
    _need(_is_int(data.get("created_at")), "bad created_at")
    _need(isinstance(data.get("model"), str), "bad model")
    previous = data.get("previous_response_id")
    _need(previous is None or (isinstance(previous, str) and bool(ID_PATTERN.fullmatch(previous))),
          "bad previous_response_id")
    body = data.get("body", {})
    _need(isinstance(body, dict), "bad body")
    try:      # answered as UTF-8 JSON: a lone surrogate (from a "\ud800" escape) cannot be encoded
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise RecordError("text that is not valid Unicode") from None
    return ResponseRecord(response_id, data["owner"], session_id, clean,
                          data["created_at"], data["model"], previous, body)


def parse(raw: bytes, response_id: str) -> tuple[ResponseRecord | None, str | None, str | None]:
    """(the record, None, its owner) from a file's bytes, or (None, why it is unusable, the owner
    if it can still be read)."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, "not valid JSON (truncated or damaged)", None
    try:
        return validate(data, response_id), None, read_owner(data)
    except RecordError as exc:
        return None, str(exc), read_owner(data)


def read_bytes(path: Path, limit: int = MAX_RECORD_BYTES) -> bytes:
    """A record file's bytes: a regular file only (never blocking on a FIFO, never through a
    symlink), at most `limit` bytes (RecordError beyond)."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        _need(size <= limit, f"too large ({size} bytes)")
        raw = f.read(limit + 1)
    _need(len(raw) <= limit, "too large")
    return raw


class ResponseStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._lock = threading.Lock()

    def _path(self, response_id: str) -> Path:
        return self.root / f"{response_id}.json"

    def save(self, record: ResponseRecord) -> None:
        try:
            make_folder(self.root.parent.parent, self.root)     # the state folder's server/responses/
            atomic_write(self._path(record.id), [json.dumps(asdict(record), ensure_ascii=False).encode()])
        except OSError as exc:
            raise ApiError(500, f"the response could not be stored: {exc.strerror or exc}",
                           code="storage_error") from None

    def _load(self, response_id: str, owner: str) -> tuple[ResponseRecord | None, str | None]:
        """The caller's record, or (None, why it is damaged); a 404 when there is none, or it is
        another key's (a damaged record naming another owner is not found either)."""
        missing = ApiError(404, f"no stored response '{response_id[:80]}'", "previous_response_id",
                           "response_not_found")
        if not ID_PATTERN.fullmatch(response_id):
            raise missing
        try:
            raw = read_bytes(self._path(response_id))
        except FileNotFoundError:
            raise missing from None
        except (OSError, RecordError) as exc:
            return None, f"unreadable ({getattr(exc, 'strerror', None) or exc})"
        record, why, stored_owner = parse(raw, response_id)
        if stored_owner is not None and stored_owner != owner:
            raise missing
        return record, why

    def get(self, response_id: str, owner: str) -> ResponseRecord:
        """The caller's own record; a 404 when there is none, it is another key's, or it is damaged
        (saying so)."""
        record, why = self._load(response_id, owner)
        if record is None:
            raise ApiError(404, f"the stored response '{response_id}' is damaged ({why}); delete it "
                                "and start a new chain", "previous_response_id", "response_damaged")
        return record

    def delete(self, response_id: str, owner: str) -> ResponseRecord | None:
        """Removes the caller's record (a damaged one too: then None, its session is unknown)."""
        record, _ = self._load(response_id, owner)
        path = self._path(response_id)
        if not unlink_inside(self.root.parent.parent, path) and os.path.lexists(path):    # never through a symlink
            raise ApiError(500, "the response could not be deleted: server/responses is not a plain folder",
                           code="storage_error")
        return record

    def session_in_use(self, session_id: str) -> bool:
        """Whether any stored record still names the session (a scan; deletes are rare)."""
        if not self.root.is_dir():
            return False
        needle = f'"session_id": "{session_id}"'
        for path in self.root.glob("resp_*.json"):
            try:
                if needle in read_bytes(path).decode("utf-8", errors="replace"):
                    return True
            except (OSError, RecordError):      # not a regular file, too large: names nothing
                continue
        return False
