"""The MCP client against a real server (tests/support/mcp_server.py over stdio, a real process),
and against servers that cannot be reached: each failure is one line."""
from __future__ import annotations

import sys

import pytest

from app.tools.mcp_client import McpServerError, call_tool, list_tools
from app.tools.mcp_config import McpServerConfig, parse_server
from tests.support.mcp_server import stdio_config


@pytest.fixture(scope="module")
def server() -> McpServerConfig:
    return parse_server("test-tools", stdio_config())


def test_lists_the_tools_with_their_schemas(server: McpServerConfig) -> None:
    tools = {t.name: t for t in list_tools(server)}
    assert set(tools) == {"add", "lookup", "shout", "colour_of"}
    add = tools["add"]
    assert add.server == "test-tools" and add.description == "Add two integers."
    assert add.input_schema["required"] == ["a", "b"]
    assert add.schema()["function"]["parameters"]["properties"]["a"]["type"] == "integer"


def test_calls_a_tool(server: McpServerConfig) -> None:
    result = call_tool(server, "add", {"a": 19, "b": 23})
    assert (result.text, result.is_error) == ("42", False)
    assert call_tool(server, "lookup", {"key": "onyx"}).text == "a banded chalcedony"
    assert call_tool(server, "colour_of", {"fruit": "banana"}).text == "yellow"


def test_a_tool_error_is_a_result_marked_as_error(server: McpServerConfig) -> None:
    result = call_tool(server, "lookup", {"key": "quartz"})
    assert result.is_error and "no entry for 'quartz'" in result.text


def test_streamable_http_server_lists_and_calls() -> None:
    from tests.support.mcp_server import http_server
    with http_server() as url:
        web = parse_server("web", {"url": url})
        assert {t.name for t in list_tools(web)} == {"add", "lookup", "shout", "colour_of"}
        assert call_tool(web, "shout", {"text": "amber"}).text == "AMBER"
        assert call_tool(web, "lookup", {"key": "quartz"}).is_error


def test_a_command_that_does_not_exist(tmp_path: object) -> None:
    bad = McpServerConfig("ghost", command="amber-no-such-command-here")
    with pytest.raises(McpServerError) as err:
        list_tools(bad, timeout_s=30)
    assert "'ghost'" in str(err.value) and "\n" not in str(err.value)


def test_a_process_that_is_not_an_mcp_server() -> None:
    bad = McpServerConfig("mute", command=sys.executable, args=["-c", "print('hello')"])
    with pytest.raises(McpServerError) as err:
        list_tools(bad, timeout_s=30)
    assert "'mute'" in str(err.value) and "\n" not in str(err.value)


def test_a_url_where_nothing_listens() -> None:
    import socket
    with socket.socket() as s:      # a free port, closed again: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    bad = McpServerConfig("gone", url=f"http://127.0.0.1:{port}/mcp")
    with pytest.raises(McpServerError) as err:
        list_tools(bad, timeout_s=30)
    assert "'gone'" in str(err.value) and "\n" not in str(err.value)
