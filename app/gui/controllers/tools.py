"""MCP servers for the window: their configuration (mcp.json, read and written off the UI thread),
each enabled server's status (connected with N tools, or why not), and the `Toolbox` a turn offers
the model. No widgets: changes are signals."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from PySide6.QtCore import QObject, Signal

from ...tools.mcp_client import McpTool, list_tools
from ...tools.mcp_config import McpConfig, McpServerConfig, load_mcp_config, save_mcp_config
from ...tools.toolbox import Toolbox, tool_format
from ..tasks import TaskRunner

log = logging.getLogger(__name__)

OFF, CONNECTING, CONNECTED, FAILED = "off", "connecting", "connected", "failed"


@dataclass
class ServerStatus:
    state: str = OFF
    tools: list[McpTool] = field(default_factory=list)
    error: str = ""

    def words(self) -> str:
        """What the settings page says of the server."""
        if self.state == CONNECTED:
            n = len(self.tools)
            return f"Connected, {n} tool{'s' if n != 1 else ''}"
        if self.state == FAILED:
            return self.error
        return "Connecting…" if self.state == CONNECTING else "Off"


class ToolsController(QObject):
    """`config` holds the servers; `status` each one's; `enabled()` is the window's switch."""

    changed = Signal()          # the servers or their statuses changed
    fileProblem = Signal(str)   # mcp.json could not be used, in one line

    def __init__(self, path: Path, tasks: TaskRunner, enabled: Callable[[], bool],
                 lister: Callable[[McpServerConfig], list[McpTool]] = list_tools,
                 parent: QObject | None = None):
        super().__init__(parent)
        self.path, self.tasks, self.enabled, self.lister = path, tasks, enabled, lister
        self.config = McpConfig()
        self.status: dict[str, ServerStatus] = {}
        self.always: set[tuple[str, str]] = set()   # approved for good in this window (also saved)
        self._generation = 0      # answers of an older listing are dropped
        self._asked: dict[str, int] = {}    # server -> the generation of its latest listing

    # --- loading and saving ------------------------------------------------------------------
    def load(self) -> None:
        """Reads mcp.json (worker thread), then connects to each enabled server."""
        path = self.path
        self.tasks.run_task(lambda: load_mcp_config(path), self._loaded)

    def _loaded(self, config: McpConfig) -> None:
        self.config = config
        if config.error:
            self.fileProblem.emit(config.error)
        for note in config.notes:
            log.warning("mcp.json: %s", note)
        self.refresh()

    def set_servers(self, servers: list[McpServerConfig]) -> None:
        """The servers as the settings page leaves them: saved; those that changed connected again."""
        before = {s.name: s.to_json() for s in self.config.servers}
        self.config = McpConfig(servers=[replace(s) for s in servers])
        path, saved = self.path, list(self.config.servers)

        def failed(exc: BaseException) -> None:
            self.fileProblem.emit(f"Could not save {path.name}: {exc}")

        self.tasks.run_task(lambda: save_mcp_config(path, saved), None, failed)
        self.refresh({s.name for s in self.config.servers if before.get(s.name) != s.to_json()})

    def refresh(self, names: set[str] | None = None) -> None:
        """Lists the tools of the enabled servers again (`names`: only those; each on a worker
        thread)."""
        self._generation += 1
        generation = self._generation
        self.status = {s.name: self.status.get(s.name, ServerStatus(OFF)) for s in self.config.servers}
        for server in self.config.servers:
            if names is not None and server.name not in names:
                continue
            if not server.enabled:
                self.status[server.name] = ServerStatus(OFF)
                self._asked[server.name] = generation
                continue
            self.status[server.name] = ServerStatus(CONNECTING)
            self._asked[server.name] = generation
            self._list(generation, server)
        self.changed.emit()

    def _list(self, generation: int, server: McpServerConfig) -> None:
        def listed(tools: list[McpTool]) -> None:
            self._listed(generation, server.name, tools)

        def failed(exc: BaseException) -> None:
            self._failed(generation, server.name, exc)

        self.tasks.run_task(lambda: self.lister(server), listed, failed)

    def _listed(self, generation: int, name: str, tools: list[McpTool]) -> None:
        if generation == self._asked.get(name) and name in self.status:
            self.status[name] = ServerStatus(CONNECTED, tools)
            self.changed.emit()

    def _failed(self, generation: int, name: str, exc: BaseException) -> None:
        if generation == self._asked.get(name) and name in self.status:
            self.status[name] = ServerStatus(FAILED, error=str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            self.changed.emit()

    def remember_always(self, server: str, tool: str) -> None:
        """"Always allow" for `tool` of `server`: kept in mcp.json's alwaysAllow."""
        self.always.add((server, tool))
        entry = self.config.server(server)
        if entry is not None and tool not in entry.always_allow:
            entry.always_allow.append(tool)
            path, saved = self.path, list(self.config.servers)
            self.tasks.run_task(lambda: save_mcp_config(path, saved), None,
                                lambda exc: self.fileProblem.emit(f"Could not save {path.name}: {exc}"))

    # --- what a turn offers ------------------------------------------------------------------
    def tools(self) -> list[McpTool]:
        """The connected servers' tools; a name offered by two servers goes to the first."""
        seen: dict[str, McpTool] = {}
        for server in self.config.servers:
            status = self.status.get(server.name)
            if server.enabled and status is not None and status.state == CONNECTED:
                for t in status.tools:
                    seen.setdefault(t.name, t)
        return list(seen.values())

    def toolbox(self, format_name: str | None) -> Toolbox | None:
        """The tools for a turn of a model writing calls in `format_name`; None when tools are
        off, none are connected, or the model has no tool-call format."""
        fmt = tool_format(format_name)
        tools = self.tools() if self.enabled() else []
        if fmt is None or not tools:
            return None
        servers = {s.name: replace(s, always_allow=list(s.always_allow)) for s in self.config.servers}
        return Toolbox(fmt, tools, servers, always=set(self.always))
