"""Every answer of Amber's API server checked against OpenAI's OpenAPI spec, in the server tests.

`OpenApiChecked` is an ASGI middleware around the server's app: it finds each request's endpoint
in the spec (`openapi_spec.Spec.route`) and validates what the app sends, before it is sent:

- a JSON body against the schema the spec gives its endpoint, status and content type
  (chat completion -> CreateChatCompletionResponse, Responses -> Response, models, input items ...);
  every 4xx/5xx body against ErrorResponse (OpenAI's `{"error": {...}}`, on any path);
- each server-sent event of a stream: a chat chunk against CreateChatCompletionStreamResponse, a
  completions chunk against CreateCompletionResponse (the spec's shape for both), each Responses
  event against the schema of its `type` among ResponseStreamEvent's members (and its `event:`
  line must name the same type); a `data: {"error": ...}` event against ErrorResponse; `[DONE]`
  only as the last event of a chat or completions stream.

What does not match is written as one JSON line to a `ViolationLog`, a file shared with the test
process, so servers in child processes report too; `raise_new` fails the test that saw it (the
tests/server conftest calls it after each test phase, `ServerProcess.stop` after the server ends).
In-process servers get the middleware from `checked_create_app`; a child server from
`tests.support.checked_serve`, told where the spec and the log are by SPEC_ENV and LOG_ENV.
"""
from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .openapi_spec import ERROR_SCHEMA, STREAM_EVENTS, Route, Spec, write_subset

SPEC_ENV = "AMBER_TEST_OPENAPI_SPEC"     # the spec's served subset as JSON (openapi_spec.write_subset)
LOG_ENV = "AMBER_TEST_OPENAPI_LOG"       # where a child server writes what did not match
MAX_BODY = 16 << 20                      # a body checked whole; a larger one is itself a finding


class OpenApiViolation(AssertionError):
    """A server answer that OpenAI's spec does not allow."""


class ViolationLog:
    """Findings as JSON lines in a file: appended by any process, read once each by the tests."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._read = 0
        path.touch()

    def write(self, where: str, problem: str) -> None:
        line = json.dumps({"where": where, "problem": problem}) + "\n"
        with self.path.open("a", encoding="utf-8") as f:      # one write: whole lines from every process
            f.write(line)

    def take_new(self) -> list[str]:
        """The findings written since the last call."""
        with self.path.open("rb") as f:
            f.seek(self._read)
            data = f.read()
        end = data.rfind(b"\n") + 1        # a line still being written waits for the next call
        self._read += end
        return [f"{r['where']}: {r['problem']}" for r in map(json.loads, data[:end].splitlines())]


@functools.cache
def _session_dir() -> Path:
    """A folder for this test process's spec subset and logs, removed when it exits."""
    path = Path(tempfile.mkdtemp(prefix="amber-openapi-"))
    atexit.register(shutil.rmtree, path, True)
    return path


@functools.cache
def spec_json() -> Path:
    """The spec's served subset as JSON: the YAML parsed once per test session."""
    return write_subset(_session_dir() / "openai-openapi.json")


@functools.cache
def _spec(path: Path | None) -> Spec:
    return Spec.load(path)


_logs: list[ViolationLog] = []


def new_log() -> ViolationLog:
    """A log for one server, checked by `raise_new` until the test process ends."""
    fd, name = tempfile.mkstemp(prefix="violations-", suffix=".jsonl", dir=_session_dir())
    os.close(fd)
    log = ViolationLog(Path(name))
    _logs.append(log)
    return log


def raise_new(logs: list[ViolationLog] | None = None) -> None:
    """OpenApiViolation naming every finding not yet reported (of `logs`, or of every server)."""
    found = [problem for log in (_logs if logs is None else logs) for problem in log.take_new()]
    if found:
        raise OpenApiViolation(f"the server's answers do not match OpenAI's OpenAPI spec ({len(found)}):\n  "
                               + "\n  ".join(found))


class _Json:
    """A JSON body, checked whole when its last byte is about to be sent."""

    def __init__(self, spec: Spec, schema: str | None) -> None:
        self.spec, self.schema, self.data = spec, schema, bytearray()

    def feed(self, chunk: bytes, last: bool) -> list[str]:
        self.data += chunk
        if len(self.data) > MAX_BODY:
            return [f"the body is over {MAX_BODY} bytes"]
        if not last or self.schema is None:
            return []
        try:
            body = json.loads(self.data)
        except ValueError as exc:
            return [f"the body is not JSON ({exc}): {bytes(self.data[:200])!r}"]
        return self.spec.problems(self.schema, body)


