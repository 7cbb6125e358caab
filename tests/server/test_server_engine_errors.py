"""The API server answers the engine's typed errors as OpenAI-style errors: an engine that was
shut down (a model switch in the window, say) is a 503 `model_not_ready`, never a 500. An
in-process server (`serve_in_thread`) over a real SessionManager on the tiny model."""
from __future__ import annotations

import http.client
import json

from engine.server import serve_in_thread
from engine.sessions.manager import SessionManager


def test_a_shut_down_engine_is_a_503_model_not_ready(tiny_model, tmp_path):
    manager = SessionManager(tiny_model, tmp_path / "state")
    handle = serve_in_thread(manager, "127.0.0.1", 0)
    try:
        manager.shutdown()
        conn = http.client.HTTPConnection("127.0.0.1", handle.port, timeout=120)
        body = {"model": manager.model_name, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        answer = json.loads(resp.read())
        conn.close()
        assert resp.status == 503
        assert answer["error"]["code"] == "model_not_ready" and "shut down" in answer["error"]["message"]
    finally:
        handle.stop()
