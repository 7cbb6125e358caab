"""The mcp.json file: LM Studio's format read and written back; a bad file is a one-line message."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.tools.mcp_config import McpServerConfig, load_mcp_config, save_mcp_config


def write(path: Path, data: object) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_lm_studio_format_read(tmp_path: Path) -> None:
    path = write(tmp_path / "mcp.json", {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "server-files", "/tmp"], "env": {"TOKEN": "x"}},
        "web": {"url": "http://127.0.0.1:9/mcp", "disabled": True, "alwaysAllow": ["fetch"]}}})
    config = load_mcp_config(path)
    assert config.error is None and config.notes == []
    files, web = config.servers
    assert (files.name, files.transport, files.command, files.args, files.env) == \
        ("files", "stdio", "npx", ["-y", "server-files", "/tmp"], {"TOKEN": "x"})
    assert files.enabled and files.always_allow == []
    assert (web.transport, web.url, web.enabled, web.always_allow) == \
        ("http", "http://127.0.0.1:9/mcp", False, ["fetch"])


def test_missing_file_is_no_servers(tmp_path: Path) -> None:
    config = load_mcp_config(tmp_path / "mcp.json")
    assert config.servers == [] and config.error is None


@pytest.mark.parametrize("content, words", [
    ("{not json", "not valid JSON (line 1"),
    ([1, 2], 'no "mcpServers" object'),
    ({"mcpServers": []}, 'no "mcpServers" object'),
    ("[" * 100_000, "could not be read"),      # nesting deeper than the parser allows
])
def test_bad_file_is_one_line(tmp_path: Path, content: object, words: str) -> None:
    config = load_mcp_config(write(tmp_path / "mcp.json", content))
    assert config.servers == []
    assert config.error is not None and words in config.error and "\n" not in config.error


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_bytes(b'{"mcpServers": {"\xff": {}}}')
    error = load_mcp_config(path).error
    assert error is not None and "UTF-8" in error


@pytest.mark.parametrize("entry, words", [
    ("npx", "is not a JSON object"),
    ({}, "needs either a 'command' or a 'url'"),
    ({"command": "a", "url": "http://x"}, "needs either"),
    ({"url": "file:///etc/passwd"}, "must start with http"),
    ({"command": "a", "args": "b"}, "'args' must be a list"),
    ({"command": "a", "env": {"K": 1}}, "'env' must map"),
    ({"command": 3}, "must be strings"),
])
def test_bad_entry_is_skipped_with_a_note(tmp_path: Path, entry: object, words: str) -> None:
    path = write(tmp_path / "mcp.json", {"mcpServers": {"bad": entry, "good": {"command": "ok"}}})
    config = load_mcp_config(path)
    assert [s.name for s in config.servers] == ["good"]
    assert len(config.notes) == 1 and words in config.notes[0] and "'bad'" in config.notes[0]


def test_saved_and_read_back_keeping_unknown_keys(tmp_path: Path) -> None:
    path = write(tmp_path / "mcp.json", {"other": 1, "mcpServers": {"a": {"command": "x", "timeout": 5}}})
    config = load_mcp_config(path)
    config.servers[0].always_allow.append("add")
    config.servers.append(McpServerConfig("b", url="https://example.invalid/mcp", enabled=False))
    save_mcp_config(path, config.servers)
    raw = json.loads(path.read_text())
    assert raw["other"] == 1
    assert raw["mcpServers"] == {"a": {"command": "x", "timeout": 5, "alwaysAllow": ["add"]},
                                 "b": {"url": "https://example.invalid/mcp", "disabled": True}}
    again = load_mcp_config(path)
    assert [(s.name, s.enabled, s.always_allow) for s in again.servers] == [("a", True, ["add"]), ("b", False, [])]