class _EventStream:
    """Server-sent events, each checked as soon as it is complete (before the bytes that end it
    are sent). `schema` is a chat/completions chunk's schema, or None for the Responses events."""

    def __init__(self, spec: Spec, schema: str | None) -> None:
        self.spec, self.schema, self.pending, self.done = spec, schema, b"", False

    def feed(self, chunk: bytes, last: bool) -> list[str]:
        self.pending += chunk
        problems: list[str] = []
        while b"\n\n" in self.pending:
            raw, self.pending = self.pending.split(b"\n\n", 1)
            problems += self._event(raw)
        if len(self.pending) > MAX_BODY:
            problems.append(f"an event is over {MAX_BODY} bytes")
            self.pending = b""
        if last and self.pending.strip():
            problems.append(f"the stream ends inside an event: {self.pending[:200]!r}")
        return problems

    def _event(self, raw: bytes) -> list[str]:
        fields: dict[str, str] = {}
        for line in raw.decode("utf-8", "replace").split("\n"):
            name, _, value = line.partition(":")
            if name:             # a line starting with ':' is a comment
                fields[name] = fields[name] + "\n" + value.removeprefix(" ") if name in fields \
                    else value.removeprefix(" ")
        if "data" not in fields:
            return [f"an event without data: {raw[:200]!r}"]
        if self.done:
            return [f"an event after [DONE]: {raw[:200]!r}"]
        if fields["data"] == "[DONE]":
            self.done = True
            return [] if self.schema is not None else ["[DONE] ends a chat or completions stream, not Responses'"]
        try:
            event = json.loads(fields["data"])
        except ValueError as exc:
            return [f"an event's data is not JSON ({exc}): {raw[:200]!r}"]
        if isinstance(event, dict) and "error" in event and "object" not in event and "type" not in event:
            return self.spec.problems(ERROR_SCHEMA, event)
        if self.schema is not None:
            return self.spec.problems(self.schema, event)
        kind = event.get("type") if isinstance(event, dict) else None
        name = self.spec.events.get(kind) if isinstance(kind, str) else None
        if name is None:
            return [f"{STREAM_EVENTS} has no event of type {kind!r}"]
        if fields.get("event", kind) != kind:
            return [f"the event line says {fields['event']!r}, its data's type is {kind!r}"]
        return self.spec.problems(name, event)


def _checker(spec: Spec, route: Route | None, method: str, path: str, status: int,
             content_type: str) -> _Json | _EventStream | str | None:
    """What checks an answer's body; a finding (str) when the answer itself is not allowed;
    None for what the spec does not describe (/health, a spec'd status without a body schema)."""
    if status >= 400:         # Amber answers every error in OpenAI's shape, on any path
        return _Json(spec, ERROR_SCHEMA) if content_type == "application/json" \
            else f"an error answered as {content_type or 'no content type'}, not OpenAI's JSON error"
    if route is None:
        return f"no endpoint of the spec answers {method} {path}" if path.startswith("/v1/") else None
    answers = route.answers.get(str(status))
    if answers is None:
        return f"the spec gives {method} {route.pattern.pattern} no {status} answer"
    if not answers:
        return None
    if content_type not in answers:
        return f"the spec's {status} answer is {' or '.join(answers)}, not {content_type or 'no content type'}"
    schema = answers[content_type]
    if content_type == "text/event-stream":
        return _EventStream(spec, None if schema == STREAM_EVENTS else schema)
    return _Json(spec, schema)


class OpenApiChecked:
    """The ASGI middleware: passes everything through, reporting to `report(where, problem)`
    what the spec does not allow, each before the bytes that complete it are sent."""

    def __init__(self, app: ASGIApp, spec: Spec, report: Callable[[str, str], None]) -> None:
        self.app, self.spec, self.report = app, spec, report

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        route = self.spec.route(method, path)
        checker: _Json | _EventStream | None = None
        where = f"{method} {path}"

        async def checked(message: Message) -> None:
            nonlocal checker, where
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = {k.lower(): v for k, v in message.get("headers", [])}
                content_type = headers.get(b"content-type", b"").decode("latin-1").split(";")[0].strip()
                where = f"{method} {path} {status}"
                found = _checker(self.spec, route, method, path, status, content_type)
                if isinstance(found, str):
                    self.report(where, found)
                else:
                    checker = found
            elif message["type"] == "http.response.body" and checker is not None:
                for problem in checker.feed(message.get("body", b""), not message.get("more_body", False)):
                    self.report(where, problem)
            await send(message)
        await self.app(scope, receive, checked)


def checked_app(app: ASGIApp, log: ViolationLog, spec_path: Path | None = None) -> OpenApiChecked:
    return OpenApiChecked(app, _spec(spec_path), log.write)


def checked_create_app(create_app: Callable[..., Any]) -> Callable[..., Any]:
    """`engine.server.app.create_app` whose apps are checked, reporting to a new log each."""
    @functools.wraps(create_app)
    def create(*args: Any, **kwargs: Any) -> Any:
        return checked_app(create_app(*args, **kwargs), new_log(), spec_json())
    return create


def install_from_env() -> None:
    """In a child server (tests.support.checked_serve): every app the server makes is checked
    against the spec at SPEC_ENV, its findings written to the log at LOG_ENV."""
    import engine.server.serve as serve   # noqa: PLC0415 - only in the child, before it serves
    spec_path, log = Path(os.environ[SPEC_ENV]), ViolationLog(Path(os.environ[LOG_ENV]))
    create_app = serve.create_app
    serve.create_app = lambda *a, **k: checked_app(create_app(*a, **k), log, spec_path)  # type: ignore[assignment]
