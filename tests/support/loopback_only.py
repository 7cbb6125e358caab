"""`loopback_only()`: while it is active, this process's name lookups and connections to anything
but the loopback interface are refused (OSError) and recorded, so a test can show that a client
library reaches nothing beyond 127.0.0.1 (no price lists, telemetry or update checks)."""
from __future__ import annotations

import contextlib
import ipaddress
import socket
from typing import Any, Iterator

import pytest

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def is_loopback(host: Any) -> bool:
    """True for 127.0.0.0/8, ::1 and the local host's names (None: a lookup for binding)."""
    if host is None:
        return True
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    host = str(host).strip("[]").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


@contextlib.contextmanager
def loopback_only() -> Iterator[list[str]]:
    """Yields the list of refused attempts ("lookup host" / "connect host:port"), filled as they
    happen; the caller asserts it is empty."""
    refused: list[str] = []
    real_lookup, real_connect, real_connect_ex = socket.getaddrinfo, socket.socket.connect, socket.socket.connect_ex

    def lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        if not is_loopback(host):
            refused.append(f"lookup {host!r}")
            raise socket.gaierror(socket.EAI_NONAME, f"refused in this test: {host!r} is not loopback")
        return real_lookup(host, *args, **kwargs)

    def outside(sock: socket.socket, address: Any) -> bool:
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or is_loopback(address[0]):
            return False
        refused.append(f"connect {address[0]}:{address[1]}")
        return True

    def connect(sock: socket.socket, address: Any) -> None:
        if outside(sock, address):
            raise ConnectionRefusedError(f"refused in this test: {address[0]} is not loopback")
        real_connect(sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> int:
        return 111 if outside(sock, address) else real_connect_ex(sock, address)   # ECONNREFUSED

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket, "getaddrinfo", lookup)
        patch.setattr(socket.socket, "connect", connect)
        patch.setattr(socket.socket, "connect_ex", connect_ex)
        yield refused
