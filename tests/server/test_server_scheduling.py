"""Concurrency: fair service, 429 when the queue is full, 503 when shutting down, and a client that
disconnects cancels its generation. In-process servers (`serve_in_thread`) over a real
SessionManager, so the test can see the engine's own results."""
from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import pytest

from engine.api import GenerationResult
from engine.server import ServerConfig, serve_in_thread
from engine.sessions.manager import SessionManager

MODEL = "tiny-chat"
LONG = 100


class Recording:
    """The real SessionManager, recording each generation's result and optionally holding the
    engine thread at a gate before a generation starts."""

    def __init__(self, manager: SessionManager) -> None:
        self._m = manager
        self.results: list[GenerationResult] = []
        self.started: list[int] = []            # max_new_tokens of each generation, in start order
        self.gate = threading.Event()
        self.gate.set()
        self.lock = threading.Lock()
        # Set by a test: generations of at least LONG tokens wait up to 0.1 s a token until a
        # shorter one has finished, so a loaded machine cannot finish the long one first.
        self.short_finished: threading.Event | None = None

    def __getattr__(self, name):
        return getattr(self._m, name)

    def generate_tokens(self, sid, prompt, sampling=None, cancel=None):
        self.started.append(sampling.max_new_tokens)
        while not self.gate.wait(0.01):      # holds the engine thread (as a long prefill would)
            pass
        paced = self.short_finished is not None and sampling.max_new_tokens >= LONG
        for event in self._m.generate_tokens(sid, prompt, sampling, cancel):
            if isinstance(event, GenerationResult):
                with self.lock:
                    self.results.append(event)
                if self.short_finished is not None and not paced:
                    self.short_finished.set()
            elif paced:
                self.short_finished.wait(0.1)     # type: ignore[union-attr]
            yield event


@pytest.fixture
def engine(tiny_model, tmp_path):
    m = SessionManager(tiny_model, tmp_path / "state")
    yield Recording(m)
    m.shutdown()


@pytest.fixture
def serve(engine):
    handles = []

    def start(**cfg):
        h = serve_in_thread(engine, "127.0.0.1", 0, config=ServerConfig(**cfg))
        handles.append(h)
        return h
    yield start
    for h in handles:
        h.stop()


def post(port: int, body: dict, path: str = "/v1/completions", timeout: float = 120):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, json.loads(data) if data.startswith(b"{") else data


def completion(n: int, prompt: str = "Once upon a time", **kw) -> dict:
    # Penalty-free greedy on random weights rarely hits EOS: replies run to max_tokens.
    return {"model": MODEL, "prompt": prompt, "max_tokens": n, "temperature": 0, **kw}


def wait_until(cond, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.01)


def test_serve_in_thread_reports_its_address(serve):
    h = serve()
    assert h.url == f"http://127.0.0.1:{h.port}/v1" and h.running
    status, body = post(h.port, {}, "/v1/models")   # POST on a GET route
    assert status == 405


def test_a_short_request_is_not_stuck_behind_a_long_one(serve, engine):
    h = serve(max_active=4)
    engine.short_finished = threading.Event()
    done: list[str] = []
    long_thread = threading.Thread(target=lambda: (post(h.port, completion(300)), done.append("long")))
    long_thread.start()
    wait_until(lambda: engine.started)          # the long one is generating
    status, body = post(h.port, completion(3, "Hi"))
    done.append("short")
    long_thread.join(120)
    assert status == 200 and body["usage"]["completion_tokens"] <= 3
    assert done == ["short", "long"]
    long_result = max(engine.results, key=lambda r: r.figures.generated_tokens)
    assert long_result.figures.generated_tokens > 3


