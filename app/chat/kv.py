"""What a chat's KV state is, from the engine's `SessionInfo`, and the salt a chat opens with."""
from __future__ import annotations

import secrets
from typing import Any

from engine.api import ChatEngine


def kv_state_of(info: Any) -> tuple[str, int]:
    """What the sidebar shows for a session: "disk" when its KV is saved (a pinned chat, even
    while it is also in memory), else where the engine has it."""
    disk = int(getattr(info, "kv_bytes_disk", 0) or 0)
    if disk > 0:
        return "disk", disk
    where = getattr(info.kv_location, "value", str(info.kv_location))
    if where == "memory":
        return "memory", int(getattr(info, "kv_bytes_memory", 0) or 0)
    return ("disk", disk) if where == "disk" else ("none", 0)


def chat_salt(engine: ChatEngine, store: Any, chat_id: str, detail: Any = None,
              temporary: bool = False) -> str | None:
    """The salt to open a chat with: the stored one, or — for an engine that wants one per chat
    (remote vLLM / Amber servers) — a new 256-bit salt, stored with the chat first. Temporary
    chats never get a stored salt (the engine keeps a throwaway one in memory)."""
    if store is None:
        return None
    if detail is None:
        detail = store.get_conversation(chat_id)
    salt = getattr(detail, "cache_salt", None)
    if salt or temporary or not engine.capabilities.per_chat_salt:
        return salt
    salt = secrets.token_urlsafe(32)     # 256 bits, as engine.remote.engine.new_cache_salt
    store.set_cache_salt(chat_id, salt)
    return salt


def is_remote_engine(engine: ChatEngine) -> bool:
    """An engine on another machine (engine.remote): it cannot delete local KV files."""
    return engine.capabilities.remote
