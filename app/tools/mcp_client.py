"""A blocking client for one MCP server over the official `mcp` SDK (stdio or streamable HTTP).

Each call connects, does its one request and disconnects: a worker thread runs it (the window
through app.gui.tasks), nothing stays running between turns, and a server that died is simply
started again next time. Every failure is an `McpServerError` whose message is one line.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, TypeVar

from .mcp_config import McpServerConfig

if TYPE_CHECKING:
    from mcp import Client

T = TypeVar("T")

CONNECT_TIMEOUT_S = 30.0      # starting a server (npx may install a package first)
CALL_TIMEOUT_S = 120.0        # one tool call
MAX_RESULT_CHARS = 32_000     # what a tool result may put into the chat (the rest is cut, and says so)


class McpServerError(Exception):
    """A server could not be started, reached, listed or called; the message says why, in one line."""


@dataclass(frozen=True)
class McpTool:
    """A tool a server offers, as the model is shown it (OpenAI's function schema)."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]

    def schema(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.input_schema}}


@dataclass(frozen=True)
class ToolResult:
    """What a call gave back, as text for the chat; `is_error`: the tool said it failed."""

    text: str
    is_error: bool = False


def _client(server: McpServerConfig) -> Client:
    # The SDK (pydantic models, HTTP and process transports) loads on first use, not with the
    # window: importing it costs more than a second of start-up.
    from mcp import Client, StdioServerParameters  # noqa: PLC0415
    from mcp.client.stdio import get_default_environment  # noqa: PLC0415

    if server.url:
        return Client(server.url, mode="auto")
    env = {**get_default_environment(), **server.env}
    if "PATH" not in server.env and "PATH" in os.environ:
        env["PATH"] = os.environ["PATH"]     # find `npx`, `uvx`, ... as a terminal would
    return Client(StdioServerParameters(command=server.command, args=list(server.args), env=env))


def _one_line(exc: BaseException) -> str:
    """The innermost useful cause of `exc` (anyio wraps failures in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _run(server: McpServerConfig, what: str, timeout_s: float,
         work: Callable[[Client], Awaitable[T]]) -> T:
    import anyio  # noqa: PLC0415 - with the SDK, on first use

    async def main() -> T:
        with anyio.fail_after(timeout_s):
            async with _client(server) as client:
                return await work(client)

    try:
        return anyio.run(main)
    except TimeoutError:
        raise McpServerError(f"MCP server '{server.name}' did not answer {what} within {timeout_s:g} s") from None
    except McpServerError:
        raise
    except Exception as exc:  # noqa: BLE001 - the SDK and the transports raise many kinds; all are reported
        raise McpServerError(f"MCP server '{server.name}' failed {what}: {_one_line(exc)}") from exc


def list_tools(server: McpServerConfig, timeout_s: float = CONNECT_TIMEOUT_S) -> list[McpTool]:
    """The tools `server` offers (every page of its listing)."""
    async def work(client: Client) -> list[McpTool]:
        tools: list[McpTool] = []
        cursor: str | None = None
        for _ in range(100):     # a server whose pages never end cannot hang the window
            page = await client.list_tools(cursor=cursor)
            tools += [McpTool(server.name, t.name, t.description or "", dict(t.input_schema or {}))
                      for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    return _run(server, "to list its tools", timeout_s, work)


def result_text(content: list[Any], structured: Any = None) -> str:
    """A call's content blocks as text: text blocks as they are, other blocks named."""
    parts: list[str] = []
    for block in content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        elif kind == "resource":
            resource = getattr(block, "resource", None)
            parts.append(str(getattr(resource, "text", "") or f"[resource {getattr(resource, 'uri', '')}]"))
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False))
    text = "\n".join(parts)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n[... {len(text) - MAX_RESULT_CHARS} more characters left out]"
    return text


def call_tool(server: McpServerConfig, name: str, arguments: dict[str, Any],
              timeout_s: float = CALL_TIMEOUT_S) -> ToolResult:
    """Calls tool `name` with `arguments` on `server`."""
    async def work(client: Client) -> ToolResult:
        result = await client.call_tool(name, arguments)
        return ToolResult(result_text(list(result.content), result.structured_content), bool(result.is_error))

    return _run(server, f"calling '{name}'", timeout_s, work)
