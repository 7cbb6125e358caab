"""Settings ▸ Tools: the MCP servers (mcp.json, LM Studio's format), each with its switch and its
status (connected with N tools, or the error in words); Add, Edit, Remove. Changes apply at once
(the file is saved and the servers are connected again), like the API server's switch."""
from __future__ import annotations

import shlex
from dataclasses import replace
from typing import Any, Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QCheckBox, QComboBox, QDialog, QDialogButtonBox, QFormLayout, QHBoxLayout, QLabel,
                               QLineEdit, QPlainTextEdit, QPushButton, QTableWidget, QTableWidgetItem, QVBoxLayout,
                               QWidget)

from ...tools.mcp_config import McpServerConfig, parse_server

STDIO, HTTP = "stdio", "http"


class McpServerDialog(QDialog):
    """One server: a command to start (stdio) or a URL (streamable HTTP)."""

    def __init__(self, server: McpServerConfig | None, taken: set[str], parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("MCP server")
        self.setMinimumWidth(460)
        self.taken = taken
        self.original = server
        form = QFormLayout(self)
        self.name = QLineEdit(server.name if server else "")
        self.name.setObjectName("McpName")
        form.addRow("Name", self.name)
        self.kind = QComboBox()
        self.kind.setObjectName("McpKind")
        self.kind.addItem("Command (stdio)", STDIO)
        self.kind.addItem("URL (streamable HTTP)", HTTP)
        self.kind.setCurrentIndex(1 if server is not None and server.url else 0)
        form.addRow("Connect by", self.kind)
        self.command = QLineEdit(shlex.join([server.command, *server.args]) if server and server.command else "")
        self.command.setObjectName("McpCommand")
        self.command.setPlaceholderText("npx -y @modelcontextprotocol/server-filesystem ~/Documents")
        form.addRow("Command", self.command)
        self.env = QPlainTextEdit("\n".join(f"{k}={v}" for k, v in (server.env if server else {}).items()))
        self.env.setObjectName("McpEnv")
        self.env.setPlaceholderText("NAME=value, one a line")
        self.env.setFixedHeight(60)
        form.addRow("Environment", self.env)
        self.url = QLineEdit(server.url if server else "")
        self.url.setObjectName("McpUrl")
        self.url.setPlaceholderText("http://127.0.0.1:8000/mcp")
        form.addRow("URL", self.url)
        self.error = QLabel("")
        self.error.setObjectName("McpServerError")
        self.error.setWordWrap(True)
        form.addRow(self.error)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        self.kind.currentIndexChanged.connect(self._follow_kind)
        self._follow_kind()

    def _follow_kind(self) -> None:
        stdio = self.kind.currentData() == STDIO
        self.command.setEnabled(stdio)
        self.env.setEnabled(stdio)
        self.url.setEnabled(not stdio)

    def server(self) -> McpServerConfig:
        """The server the fields describe; ValueError (one line) when they do not."""
        name = self.name.text().strip()
        if not name:
            raise ValueError("The server needs a name")
        if name in self.taken:
            raise ValueError(f"There is a server named '{name}' already")
        raw: dict[str, Any] = {}
        if self.kind.currentData() == STDIO:
            try:
                words = shlex.split(self.command.text())
            except ValueError as exc:
                raise ValueError(f"The command cannot be read: {exc}") from None
            if not words:
                raise ValueError("The server needs a command")
            env = {}
            for line in self.env.toPlainText().splitlines():
                if line.strip():
                    key, sep, value = line.partition("=")
                    if not sep or not key.strip():
                        raise ValueError(f"Environment lines are NAME=value, not '{line.strip()}'")
                    env[key.strip()] = value
            raw = {"command": words[0], "args": words[1:], "env": env}
        else:
            raw = {"url": self.url.text().strip()}
        server = parse_server(name, raw)
        if self.original is not None:
            server.enabled, server.always_allow = self.original.enabled, list(self.original.always_allow)
            server.extra = dict(self.original.extra)
        return server

    def _accept(self) -> None:
        try:
            self.server()
        except ValueError as exc:
            self.error.setText(str(exc))
            return
        self.accept()


def ask_server(parent: QWidget, server: McpServerConfig | None, taken: set[str]) -> McpServerConfig | None:
    dlg = McpServerDialog(server, taken, parent)
    return dlg.server() if dlg.exec() else None


class McpServersPage(QWidget):
    """The page; `tools` is the window's app.gui.controllers.tools.ToolsController."""

    def __init__(self, tools: Any, offered: bool, parent: QWidget | None = None):
        super().__init__(parent)
        self.tools = tools
        self.ask: Callable[[McpServerConfig | None, set[str]], McpServerConfig | None] = \
            lambda server, taken: ask_server(self, server, taken)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.offer = QCheckBox("Offer the MCP servers' tools to models that can call tools")
        self.offer.setObjectName("OfferTools")
        self.offer.setChecked(offered)
        lay.addWidget(self.offer)
        note = QLabel("Each call is shown to you first: allow it once, always, or deny it. "
                      f"The servers are kept in {tools.path.name} (LM Studio's format).")
        note.setWordWrap(True)
        lay.addWidget(note)
        self.table = QTableWidget(0, 3)
        self.table.setObjectName("McpServers")
        self.table.setAccessibleName("MCP servers")
        self.table.setHorizontalHeaderLabels(["On", "Server", "Status"])
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.itemChanged.connect(self._switched)
        lay.addWidget(self.table)
        row = QHBoxLayout()
        self.add_btn = QPushButton("Add…")
        self.edit_btn = QPushButton("Edit…")
        self.remove_btn = QPushButton("Remove")
        self.add_btn.clicked.connect(self.add)
        self.edit_btn.clicked.connect(self.edit)
        self.remove_btn.clicked.connect(self.remove)
        for b in (self.add_btn, self.edit_btn, self.remove_btn):
            row.addWidget(b)
        row.addStretch(1)
        lay.addLayout(row)
        self.problem = QLabel(tools.config.error or "")
        self.problem.setObjectName("McpFileProblem")
        self.problem.setWordWrap(True)
        self.problem.setVisible(bool(tools.config.error))
        lay.addWidget(self.problem)
        tools.changed.connect(self.fill)
        self.fill()

    # --- the table ---------------------------------------------------------------------------
    def fill(self) -> None:
        servers, status = self.tools.config.servers, self.tools.status
        self.table.blockSignals(True)
        self.table.setRowCount(len(servers))
        for i, s in enumerate(servers):
            on = QTableWidgetItem()
            on.setFlags(Qt.ItemFlag.ItemIsUserCheckable | Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
            on.setCheckState(Qt.CheckState.Checked if s.enabled else Qt.CheckState.Unchecked)
            on.setData(Qt.ItemDataRole.AccessibleTextRole, f"{s.name} on" if s.enabled else f"{s.name} off")
            self.table.setItem(i, 0, on)
            where = s.url or shlex.join([s.command, *s.args])
            name = QTableWidgetItem(s.name)
            name.setToolTip(where)
            self.table.setItem(i, 1, name)
            st = status.get(s.name)
            words = st.words() if st is not None else "Off"
            cell = QTableWidgetItem(words)
            cell.setToolTip(words)
            self.table.setItem(i, 2, cell)
        self.table.resizeColumnToContents(0)
        self.table.blockSignals(False)
        self.problem.setText(self.tools.config.error or "")
        self.problem.setVisible(bool(self.tools.config.error))

    def status_text(self, name: str) -> str:
        row = next((i for i, s in enumerate(self.tools.config.servers) if s.name == name), -1)
        item = self.table.item(row, 2) if row >= 0 else None
        return item.text() if item is not None else ""

    def _selected(self) -> int:
        rows = self.table.selectionModel().selectedRows()
        return rows[0].row() if rows else -1

    def _switched(self, item: QTableWidgetItem) -> None:
        if item.column() != 0:
            return
        servers = list(self.tools.config.servers)
        servers[item.row()] = replace(servers[item.row()], enabled=item.checkState() == Qt.CheckState.Checked)
        self.tools.set_servers(servers)

    # --- add, edit, remove -------------------------------------------------------------------
    def add(self) -> None:
        servers = list(self.tools.config.servers)
        made = self.ask(None, {s.name for s in servers})
        if made is not None:
            self.tools.set_servers(servers + [made])

    def edit(self) -> None:
        row, servers = self._selected(), list(self.tools.config.servers)
        if row < 0:
            return
        made = self.ask(servers[row], {s.name for i, s in enumerate(servers) if i != row})
        if made is not None:
            servers[row] = made
            self.tools.set_servers(servers)

    def remove(self) -> None:
        row, servers = self._selected(), list(self.tools.config.servers)
        if row >= 0:
            del servers[row]
            self.tools.set_servers(servers)
