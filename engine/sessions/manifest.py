"""Session manifests: one validated dataclass, read / check / checksum / write.

`sessions/<id>.json` names a session's KV (block keys, a private tail file) and keeps its
transcript. Everything in it is untrusted when read back: the file is size-capped, parsed, its
XXH3 checksum verified, every field's type checked, `session_id` compared with the file's name and
every file name checked to be a bare name of the expected form (so no manifest can make Amber
touch a file outside the state folder). Before a manifest is replaced, the current one is kept as
`sessions/prev/<id>.json` (a copy: a hard link would share any damage); a damaged manifest is moved aside to
`sessions/damaged/` (never overwritten) and the previous version is used instead. So is anything
else found in a manifest's place (a FIFO, a symlink, a folder): moved aside whole, never followed,
so the chat can be saved again. The folders are made by `safefs.make_folder` (never through a symlink).
"""
from __future__ import annotations

import errno
import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import xxhash

from engine.kvstore import kvfile
from engine.base.safefs import (UnsafePathError, atomic_write, is_regular, make_folder, open_regular,
                                unlink_inside)

VERSION = 2                 # 2: checksum; 1 (no checksum) is still read: the KV layout is the same
READABLE_VERSIONS = (1, 2)
MAX_BYTES = 64 << 20        # a manifest larger than this is refused before it is read
KINDS = ("pinned", "regular")
ROLES = ("system", "user", "assistant", "tool")
MAX_TOKEN_ID = 1 << 31
_KEY = re.compile(r"[0-9a-f]{40}\Z")
_TAIL_SUFFIX = re.compile(r"\.[0-9a-f]{8}\.kvt\Z")


class ManifestError(Exception):
    """A manifest is unusable; the message says why (shown as `manifest_error`)."""


@dataclass
class Manifest:
    session_id: str
    kind: str
    fingerprint: str
    cache_salt: str | None
    block_tokens: int
    tokens: list[int] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)
    tail: str | None = None
    transcript: list[dict[str, str]] = field(default_factory=list)
    updated: float = 0.0
    version: int = VERSION
    # The token-exact history (engine.generation.history: ids, text, marks); checked by TokenHistory.from_json.
    history: dict[str, Any] | None = None


def is_block_key(name: object) -> bool:
    return isinstance(name, str) and bool(_KEY.match(name))


def is_tail_name(name: object, session_id: str) -> bool:
    """`<session id>.<8 hex>.kvt`: a bare name, this session's own."""
    return (isinstance(name, str) and name.startswith(session_id + ".")
            and bool(_TAIL_SUFFIX.match(name[len(session_id):])))


def canonical_id(text: str) -> str | None:
    """The canonical form of a session id (a UUID), or None when it is not one."""
    try:
        sid = str(uuid.UUID(text))
    except (ValueError, TypeError, AttributeError):
        return None
    return sid if sid == text else None


def _checksum(data: dict[str, Any]) -> str:
    body = {k: v for k, v in data.items() if k != "checksum"}
    return xxhash.xxh3_64_hexdigest(json.dumps(body, sort_keys=True, separators=(",", ":"),
                                               ensure_ascii=False).encode())


def seal(data: dict[str, Any]) -> dict[str, Any]:
    """The same fields plus their checksum (what `encode` writes)."""
    return {**{k: v for k, v in data.items() if k != "checksum"}, "checksum": _checksum(data)}


def encode(m: Manifest) -> bytes:
    data = {"version": VERSION, "session_id": m.session_id, "kind": m.kind, "fingerprint": m.fingerprint,
            "cache_salt": m.cache_salt, "block_tokens": m.block_tokens, "tokens": m.tokens, "blocks": m.blocks,
            "tail": m.tail, "transcript": m.transcript, "updated": m.updated or time.time()}
    if m.history is not None:
        data["history"] = m.history
    return json.dumps(seal(data), ensure_ascii=False).encode()


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise ManifestError(what)


def _is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def validate(data: object, session_id: str) -> Manifest:
    """A Manifest from parsed JSON, or ManifestError naming the first bad field."""
    _need(isinstance(data, dict), "not a JSON object")
    assert isinstance(data, dict)
    version = data.get("version")
    _need(_is_int(version) and version in READABLE_VERSIONS, f"unknown version {version!r}")
    assert isinstance(version, int)
    if version >= 2:
        _need(data.get("checksum") == _checksum(data), "checksum mismatch (the file is damaged)")
    _need(data.get("session_id") == session_id, "session_id differs from the file's name")
    kind = data.get("kind")
    _need(kind in KINDS, f"bad kind {kind!r}")
    assert isinstance(kind, str)
    fingerprint = data.get("fingerprint")
    _need(isinstance(fingerprint, str), "bad fingerprint")
    assert isinstance(fingerprint, str)
    salt = data.get("cache_salt")
    _need(salt is None or isinstance(salt, str), "bad cache_salt")
    bt = data.get("block_tokens")
    _need(_is_int(bt) and 0 < bt <= 1 << 20, "bad block_tokens")
    assert isinstance(bt, int)
    tokens = data.get("tokens", [])
    _need(isinstance(tokens, list) and all(_is_int(t) and 0 <= t < MAX_TOKEN_ID for t in tokens), "bad tokens")
    blocks = data.get("blocks", [])
    _need(isinstance(blocks, list) and all(is_block_key(k) for k in blocks), "bad block key")
    tail = data.get("tail")
    _need(tail is None or is_tail_name(tail, session_id), "bad tail name")
    transcript = data.get("transcript", [])
    _need(isinstance(transcript, list) and all(
        isinstance(t, dict) and t.get("role") in ROLES and isinstance(t.get("content"), str)
        for t in transcript), "bad transcript")
    updated = data.get("updated", 0.0)
    _need(isinstance(updated, (int, float)) and not isinstance(updated, bool), "bad updated")
    history = data.get("history")
    _need(history is None or isinstance(history, dict), "bad history")
    return Manifest(session_id, kind, fingerprint, salt, bt, list(tokens), list(blocks), tail,
                    [{"role": t["role"], "content": t["content"]} for t in transcript], float(updated), version,
                    history=history)


