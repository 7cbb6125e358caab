"""API keys and cache salts.

The server decides every session's cache salt: each API key gets its own namespace (an HMAC of the
key under a secret kept in Amber's state folder, so the salt cannot be guessed or computed from the
key alone), and a caller-supplied `cache_salt` only subdivides its own key's namespace. A request can
therefore never name another key's namespace, whatever it sends (the lesson of vLLM's cache_salt and
of Gu et al., arXiv 2502.07776: a shared prefix cache leaks prompts through time to first token).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from engine.base.safefs import make_folder, open_regular
from engine.kvstore.kvfile import atomic_write
from .errors import ApiError

SECRET_FILE = "server-secret"


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the namespace of its key (also the owner of its stored responses)."""
    namespace: str

    def salt(self, cache_salt: str | None) -> str:
        """The session salt: the key's namespace, subdivided by the caller's own salt if given."""
        if cache_salt is None:
            return self.namespace
        sub = hashlib.sha256(f"{self.namespace}\0{cache_salt}".encode()).hexdigest()
        return f"{self.namespace[:16]}.{sub}"


def load_secret(state_dir: Path) -> bytes:
    """The server's 256-bit secret (created once, mode 0600, written atomically)."""
    path = Path(state_dir) / SECRET_FILE
    try:
        with open_regular(path) as f:      # never blocks on a FIFO, never follows a symlink
            data = f.read(65)
        if len(data) == 64:
            return bytes.fromhex(data.decode())
    except (OSError, ValueError):     # unreadable or damaged: a new secret (stored responses stay unreachable)
        pass
    value = secrets.token_bytes(32)
    make_folder(Path(state_dir).parent, path.parent)      # never through a symlinked server/
    atomic_write(path, [value.hex().encode()])
    try:
        os.chmod(path, 0o600)
    except OSError:
        pass
    return value


class KeyRing:
    """The accepted bearer keys (none: the server is open, everyone in one namespace)."""

    def __init__(self, keys: Sequence[str], secret: bytes) -> None:
        self._secret = secret
        self._keys = [k.encode() for k in keys if k]
        self.required = bool(self._keys)

    def _namespace(self, key: bytes) -> str:
        return hmac.new(self._secret, b"key:" + key, hashlib.sha256).hexdigest()

    def caller(self, authorization: str | None) -> Caller:
        if not self.required:
            return Caller(self._namespace(b""))
        if not authorization:
            raise ApiError(401, "missing API key: send 'Authorization: Bearer <key>'", code="invalid_api_key",
                           headers={"WWW-Authenticate": "Bearer"})
        scheme, _, token = authorization.partition(" ")
        given = token.strip().encode()
        if scheme.lower() != "bearer" or not given:
            raise ApiError(401, "the Authorization header must be 'Bearer <key>'", code="invalid_api_key",
                           headers={"WWW-Authenticate": "Bearer"})
        match = None
        for key in self._keys:      # every key compared, in constant time each
            if hmac.compare_digest(key, given):
                match = key
        if match is None:
            raise ApiError(401, "invalid API key", code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
        return Caller(self._namespace(match))
