"""`RemoteEngine`: the `ChatEngine` protocol over an OpenAI-compatible server (vLLM, llama.cpp's
server, Amber's own `amber-engine serve`, Ollama, …) for models too big for this machine.

What is sent: the chat's messages and sampling to `POST {base}/chat/completions` with
`stream: true` and `stream_options.include_usage`. Per server kind (the "flavor"):
- vLLM and Amber: a per-chat `cache_salt` (256 random bits, stored with the chat by the GUI) so that
  the server's prefix cache never serves one chat's KV to another request (timing side channels);
- llama.cpp's server: `cache_prompt: true`, so the slot keeps the chat's prefix between turns;
- anything else: only standard OpenAI fields (the OpenAI API rejects unknown ones).
Temporary chats send no `store`, no persisted salt (a salt held in memory for the session only, so
nothing else can ever hit its cached prefix) and `cache_prompt: false`. Sessions are client-side:
the store keeps the transcript, so pin/unpin only change what Amber keeps; the server keeps no
session for us. Figures come from what the server returns (`usage`, llama.cpp's `timings`,
Amber's `amber` field); time to first token and tokens/s are measured here when it gives none.
"""
from __future__ import annotations

import contextlib
import queue
import secrets
import socket
import threading
import time
from dataclasses import dataclass, fields
from typing import Any, Iterator, Mapping, Sequence

import httpx2 as httpx

from engine.api import (CacheSaltMismatch, CancelToken, ChatMessage, EngineCapabilities, FinishReason,
                        GenerationFigures, GenerationResult, KVLocation, ModelNotReady, OverflowPolicy,
                        SamplingParams, SessionBusy, SessionInfo, SessionKind, SessionKindConflict,
                        SessionNotOpen, StreamEvent, TextChunk)
from engine.remote.http import (MAX_JSON_BODY, ContextOverflow, RemoteEndpoint, RemoteError,
                          make_client, one_line, parse_json, read_bounded, read_error_body, redact, socket_of,
                          sse_data, status_error, transport_error)

__all__ = ["RemoteEndpoint", "RemoteEngine", "RemoteError", "detect_flavor", "list_models",
           "new_cache_salt"]

SALTED = ("vllm", "amber")            # servers that take a per-request cache_salt
FLAVOR_NAMES = {"vllm": "vLLM", "llamacpp": "llama.cpp", "amber": "Amber", "openai": "OpenAI API"}
_POLL_S = 0.05                        # how often a waiting generate() looks at its cancel token
MAX_OVERFLOW_RETRIES = 12             # requests one turn may take to fit the server's window


def new_cache_salt() -> str:
    """256 random bits, URL-safe (what vLLM's `cache_salt` takes)."""
    return secrets.token_urlsafe(32)


def list_models(ep: RemoteEndpoint, client: httpx.Client | None = None) -> list[dict[str, Any]]:
    """`GET {base}/models`: the server's model entries (each has at least an `id`)."""
    own = client is None
    client = client or make_client(ep)
    try:
        with client.stream("GET", ep.base_url + "/models") as r:
            if r.status_code != 200:
                raise status_error(ep, r.status_code, read_error_body(r), "/models")
            data = parse_json(read_bounded(r, MAX_JSON_BODY), f"{ep.host}'s model list")
    except (httpx.HTTPError, OSError) as exc:
        raise transport_error(ep, exc) from None
    finally:
        if own:
            client.close()
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise RemoteError(f"{ep.host}'s model list is not an OpenAI model list (no 'data' array)")
    return [m for m in items if isinstance(m, dict) and isinstance(m.get("id"), str)]


def detect_flavor(models: list[dict[str, Any]]) -> str:
    """Which server this is, from its model list's `owned_by` (vLLM says "vllm", llama.cpp's server
    "llamacpp", llama-cpp-python's "me", Amber's "amber"); "openai" (standard fields only) otherwise."""
    owners = {str(m.get("owned_by", "")).lower() for m in models}
    if "vllm" in owners:
        return "vllm"
    if owners & {"llamacpp", "llama.cpp", "me"} or any("meta" in m and "n_ctx_train" in
                                                       (m.get("meta") or {}) for m in models):
        return "llamacpp"
    if "amber" in owners:
        return "amber"
    return "openai"


