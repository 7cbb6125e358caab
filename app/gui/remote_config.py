"""Saved remote endpoints (OpenAI-compatible servers) and the glue between them and the window.

The endpoints live in `<Amber home>/remotes.json`, written atomically with owner-only permissions
(0600) because it holds API keys; the keys never go into settings.json, a log line or a repr. The
model picker names a remote endpoint as `remote:<id>` in `Settings.model`. No Qt here.
"""
from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.chat.kv import chat_salt, is_remote_engine  # noqa: F401 - where they used to live
from engine.base.safefs import atomic_write
from engine.api import ChatEngine

if TYPE_CHECKING:   # engine.remote pulls in the HTTP stack: imported when first needed
    from engine.remote.engine import RemoteEndpoint

log = logging.getLogger(__name__)

PREFIX = "remote:"
FILE_NAME = "remotes.json"
MAX_FILE = 1 << 20         # a hand-edited or corrupt file bigger than this is not read
LOGS_NOTE = ("Chats with a remote model are sent to its server; that server's own logs and "
             "retention are outside Amber's control.")


@dataclass
class SavedRemote:
    id: str
    endpoint: "RemoteEndpoint"

    @property
    def choice(self) -> str:
        return PREFIX + self.id


def is_remote_choice(model: str | None) -> bool:
    return bool(model) and str(model).startswith(PREFIX)


def remotes_path(home: Path) -> Path:
    return Path(home) / FILE_NAME


def load_remotes(home: Path) -> list[SavedRemote]:
    """The saved endpoints; a missing, unreadable or malformed file gives [] (and a log line)."""
    path = remotes_path(home)
    try:
        if path.stat().st_size > MAX_FILE:
            log.warning("%s is larger than %d bytes; ignored", path, MAX_FILE)
            return []
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("%s unreadable (%s); no remote servers", path, type(exc).__name__)
        return []
    from engine.remote.engine import RemoteEndpoint, RemoteError  # noqa: PLC0415
    out: list[SavedRemote] = []
    for item in raw.get("remotes", []) if isinstance(raw, dict) else []:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            continue
        try:
            ep = RemoteEndpoint(base_url=str(item.get("base_url", "")), model=str(item.get("model", "")),
                                api_key=str(item.get("api_key", "")), flavor=str(item.get("flavor", "auto")),
                                name=str(item.get("name", "")))
        except RemoteError:
            continue
        out.append(SavedRemote(item["id"], ep))
    return out


def _write(home: Path, remotes: list[SavedRemote]) -> None:
    path = remotes_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"remotes": [{"id": r.id, "name": r.endpoint.name, "base_url": r.endpoint.base_url,
                         "model": r.endpoint.model, "flavor": r.endpoint.flavor,
                         "api_key": r.endpoint.api_key} for r in remotes]}
    atomic_write(path, json.dumps(data, indent=2), private=True, parents=True)   # mode 0600


def save_remote(home: Path, endpoint: "RemoteEndpoint", remote_id: str | None = None) -> SavedRemote:
    """Adds (or replaces, by id or by the same address and model) a saved endpoint."""
    remotes = load_remotes(home)
    if remote_id is None:
        same = next((r for r in remotes if r.endpoint.base_url == endpoint.base_url
                     and r.endpoint.model == endpoint.model), None)
        remote_id = same.id if same else uuid.uuid4().hex[:12]
    saved = SavedRemote(remote_id, endpoint)
    remotes = [r for r in remotes if r.id != remote_id] + [saved]
    _write(home, remotes)
    return saved


def remove_remote(home: Path, remote_id: str) -> None:
    _write(home, [r for r in load_remotes(home) if r.id != remote_id])


def find_remote(home: Path, choice: str) -> SavedRemote | None:
    rid = choice[len(PREFIX):] if is_remote_choice(choice) else choice
    return next((r for r in load_remotes(home) if r.id == rid), None)


def open_remote_engine(choice: str, home: Path) -> ChatEngine:
    """Connects to the saved endpoint `choice` (worker thread); RemoteError says why it cannot."""
    from engine.remote.engine import RemoteEngine, RemoteError  # noqa: PLC0415
    saved = find_remote(home, choice)
    if saved is None:
        raise RemoteError("this remote server is no longer saved; pick a model again")
    return RemoteEngine(saved.endpoint)


def temporary_notice(engine: Any, base: str) -> str:
    """The temporary-chat notice, saying what Amber cannot promise when the model is remote."""
    if not is_remote_engine(engine):
        return base
    return (f"{base} The model runs on {engine.endpoint.host}: Amber sends it nothing that asks it "
            "to keep this chat, but that server's own logs are outside Amber's control.")
