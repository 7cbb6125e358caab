"""HTTP for remote engines: the endpoint, bounded reads, server-sent events, one-line errors.

Everything a server sends is untrusted: bodies and event lines have hard size limits, JSON that is
not the expected shape becomes a `RemoteError` naming the cause, and no exception from the HTTP
stack escapes as a traceback. The API key is sent only as a bearer header to the configured host
(redirects are not followed, proxies from the environment are not used) and never appears in a
message, a repr or a log line.
"""
from __future__ import annotations

import json
import re
import socket
from dataclasses import dataclass, field
from typing import Any, Iterator
from urllib.parse import urlsplit, urlunsplit

import httpx2 as httpx

MAX_ERROR_BODY = 64 * 1024          # bytes read from a failed response
MAX_JSON_BODY = 8 * 1024 * 1024     # a /models listing or a non-streamed reply
MAX_EVENT_LINE = 1024 * 1024        # one SSE line
MAX_STREAM_BYTES = 64 * 1024 * 1024  # a whole streamed reply
FLAVORS = ("auto", "vllm", "llamacpp", "amber", "openai")


class RemoteError(Exception):
    """A remote server could not be used; the message is one line saying why."""


class ContextOverflow(RemoteError):
    """The server refused the prompt as longer than its context window (a 400 saying so)."""


# How servers word "the prompt does not fit": OpenAI / vLLM ("maximum context length"), llama.cpp
# ("exceeds the available context size"), llama-cpp-python ("exceed context window"), Amber
# (code context_length_exceeded: "the prompt has N tokens; this server accepts at most M").
_OVERFLOW = re.compile(r"context[ _](length|size|window)|maximum context|prompt has \d+ tokens", re.I)


@dataclass
class RemoteEndpoint:
    """An OpenAI-compatible server: base URL (…/v1), optional API key, the model to use."""
    base_url: str
    model: str
    api_key: str = field(default="", repr=False)
    flavor: str = "auto"                # auto | vllm | llamacpp | amber | openai (sends no extras)
    name: str = ""                      # the label in the model picker
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 300.0       # longest silence between two bytes (a big prompt's prefill)

    def __post_init__(self) -> None:
        self.base_url = normalize_base_url(self.base_url)
        self.model = (self.model or "").strip()
        self.api_key = (self.api_key or "").strip()
        if self.flavor not in FLAVORS:
            self.flavor = "auto"

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).netloc

    @property
    def label(self) -> str:
        return self.name or f"{self.model or '?'} @ {self.host}"

    def __repr__(self) -> str:   # the key never shows, even in a traceback's locals
        key = "set" if self.api_key else "none"
        return f"RemoteEndpoint({self.base_url!r}, model={self.model!r}, key={key}, flavor={self.flavor})"


