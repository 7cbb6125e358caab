"""Single instance: a second launch over the same data folder brings the running window forward.

The local server's name is derived from the data folder, so instances with different `AMBER_HOME`s
(tests, several profiles) never collide.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket


def server_name(home: Path) -> str:
    digest = hashlib.sha1(str(Path(home).resolve()).encode()).hexdigest()[:16]
    user = os.environ.get("USER") or os.environ.get("USERNAME") or ""
    return f"amber-{hashlib.sha1(user.encode()).hexdigest()[:6]}-{digest}"


class SingleInstance(QObject):
    activated = Signal()

    def __init__(self, home: Path, parent: QObject | None = None):
        super().__init__(parent)
        self.name = server_name(home)
        self.server: QLocalServer | None = None

    def notify_running(self, timeout_ms: int = 500) -> bool:
        """True when another instance answered (and was asked to come forward)."""
        sock = QLocalSocket()
        sock.connectToServer(self.name)
        if not sock.waitForConnected(timeout_ms):
            return False
        sock.write(b"activate\n")
        sock.flush()
        sock.waitForBytesWritten(timeout_ms)
        sock.waitForReadyRead(timeout_ms)  # the running instance acknowledges
        sock.disconnectFromServer()
        return True

    def listen(self) -> bool:
        server = QLocalServer(self)
        server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        if not server.listen(self.name):
            QLocalServer.removeServer(self.name)  # a stale socket from a crashed instance
            if not server.listen(self.name):
                return False
        server.newConnection.connect(self._on_connection)
        self.server = server
        return True

    def _on_connection(self) -> None:
        assert self.server is not None
        while self.server.hasPendingConnections():
            sock = self.server.nextPendingConnection()

            def read(s: QLocalSocket = sock) -> None:
                if bytes(s.readAll().data()).strip().startswith(b"activate"):
                    s.write(b"ok\n")
                    s.flush()
                    self.activated.emit()

            sock.readyRead.connect(read)
            # sockets stay children of the server (deleted with it); no deleteLater races
            if sock.bytesAvailable():
                read()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
