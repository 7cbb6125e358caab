"""Export of a conversation to Markdown and JSON, and validation of JSON to import."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Sequence

from .rows import ROLES, ConversationDetail, MessageRow

FORMAT = "amber-conversation"
VERSION = 1
MAX_IMPORT_MESSAGES = 100_000
MAX_IMPORT_BYTES = 64 * 1024 * 1024     # a file to import is read whole: never more than this
MIN_YEAR, MAX_YEAR = 1970, 9000        # times an import may carry
MAX_IMPORT_TITLE = 200                  # characters of an imported title (cut, not refused)
# JSON values (outside strings) an import may hold: each becomes a Python object while parsing, so
# a file of 64 MiB of `[]` would take gigabytes. An export has ~40 per message.
MAX_IMPORT_VALUES = 2_000_000
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def to_markdown(conv: ConversationDetail, path: Sequence[MessageRow]) -> str:
    """The active path as readable Markdown (alternatives are left out)."""
    lines = [f"# {conv.title}", ""]
    meta = [f"Exported from Amber on {_iso(datetime.now(timezone.utc))}"]
    if conv.model_id:
        meta.append(f"model {conv.model_id}")
    lines += [f"*{'; '.join(meta)}.*", ""]
    if conv.system_prompt:
        lines += ["## System prompt", "", conv.system_prompt, ""]
    for msg in path:
        lines += [f"## {msg.role.capitalize()}", "", msg.content, ""]
        figures = _figures_line(msg.figures)
        if figures:
            lines += [f"*{figures}*", ""]
    return "\n".join(lines).rstrip() + "\n"


def to_text(conv: ConversationDetail, path: Sequence[MessageRow]) -> str:
    """The active path as plain text: who said what, nothing else."""
    lines = [conv.title, ""]
    if conv.system_prompt:
        lines += ["System:", conv.system_prompt, ""]
    for msg in path:
        lines += [f"{msg.role.capitalize()}:", msg.content, ""]
    return "\n".join(lines).rstrip() + "\n"


def _figures_line(figures: dict[str, Any] | None) -> str:
    if not figures:
        return ""
    parts = []
    if figures.get("generated_tokens"):
        parts.append(f"{figures['generated_tokens']} tokens")
    if figures.get("decode_tokens_per_s"):
        parts.append(f"{float(figures['decode_tokens_per_s']):.1f} tokens/s")
    if figures.get("ttft_ms"):
        parts.append(f"first token after {float(figures['ttft_ms']):.0f} ms")
    if figures.get("finish_reason"):
        parts.append(f"finished: {figures['finish_reason']}")
    if figures.get("resume") == "disk":
        parts.append("history resumed from disk")
    return " · ".join(parts)


def to_json(conv: ConversationDetail, messages: Sequence[MessageRow]) -> dict[str, Any]:
    """Everything but the KV state: the whole message tree (alternatives included)."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "exported_at": _iso(datetime.now(timezone.utc)),
        "conversation": {
            "id": conv.id,
            "title": conv.title,
            "title_locked": conv.title_locked,
            "pinned": conv.pinned,
            "created_at": _iso(conv.created_at),
            "updated_at": _iso(conv.updated_at),
            "model_id": conv.model_id,
            "model_fingerprint": conv.model_fingerprint,
            "system_prompt": conv.system_prompt,
            "settings": conv.settings,
        },
        "current_leaf_id": conv.current_leaf_id,
        "messages": [
            {
                "id": m.id,
                "parent_id": m.parent_id,
                "role": m.role,
                "content": m.content,
                "created_at": _iso(m.created_at),
                "figures": m.figures,
                "model_name": m.model_name,
                "tool_steps": m.tool_steps,
            }
            for m in messages
        ],
    }


@dataclass(frozen=True)
class ImportedMessage:
    """A validated message to import; `key`/`parent_key` are the ids in the file."""

    key: int
    parent_key: int | None
    role: str
    content: str
    created_at: datetime
    figures: dict[str, Any] | None
    model_name: str | None = None
    tool_steps: list[dict[str, Any]] | None = None


def _tool_steps(value: Any, where: str) -> list[dict[str, Any]] | None:
    """A message's tool steps from a file: rounds of {"text", "calls": [objects]}, or null."""
    if value is None:
        return None
    bad = ValueError(f"{where}: tool_steps must be a list of {{\"text\", \"calls\": [objects]}} or null")
    if not isinstance(value, list):
        raise bad
    for step in value:
        if not isinstance(step, dict) or not isinstance(step.get("text", ""), str) \
                or not isinstance(step.get("calls"), list) or not all(isinstance(c, dict) for c in step["calls"]):
            raise bad
    return value or None


@dataclass(frozen=True)
class ImportedConversation:
    """A validated conversation to import (parents always precede children)."""

    title: str
    title_locked: bool
    created_at: datetime
    updated_at: datetime
    model_id: str
    model_fingerprint: str
    system_prompt: str
    settings: dict[str, Any]
    current_leaf_key: int | None
    messages: list[ImportedMessage]


