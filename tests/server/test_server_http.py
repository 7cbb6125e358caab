"""Malformed requests over raw HTTP (http.client and sockets): every answer is an OpenAI error with
the right status, never a 500, and the server keeps serving."""
from __future__ import annotations

import http.client
import json
import socket

import pytest

from tests.support.server import KEY_A

MODEL = "tiny-chat"
AUTH = {"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json"}


def request(server, method: str, path: str, body: bytes | str | None = None, headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=AUTH if headers is None else headers)
        resp = conn.getresponse()
        return resp.status, resp.read(), dict(resp.getheaders())
    finally:
        conn.close()


def error_of(status: int, raw: bytes) -> dict:
    data = json.loads(raw)
    err = data["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"] and "\n" not in err["message"]
    assert "Traceback" not in err["message"]
    assert err["type"] == ("rate_limit_error" if status == 429 else "invalid_request_error")
    return err


def chat_body(**kw) -> str:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    body.update(kw)
    return json.dumps(body)


@pytest.mark.parametrize("body, needle", [
    (b"{not json", "not valid JSON"),
    (b"", "not valid JSON"),
    (b"[1, 2]", "dictionary"),
    (b"\xff\xfe\x00garbage", "JSON"),
    (chat_body(messages="hello"), "messages"),
    (chat_body(messages=[{"role": "user", "content": 5}]), "messages.0.content"),
    (chat_body(messages=[{"role": "wizard", "content": "x"}]), "messages.0.role"),
    (chat_body(max_tokens="10"), "max_tokens"),
    (chat_body(max_tokens=0), "max_tokens"),
    (chat_body(temperature="hot"), "temperature"),
    (chat_body(temperature=-1), "temperature"),
    (chat_body(top_p=1.5), "top_p"),
    (chat_body(stream="yes"), "stream"),
    (chat_body(seed=1.5), "seed"),
    (chat_body(n=9), "n is the number of choices, 1 to 8"),
    (chat_body(n=0), "n is the number of choices"),
    (chat_body(stop=[1, 2]), "stop"),
    (chat_body(stop=[""]), "stop"),
    (chat_body(tools=[{"type": "function", "function": {"name": "f"}}]), "tools"),
    (chat_body(top_logprobs=2), "'top_logprobs' needs 'logprobs': true"),
    (chat_body(logprobs=True, top_logprobs=21), "top_logprobs"),
    (chat_body(logprobs=1), "logprobs"),
    (chat_body(logit_bias={"1": -101}), "logit_bias"),
    (chat_body(logit_bias={"x1": 1}), "logit_bias"),
    (chat_body(logit_bias=[1]), "logit_bias"),
    (chat_body(logit_bias={str(i): 1 for i in range(1025)}), "logit_bias"),
    (chat_body(stop=[f"s{i}" for i in range(17)]), "at most 16"),
    (chat_body(cache_salt=""), "cache_salt"),
    (chat_body(cache_salt="s" * 1000), "cache_salt"),
    (json.dumps({"messages": [{"role": "user", "content": "hi"}]}), "model"),
    (chat_body(presence_penalty=3), "presence_penalty"),
    (chat_body(messages=[{"role": "user", "content": "caf\ud800"}]), "'messages.0.content' is not valid Unicode"),
    (chat_body(messages=[{"role": "user", "content": [{"type": "text", "text": "\udfff"}]}]), "messages.0.content.0"),
    (chat_body(model="tiny\udc00"), "'model' is not valid Unicode"),
    (chat_body(stop=["\ud800"]), "'stop.0'"),
])
def test_bad_chat_bodies_are_400(server, body, needle):
    status, raw, _ = request(server, "POST", "/v1/chat/completions", body)
    assert status == 400, raw
    assert needle in error_of(400, raw)["message"]


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", {"model": MODEL, "prompt": 5}),
    ("/v1/completions", {"model": MODEL, "prompt": []}),
    ("/v1/completions", {"model": MODEL, "prompt": [-1]}),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "echo": True}),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "logprobs": 21}),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "logprobs": True}),
    ("/v1/completions", {"model": MODEL, "prompt": "x", "n": 9}),
    ("/v1/responses", {"model": MODEL, "input": 7}),
    ("/v1/responses", {"model": MODEL, "input": "x", "store": "no"}),
    ("/v1/responses", {"model": MODEL, "input": "x", "previous_response_id": ""}),
    ("/v1/responses", {"model": MODEL, "input": [{"role": "user", "content": [{"type": "input_image"}]}]}),
    ("/v1/responses", {"model": MODEL, "input": "\ud800"}),
    ("/v1/responses", {"model": MODEL, "input": "x", "instructions": "\udc80"}),
    ("/v1/completions", {"model": MODEL, "prompt": "caf\ud800"}),
])
def test_bad_bodies_of_the_other_endpoints_are_400(server, path, body):
    status, raw, _ = request(server, "POST", path, json.dumps(body))
    assert status == 400, raw
    error_of(400, raw)


