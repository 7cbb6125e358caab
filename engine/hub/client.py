"""The Hub connection: endpoint, token, offline mode, and errors turned into one-line messages.

huggingface_hub reads `HF_ENDPOINT` once, at import (constants.ENDPOINT); Amber reads it on every
call and passes it explicitly, so a changed environment (tests, a GUI setting) takes effect.
"""
from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Any, Iterator

from engine.base import paths
from .errors import AuthRequired, DiskFull, HubError, NotFound, OfflineError

DEFAULT_ENDPOINT = "https://huggingface.co"
TOKEN_FILE = "hf-token"   # under amber_home(), mode 0600


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
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(token)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def resolve_token(explicit: str | None = None) -> str | None:
    """The token to send: the one given, else `HF_TOKEN`, else the one Amber stored, else none.
    (huggingface_hub's own token file is not read: Amber only sends what the user gave it.)"""
    for candidate in (explicit, os.environ.get("HF_TOKEN"), stored_token()):
        if candidate and candidate.strip():
            return candidate.strip()
    return None


def api(token: str | None = None) -> Any:
    from huggingface_hub import HfApi
    _quiet()
    # token=False: never fall back to a token file of huggingface_hub's that the user did not give Amber
    return HfApi(endpoint=endpoint(), token=resolve_token(token) or False)


def _quiet() -> None:
    """huggingface_hub logs retries and fallbacks as warnings; Amber reports its own one line."""
    import logging
    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)


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
    except (KeyError, TypeError, AttributeError):
        raise HubError(f"{what}: the Hub's answer is malformed") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