def _reason(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return "a symlink, not a file"
    if isinstance(exc, UnsafePathError):
        return str(exc).split(": ", 1)[-1]          # the file's name is said already
    return str(exc.strerror or exc)


def read(path: Path, session_id: str, root: Path | None = None) -> Manifest:
    """Reads and validates one manifest file (below `root` with no symlinked folder on the way,
    when given); FileNotFoundError when there is none."""
    try:
        with open_regular(path, root) as f:
            size = os.fstat(f.fileno()).st_size
            _need(size <= MAX_BYTES, f"too large ({size} bytes)")
            raw = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ManifestError(f"unreadable ({_reason(exc)})") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ManifestError("not valid JSON (truncated or damaged)") from None
    return validate(data, session_id)


def _read_valid_bytes(path: Path, session_id: str) -> bytes:
    with open_regular(path) as f:
        raw = f.read(MAX_BYTES + 1)
    try:
        validate(json.loads(raw.decode("utf-8")), session_id)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ManifestError("not valid JSON") from None
    return raw


def _write_file(path: Path, data: bytes) -> None:
    """Into an existing folder (the previous version: not through kvfile.atomic_write, which counts
    and fails the session's own writes in tests)."""
    atomic_write(path, data)


@dataclass
class Loaded:
    manifest: Manifest | None
    error: str | None = None        # why the current manifest was not used (then moved aside)


class ManifestDir:
    """The `sessions/` folder: current manifests, previous versions, damaged ones moved aside."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.state = self.root.parent       # nothing below it is written through a symlink
        self.prev = self.root / "prev"
        self.damaged = self.root / "damaged"

    def path(self, sid: str) -> Path:
        return self.root / f"{sid}.json"

    def ids(self) -> list[str]:
        """Every session with a current or a previous manifest (well-formed names only)."""
        out: set[str] = set()
        for folder in (self.root, self.prev):
            if folder.is_dir():
                for p in folder.glob("*.json"):
                    sid = canonical_id(p.stem)
                    if sid is not None:
                        out.add(sid)
        return sorted(out)

    def load(self, sid: str, repair: bool = True) -> Loaded:
        """The session's manifest; a damaged one is moved aside (with `repair`; otherwise left
        as it is, for a look without side effects) and the previous version used."""
        error = None
        try:
            return Loaded(read(self.path(sid), sid))
        except FileNotFoundError:
            pass
        except ManifestError as exc:
            error = f"{sid}.json: {exc}"
            if repair:
                try:
                    error += f"; moved to {self._move_aside(sid)}"
                except OSError as why:
                    error += f"; could not move it aside ({_reason(why)})"
        try:
            m = read(self.prev / f"{sid}.json", sid, self.state)
        except (FileNotFoundError, ManifestError):
            m = None
        if error is None and m is not None:
            error = f"{sid}.json: missing"
        if error is not None:
            error += "; restored the previous version" if m is not None else "; no previous version to restore"
        return Loaded(m, error)

    def _move_aside(self, sid: str, src: Path | None = None) -> str:
        """Moves what is in the manifest's place (or at `src`): a damaged file, or a FIFO, a symlink
        or a folder (the entry itself, never what it points to), to damaged/ under a new name;
        returns where. OSError when it cannot be moved (then it stays where it is)."""
        make_folder(self.state, self.damaged)
        name = f"{sid}.{time.strftime('%Y%m%dT%H%M%S')}.{uuid.uuid4().hex[:6]}.json"
        os.replace(src or self.path(sid), self.damaged / name)
        return f"sessions/damaged/{name}"

    def write(self, m: Manifest) -> str | None:
        """Keeps the current manifest as the previous version, then writes the new one atomically.
        A current one that is not a valid manifest (damaged, or something else put in its place)
        is moved aside first, never overwritten: returns the note saying so, else None."""
        make_folder(self.state, self.root)
        path = self.path(m.session_id)
        note = None
        try:
            current = _read_valid_bytes(path, m.session_id)
        except FileNotFoundError:
            current = None
        except (ManifestError, OSError) as exc:
            current = None          # nothing good to keep: the previous version stays as it is
            why = _reason(exc) if isinstance(exc, OSError) else str(exc)
            try:
                note = f"{path.name}: {why}; moved to {self._move_aside(m.session_id)}"
            except OSError as failed:
                raise ManifestError(f"{path.name}: {why}, and it cannot be moved aside ({_reason(failed)})") from None
        if current is not None:
            prev = make_folder(self.state, self.prev) / f"{m.session_id}.json"
            if os.path.lexists(prev) and not is_regular(prev):
                self._move_aside(m.session_id, prev)    # a folder or a FIFO there would fail every save
            _write_file(prev, current)
        kvfile.atomic_write(path, [encode(m)])   # looked up at call time (tests patch it)
        return note

    def remove(self, sid: str) -> None:
        """Forgets the session: its manifest, previous version and damaged copies (the user
        deleted the chat: no copy of its text stays behind)."""
        damaged = list(self.damaged.glob(f"{sid}.*.json")) if self.damaged.is_dir() else []
        for p in [self.path(sid), self.prev / f"{sid}.json", *damaged]:
            unlink_inside(self.root.parent, p)
