"""Running the app: `serve_in_thread` (tests, the GUI) and `serve_forever` (the CLI), with uvicorn."""
from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import uvicorn

from engine.api import ChatEngine
from engine.base import paths
from .app import create_app
from .protocol import JsonErrorsH11Protocol
from .service import ServerConfig

LOOPBACK = "127.0.0.1"
MAX_CONNECTIONS = 1024        # open connections; beyond, uvicorn answers 503 (requests: ServerConfig.max_in_flight)


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before uvicorn starts (port 0 picks a free port we can report)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Inherited by accepted connections (Linux): a response's head and body, and each streamed
    # token, go out at once instead of waiting ~40 ms for the client's delayed ACK (Nagle).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _config(engine: ChatEngine, state_dir: Path | str, config: ServerConfig | None) -> uvicorn.Config:
    return uvicorn.Config(create_app(engine, state_dir, config), log_level="warning", access_log=False,
                          limit_concurrency=MAX_CONNECTIONS, timeout_graceful_shutdown=5, lifespan="on",
                          http=JsonErrorsH11Protocol)


def url_of(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@dataclass
class ServerHandle:
    """A server running in a background thread; `stop()` ends it (the engine stays the caller's)."""
    host: str
    port: int
    _server: uvicorn.Server
    _thread: threading.Thread

    @property
    def url(self) -> str:
        """The base URL clients use, e.g. http://127.0.0.1:8080/v1."""
        return url_of(self.host, self.port) + "/v1"

    def stop(self, timeout: float = 15.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()


def serve_in_thread(engine: ChatEngine, host: str = LOOPBACK, port: int = 0, state_dir: Path | str | None = None,
                    config: ServerConfig | None = None, startup_timeout: float = 30.0) -> ServerHandle:
    """Starts the server on its own thread and event loop; returns once it accepts connections.
    OSError when the address cannot be bound."""
    if state_dir is None:
        state_dir = engine.capabilities.state_dir
        if state_dir is None:
            state_dir = paths.state_dir()
    sock = _bind(host, port)
    bound = sock.getsockname()[1]
    server = uvicorn.Server(_config(engine, state_dir, config))
    failed: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(server.serve(sockets=[sock]))
        except BaseException as exc:    # noqa: BLE001 - reported to the caller waiting for startup
            failed.append(exc)
        finally:
            sock.close()
    thread = threading.Thread(target=run, name=f"amber-server-{bound}", daemon=True)
    thread.start()
    ready = threading.Event()
    for _ in range(int(startup_timeout / 0.01)):
        if server.started or not thread.is_alive():
            break
        ready.wait(0.01)
    if not server.started:
        server.should_exit = True
        thread.join(5)
        raise OSError(f"the server did not start: {failed[0] if failed else 'timed out'}")
    return ServerHandle(host, bound, server, thread)


def serve_forever(engine: ChatEngine, host: str, port: int, state_dir: Path | str,
                  config: ServerConfig | None = None, on_ready: Callable[[str], None] | None = None) -> None:
    """Serves in the calling (main) thread until SIGINT/SIGTERM; `on_ready(url)` once listening."""
    sock = _bind(host, port)
    server = uvicorn.Server(_config(engine, state_dir, config))

    async def main() -> None:
        task = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        if server.started and on_ready is not None:
            on_ready(url_of(host, sock.getsockname()[1]) + "/v1")
        await task
    try:
        asyncio.run(main())
    finally:
        sock.close()
