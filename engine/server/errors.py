"""OpenAI-shaped errors: `{"error": {"message", "type", "param", "code"}}` with the right status."""
from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.base.oneline import one_line

# status -> OpenAI's error type
_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 403: "permission_error",
          404: "invalid_request_error", 405: "invalid_request_error", 409: "invalid_request_error",
          413: "invalid_request_error", 422: "invalid_request_error", 429: "rate_limit_error",
          500: "server_error", 503: "server_error"}


class ApiError(Exception):
    """An error answered to the client as OpenAI does."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers


def printable(text: str) -> str:
    """`text` as an error message may echo it: one line, control characters and lone surrogates
    (from a JSON string's escapes: not encodable as UTF-8) shown as escapes, never raw."""
    return one_line(text).encode("utf-8", "backslashreplace").decode("utf-8")


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": printable(message), "type": _TYPES.get(status, "invalid_request_error"),
                      "param": param, "code": code}}


def error_response(status: int, message: str, param: str | None = None, code: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param, code), status_code=status, headers=headers)


def sse_error(exc: ApiError) -> bytes:
    """An error met after a stream started (the status line is gone): one `data:` event."""
    return f"data: {json.dumps(error_body(exc.status, exc.message, exc.param, exc.code))}\n\n".encode()


def _describe(err: dict[str, Any]) -> tuple[str, str | None]:
    """One line for a pydantic error: the field path and what is wrong with it."""
    loc = [str(p) for p in err.get("loc", ()) if p != "body"]
    # Union members add their type name to the path (e.g. 'str', 'list[int]'): drop them.
    loc = [p for p in loc if not any(ch in p for ch in "[]") and p not in ("str", "int", "float", "bool")]
    param = ".".join(loc) or None
    if err.get("type") == "invalid_unicode":         # schemas._Request: names the field itself
        return str(err.get("msg")), err.get("ctx", {}).get("param")
    if err.get("type") == "json_invalid":
        return f"the body is not valid JSON ({err.get('ctx', {}).get('error', 'parse error')})", None
    if err.get("type") == "missing":
        if param is None:
            return "the request body is missing: send a JSON object (not valid JSON: empty body)", None
        return f"'{param}' is required", param
    if param is None and isinstance(err.get("input"), (bytes, bytearray)):
        return "the body must be a JSON object sent with 'Content-Type: application/json'", None
    msg = str(err.get("msg", "invalid value"))
    return (f"'{param}': {msg}" if param else msg), param


def install(app: FastAPI) -> None:
    """Every error the framework raises, answered in OpenAI's shape (never a 500 for bad input)."""

    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.param, exc.code, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if not errors:
            return error_response(400, "invalid request body")
        body_errors = [e for e in errors if e.get("type") == "json_invalid"]
        message, param = _describe(body_errors[0] if body_errors else errors[0])
        if len(errors) > 1 and not body_errors:
            message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
        return error_response(400, message, param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        status = exc.status_code
        message = {404: "unknown URL (Amber serves /v1/models, /v1/chat/completions, /v1/completions, "
                        "/v1/responses)", 405: "method not allowed"}.get(status, str(exc.detail))
        return error_response(status, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:   # a bug, never bad input
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}")
