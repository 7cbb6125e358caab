"""The MCP servers' configuration file, in LM Studio's (and Claude Desktop's) `mcp.json` format:

    {"mcpServers": {"files": {"command": "npx", "args": ["-y", "..."], "env": {"KEY": "v"}},
                    "web": {"url": "http://127.0.0.1:8765/mcp"}}}

Amber adds two keys per server that other hosts use too: `"disabled": true` (Cline) and
`"alwaysAllow": ["tool", ...]` (tools the user approved for good). The file is untrusted: a bad
file gives no servers and a one-line message naming the cause, never an exception; entries that
are not understood are skipped with a note. Unknown keys are kept when the file is written back.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.base.safefs import atomic_write

MAX_CONFIG_BYTES = 1 << 20


@dataclass
class McpServerConfig:
    """One server: started as `command args` (stdio) or reached at `url` (streamable HTTP)."""

    name: str
    command: str = ""
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    url: str = ""
    enabled: bool = True
    always_allow: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)   # keys Amber does not use, kept

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        if self.url:
            out["url"] = self.url
        else:
            out["command"] = self.command
            if self.args:
                out["args"] = list(self.args)
            if self.env:
                out["env"] = dict(self.env)
        if not self.enabled:
            out["disabled"] = True
        if self.always_allow:
            out["alwaysAllow"] = sorted(set(self.always_allow))
        return out


@dataclass
class McpConfig:
    """The servers read from the file, and what was wrong with it (None: nothing)."""

    servers: list[McpServerConfig] = field(default_factory=list)
    error: str | None = None
    notes: list[str] = field(default_factory=list)    # entries skipped, each in one line

    def server(self, name: str) -> McpServerConfig | None:
        return next((s for s in self.servers if s.name == name), None)


def _strings(value: Any) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def parse_server(name: str, raw: Any) -> McpServerConfig:
    """One `mcpServers` entry; ValueError (one line) when it cannot be used."""
    if not isinstance(raw, dict):
        raise ValueError(f"server '{name}' is not a JSON object")
    url, command = raw.get("url", raw.get("serverUrl", "")), raw.get("command", "")
    if not isinstance(url, str) or not isinstance(command, str):
        raise ValueError(f"server '{name}': 'command' and 'url' must be strings")
    if bool(url) == bool(command):
        raise ValueError(f"server '{name}' needs either a 'command' or a 'url'")
    if url and not url.startswith(("http://", "https://")):
        raise ValueError(f"server '{name}': the url must start with http:// or https://")
    args = _strings(raw.get("args", []))
    if args is None:
        raise ValueError(f"server '{name}': 'args' must be a list of strings")
    env = raw.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ValueError(f"server '{name}': 'env' must map names to strings")
    allow = _strings(raw.get("alwaysAllow", []))
    if allow is None:
        raise ValueError(f"server '{name}': 'alwaysAllow' must be a list of tool names")
    used = {"url", "serverUrl", "command", "args", "env", "disabled", "alwaysAllow"}
    return McpServerConfig(name=name, command=command, args=args, env=dict(env), url=url,
                           enabled=raw.get("disabled") is not True, always_allow=allow,
                           extra={k: v for k, v in raw.items() if k not in used})


def load_mcp_config(path: Path) -> McpConfig:
    """The servers in `path` (none when it does not exist); never raises."""
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            return McpConfig(error=f"{path.name} is larger than {MAX_CONFIG_BYTES // 1024} KiB; no MCP servers loaded")
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return McpConfig()
    except UnicodeDecodeError:
        return McpConfig(error=f"{path.name} is not UTF-8 text; no MCP servers loaded")
    except json.JSONDecodeError as exc:
        return McpConfig(error=f"{path.name} is not valid JSON (line {exc.lineno}: {exc.msg}); "
                               "no MCP servers loaded")
    except (OSError, RecursionError) as exc:
        return McpConfig(error=f"{path.name} could not be read ({type(exc).__name__}); no MCP servers loaded")
    servers = raw.get("mcpServers") if isinstance(raw, dict) else None
    if not isinstance(servers, dict):
        return McpConfig(error=f"{path.name} has no \"mcpServers\" object; no MCP servers loaded")
    config = McpConfig()
    for name, entry in servers.items():
        try:
            config.servers.append(parse_server(str(name), entry))
        except ValueError as exc:
            config.notes.append(f"{exc}; skipped")
    return config


def save_mcp_config(path: Path, servers: list[McpServerConfig]) -> None:
    """Writes the servers (temp file, fsync, rename); other top-level keys of the file are kept."""
    try:
        current = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        current = {}
    document = current if isinstance(current, dict) else {}
    document["mcpServers"] = {s.name: s.to_json() for s in servers}
    atomic_write(path, json.dumps(document, indent=2), private=True, parents=True)