def parse_json(data: dict[str, Any] | str | bytes) -> ImportedConversation:
    """Validate an export made by `to_json`; raise ValueError saying what is wrong."""
    if isinstance(data, (str, bytes)):
        if len(data) > MAX_IMPORT_BYTES:
            raise ValueError(f"too large ({len(data):,} bytes; at most {MAX_IMPORT_BYTES:,})")
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogatepass")
        bare = _JSON_STRING.sub(b'""', data)     # what is left to count: the structure
        values = bare.count(b",") + bare.count(b"[") + bare.count(b"{")
        if values > MAX_IMPORT_VALUES:
            raise ValueError(f"too many JSON values ({values:,}; at most {MAX_IMPORT_VALUES:,})")
        try:
            data = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"not an Amber conversation export (expected format {FORMAT!r})")
    version = data.get("version")
    if not isinstance(version, int) or version > VERSION or version < 1:
        raise ValueError(f"unsupported export version {version!r} (this Amber reads {VERSION})")
    conv = _expect(data, "conversation", dict)
    raw_messages = _expect(data, "messages", list)
    if len(raw_messages) > MAX_IMPORT_MESSAGES:
        raise ValueError(f"too many messages ({len(raw_messages)})")
    messages: list[ImportedMessage] = []
    seen: set[int] = set()
    for i, raw in enumerate(raw_messages):
        if not isinstance(raw, dict):
            raise ValueError(f"message {i} is not an object")
        key = _expect(raw, "id", int, where=f"message {i}")
        parent = raw.get("parent_id")
        if parent is not None and (not _is_id(parent) or parent not in seen):
            raise ValueError(f"message {i}: parent_id {parent!r} does not name an earlier message")
        if key in seen:
            raise ValueError(f"message {i}: duplicate id {key}")
        role = _expect(raw, "role", str, where=f"message {i}")
        if role not in ROLES:
            raise ValueError(f"message {i}: unknown role {role!r}")
        figures = raw.get("figures")
        if figures is not None and not isinstance(figures, dict):
            raise ValueError(f"message {i}: figures must be an object or null")
        figures = _clean_figures(figures)
        model_name = raw.get("model_name")
        if model_name is not None and not isinstance(model_name, str):
            raise ValueError(f"message {i}: model_name must be a string or null")
        seen.add(key)
        messages.append(ImportedMessage(
            key=key, parent_key=parent, role=role,
            content=_expect(raw, "content", str, where=f"message {i}"),
            created_at=_parse_time(raw.get("created_at"), f"message {i}"),
            figures=figures, model_name=model_name,
            tool_steps=_tool_steps(raw.get("tool_steps"), f"message {i}"),
        ))
    leaf = data.get("current_leaf_id")
    if leaf is not None and (not _is_id(leaf) or leaf not in seen):
        raise ValueError(f"current_leaf_id {leaf!r} does not name a message")
    if leaf is None and messages:
        leaf = messages[-1].key
    settings = conv.get("settings", {})
    if not isinstance(settings, dict):
        raise ValueError("conversation settings must be an object")
    title = " ".join(_expect(conv, "title", str, where="conversation").split())
    if len(title) > MAX_IMPORT_TITLE:
        title = title[:MAX_IMPORT_TITLE - 1].rstrip() + "\u2026"
    return ImportedConversation(
        title=title,
        title_locked=bool(conv.get("title_locked", False)),
        created_at=_parse_time(conv.get("created_at"), "conversation"),
        updated_at=_parse_time(conv.get("updated_at"), "conversation"),
        model_id=str(conv.get("model_id", "")),
        model_fingerprint=str(conv.get("model_fingerprint", "")),
        system_prompt=str(conv.get("system_prompt", "")),
        settings=_clean_settings(settings),
        current_leaf_key=leaf,
        messages=messages,
    )


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    """A finite number a Qt widget can hold (figures and settings end up in progress bars and
    spin boxes, whose values are 32-bit)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and abs(value) < 2**31


def _clean_figures(figures: dict[str, Any] | None) -> dict[str, Any] | None:
    """Only what a reply's figures hold: numbers and short words (a file is untrusted; the window
    formats these values)."""
    if figures is None:
        return None
    out: dict[str, Any] = {}
    for key, value in figures.items():
        if _number(value) or value is None or isinstance(value, bool):
            out[key] = value
        elif isinstance(value, str) and len(value) <= 200 and not key.endswith(_NUMERIC_SUFFIXES):
            out[key] = value
    return out


_NUMERIC_SUFFIXES = ("_tokens", "_ms", "_per_s", "_used", "_window", "_messages")


def _clean_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A chat's own settings, as far as they are plain values: numbers, flags, short words, and the
    sampling numbers (a file is untrusted; the window and the engine read these)."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if key == "sampling" and isinstance(value, dict):
            out[key] = {k: v for k, v in value.items() if isinstance(k, str) and len(k) <= 40
                        and (v is None or isinstance(v, bool) or _number(v))}
        elif _number(value) or value is None or isinstance(value, bool) or \
                (isinstance(value, str) and len(value) <= 200):
            out[key] = value
    return out


def _expect(obj: dict[str, Any], key: str, kind: type, *, where: str = "export") -> Any:
    value = obj.get(key)
    # bool is an int in Python; an id of True is still wrong.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{where}: {key!r} must be {kind.__name__}, got {type(value).__name__}")
    return value


def _parse_time(value: Any, where: str) -> datetime:
    if value is None:
        return datetime.now(timezone.utc)
    if not isinstance(value, str):
        raise ValueError(f"{where}: time {value!r} is not an ISO 8601 string")
    shown = value if len(value) <= 40 else value[:40] + "…"
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ValueError(f"{where}: time {shown!r} is not ISO 8601") from exc
    try:
        parsed = parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed.astimezone(timezone.utc)
        in_range = MIN_YEAR <= parsed.year <= MAX_YEAR
    except (ValueError, OverflowError):
        in_range = False
    # In UTC and well inside datetime's range: a stored year 1 or 9999 cannot be shown in every
    # time zone, and the chat list would fail to load.
    if not in_range:
        raise ValueError(f"{where}: time {shown!r} is out of range ({MIN_YEAR} to {MAX_YEAR})")
    return parsed


def _iso(value: datetime) -> str:
    return value.astimezone(timezone.utc).isoformat()