def test_unknown_model_is_404(server):
    for path, body in [("/v1/chat/completions", chat_body(model="nope")),
                       ("/v1/completions", json.dumps({"model": "nope", "prompt": "x"})),
                       ("/v1/responses", json.dumps({"model": "nope", "input": "x"}))]:
        status, raw, _ = request(server, "POST", path, body)
        assert status == 404 and error_of(404, raw)["code"] == "model_not_found"
    status, raw, _ = request(server, "GET", "/v1/models/nope")
    assert status == 404


def test_unknown_or_traversing_response_ids_are_404(server):
    for rid in ["resp_" + "0" * 48, "../../sessions/x", "resp_%2e%2e%2fsecret", "x" * 100,
                "resp_1\nX-Injected: 1\x1b[2J"]:
        status, raw, _ = request(server, "POST", "/v1/responses",
                                 json.dumps({"model": MODEL, "input": "x", "previous_response_id": rid}))
        assert status == 404, raw
        err = error_of(404, raw)            # one line: control characters are never echoed raw
        assert err["code"] == "response_not_found" and "\x1b" not in err["message"]
        if "\n" in rid:
            assert "resp_1\\nX-Injected" in err["message"]
            continue
        status, raw, _ = request(server, "GET", f"/v1/responses/{rid}")
        assert status == 404


def test_missing_or_wrong_key_is_401(server):
    for headers in [{"Content-Type": "application/json"},
                    {"Authorization": "Bearer nope", "Content-Type": "application/json"},
                    {"Authorization": f"Basic {KEY_A}", "Content-Type": "application/json"},
                    {"Authorization": "Bearer ", "Content-Type": "application/json"}]:
        for method, path, body in [("GET", "/v1/models", None), ("POST", "/v1/chat/completions", chat_body())]:
            status, raw, hdrs = request(server, method, path, body, headers)
            assert status == 401, (headers, raw)
            assert error_of(401, raw)["code"] == "invalid_api_key"
            assert hdrs.get("www-authenticate") == "Bearer"


def test_unknown_routes_and_methods(server):
    status, raw, _ = request(server, "GET", "/v1/nothing")
    assert status == 404 and error_of(404, raw)
    status, raw, _ = request(server, "GET", "/v1/chat/completions")
    assert status == 405 and error_of(405, raw)


def read_until_closed(s: socket.socket) -> bytes:
    """Everything the server sends before it closes the connection (it does, after a refusal)."""
    out = b""
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return out
            out += data
    except (ConnectionResetError, socket.timeout):
        return out


def test_declared_huge_body_is_413_without_reading_it(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Authorization: Bearer " + KEY_A.encode() + b"\r\nContent-Length: 50000000\r\n\r\n{")
        head = read_until_closed(s).decode()
    assert head.startswith("HTTP/1.1 413"), head
    assert "larger than this server's limit" in head


def test_chunked_huge_body_is_413(server):
    chunk = b"x" * 65536
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Authorization: Bearer " + KEY_A.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        reply = b""
        try:
            for _ in range(100):          # 6.5 MB, over the 4 MiB limit
                s.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            s.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass                           # the server answered and closed early: fine
        try:
            while b"\r\n\r\n" not in reply:
                data = s.recv(65536)
                if not data:
                    break
                reply += data
        except ConnectionResetError:
            pass
    assert reply.startswith(b"HTTP/1.1 413"), reply[:200]


def test_a_huge_body_sent_in_one_piece_gets_its_413(server):
    body = b"x" * (5 << 20)          # over the 4 MiB limit, written whole before the answer is read
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Authorization: Bearer " + KEY_A.encode() + b"\r\nContent-Length: " + str(len(body)).encode() +
                  b"\r\n\r\n" + body)
        reply = read_until_closed(s)
    head, _, raw = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), reply[:300]
    assert b"content-type: application/json" in head.lower()
    assert "larger than this server's limit" in error_of(413, raw)["message"]


@pytest.mark.parametrize("raw", [
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
    b"GARBAGE\r\n\r\n",
    b"GET /v1/models HTTP/9.9 extra\r\n\r\n",
    b"GET /v1/mo\x00dels HTTP/1.1\r\nHost: x\r\n\r\n",
], ids=["content-length-word", "content-length-twice", "garbage-line", "bad-version", "nul-in-target"])
def test_requests_that_are_not_http_get_a_json_400(server, raw):
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(raw)
        reply = read_until_closed(s)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"400", reply
    assert b"content-type: application/json" in head.lower(), reply
    assert "not valid HTTP" in error_of(400, body)["message"]


def test_stream_ends_with_done_and_the_server_survives_all_of_the_above(server):
    status, raw, hdrs = request(server, "POST", "/v1/chat/completions", chat_body(stream=True))
    assert status == 200 and hdrs["content-type"].startswith("text/event-stream")
    events = [line for line in raw.decode().split("\n\n") if line]
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)
    status, raw, _ = request(server, "GET", "/health", headers={})
    assert status == 200 and json.loads(raw)["status"] == "ok"


def test_a_form_encoded_body_says_to_send_json(server):
    status, raw, _ = request(server, "POST", "/v1/chat/completions", chat_body(),
                             {**AUTH, "Content-Type": "application/x-www-form-urlencoded"})
    assert status == 400 and "Content-Type: application/json" in error_of(400, raw)["message"]
