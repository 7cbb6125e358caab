"""A tiny scripted HTTP server on 127.0.0.1 (real sockets) for a remote engine's error paths.

Each test sets `server.behaviour` to one of the modes below and reads `server.requests` (the JSON
bodies and headers the client really sent). Not an OpenAI implementation: Amber's own server is
what the engine is tested against for real replies (tests/server/test_remote_engine.py).
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(text: str | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    delta = {"content": text} if text is not None else {}
    return {"id": "c1", "object": "chat.completion.chunk", "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


class _Handler(BaseHTTPRequestHandler):
    server: "RawServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:   # quiet
        pass

    def _send(self, status: int, body: bytes, ctype: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        self.server.requests.append({"path": self.path, "headers": dict(self.headers), "body": None})
        mode = self.server.behaviour
        if mode == "401":
            return self._send(401, json.dumps({"error": {"message": "Invalid API key", "type": "auth"}}).encode())
        if self.path.rstrip("/").endswith("/models"):
            return self._send(200, json.dumps({"object": "list", "data": self.server.models}).encode())
        self._send(404, b'{"detail": "Not Found"}')

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n)
        self.server.requests.append({"path": self.path, "headers": dict(self.headers),
                                     "body": json.loads(raw or b"null")})
        mode = self.server.behaviour
        if mode == "401":
            key = self.headers.get("Authorization", "").removeprefix("Bearer ")
            return self._send(401, json.dumps({"error": {"message": f"Invalid API key {key}"}}).encode())
        if mode == "404":
            return self._send(404, json.dumps({"error": {"message": "The model `x` does not exist."}}).encode())
        if mode == "500":
            return self._send(500, b"Internal Server Error\n\x1b[31mTraceback (most recent call last)")
        if mode == "garbage":
            self._start_stream()
            self.wfile.write(b"data: {not json at all\n\n")
            return
        if mode == "html":
            return self._send(200, b"<html><body>a login page</body></html>", "text/html")
        if mode == "huge_line":
            self._start_stream()
            try:
                for _ in range(2048):
                    self.wfile.write(b"x" * 1024)
            except OSError:
                pass
            return
        if mode == "error_event":
            self._start_stream()
            self.wfile.write(sse(chunk("a")) + sse({"error": {"message": "out of memory\non the GPU"}}))
            return
        if mode == "cut":
            self._start_stream()
            self.wfile.write(sse(chunk("partial")))
            self.wfile.flush()
            self.connection.shutdown(2)
            return
        if mode == "silent":
            self._start_stream()
            self.wfile.write(sse(chunk("one")))
            self.wfile.flush()
            # then nothing: the client must give up (read timeout) or cancel; wait for it to leave
            deadline = time.monotonic() + 30
            self.connection.settimeout(0.2)
            while time.monotonic() < deadline and not self.server.stopping.is_set():
                try:
                    if self.connection.recv(1) == b"":
                        break
                except TimeoutError:
                    continue
                except OSError:
                    break
            self.server.disconnects.append(time.monotonic())
            return
        if mode == "json":      # a server that ignores `stream`
            return self._send(200, json.dumps({
                "id": "x", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "whole reply"},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}}).encode())
        # "ok": a llama.cpp-style stream with timings, then usage, then [DONE]
        self._start_stream()
        for piece in ("Hel", "lo", " wörld"):
            self.wfile.write(sse(chunk(piece)))
        self.wfile.write(sse(chunk(None, "length", timings={
            "cache_n": 5, "prompt_n": 12, "prompt_ms": 34.5, "predicted_n": 3,
            "predicted_per_second": 41.0})))
        self.wfile.write(sse({"id": "c1", "object": "chat.completion.chunk", "choices": [],
                              "usage": {"prompt_tokens": 17, "completion_tokens": 3,
                                        "prompt_tokens_details": {"cached_tokens": 5}}}))
        self.wfile.write(b": a comment line\n\ndata: [DONE]\n\n")


class RawServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, models: list[dict[str, Any]] | None = None):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.behaviour = "ok"
        self.models = models if models is not None else [{"id": "m", "object": "model", "owned_by": "llamacpp"}]
        self.requests: list[dict[str, Any]] = []
        self.disconnects: list[float] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def stop(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()