def test_full_queue_is_429_and_callers_are_served_in_turn(serve, engine):
    h = serve(max_active=1, max_queued=2)
    engine.gate.clear()
    results: dict[int, tuple] = {}

    def send(i: int, n: int) -> None:
        results[i] = post(h.port, completion(n, f"Prompt {i}"))
    first = threading.Thread(target=send, args=(0, 2))
    first.start()
    wait_until(lambda: len(engine.started) == 1)       # the engine thread holds request 0
    queued = [threading.Thread(target=send, args=(i, 2 + i)) for i in (1, 2)]
    for i, t in enumerate(queued, 1):
        t.start()
        wait_until(lambda i=i: json.loads(http_get(h.port, "/health"))["waiting"] == i)   # in this order
    wait_until(lambda: json.loads(http_get(h.port, "/health"))["waiting"] == 2)
    status, body = post(h.port, completion(2, "one too many"))
    assert status == 429 and body["error"]["type"] == "rate_limit_error"
    engine.gate.set()
    for t in [first, *queued]:
        t.join(120)
    assert all(results[i][0] == 200 for i in range(3))
    assert engine.started == [2, 3, 4]      # FIFO for one caller


def refuses_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def http_get(port: int, path: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path)
    data = conn.getresponse().read()
    conn.close()
    return data


@pytest.mark.parametrize("stream", [True, False])
def test_a_disconnected_client_cancels_its_generation(serve, engine, stream):
    h = serve()
    body = json.dumps(completion(400, stream=stream)).encode()
    s = socket.create_connection(("127.0.0.1", h.port), timeout=60)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    if stream:
        got = b""
        while got.count(b"data: ") < 3:        # a few tokens arrived: the generation is running
            got += s.recv(65536)
    else:
        wait_until(lambda: engine.started)
    s.close()
    wait_until(lambda: engine.results)
    result = engine.results[0]
    assert result.figures.finish_reason == "cancelled"
    assert result.figures.generated_tokens < 400
    # The engine is free again at once.
    status, reply = post(h.port, completion(2))
    assert status == 200


def test_stopping_the_server_answers_waiting_requests(serve, engine):
    h = serve(max_active=1)
    engine.gate.clear()
    out: list = []
    t = threading.Thread(target=lambda: out.append(post(h.port, completion(5))))
    t.start()
    wait_until(lambda: engine.started)
    stopper = threading.Thread(target=h.stop)
    stopper.start()
    wait_until(lambda: refuses_connections(h.port))     # the server is shutting down
    engine.gate.set()
    t.join(60)
    stopper.join(60)
    assert not h.running
    # The request in flight when the stop began is answered before the server stops: the shutdown
    # lets it finish (200), or cancels it (200 with what was generated, or 503) - never a 500.
    assert out and out[0][0] in (200, 503)


def test_waiting_callers_are_admitted_round_robin(serve, engine):
    h = serve(max_active=1, api_keys=["ka", "kb"])
    engine.gate.clear()

    def send(key: str, n: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", h.port, timeout=120)
        conn.request("POST", "/v1/completions", json.dumps(completion(n)),
                     {"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
        assert conn.getresponse().status == 200
        conn.close()
    # Key A holds the engine and queues two more; key B queues one after them.
    order = [("ka", 2), ("ka", 3), ("ka", 4), ("kb", 5)]
    threads = []
    for i, (key, n) in enumerate(order):
        t = threading.Thread(target=send, args=(key, n))
        t.start()
        threads.append(t)
        if i == 0:
            wait_until(lambda: len(engine.started) == 1)
        else:
            wait_until(lambda i=i: json.loads(http_get(h.port, "/health"))["waiting"] == i)
    engine.gate.set()
    for t in threads:
        t.join(120)
    # B is not made to wait behind all of A's queue: A, then B, then A's rest.
    assert engine.started == [2, 3, 5, 4]


def test_too_many_requests_in_flight_is_an_openai_503(serve, engine):
    h = serve(max_active=1, max_in_flight=2)
    engine.gate.clear()
    threads = [threading.Thread(target=post, args=(h.port, completion(2, f"held {i}"))) for i in range(2)]
    threads[0].start()
    wait_until(lambda: len(engine.started) == 1)
    threads[1].start()
    wait_until(lambda: json.loads(http_get(h.port, "/health"))["waiting"] == 1)
    status, body = post(h.port, completion(2, "third"))
    assert status == 503 and body["error"]["code"] == "server_busy" and body["error"]["type"] == "server_error"
    engine.gate.set()
    for t in threads:
        t.join(120)
    assert post(h.port, completion(2))[0] == 200
