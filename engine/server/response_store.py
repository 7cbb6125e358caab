"""Stored responses (`store: true`): one small JSON file each, naming the Amber session of its chain.

A chain of responses is one pinned Amber session: its KV is on disk, so continuing a chain with
`previous_response_id` after a server restart reloads the KV instead of prefilling the history.
Each record keeps the conversation so far (without the instructions, which OpenAI does not carry
over) and is visible only to the API key that made it.
"""
from __future__ import annotations

import json
import re
import secrets
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.kvstore.kvfile import atomic_write
from .errors import ApiError

ID_PATTERN = re.compile(r"resp_[0-9a-f]{48}")
MAX_RECORD_BYTES = 64 << 20


def new_response_id() -> str:
    return f"resp_{secrets.token_hex(24)}"


@dataclass
class ResponseRecord:
    id: str
    owner: str                          # the caller's namespace (auth.Caller.namespace)
    session_id: str
    messages: list[dict[str, str]]      # the conversation including this response's output
    created_at: int
    model: str
    previous_response_id: str | None = None
    body: dict[str, Any] = field(default_factory=dict)   # the response object as answered


class ResponseStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._lock = threading.Lock()

    def _path(self, response_id: str) -> Path:
        return self.root / f"{response_id}.json"

    def save(self, record: ResponseRecord) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        atomic_write(self._path(record.id), [json.dumps(asdict(record), ensure_ascii=False).encode()])

    def get(self, response_id: str, owner: str) -> ResponseRecord:
        """The caller's own record, or a 404 (another key's record is not found either)."""
        missing = ApiError(404, f"no stored response '{response_id[:80]}'", "previous_response_id",
                           "response_not_found")
        if not ID_PATTERN.fullmatch(response_id):
            raise missing
        path = self._path(response_id)
        try:
            if path.stat().st_size > MAX_RECORD_BYTES:
                raise missing
            data = json.loads(path.read_text(encoding="utf-8"))
            record = ResponseRecord(**data)
        except (OSError, ValueError, TypeError):
            raise missing from None
        if record.owner != owner or not isinstance(record.messages, list):
            raise missing
        return record

    def delete(self, response_id: str, owner: str) -> ResponseRecord:
        record = self.get(response_id, owner)
        self._path(response_id).unlink(missing_ok=True)
        return record

    def session_in_use(self, session_id: str) -> bool:
        """Whether any stored record still names the session (a scan; deletes are rare)."""
        if not self.root.is_dir():
            return False
        needle = f'"session_id": "{session_id}"'
        for path in self.root.glob("resp_*.json"):
            try:
                if needle in path.read_text(encoding="utf-8"):
                    return True
            except OSError:
                continue
        return False
