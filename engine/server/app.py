"""The ASGI app: FastAPI routes over a `Service`, a request-body bound, and OpenAI-shaped errors."""
from __future__ import annotations

import asyncio
import contextlib
import json
import time
from pathlib import Path
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.api import ChatEngine
from . import chat, errors, responses
from .auth import KeyRing, load_secret
from .errors import ApiError
from .service import ServerConfig, Service


DRAIN_FACTOR = 4     # a declared body up to 4x the limit is read and dropped after its 413


class _BodyTooLarge(HTTPException):
    """Raised from `receive` mid-body; an HTTPException so FastAPI's body parser passes it on."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than this server's limit of {limit} bytes")


class _BodyTooSlow(HTTPException):
    """Raised from `receive` when the body has not arrived in time (the connection is closed)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(408, f"the request body did not arrive within {seconds:g} s", headers={"Connection": "close"})


async def refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str, *extra: tuple[bytes, bytes],
                 drain: int = 0, timeout: float = 0.0, code: str | None = None) -> None:
    """An OpenAI-shaped error before the request's body is read, then the connection closed. The
    body the client is sending is first read and dropped, up to `drain` bytes and `timeout`
    seconds: a client that writes its whole body before reading the answer gets the answer, not a
    broken pipe (closing a socket with unread bytes resets it). A larger body is not waited for."""
    body = json.dumps(errors.error_body(status, message, code=code)).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *extra]})
    headers = dict(scope.get("headers") or [])
    length = headers.get(b"content-length", b"0")
    declared = int(length) if length.isdigit() else drain + 1
    has_body = declared > 0 or b"transfer-encoding" in headers
    if not has_body or declared > drain:
        await send({"type": "http.response.body", "body": body})
        return
    await send({"type": "http.response.body", "body": body, "more_body": True})
    seen, deadline = 0, time.monotonic() + timeout
    with contextlib.suppress(asyncio.TimeoutError):
        while seen <= drain:
            got = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            if got["type"] != "http.request":
                break
            seen += len(got.get("body", b""))
            if not got.get("more_body", False):
                break
    await send({"type": "http.response.body", "body": b""})


class BodyLimit:
    """Refuses bodies over `limit` bytes (413): by Content-Length before reading, or while reading;
    and bodies that take longer than `timeout` seconds to arrive (408), so a client that sends
    its headers and then trickles (or withholds) the body cannot hold a request slot for long."""

    def __init__(self, app: ASGIApp, limit: int, timeout: float) -> None:
        self.app, self.limit, self.timeout = app, limit, timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                await refuse(scope, receive, send, 400, "the Content-Length header is not a number")
                return
            if declared > self.limit:
                await refuse(scope, receive, send, 413, f"the request body ({declared} bytes) is larger than this "
                                                        f"server's limit of {self.limit} bytes",
                             drain=DRAIN_FACTOR * self.limit, timeout=self.timeout)
                return
        seen = 0
        body_done = False
        deadline = time.monotonic() + self.timeout

        async def limited() -> Message:
            nonlocal seen, body_done
            if body_done:       # after the body: waiting for the disconnect, as long as it takes
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise _BodyTooSlow(self.timeout) from None
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _BodyTooLarge(self.limit)
                body_done = not message.get("more_body", False)
            return message
        await self.app(scope, limited, send)


class InFlightLimit:
    """The API key, from the headers before any body byte is read (401); then more than `limit`
    requests at once: an OpenAI-shaped 503 (uvicorn's own limit answers in plain text). Only
    requests with a good key take a slot, so clients without one cannot crowd out those with one."""

    def __init__(self, app: ASGIApp, limit: int, keys: KeyRing, drain: int, timeout: float) -> None:
        self.app, self.limit, self.keys, self.current = app, limit, keys, 0
        self.drain, self.timeout = drain, timeout      # a refused body read and dropped: as `refuse`

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") == "/health":   # cheap: always answered
            await self.app(scope, receive, send)
            return
        if self.keys.required:
            authorization = dict(scope.get("headers") or []).get(b"authorization")
            try:
                self.keys.caller(None if authorization is None else authorization.decode("latin-1"))
            except ApiError as exc:      # answered at once, holding no slot; its body is never parsed
                await refuse(scope, receive, send, exc.status, exc.message, (b"www-authenticate", b"Bearer"),
                             drain=self.drain, timeout=self.timeout, code=exc.code)
                return
        if self.current >= self.limit:
            body = json.dumps(errors.error_body(503, f"the server is busy ({self.current} requests in flight); "
                                                     "retry later", code="server_busy")).encode()
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        self.current += 1     # one event loop: no lock needed
        try:
            await self.app(scope, receive, send)
        finally:
            self.current -= 1


def create_app(engine: ChatEngine, state_dir: Path | str, config: ServerConfig | None = None) -> FastAPI:
    """The server's app over `engine` (borrowed: the caller shuts it down). `state_dir` holds the
    server's secret and its stored responses (Amber's engine state folder)."""
    config = config or ServerConfig()
    state = Path(state_dir) / "server"
    service = Service(engine, state, config, KeyRing(config.api_keys, load_secret(state)))

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        service.close()

    app = FastAPI(title="Amber", version="1", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.service = service
    errors.install(app)

    def model_card() -> dict[str, Any]:
        return {"id": service.model_id, "object": "model", "created": service.created, "owned_by": "amber",
                "context_window": engine.context_window}

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        service.caller(request)
        return JSONResponse({"object": "list", "data": [model_card()]})

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str, request: Request) -> JSONResponse:
        service.caller(request)
        service.check_model(model_id)
        return JSONResponse(model_card())

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> JSONResponse:
        # Said plainly, not a route-not-found: a chat model's hidden states make poor embeddings.
        service.caller(request)
        raise ApiError(404, f"'{service.model_id}' is a chat model and cannot serve embeddings: Amber's server "
                            "does not offer /v1/embeddings (use an embedding model's own server)", "model",
                       "embeddings_not_supported")

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({"status": "ok", **service.scheduler.load()})

    app.include_router(chat.router(service))
    app.include_router(responses.router(service))
    app.add_middleware(BodyLimit, limit=config.max_body_bytes, timeout=config.body_timeout_s)
    app.add_middleware(InFlightLimit, limit=config.max_in_flight, keys=service.keys,     # outermost: runs first
                       drain=config.max_body_bytes, timeout=config.body_timeout_s)
    return app