def normalize_base_url(url: str) -> str:
    """`http(s)://host[:port][/path]` without a trailing slash; a bare host gets `/v1`."""
    raw = (url or "").strip()
    if raw and "://" not in raw:
        raw = "http://" + raw
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise RemoteError(f"not a server address: {url!r} ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(f"not a server address: {url!r} (expected http://host:port/v1)")
    path = parts.path.rstrip("/") or "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def one_line(text: Any, limit: int = 300) -> str:
    """Printable, single-line, bounded: what a server said, fit for a status bar."""
    s = re.sub(r"[\x00-\x1f\x7f]+", " ", str(text)).strip()
    return s if len(s) <= limit else s[: limit - 1] + "…"


def redact(ep: RemoteEndpoint, text: str) -> str:
    """`text` without the endpoint's API key (a server may echo it back in an error)."""
    return text.replace(ep.api_key, "[key]") if len(ep.api_key) >= 4 else text


def make_client(ep: RemoteEndpoint) -> httpx.Client:
    headers = {"Accept": "application/json, text/event-stream", "User-Agent": "Amber"}
    if ep.api_key:
        headers["Authorization"] = f"Bearer {ep.api_key}"
    timeout = httpx.Timeout(ep.read_timeout_s, connect=ep.connect_timeout_s, write=30.0, pool=10.0)
    return httpx.Client(headers=headers, timeout=timeout, follow_redirects=False, trust_env=False)


def server_message(body: bytes) -> str:
    """The human part of an error body: OpenAI's `error.message`, FastAPI's `detail`, or text."""
    try:
        data = json.loads(body.decode("utf-8", "replace"))
    except ValueError:
        return one_line(body.decode("utf-8", "replace"), 200)
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or err.get("msg")
            if msg:
                return one_line(msg, 200)
        elif isinstance(err, str):
            return one_line(err, 200)
        if "detail" in data:
            return one_line(data["detail"], 200)
    return one_line(json.dumps(data)[:200], 200)


def status_error(ep: RemoteEndpoint, status: int, body: bytes, what: str) -> RemoteError:
    """A RemoteError for an HTTP error status, worded by what it usually means."""
    said = redact(ep, server_message(body))
    said = f": {said}" if said else ""
    if status in (401, 403):
        hint = "no API key was given" if not ep.api_key else "the API key was refused"
        return RemoteError(f"{ep.host} answered {status} ({hint}){said}")
    if status == 404:
        return RemoteError(f"{ep.host} answered 404 for {what} (unknown model {ep.model!r} "
                           f"or not an OpenAI-compatible address; the base URL usually ends in /v1){said}")
    if status in (429, 503):
        return RemoteError(f"{ep.host} is busy ({status}); try again in a moment{said}")
    if status == 413:
        return RemoteError(f"{ep.host} refused the request as too large (413){said}")
    if status == 400 and _OVERFLOW.search(body[:MAX_ERROR_BODY].decode("utf-8", "replace")):
        return ContextOverflow(f"{ep.host} rejected the request ({status}): the chat is longer than "
                               f"the model's context window{said}")
    if 400 <= status < 500:
        return RemoteError(f"{ep.host} rejected the request ({status}){said}")
    return RemoteError(f"{ep.host} failed with a server error ({status}){said}")


def transport_error(ep: RemoteEndpoint, exc: BaseException) -> RemoteError:
    """A RemoteError for a network failure (refused, timed out, cut off, bad TLS, …)."""
    if isinstance(exc, RemoteError):
        return exc
    if isinstance(exc, httpx.ConnectTimeout):
        return RemoteError(f"cannot reach {ep.host}: no answer within {ep.connect_timeout_s:g} s")
    if isinstance(exc, httpx.ConnectError):
        return RemoteError(f"cannot reach {ep.host}: {one_line(exc, 160) or 'connection failed'}")
    if isinstance(exc, httpx.ReadTimeout):
        return RemoteError(f"{ep.host} sent nothing for {ep.read_timeout_s:g} s (timed out)")
    if isinstance(exc, httpx.TimeoutException):
        return RemoteError(f"{ep.host} timed out ({type(exc).__name__})")
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
        return RemoteError(f"{ep.host} closed the connection in the middle of the reply")
    if isinstance(exc, httpx.HTTPError):
        return RemoteError(f"{ep.host}: {type(exc).__name__}: {one_line(exc, 160)}")
    return RemoteError(f"{ep.host}: {type(exc).__name__}: {one_line(exc, 160)}")


def read_bounded(response: httpx.Response, limit: int) -> bytes:
    """The response body, or RemoteError once it passes `limit` bytes (never unbounded)."""
    out = bytearray()
    for chunk in response.iter_raw():
        out += chunk
        if len(out) > limit:
            raise RemoteError(f"the server's answer is larger than {limit // 1024} KiB; not read")
    return bytes(out)


def read_error_body(response: httpx.Response) -> bytes:
    try:
        return read_bounded(response, MAX_ERROR_BODY)
    except (RemoteError, httpx.HTTPError):
        return b""


def parse_json(body: bytes, what: str) -> Any:
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise RemoteError(f"{what} is not JSON: {one_line(body[:80].decode('utf-8', 'replace'), 80)!r}") from None


def sse_data(response: httpx.Response) -> Iterator[str]:
    """The `data:` payloads of a server-sent event stream, with every line and the total bounded.

    Multi-line data fields are joined with newlines (the SSE rule); comments and other fields
    (`event:`, `id:`, `retry:`) are skipped."""
    buf = bytearray()
    total = 0
    data: list[str] = []
    for chunk in response.iter_raw():
        total += len(chunk)
        if total > MAX_STREAM_BYTES:
            raise RemoteError(f"the reply stream passed {MAX_STREAM_BYTES >> 20} MiB; stopped reading")
        buf += chunk
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                if len(buf) > MAX_EVENT_LINE:
                    raise RemoteError(f"the server sent a line longer than {MAX_EVENT_LINE >> 10} KiB")
                break
            line = bytes(buf[:nl]).rstrip(b"\r")
            del buf[: nl + 1]
            if not line:
                if data:
                    yield "\n".join(data)
                    data = []
                continue
            if line.startswith(b":"):
                continue
            name, _, value = line.partition(b":")
            if name == b"data":
                data.append(value[1:].decode("utf-8", "replace") if value.startswith(b" ")
                            else value.decode("utf-8", "replace"))
    if buf.strip():
        line = bytes(buf).rstrip(b"\r")
        if line.startswith(b"data:"):
            data.append(line[5:].lstrip(b" ").decode("utf-8", "replace"))
    if data:
        yield "\n".join(data)


def socket_of(response: httpx.Response) -> socket.socket | None:
    """The socket under a streaming response (to cut a blocked read short), if the stack exposes it."""
    stream = response.extensions.get("network_stream")
    try:
        sock = stream.get_extra_info("socket") if stream is not None else None
    except Exception:  # noqa: BLE001 - an implementation detail; cancelling falls back to waiting
        return None
    return sock if isinstance(sock, socket.socket) else None