def _context_of(entry: dict[str, Any]) -> int:
    """The context window a model entry states (vLLM: max_model_len; llama.cpp: meta.n_ctx_*)."""
    meta = entry.get("meta")
    if not isinstance(meta, dict):
        meta = {}
    for v in (entry.get("max_model_len"), entry.get("context_window"), entry.get("context_length"),
              meta.get("n_ctx"), meta.get("n_ctx_train")):
        if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 31:
            return v
    return 0


@dataclass
class _Session:
    kind: SessionKind
    salt: str | None          # the chat's stored salt (None for temporary chats)
    wire_salt: str | None     # what is sent: the stored salt, or a memory-only one
    tokens: int = 0
    generating: bool = False


def _drop_oldest(msgs: list[Any], keep_system: bool) -> tuple[list[Any], int]:
    """Leaves out the oldest messages (a quarter of them, at least one turn), never the last one."""
    def role(m: Any) -> str:
        return m.role if isinstance(m, ChatMessage) else str(m.get("role", ""))
    head = [m for m in msgs[:1] if keep_system and role(m) == "system"]
    rest = msgs[len(head):]
    n = min(len(rest) - 1, max(2, len(rest) // 4))
    if n <= 0:
        return msgs, 0
    return head + rest[n:], n


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


class RemoteEngine:
    """A chat engine whose model runs on an OpenAI-compatible server. Thread-safe."""

    # The GUI stores a salt with each (non-temporary) chat for us; no KV is kept on this machine.
    capabilities = EngineCapabilities(remote=True, per_chat_salt=True)

    def __init__(self, endpoint: RemoteEndpoint, *, connect: bool = True):
        self.endpoint = endpoint
        self.flavor = endpoint.flavor
        self.context_window = 0
        self._client = make_client(endpoint)
        self._lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self._requests = 0
        self._closed = False
        if connect:
            self.connect()

    # --- identity ------------------------------------------------------------------------------
    @property
    def model_name(self) -> str:
        return self.endpoint.model

    @property
    def provider(self) -> str:
        return f"remote · {FLAVOR_NAMES.get(self.flavor, self.flavor)} · {self.endpoint.host}"

    def connect(self) -> None:
        """Checks the server answers, accepts the key and serves the model; learns its flavor."""
        models = list_models(self.endpoint, self._client)
        ids = [m["id"] for m in models]
        if not self.endpoint.model:
            if not ids:
                raise RemoteError(f"{self.endpoint.host} serves no models")
            self.endpoint.model = ids[0]
        entry = next((m for m in models if m["id"] == self.endpoint.model), None)
        if entry is None and ids:
            shown = ", ".join(one_line(i, 60) for i in ids[:5]) + (", …" if len(ids) > 5 else "")
            raise RemoteError(f"{self.endpoint.host} does not serve model {self.endpoint.model!r} "
                              f"(it serves: {shown})")
        if self.flavor == "auto":
            self.flavor = detect_flavor(models)
        self.context_window = _context_of(entry or {})

    # --- sessions (client-side: the store keeps the transcript) --------------------------------
    def open(self, session_id: str, kind: SessionKind = SessionKind.REGULAR,
             cache_salt: str | None = None) -> SessionInfo:
        kind = SessionKind(kind)
        if self._closed:
            raise ModelNotReady(f"the connection to {self.endpoint.host} was shut down")
        with self._lock:
            s = self._sessions.get(session_id)
            if s is not None and (kind == SessionKind.TEMPORARY) != (s.kind == SessionKind.TEMPORARY):
                raise SessionKindConflict(f"session {session_id} is {s.kind.value}; a temporary session cannot "
                                          "become persistent or the other way round")
            if s is not None and s.salt and cache_salt != s.salt:
                raise CacheSaltMismatch(f"session {session_id} was opened with another cache salt")
            if s is None:
                temp = kind == SessionKind.TEMPORARY
                salt = None if temp else cache_salt
                # No stored salt (or a temporary chat): one held in memory only, never reused later.
                s = _Session(kind, salt, salt or new_cache_salt())
                self._sessions[session_id] = s
            else:
                s.kind = kind
                if cache_salt and kind != SessionKind.TEMPORARY:
                    s.salt = s.wire_salt = cache_salt
        return self.info(session_id)

    def pin(self, session_id: str) -> None:
        self._set_kind(session_id, SessionKind.PINNED)

    def unpin(self, session_id: str) -> None:
        self._set_kind(session_id, SessionKind.REGULAR)

    def _set_kind(self, session_id: str, kind: SessionKind) -> None:
        with self._lock:
            s = self._get(session_id)
            if s.kind == SessionKind.TEMPORARY:
                if kind == SessionKind.PINNED:
                    raise SessionKindConflict("a temporary session cannot be pinned")
                return
            s.kind = kind

    def _get(self, session_id: str) -> _Session:
        s = self._sessions.get(session_id)
        if s is None:
            raise SessionNotOpen(f"session {session_id} is not open")
        return s

    def close(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)   # a temporary chat's salt is forgotten here

    def delete(self, session_id: str) -> None:
        self.close(session_id)

    def info(self, session_id: str) -> SessionInfo:
        with self._lock:
            s = self._get(session_id)
        return SessionInfo(session_id=session_id, kind=s.kind, tokens=s.tokens,
                           kv_location=KVLocation.NONE, kv_bytes_memory=0, kv_bytes_disk=0,
                           cache_salt=s.salt)

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"remote": self.endpoint.base_url, "model": self.endpoint.model,
                    "flavor": self.flavor, "open_sessions": len(self._sessions),
                    "requests": self._requests}

    def clear_cache(self) -> int:
        """The server owns its prompt cache; what goes here is every session but the pinned ones
        (a temporary chat gets a new salt, so the server's cache of it is not used again).
        No local blocks: 0."""
        with self._lock:
            for sid in [k for k, s in self._sessions.items() if s.kind != SessionKind.PINNED]:
                del self._sessions[sid]
        return 0

    def count_tokens(self, text: str) -> int | None:
        """None: an OpenAI-compatible server offers no standard way to count tokens."""
        return None

    def shutdown(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._closed = True
            self._sessions.clear()
        self._client.close()

    # --- generation ----------------------------------------------------------------------------
    def request_body(self, session_id: str, messages: Sequence[ChatMessage | Mapping[str, Any]],
                     sampling: SamplingParams | None = None) -> dict[str, Any]:
        """The JSON sent for one turn (public so that what leaves the machine can be checked)."""
        sp = sampling or SamplingParams()
        with self._lock:
            s = self._sessions.get(session_id)
        temp = s is not None and s.kind == SessionKind.TEMPORARY
        body: dict[str, Any] = {
            "model": self.endpoint.model,
            "messages": [m.to_dict() if isinstance(m, ChatMessage) else
                         {"role": m["role"], "content": m["content"]} for m in messages],
            "stream": True, "stream_options": {"include_usage": True},
            "max_tokens": int(sp.max_new_tokens)}
        if sp.greedy:
            body["temperature"] = 0.0
        elif sp.temperature is not None:
            body["temperature"] = float(sp.temperature)
        if sp.top_p is not None and not sp.greedy:
            body["top_p"] = float(sp.top_p)
        if sp.seed is not None:
            body["seed"] = int(sp.seed)
        if sp.presence_penalty:
            body["presence_penalty"] = float(sp.presence_penalty)
        if sp.frequency_penalty:
            body["frequency_penalty"] = float(sp.frequency_penalty)
        if sp.stop:
            body["stop"] = list(sp.stop)[:4]      # OpenAI's limit
        if self.flavor in ("vllm", "llamacpp") and not sp.greedy:
            if sp.top_k:
                body["top_k"] = int(sp.top_k)
            if sp.min_p:
                body["min_p"] = float(sp.min_p)
        if sp.repetition_penalty and sp.repetition_penalty != 1.0:
            if self.flavor == "vllm":
                body["repetition_penalty"] = float(sp.repetition_penalty)
            elif self.flavor == "llamacpp":
                body["repeat_penalty"] = float(sp.repetition_penalty)
        if self.flavor in SALTED and s is not None and s.wire_salt:
            body["cache_salt"] = s.wire_salt
        elif self.flavor == "llamacpp":
            body["cache_prompt"] = not temp
        return body

    def generate(self, session_id: str, messages: Sequence[ChatMessage | Mapping[str, Any]],
                 sampling: SamplingParams | None = None,
                 cancel: CancelToken | None = None,
                 tools: list[dict[str, Any]] | None = None) -> Iterator[StreamEvent]:
        """Streams one turn. When the server refuses the chat as too long for its context window,
        the overflow policy applies here (the server's tokenizer is unknown to Amber): older
        messages are left out and the turn is retried (`truncate_middle` keeps the system prompt,
        `rolling` does not; `stop` passes the server's error on)."""
        if self._closed:
            raise ModelNotReady(f"the connection to {self.endpoint.host} was shut down")
        if tools:       # capabilities.tool_format is None: the server's calls are not read here
            raise ValueError(f"tools are not offered to {self.endpoint.host}'s models from Amber's window")
        with self._lock:
            s = self._get(session_id)
            if s.generating:
                raise SessionBusy(f"session {session_id} is already generating")
            s.generating = True
        try:
            yield from self._turn(session_id, messages, sampling, cancel)
        finally:
            with self._lock:
                s.generating = False

    def _turn(self, session_id: str, messages: Sequence[ChatMessage | Mapping[str, Any]],
              sampling: SamplingParams | None, cancel: CancelToken | None) -> Iterator[StreamEvent]:
        msgs = list(messages)
        policy = (sampling or SamplingParams()).overflow
        dropped = 0
        for _ in range(MAX_OVERFLOW_RETRIES):
            body = self.request_body(session_id, msgs, sampling)
            try:
                yield from self._stream(session_id, body, bool(body.get("stop")), cancel, dropped)
                return
            except ContextOverflow:
                if policy == OverflowPolicy.STOP.value:
                    raise
                msgs, n = _drop_oldest(msgs, keep_system=policy != OverflowPolicy.ROLLING.value)
                if n == 0:
                    raise
                dropped += n
        raise RemoteError(f"{self.endpoint.host} kept refusing the chat as too long for its context window")

    def _stream(self, session_id: str, body: dict[str, Any], stops: bool,
                cancel: CancelToken | None, dropped: int = 0) -> Iterator[StreamEvent]:
        events: queue.Queue[tuple[str, Any]] = queue.Queue(maxsize=1024)
        cut = threading.Event()
        holder: dict[str, socket.socket | None] = {"sock": None}
        start = time.perf_counter()
        with self._lock:
            self._requests += 1
        pump = threading.Thread(target=self._pump, args=(body, events, cut, holder),
                                name="amber-remote-stream", daemon=True)
        pump.start()
        text: list[str] = []
        figs = GenerationFigures(provider=self.provider, context_window=self.context_window)
        first_at: float | None = None
        finish, usage, timings, amber = "", None, None, None
        try:
            while True:
                try:
                    kind, value = events.get(timeout=_POLL_S)
                except queue.Empty:
                    if cancel is not None and cancel.is_set():
                        finish = FinishReason.CANCELLED.value
                        break
                    continue
                if kind == "error":
                    raise value
                if kind == "end":
                    if not value and not finish:
                        # No [DONE] and no finish_reason: the server gave up mid-reply (llama-cpp-
                        # python, for one, ends the stream this way when the prompt is too long).
                        raise RemoteError(f"{self.endpoint.host} ended the reply without finishing it "
                                          "(no finish_reason, no [DONE]); the server's log may say why")
                    break
                chunk = value
                if isinstance(chunk.get("usage"), dict):
                    usage = chunk["usage"]
                if isinstance(chunk.get("timings"), dict):
                    timings = chunk["timings"]
                if isinstance(chunk.get("amber"), dict):
                    amber = chunk["amber"]
                for choice in chunk.get("choices") or []:
                    if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                        continue
                    delta = choice.get("delta") or choice.get("message") or {}
                    piece = delta.get("content") if isinstance(delta, dict) else None
                    if not isinstance(piece, str) and isinstance(choice.get("text"), str):
                        piece = choice["text"]
                    if isinstance(piece, str) and piece:
                        if first_at is None:
                            first_at = time.perf_counter()
                        text.append(piece)
                        yield TextChunk(piece, [])
                    if choice.get("finish_reason"):
                        finish = str(choice["finish_reason"])
                if cancel is not None and cancel.is_set():
                    finish = FinishReason.CANCELLED.value
                    break
        finally:
            cut.set()
            sock = holder.get("sock")
            if sock is not None and pump.is_alive():
                try:   # wakes a read blocked on a silent server; the server sees the disconnect
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        end = time.perf_counter()
        self._figures(figs, finish, stops, usage, timings, amber, start, first_at, end)
        figs.dropped_messages = dropped
        with self._lock:
            s = self._sessions.get(session_id)
            if s is not None and figs.context_used:
                s.tokens = figs.context_used
        yield GenerationResult("".join(text), [], figs)

    def _pump(self, body: dict[str, Any], events: queue.Queue[Any], cut: threading.Event,
              holder: dict[str, Any]) -> None:
        """Reader thread: posts the request and turns the stream into queue items."""
        ep = self.endpoint

        def put(item: tuple[str, Any]) -> bool:
            while not cut.is_set():
                try:
                    events.put(item, timeout=_POLL_S)
                    return True
                except queue.Full:
                    continue
            return False

        try:
            with contextlib.ExitStack() as stack:
                for attempt in (1, 2):
                    try:
                        r = stack.enter_context(self._client.stream(
                            "POST", ep.base_url + "/chat/completions", json=body))
                        break
                    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
                        # A kept-alive connection the server had dropped (after a failed reply,
                        # say): it never answered, so one retry on a fresh connection is safe.
                        if attempt == 2 or cut.is_set():
                            raise
                holder["sock"] = socket_of(r)
                if r.status_code != 200:
                    raise status_error(ep, r.status_code, read_error_body(r), "/chat/completions")
                if "text/event-stream" not in r.headers.get("content-type", ""):
                    # A server that ignored `stream`: one JSON reply.
                    put(("chunk", self._check(parse_json(read_bounded(r, MAX_JSON_BODY),
                                                         f"{ep.host}'s reply"))))
                    done = True
                else:
                    done = False
                    for data in sse_data(r):
                        if cut.is_set():
                            return
                        if data.strip() == "[DONE]":
                            done = True
                            break
                        if not put(("chunk", self._check(parse_json(data.encode(), f"an event from {ep.host}")))):
                            return
            put(("end", done))
        except BaseException as exc:  # noqa: BLE001 - everything becomes one line for the caller
            if not cut.is_set():
                err = exc if isinstance(exc, RemoteError) else transport_error(ep, exc)
                put(("error", err))

    def _check(self, chunk: Any) -> dict[str, Any]:
        if not isinstance(chunk, dict):
            raise RemoteError(f"{self.endpoint.host} sent an event that is not a JSON object")
        err = chunk.get("error")
        if err:
            msg = err.get("message") if isinstance(err, dict) else err
            said = redact(self.endpoint, one_line(msg or err, 200))
            raise RemoteError(f"{self.endpoint.host} reported an error: {said}")
        return chunk

    @staticmethod
    def _figures(f: GenerationFigures, finish: str, stops: bool, usage: Any, timings: Any,
                 amber: Any, start: float, first_at: float | None, end: float) -> None:
        """Fills `f` from the server's figures; client-side timing only where it gave none."""
        f.finish_reason = {"stop": FinishReason.STOP.value if stops else FinishReason.EOS.value,
                           "length": FinishReason.LENGTH.value}.get(finish, finish)
        if isinstance(usage, dict):
            f.prompt_tokens = int(_num(usage.get("prompt_tokens")) or 0)
            f.generated_tokens = int(_num(usage.get("completion_tokens")) or 0)
            details = usage.get("prompt_tokens_details")
            if isinstance(details, dict):
                f.reused_tokens = int(_num(details.get("cached_tokens")) or 0)
            f.prefilled_tokens = max(0, f.prompt_tokens - f.reused_tokens)
        if isinstance(timings, dict):    # llama.cpp's server
            if _num(timings.get("cache_n")) is not None:
                f.reused_tokens = int(timings["cache_n"])
            if _num(timings.get("prompt_n")) is not None:
                f.prefilled_tokens = int(timings["prompt_n"])
                f.prompt_tokens = f.prompt_tokens or f.prefilled_tokens + f.reused_tokens
            f.prefill_ms = _num(timings.get("prompt_ms")) or f.prefill_ms
            f.decode_tokens_per_s = _num(timings.get("predicted_per_second")) or 0.0
            f.generated_tokens = f.generated_tokens or int(_num(timings.get("predicted_n")) or 0)
        if isinstance(amber, dict):      # Amber's own server: its GenerationFigures
            names = {x.name for x in fields(GenerationFigures)} - {"provider", "finish_reason", "context_window"}
            for name in names:
                v = amber.get(name)
                if _num(v) is not None and isinstance(getattr(f, name), (int, float)):
                    setattr(f, name, type(getattr(f, name))(v))
                elif isinstance(v, str) and isinstance(getattr(f, name), str):
                    setattr(f, name, one_line(v, 40))
        if not f.ttft_ms and first_at is not None:
            f.ttft_ms = (first_at - start) * 1000.0       # measured here: includes the network
        if not f.decode_tokens_per_s and first_at is not None and f.generated_tokens > 1 and end > first_at:
            f.decode_tokens_per_s = (f.generated_tokens - 1) / (end - first_at)
        f.context_used = f.prompt_tokens + f.generated_tokens
