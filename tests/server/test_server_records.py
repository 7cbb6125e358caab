"""Stored response records and the server's secret are read as untrusted files: a damaged record is
a clean OpenAI error at GET, at continue and at DELETE (which still removes it), a FIFO in their
place never blocks a request or the server's start. A real server process on 127.0.0.1."""
from __future__ import annotations

import http.client
import json
import os
from pathlib import Path

import pytest

from tests.support.server import KEY_A, KEY_B, ServerProcess

MODEL = "tiny-chat"
AUTH = {"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def served(tiny_dir, tmp_path_factory):
    state = tmp_path_factory.mktemp("records") / "state"
    s = ServerProcess(tiny_dir, state, "--api-key", KEY_A, "--api-key", KEY_B)
    yield s, state / "server" / "responses"
    assert s.stop() == 0


def call(server, method: str, path: str, body: dict | None = None, key: str = KEY_A) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        conn.request(method, path, None if body is None else json.dumps(body),
                     {**AUTH, "Authorization": f"Bearer {key}"})
        resp = conn.getresponse()
        raw = resp.read()
        assert resp.getheader("content-type") == "application/json", raw
        return resp.status, json.loads(raw)
    finally:
        conn.close()


def stored(server) -> dict:
    status, body = call(server, "POST", "/v1/responses", {"model": MODEL, "input": "hello", "max_output_tokens": 2})
    assert status == 200, body
    return body


def one_line_error(body: dict) -> dict:
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"] and "\n" not in err["message"] and "Traceback" not in err["message"]
    return err


def deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


@pytest.mark.parametrize("damage, valid", [
    (lambda d: {**d, "messages": [1, 2]}, False),
    (lambda d: {**d, "messages": [{"role": "user"}]}, False),
    (lambda d: {**d, "session_id": 7}, False),
    (lambda d: {**d, "session_id": "../../sessions/x"}, False),
    (lambda d: {**d, "body": {"text": "\ud800"}}, False),
    (lambda d: {**d, "body": [1]}, False),
    (lambda d: deep(100_000), False),
    (lambda d: {**d, "body": {"deep": json.loads(deep(900))}}, True),     # deep, but only data: answered as stored
    (lambda d: {**d, "messages": [{"role": "tool", "content": "18 C"}]}, False),
    (lambda d: {**d, "messages": [{"role": "assistant", "content": None}]}, False),
    (lambda d: {**d, "messages": [{"role": "assistant", "content": None, "tool_calls": {"id": "x"}}]}, False),
    (lambda d: {**d, "messages": [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "function": {"name": "f", "arguments": 7}}]}]}, False),
    (lambda d: {**d, "messages": [{"role": "user", "content": "hi", "tool_calls": []}]}, False),
], ids=["messages-ints", "message-without-content", "int-session", "bad-session", "lone-surrogate", "body-list",
        "100k-deep", "body-900-deep", "tool-result-without-call-id", "assistant-without-content-or-calls",
        "tool-calls-not-a-list", "tool-call-arguments-a-number", "user-with-tool-calls"])
def test_a_damaged_record_is_a_clean_error_and_can_be_deleted(served, damage, valid):
    server, responses = served
    rid = stored(server)["id"]
    path = responses / f"{rid}.json"
    changed = damage(json.loads(path.read_text()))
    path.write_bytes(changed if isinstance(changed, bytes) else json.dumps(changed).encode())
    status, body = call(server, "GET", f"/v1/responses/{rid}")
    if valid:
        assert status == 200 and body == changed["body"]
    else:
        assert status == 404 and one_line_error(body)["code"] == "response_damaged", body
        status, body = call(server, "POST", "/v1/responses",
                            {"model": MODEL, "input": "more", "previous_response_id": rid, "max_output_tokens": 2})
        assert status == 404 and one_line_error(body)["code"] == "response_damaged", body
    status, body = call(server, "DELETE", f"/v1/responses/{rid}")
    assert status == 200 and body["deleted"] is True, body
    assert not path.exists()
    status, body = call(server, "GET", f"/v1/responses/{rid}")
    assert status == 404 and one_line_error(body)["code"] == "response_not_found"


def test_another_keys_damaged_record_is_not_found_and_stays(served):
    server, responses = served
    rid = stored(server)["id"]
    path = responses / f"{rid}.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "messages": [1]}))
    for method in ("GET", "DELETE"):
        status, body = call(server, method, f"/v1/responses/{rid}", key=KEY_B)
        assert status == 404 and one_line_error(body)["code"] == "response_not_found"
    assert path.exists()


def test_fifos_named_like_records_never_block(served):
    server, responses = served
    good = stored(server)
    fifos = []
    for i in range(12):       # more than the server's worker threads
        rid = "resp_" + f"{i:02x}" * 24
        os.mkfifo(responses / f"{rid}.json")
        fifos.append(rid)
    for rid in fifos:
        status, body = call(server, "GET", f"/v1/responses/{rid}")
        assert status == 404 and "not a regular file" in one_line_error(body)["message"], body
    status, body = call(server, "POST", "/v1/responses", {"model": MODEL, "input": "more", "max_output_tokens": 2,
                                                          "previous_response_id": good["id"]})
    assert status == 200, body
    # Deleting scans the records for the chain's session: the FIFOs are skipped, not read.
    status, body = call(server, "DELETE", f"/v1/responses/{body['id']}")
    assert status == 200, body
    status, body = call(server, "DELETE", f"/v1/responses/{fifos[0]}")
    assert status == 200 and not (responses / f"{fifos[0]}.json").exists()


def test_a_fifo_in_place_of_the_servers_secret_does_not_hang_its_start(tiny_dir, tmp_path):
    state = tmp_path / "state"
    (state / "server").mkdir(parents=True)
    os.mkfifo(state / "server" / "server-secret")
    server = ServerProcess(tiny_dir, state, "--api-key", KEY_A)
    try:
        assert stored(server)["id"].startswith("resp_")
        assert Path(state / "server" / "server-secret").is_file()
    finally:
        assert server.stop() == 0
