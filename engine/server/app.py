"""The ASGI app: FastAPI routes over a `Service`, a request-body bound, and OpenAI-shaped errors."""
from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, AsyncIterator

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine.api import ChatEngine
from . import chat, errors, responses
from .auth import KeyRing, load_secret
from .service import ServerConfig, Service


class _BodyTooLarge(HTTPException):
    """Raised from `receive` mid-body; an HTTPException so FastAPI's body parser passes it on."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body is larger than this server's limit of {limit} bytes")


class BodyLimit:
    """Refuses bodies over `limit` bytes (413): by Content-Length before reading, or while reading."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def _refuse(self, send: Send, status: int, message: str) -> None:
        body = json.dumps(errors.error_body(status, message)).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                await self._refuse(send, 400, "the Content-Length header is not a number")
                return
            if declared > self.limit:
                await self._refuse(send, 413, f"the request body ({declared} bytes) is larger than this "
                                              f"server's limit of {self.limit} bytes")
                return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _BodyTooLarge(self.limit)
            return message
        await self.app(scope, limited, send)


class InFlightLimit:
    """More than `limit` requests at once: an OpenAI-shaped 503 (uvicorn's own limit answers in
    plain text), before the body is read."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit, self.current = app, limit, 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") == "/health":   # cheap: always answered
            await self.app(scope, receive, send)
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

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({"status": "ok", **service.scheduler.load()})

    app.include_router(chat.router(service))
    app.include_router(responses.router(service))
    app.add_middleware(BodyLimit, limit=config.max_body_bytes)
    app.add_middleware(InFlightLimit, limit=config.max_in_flight)     # outermost: runs first
    return app
