"""The Hub connection: endpoint, token, offline mode, bounded JSON answers, and errors turned
into one-line messages.

huggingface_hub reads `HF_ENDPOINT` once, at import (constants.ENDPOINT); Amber reads it on every
call and passes it explicitly, so a changed environment (tests, a GUI setting) takes effect.
Everything the Hub answers is untrusted: a JSON answer is read up to a size and a time bound and
refused when nested deeper than any real answer is, before it is parsed.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from engine.base import paths
from engine.base.safefs import atomic_write
from engine import config
from .errors import AuthRequired, DiskFull, HubError, NotFound, OfflineError

DEFAULT_ENDPOINT = "https://huggingface.co"
TOKEN_FILE = "hf-token"   # under amber_home(), mode 0600

MAX_JSON_BYTES = 32 << 20        # a model info listing thousands of files is a few MB
MAX_JSON_DEPTH = 64              # the Hub's answers nest a handful of levels
JSON_TIMEOUT_S = 20.0            # per read (connect, each chunk)
JSON_DEADLINE_S = 120.0          # the whole answer, however slowly it trickles in
ERROR_BODY_BYTES = 64 << 10      # what is read of an error answer's body

# Downloads: bounds on reconnecting to a server that stalls or drops the connection
MAX_ATTEMPTS_ENV = config.HUB_MAX_ATTEMPTS
DEADLINE_ENV = config.HUB_DEADLINE_S
MAX_ATTEMPTS = 20                # connections per file, progress or not
DEADLINE_BASE_S = 600.0          # a file's time bound: this, plus its size at MIN_RATE
MIN_RATE = 128 << 10             # bytes per second


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def is_offline() -> bool:
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in {"1", "ON", "YES", "TRUE"}


def check_online() -> None:
    if is_offline():
        raise OfflineError("offline mode is on (HF_HUB_OFFLINE): models cannot be searched or downloaded")


# ---- token -----------------------------------------------------------------------------------
def token_path() -> Path:
    return paths.amber_home() / TOKEN_FILE


def stored_token() -> str | None:
    try:
        text = token_path().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def store_token(token: str | None) -> None:
    """Saves (or with None/"" forgets) the token Amber uses: a 0600 file, written atomically."""
    path = token_path()
    if not token:
        path.unlink(missing_ok=True)
        return
    token = token.strip()
    if not token or any(c.isspace() for c in token) or len(token) > 512:
        raise HubError("that does not look like a Hugging Face token")
    atomic_write(path, token, private=True, parents=True)


def resolve_token(explicit: str | None = None) -> str | None:
    """The token to send: the one given, else `HF_TOKEN`, else the one Amber stored, else none.
    (huggingface_hub's own token file is not read: Amber only sends what the user gave it.)"""
    for candidate in (explicit, os.environ.get("HF_TOKEN"), stored_token()):
        if candidate and candidate.strip():
            return candidate.strip()
    return None


def _quiet() -> None:
    """huggingface_hub logs retries and fallbacks as warnings; Amber reports its own one line."""
    import logging
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)


# ---- download bounds ---------------------------------------------------------------------------
@dataclass(frozen=True)
class DownloadLimits:
    """How long Amber keeps at one file: at most `max_attempts` connections (a reconnect after
    progress counts too) and `deadline_s` seconds in all; then the partial file is kept for a
    later run. Both can be set through the environment (AMBER_HUB_MAX_ATTEMPTS, AMBER_HUB_DEADLINE_S)."""
    max_attempts: int
    deadline_s: float


def download_limits(size: int) -> DownloadLimits:
    """The bounds for a file of `size` bytes; a malformed setting is a one-line HubError."""
    try:
        attempts = config.settings().hub_max_attempts
        deadline = config.settings().hub_deadline_s
    except config.SettingError as exc:
        raise HubError(str(exc)) from None
    return DownloadLimits(max_attempts=attempts if attempts is not None else MAX_ATTEMPTS,
                          deadline_s=deadline if deadline is not None else DEADLINE_BASE_S + size / MIN_RATE)


# ---- bounded JSON answers ----------------------------------------------------------------------
_JSON_TOKENS = re.compile(rb'[\[\]{}"\\]')


