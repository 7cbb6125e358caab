"""Stored response chains whose session fails to open: the failure is answered (409) and leaves
nothing behind, so the chain continues as soon as the request is right (or the chat is free).
In-process servers over a real SessionManager, with one chain open at a time so a chain is
reopened from disk at its next turn."""
from __future__ import annotations

import http.client
import json

import pytest

from engine.server import ServerConfig, serve_in_thread
from engine.sessions.locks import StateLocks
from engine.sessions.manager import SessionManager

MODEL = "tiny-chat"


@pytest.fixture
def server(tiny_model, tmp_path):
    manager = SessionManager(tiny_model, tmp_path / "state", lock_wait_s=0.2)
    handle = serve_in_thread(manager, "127.0.0.1", 0, config=ServerConfig(max_open_chains=1))
    yield handle, manager
    handle.stop()
    manager.shutdown()


def respond(port: int, **body) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", "/v1/responses",
                     json.dumps({"model": MODEL, "max_output_tokens": 2, "temperature": 0, **body}),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_a_chain_opened_with_another_salt_still_continues_with_its_own(server):
    handle, _ = server
    status, first = respond(handle.port, input="hello", cache_salt="mine")
    assert status == 200, first
    status, other = respond(handle.port, input="another chain")     # closes the first chain's session
    assert status == 200, other
    status, err = respond(handle.port, input="again", previous_response_id=first["id"], cache_salt="theirs")
    assert status == 409 and "another cache salt" in err["error"]["message"], err
    status, again = respond(handle.port, input="again", previous_response_id=first["id"], cache_salt="mine")
    assert status == 200, again
    assert again["amber"]["session_id"] == first["amber"]["session_id"]
    # While it is open, another salt is refused too (never silently served under the chain's salt).
    status, err = respond(handle.port, input="more", previous_response_id=again["id"], cache_salt="theirs")
    assert status == 409, err


def test_a_chain_held_by_another_process_continues_once_it_is_free(server, tmp_path):
    handle, _ = server
    status, first = respond(handle.port, input="hello")
    assert status == 200, first
    assert respond(handle.port, input="another chain")[0] == 200     # closes the first chain's session
    sid = first["amber"]["session_id"]
    elsewhere = StateLocks(tmp_path / "state")        # as the window or the CLI holds an open chat
    elsewhere.lock_session(sid, 1.0)
    try:
        status, err = respond(handle.port, input="again", previous_response_id=first["id"])
        assert status == 409 and "open in another Amber process" in err["error"]["message"], err
    finally:
        elsewhere.unlock_session(sid)
    status, again = respond(handle.port, input="again", previous_response_id=first["id"])
    assert status == 200, again
    assert again["amber"]["session_id"] == sid
