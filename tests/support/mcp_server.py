"""A small MCP server for the tests, on the official SDK (`MCPServer`, FastMCP's successor):
`python -m tests.support.mcp_server` serves it over stdio. Its tools answer deterministically:
`add(a, b)`, `lookup(key)` from a fixed table (an unknown key is a tool error), `shout(text)`,
`colour_of(fruit)` (an enum argument: a forced call of it is short whatever the model).
`stdio_config()` is the mcp.json entry that starts it with the interpreter running the tests;
`http_server()` serves it over streamable HTTP on 127.0.0.1 for a `with` block."""
from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

TABLE = {"amber": "a fossilised tree resin", "onyx": "a banded chalcedony"}

server = MCPServer("amber-test-tools")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def lookup(key: str) -> str:
    """Look a word up in a small fixed glossary."""
    if key not in TABLE:
        raise ToolError(f"no entry for {key!r}")   # a deliberate error: its words reach the client
    return TABLE[key]


@server.tool()
def shout(text: str) -> str:
    """The text in capitals."""
    return text.upper()


@server.tool()
def colour_of(fruit: Literal["apple", "banana"]) -> str:
    """The colour of a fruit."""
    return {"apple": "red", "banana": "yellow"}[fruit]


ROOT = Path(__file__).resolve().parents[2]


def stdio_config(name: str = "test-tools") -> dict[str, Any]:
    """This server as an `mcpServers` entry (run from the repository root, as the tests are)."""
    return {"command": sys.executable, "args": ["-m", "tests.support.mcp_server"],
            "env": {"PYTHONPATH": str(ROOT)}}


if __name__ == "__main__":
    server.run("stdio")


@contextmanager
def http_server() -> Iterator[str]:
    """This server over streamable HTTP on 127.0.0.1 (uvicorn, in a thread); yields its URL."""
    import uvicorn

    ready = threading.Event()

    class _Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            ready.set()

    srv = _Server(uvicorn.Config(server.streamable_http_app(), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    try:
        assert ready.wait(60), "the MCP HTTP server did not start"
        port = srv.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        srv.should_exit = True
        thread.join(30)