def json_too_deep(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether `raw` nests arrays/objects deeper than `limit` (strings skipped; linear time), so
    the parser never recurses on what a hostile server chose."""
    depth, in_string, skip_at = 0, False, -1
    for m in _JSON_TOKENS.finditer(raw):
        pos = m.start()
        if pos == skip_at:              # the character after a backslash inside a string
            continue
        c = raw[pos]
        if in_string:
            if c == 0x5C:
                skip_at = pos + 1
            elif c == 0x22:
                in_string = False
        elif c == 0x22:
            in_string = True
        elif c in (0x5B, 0x7B):
            depth += 1
            if depth > limit:
                return True
        elif c in (0x5D, 0x7D):
            depth -= 1
    return False


def parse_json(raw: bytes, what: str) -> Any:
    """`raw` parsed, or a one-line HubError (not UTF-8 JSON, or nested deeper than MAX_JSON_DEPTH).
    UTF-8 only (as JSON on the network must be): there, the bytes the depth scan looks for never
    occur inside another character, so the scan sees what the parser will."""
    try:
        text = raw.decode("utf-8-sig")      # a leading BOM is allowed, as json.loads allows it
    except UnicodeDecodeError as exc:
        raise HubError(f"{what}: the Hub's answer is not UTF-8 (byte {exc.start})") from None
    if json_too_deep(raw):
        raise HubError(f"{what}: the Hub's answer is nested more than {MAX_JSON_DEPTH} levels deep")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise HubError(f"{what}: the Hub's answer is not JSON ({_first_line(exc)})") from None


def get_json(url: str, what: str, *, params: dict[str, Any] | None = None, token: str | None = None,
             max_bytes: int = MAX_JSON_BYTES) -> Any:
    """GET `url` (huggingface_hub's session and headers) and parse the JSON answer, read within
    `max_bytes` and JSON_DEADLINE_S; every failure is a one-line HubError naming `what`."""
    from huggingface_hub.utils import build_hf_headers, get_session
    headers = build_hf_headers(token=resolve_token(token) or False)
    deadline = time.monotonic() + JSON_DEADLINE_S
    with hub_errors(what):
        with get_session().stream("GET", url, params=params, headers=headers, timeout=JSON_TIMEOUT_S) as r:
            raise_for_status(r)
            chunks, total = [], 0
            for piece in r.iter_bytes():
                total += len(piece)
                if total > max_bytes:
                    raise HubError(f"{what}: the Hub's answer is larger than {max_bytes >> 20} MiB")
                if time.monotonic() > deadline:
                    raise OfflineError(f"{what}: the Hub's answer took longer than {JSON_DEADLINE_S:.0f} s")
                chunks.append(piece)
        return parse_json(b"".join(chunks), what)


def raise_for_status(r: Any) -> None:
    """huggingface_hub's status check (its typed errors: gated, not found, ...) on at most
    ERROR_BODY_BYTES of an error answer's body, so a huge or endless error body is never read whole."""
    import httpx2
    from huggingface_hub.utils import hf_raise_for_status
    if r.status_code < 400:
        hf_raise_for_status(r)
        return
    body = b""
    with contextlib.suppress(httpx2.HTTPError):
        for piece in r.iter_bytes():
            body += piece
            if len(body) >= ERROR_BODY_BYTES:
                break
    kept = {k: v for k, v in r.headers.items()
            if k.lower() not in ("content-length", "content-encoding", "transfer-encoding")}
    hf_raise_for_status(httpx2.Response(r.status_code, headers=kept, content=body[:ERROR_BODY_BYTES],
                                        request=r.request))


# ---- errors ----------------------------------------------------------------------------------
@contextlib.contextmanager
def hub_errors(what: str) -> Iterator[None]:
    """Turns huggingface_hub / httpx / OS errors raised inside into one-line HubErrors."""
    import httpx2
    from huggingface_hub import errors as hf
    _quiet()
    try:
        yield
    except HubError:
        raise
    except hf.GatedRepoError:
        raise AuthRequired(f"{what}: the repo is gated: accept its terms on the Hugging Face website, "
                           "then give a token (HF_TOKEN, or `amber-engine models token`)") from None
    except (hf.RepositoryNotFoundError, hf.RevisionNotFoundError) as exc:
        response = getattr(exc, "response", None)
        if response is not None and response.status_code == 401:
            if resolve_token():
                raise AuthRequired(f"{what}: not found, or the token is refused (401)") from None
            raise AuthRequired(f"{what}: not found, or private (401): give a token if you have access") from None
        raise NotFound(f"{what}: not found on {endpoint()}") from None
    except hf.RemoteEntryNotFoundError:
        raise NotFound(f"{what}: no such file in the repo") from None
    except hf.OfflineModeIsEnabled:
        raise OfflineError(f"{what}: offline mode is on (HF_HUB_OFFLINE)") from None
    except hf.HfHubHTTPError as exc:
        response = getattr(exc, "response", None)
        code = response.status_code if response is not None else "?"
        if code in (401, 403):
            raise AuthRequired(f"{what}: access refused ({code}): a token with access is needed") from None
        raise HubError(f"{what}: the Hub answered HTTP {code}") from None
    except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
        raise OfflineError(f"{what}: cannot reach {endpoint()} (no network?): {_first_line(exc)}") from None
    except (httpx2.TimeoutException, httpx2.NetworkError, httpx2.RemoteProtocolError) as exc:
        raise OfflineError(f"{what}: the connection to {endpoint()} failed: {_first_line(exc)}") from None
    except httpx2.HTTPError as exc:
        raise HubError(f"{what}: {_first_line(exc)}") from None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFull(f"{what}: the disk is full ({exc.filename or 'no space left'})") from None
        raise HubError(f"{what}: {exc.strerror or exc}") from None
    except ValueError as exc:   # bad JSON, bad repo id (HFValidationError is a ValueError)
        raise HubError(f"{what}: {_first_line(exc)}") from None
    except RecursionError:
        raise HubError(f"{what}: the Hub's answer is nested too deeply") from None
    except (KeyError, TypeError, AttributeError):
        raise HubError(f"{what}: the Hub's answer is malformed") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
