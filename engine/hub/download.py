"""One file from the Hub, resumable: `<file>.part` plus a sidecar naming what it is a part of.

huggingface_hub builds the URL and headers (endpoint, token, user agent), reads the file's
metadata (HEAD: commit, ETag, size) and owns the HTTP session; the byte loop is Amber's own so
that it can report speed and time left, stop on cancel, keep the partial file for a later run
(huggingface_hub 2.4 deletes its temporary file on any failure), hash while it writes and refuse
more bytes than the Hub announced.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from engine.base.safefs import atomic_write

from .client import DownloadLimits, check_online, download_limits, endpoint, hub_errors, raise_for_status, resolve_token
from .errors import Cancelled, ChecksumMismatch, DiskFull, GaveUp, HubError, OfflineError
from .fit import free_space
from .search import HubFile

CHUNK = 1 << 20
RETRIES = 5                  # reconnects in a row without progress (each with a Range request)
PROGRESS_EVERY_S = 0.2
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class CancelToken(Protocol):
    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class Progress:
    stage: str               # "download" | "verify" | "convert" | "install"
    done: int
    total: int
    speed: float = 0.0       # bytes per second (download)
    eta_s: float | None = None
    what: str = ""

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total > 0 else 0.0


ProgressFn = Callable[[Progress], None]


class _Meter:
    """Speed as a moving average over the last few seconds; time left from it."""

    def __init__(self, total: int, progress: ProgressFn | None, what: str) -> None:
        self.total, self.progress, self.what = total, progress, what
        self.samples: list[tuple[float, int]] = []
        self.last = 0.0

    def update(self, done: int, force: bool = False) -> None:
        now = time.monotonic()
        self.samples.append((now, done))
        while len(self.samples) > 2 and now - self.samples[0][0] > 5.0:
            self.samples.pop(0)
        if self.progress is None or (not force and now - self.last < PROGRESS_EVERY_S):
            return
        self.last = now
        (t0, d0), (t1, d1) = self.samples[0], self.samples[-1]
        speed = (d1 - d0) / (t1 - t0) if t1 > t0 else 0.0
        eta = (self.total - done) / speed if speed > 0 else None
        self.progress(Progress("download", done, self.total, speed, eta, self.what))


def _sidecar(part: Path) -> Path:
    return part.with_name(part.name + ".json")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, json.dumps(data))


def is_complete(dest: Path, f: HubFile, revision: str) -> bool:
    meta = _read_json(_sidecar(dest))
    return (dest.is_file() and meta.get("complete") is True and meta.get("revision") == revision
            and (not f.sha256 or meta.get("sha256") == f.sha256) and dest.stat().st_size == f.size)


def download_file(repo: str, f: HubFile, revision: str, dest: Path, *, token: str | None = None,
                  progress: ProgressFn | None = None, cancel: CancelToken | None = None) -> Path:
    """Downloads `f` of `repo`@`revision` to `dest`, resuming `dest.part` when it is a part of the
    same file; checks the size and the SHA-256 the Hub lists. On cancel/interruption the part is
    kept; on a checksum mismatch nothing is kept."""
    with hub_errors(f"{repo}/{f.path}"):     # OS errors outside the byte loop too (sidecar, hashing)
        return _download(repo, f, revision, dest, token=token, progress=progress, cancel=cancel)


def _download(repo: str, f: HubFile, revision: str, dest: Path, *, token: str | None,
              progress: ProgressFn | None, cancel: CancelToken | None) -> Path:
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    if is_complete(dest, f, revision):
        return dest
    check_online()
    limits = download_limits(f.size)
    tok = resolve_token(token)
    url = hf_hub_url(repo, f.path, revision=revision, endpoint=endpoint())
    what = f"{repo}/{f.path}"
    with hub_errors(what):
        meta = get_hf_file_metadata(url, token=tok or False, endpoint=endpoint())
    size = meta.size if meta.size is not None else f.size
    if f.size and size != f.size:
        raise HubError(f"{what}: the Hub lists {f.size} bytes but serves {size}")
    expected_sha = f.sha256 or (meta.etag if meta.etag and _HEX64.match(meta.etag) else "")
    identity = {"repo": repo, "path": f.path, "revision": revision, "size": size, "sha256": expected_sha,
                "etag": meta.etag or ""}

    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    side = _sidecar(part)
    old = _read_json(side)
    resume_at = part.stat().st_size if part.is_file() else 0
    if not old or any(old.get(k) != v for k, v in identity.items()) or resume_at > size:
        part.unlink(missing_ok=True)       # a part of something else (or of an older commit)
        resume_at = 0
    _write_json(side, identity)
    if free_space(part.parent) < size - resume_at:
        raise DiskFull(f"{what}: needs {size - resume_at} more bytes, {free_space(part.parent)} free")

    state = {"sha": hashlib.sha256()}
    if resume_at:
        _hash_existing(part, state["sha"], cancel)
    meter = _Meter(size, progress, f.path)
    headers = build_hf_headers(token=tok or False)
    headers["Accept-Encoding"] = "identity"
    done = resume_at
    bound = _Bound(limits, what, size)
    try:
        with _open_part(part) as out:
            attempts = 0
            while done < size:
                bound.connect(done)
                before = done
                try:
                    done = _stream(url, headers, out, state, done, size, meter, cancel, what, bound)
                    if done < size:
                        raise OfflineError(f"{what}: the connection closed at byte {done} of {size}")
                except GaveUp:
                    raise
                except OfflineError:
                    out.flush()
                    done = out.tell()        # what reached the file before the drop
                    attempts = attempts + 1 if done == before else 1
                    if attempts > RETRIES:
                        raise
                    time.sleep(min(0.2 * attempts, 2.0))
            out.flush()
            os.fsync(out.fileno())
    except DiskFull:
        part.unlink(missing_ok=True)    # give the space back; a later run starts over
        side.unlink(missing_ok=True)
        raise
    meter.update(done, force=True)
    if progress:
        progress(Progress("verify", size, size, what=f.path))
    digest = state["sha"].hexdigest()
    if expected_sha and digest != expected_sha:
        part.unlink(missing_ok=True)
        side.unlink(missing_ok=True)
        raise ChecksumMismatch(f"{what}: SHA-256 mismatch (expected {expected_sha[:12]}…, got "
                               f"{digest[:12]}…): the download was deleted")
    os.replace(part, dest)
    _write_json(side, {**identity, "complete": True})
    os.replace(side, _sidecar(dest))
    return dest


class _Bound:
    """The attempt and time bounds of one file's download: progress keeps a connection going,
    but never buys more connections or time than `limits` allow."""

    def __init__(self, limits: DownloadLimits, what: str, size: int) -> None:
        self.limits, self.what, self.size = limits, what, size
        self.started = time.monotonic()
        self.connections = 0

    def connect(self, done: int) -> None:
        """Before each connection: the first is always made; a later one only within the bounds."""
        if self.connections >= self.limits.max_attempts:
            raise GaveUp(f"{self.what}: gave up after {self.connections} connections ({done} of {self.size} "
                         "bytes; the server keeps stalling or dropping them): the partial download is kept, "
                         "run it again to resume")
        if self.connections:
            self.check(done)
        self.connections += 1

    def check(self, done: int) -> None:
        if time.monotonic() - self.started > self.limits.deadline_s:
            raise GaveUp(f"{self.what}: past its deadline of {self.limits.deadline_s:.0f} s ({done} of "
                         f"{self.size} bytes): the partial download is kept, run it again to resume")


def _open_part(part: Path) -> Any:
    return part.open("ab")


def _hash_existing(part: Path, sha: Any, cancel: CancelToken | None) -> None:
    with part.open("rb") as f:
        while chunk := f.read(8 * CHUNK):
            if cancel is not None and cancel.is_set():
                raise Cancelled("cancelled; the partial download is kept")
            sha.update(chunk)


def _stream(url: str, headers: dict[str, str], out: Any, state: dict[str, Any], done: int, size: int,
            meter: _Meter, cancel: CancelToken | None, what: str, bound: _Bound) -> int:
    """One GET from `done` on; returns the new position. Connection drops -> OfflineError."""
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    h = dict(headers)
    if done:
        h["Range"] = f"bytes={done}-"
    with hub_errors(what):
        try:
            with get_session().stream("GET", url, headers=h, timeout=constants.HF_HUB_DOWNLOAD_TIMEOUT) as r:
                raise_for_status(r)
                if done and r.status_code == 200:      # Range ignored: start over
                    out.seek(0)
                    out.truncate()
                    state["sha"] = hashlib.sha256()
                    done = 0
                elif done and r.status_code == 206:
                    start = (r.headers.get("Content-Range") or "").replace("bytes ", "").split("-")[0]
                    if start != str(done):
                        raise HubError(f"{what}: the server resumed at byte {start or '?'}, not {done}")
                # No chunk size: httpx then hands over what has arrived, so a drop loses nothing
                # that reached us; cancel is checked every CHUNK bytes.
                for piece in r.iter_bytes():
                    for i in range(0, len(piece), CHUNK):
                        chunk = piece[i:i + CHUNK]
                        if cancel is not None and cancel.is_set():
                            out.flush()
                            raise Cancelled("cancelled; the partial download is kept (run it again to resume)")
                        if done + len(chunk) > size:
                            raise HubError(f"{what}: the server sent more than the {size} bytes it announced")
                        out.write(chunk)
                        state["sha"].update(chunk)
                        done += len(chunk)
                        meter.update(done)
                    bound.check(done)         # a server dripping bytes never outlasts the deadline
        except httpx2.TransportError as exc:
            out.flush()
            raise OfflineError(f"{what}: the connection dropped at byte {done}: {exc}") from None
    return done
