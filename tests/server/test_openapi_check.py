"""The spec check the server tests run under (tests/support/openapi_check.py): it finds what OpenAI's
spec does not allow (bodies, streamed events, errors) and passes what it allows; the pinned spec is
the one its README names; and the loopback guard the litellm tests use refuses the outside."""
from __future__ import annotations

import hashlib
import json
import re
import socket
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from tests.support import openapi_check
from tests.support.loopback_only import loopback_only
from tests.support.openapi_spec import SPEC_YAML, Spec, as_json_schema

CHUNK = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "system_fingerprint": "fp_1", "choices": [{"index": 0, "delta": {"content": "hi"}, "logprobs": None,
                                                    "finish_reason": None}]}
ERROR = {"error": {"message": "no", "type": "invalid_request_error", "param": None, "code": None}}


def sse(*events: str) -> bytes:
    return "".join(f"{e}\n\n" for e in events).encode()


def answer(body: object | bytes, status: int = 200, media: str = "application/json") -> Response:
    """What the route under test answers, whatever is asked."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Response(raw, status_code=status, media_type=media)


@pytest.fixture
def serve():
    """serve(method, path, body, status, media) -> the findings the check reports for that answer."""
    log = openapi_check.new_log()

    def run(method: str, path: str, body: object | bytes, status: int = 200,
            media: str = "application/json") -> list[str]:
        async def endpoint(_request):
            return answer(body, status, media)
        app = Starlette(routes=[Route(path, endpoint, methods=[method])])
        with TestClient(openapi_check.checked_app(app, log, openapi_check.spec_json())) as client:
            client.request(method, path)
        return log.take_new()
    return run


def test_the_pinned_spec_is_the_one_its_readme_names():
    readme = (SPEC_YAML.parent / "README.md").read_text()
    recorded = re.search(r"SHA-256 of `openapi.yaml`: `([0-9a-f]{64})`", readme)
    assert recorded and hashlib.sha256(SPEC_YAML.read_bytes()).hexdigest() == recorded.group(1)
    assert "MIT License" in (SPEC_YAML.parent / "LICENSE").read_text()


def test_routes_and_event_types_come_from_the_spec():
    spec = Spec.load(openapi_check.spec_json())
    chat = spec.route("POST", "/v1/chat/completions")
    assert chat and chat.answers["200"] == {"application/json": "CreateChatCompletionResponse",
                                            "text/event-stream": "CreateChatCompletionStreamResponse"}
    assert spec.route("GET", "/v1/responses/resp_1/input_items").answers["200"] == {
        "application/json": "AmberResponseItemPage"}
    assert spec.route("GET", "/v1/models/tiny").answers["200"] == {"application/json": "Model"}
    assert spec.route("GET", "/health") is None
    assert spec.events["response.output_text.delta"] == "ResponseTextDeltaEvent"
    assert spec.events["response.function_call_arguments.delta"] == "ResponseFunctionCallArgumentsDeltaEvent"


def test_nullable_becomes_or_null():
    schema = as_json_schema({"type": "object", "nullable": True, "properties": {"a": {"type": "string"}}})
    assert schema == {"anyOf": [{"type": "object", "properties": {"a": {"type": "string"}}}, {"type": "null"}]}


def test_a_body_missing_what_the_spec_requires_is_found(serve):
    good = {"object": "list", "data": [{"id": "m", "object": "model", "created": 1, "owned_by": "amber"}]}
    assert serve("GET", "/v1/models", good) == []
    found = serve("GET", "/v1/models", {"object": "list", "data": [{"id": "m", "object": "model"}]})
    assert len(found) == 1 and "GET /v1/models 200: ListModelsResponse at data/0" in found[0]
    assert "required" in found[0]


def test_only_an_empty_item_page_has_null_ids(serve):
    item = {"id": "msg_1", "type": "message", "role": "user", "status": "completed",
            "content": [{"type": "input_text", "text": "hi"}]}
    page = {"object": "list", "data": [item], "first_id": "msg_1", "last_id": "msg_1", "has_more": False}
    assert serve("GET", "/v1/responses/resp_1/input_items", page) == []
    empty = {**page, "data": [], "first_id": None, "last_id": None}
    assert serve("GET", "/v1/responses/resp_1/input_items", empty) == []
    assert serve("GET", "/v1/responses/resp_1/input_items", {**page, "first_id": None})
    assert serve("GET", "/v1/responses/resp_1/input_items", {**empty, "has_more": True})


def test_errors_must_be_openai_error_json(serve):
    assert serve("POST", "/v1/chat/completions", ERROR, 400) == []
    assert "ErrorResponse at error: 'param' is a required property" in \
        serve("POST", "/v1/chat/completions", {"error": {"message": "no", "type": "x"}}, 400)[0]
    assert "not OpenAI's JSON error" in serve("GET", "/v1/nowhere", b"Not Found", 404, "text/plain")[0]


def test_an_answer_the_spec_does_not_describe_is_found(serve):
    assert "no endpoint of the spec" in serve("GET", "/v1/embeddings", {"data": []})[0]
    assert "not text/plain" in serve("GET", "/v1/models", b"models", 200, "text/plain")[0]
    assert serve("GET", "/health", {"status": "ok"}) == []       # not an OpenAI endpoint: not checked


def test_each_chat_chunk_is_checked(serve):
    good = sse(f"data: {json.dumps(CHUNK)}", f"data: {json.dumps(ERROR)}", "data: [DONE]")
    assert serve("POST", "/v1/chat/completions", good, media="text/event-stream") == []
    bad_chunk = {**CHUNK, "choices": [{**CHUNK["choices"][0], "finish_reason": "tired"}]}
    found = serve("POST", "/v1/chat/completions", sse(f"data: {json.dumps(bad_chunk)}", "data: [DONE]"),
                  media="text/event-stream")
    assert len(found) == 1 and "CreateChatCompletionStreamResponse at choices/0/finish_reason" in found[0]
    after_done = serve("POST", "/v1/chat/completions", sse("data: [DONE]", f"data: {json.dumps(CHUNK)}"),
                       media="text/event-stream")
    assert after_done and "after [DONE]" in after_done[0]
    cut = serve("POST", "/v1/chat/completions", sse(f"data: {json.dumps(CHUNK)}") + b"data: {",
                media="text/event-stream")
    assert cut and "ends inside an event" in cut[0]


def test_each_responses_event_is_checked_against_its_type(serve):
    delta = {"type": "response.output_text.delta", "sequence_number": 3, "item_id": "msg_1", "output_index": 0,
             "content_index": 0, "delta": "hi", "logprobs": []}
    ok = sse(f"event: response.output_text.delta\ndata: {json.dumps(delta)}")
    assert serve("POST", "/v1/responses", ok, media="text/event-stream") == []
    no_index = {k: v for k, v in delta.items() if k != "output_index"}
    found = serve("POST", "/v1/responses", sse(f"data: {json.dumps(no_index)}"), media="text/event-stream")
    assert len(found) == 1 and "ResponseTextDeltaEvent" in found[0] and "output_index" in found[0]
    mislabelled = serve("POST", "/v1/responses", sse(f"event: response.done\ndata: {json.dumps(delta)}"),
                        media="text/event-stream")
    assert "the event line says 'response.done'" in mislabelled[0]
    unknown = serve("POST", "/v1/responses", sse(f"data: {json.dumps({**delta, 'type': 'response.guess'})}"),
                    media="text/event-stream")
    assert "no event of type 'response.guess'" in unknown[0]
    assert "[DONE] ends a chat" in serve("POST", "/v1/responses", sse("data: [DONE]"), media="text/event-stream")[0]


def test_raise_new_fails_once_per_finding(tmp_path: Path):
    log = openapi_check.new_log()
    log.write("GET /v1/models 200", "ListModelsResponse at data: bad")
    with pytest.raises(openapi_check.OpenApiViolation, match="ListModelsResponse at data: bad"):
        openapi_check.raise_new([log])
    openapi_check.raise_new([log])        # reported once


def test_loopback_only_refuses_and_records_the_outside():
    with loopback_only() as refused:
        with pytest.raises(OSError):
            socket.getaddrinfo("example.com", 443)
        with pytest.raises(OSError), socket.socket() as s:
            s.connect(("192.0.2.1", 443))     # TEST-NET-1: never routed
        assert socket.getaddrinfo("127.0.0.1", 80)
    assert refused == ["lookup 'example.com'", "connect 192.0.2.1:443"]


def test_tool_call_deltas_and_structured_output_formats_are_checked_by_the_spec(serve):
    """What other features add (tool calls, response formats) is checked from the spec alone."""
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":"}}
    with_call = {**CHUNK, "choices": [{**CHUNK["choices"][0], "delta": {"tool_calls": [call]}}]}
    assert serve("POST", "/v1/chat/completions", sse(f"data: {json.dumps(with_call)}"),
                 media="text/event-stream") == []
    no_index = {**CHUNK, "choices": [{**CHUNK["choices"][0], "delta": {"tool_calls": [{"id": "call_1"}]}}]}
    found = serve("POST", "/v1/chat/completions", sse(f"data: {json.dumps(no_index)}"), media="text/event-stream")
    assert len(found) == 1 and "tool_calls/0" in found[0] and "index" in found[0]
    spec = Spec.load(openapi_check.spec_json())
    good = {"type": "json_schema", "name": "colours", "schema": {"type": "object"}, "strict": True}
    assert spec.problems("TextResponseFormatConfiguration", good) == []
    assert spec.problems("TextResponseFormatConfiguration", {k: v for k, v in good.items() if k != "name"})
