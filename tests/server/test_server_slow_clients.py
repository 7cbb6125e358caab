"""Clients that send their headers and then trickle or withhold the body: without a good key they
are answered (401) from the headers alone and hold no request slot, so clients with one are still
served; with one, the body must arrive in time (408). Real sockets on 127.0.0.1 against an
in-process server with small limits (a few slots, a short body deadline)."""
from __future__ import annotations

import http.client
import json
import socket
from contextlib import ExitStack

import pytest

from engine.server import ServerConfig, serve_in_thread
from engine.sessions.manager import SessionManager

MODEL = "tiny-chat"
KEY = "key-slow-" + "3" * 20
SLOTS = 4


@pytest.fixture
def server(tiny_model, tmp_path):
    manager = SessionManager(tiny_model, tmp_path / "state")
    handle = serve_in_thread(manager, "127.0.0.1", 0, config=ServerConfig(api_keys=[KEY], max_in_flight=SLOTS,
                                                                           body_timeout_s=2.0))
    yield handle
    handle.stop()
    manager.shutdown()


def head(path: str, length: int, key: str | None) -> bytes:
    auth = b"" if key is None else b"Authorization: Bearer " + key.encode() + b"\r\n"
    return (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + auth +
            b"Content-Length: " + str(length).encode() + b"\r\n\r\n")


def reply(s: socket.socket) -> tuple[int, dict[str, str], dict]:
    """The status, headers and JSON body of the one response on `s`."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        assert chunk, data
        data += chunk
    top, _, rest = data.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    headers = dict((k.lower(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:]))
    while len(rest) < int(headers["content-length"]):
        chunk = s.recv(65536)
        assert chunk, rest
        rest += chunk
    return int(lines[0].split()[1]), headers, json.loads(rest)


def chat(port: int) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", "/v1/chat/completions",
                     json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
                     {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


@pytest.mark.parametrize("key", [None, "wrong-key"])
def test_clients_without_a_good_key_are_refused_from_the_headers_and_take_no_slot(server, key):
    with ExitStack() as stack:
        attackers = []
        for _ in range(3 * SLOTS):           # more than the server's slots, each holding its body back
            s = stack.enter_context(socket.create_connection(("127.0.0.1", server.port), timeout=60))
            s.sendall(head("/v1/chat/completions", 100_000, key) + b'{"mod')
            attackers.append(s)
        for s in attackers:
            status, headers, body = reply(s)
            assert status == 401 and body["error"]["code"] == "invalid_api_key", body
            assert headers["content-type"] == "application/json" and headers["www-authenticate"] == "Bearer"
        # While they all still hold their connections, a client with the key is served.
        status, body = chat(server.port)
        assert status == 200, body
        assert body["choices"][0]["message"]["role"] == "assistant"


def test_a_body_that_does_not_arrive_in_time_is_408_and_frees_its_slot(server):
    with ExitStack() as stack:
        slow = []
        for _ in range(SLOTS):               # every slot taken by a client with the key that stalls
            s = stack.enter_context(socket.create_connection(("127.0.0.1", server.port), timeout=60))
            s.sendall(head("/v1/chat/completions", 100, KEY) + b'{"mod')
            slow.append(s)
        for s in slow:
            status, headers, body = reply(s)
            assert status == 408 and "did not arrive" in body["error"]["message"], body
            assert headers["connection"] == "close"
            assert s.recv(1) == b""          # and the server closed the connection
    status, body = chat(server.port)
    assert status == 200, body
