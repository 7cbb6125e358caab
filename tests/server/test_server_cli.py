"""`amber-engine serve` refuses what it must, in one line with exit code 2."""
from __future__ import annotations

import os
import socket
import subprocess
import sys

from tests.support.server import REPO, ServerProcess


def serve(*args: str, tmp_path) -> subprocess.CompletedProcess:
    env = dict(os.environ, AMBER_HOME=str(tmp_path / "home"))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.pop("AMBER_API_KEYS", None)
    return subprocess.run([sys.executable, "-m", "engine", "serve", "--state-dir", str(tmp_path / "state"), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def one_line(proc, needle: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr and needle in lines[0], proc.stderr


def test_a_public_address_needs_an_api_key(tiny_dir, tmp_path):
    one_line(serve("--model", str(tiny_dir), "--host", "0.0.0.0", "--port", "0", tmp_path=tmp_path), "--api-key")


def test_a_busy_port_is_one_line(tiny_dir, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        one_line(serve("--model", str(tiny_dir), "--port", str(port), tmp_path=tmp_path),
                 f"cannot listen on 127.0.0.1:{port}")


def test_a_missing_model_is_one_line(tmp_path):
    one_line(serve("--model", str(tmp_path / "nothing"), "--port", "0", tmp_path=tmp_path), "nothing")


def test_a_bad_body_timeout_is_one_line(tiny_dir, tmp_path):
    for value in ("0", "-3", "nan", "inf", "soon"):
        one_line(serve("--model", str(tiny_dir), "--port", "0", "--body-timeout", value, tmp_path=tmp_path),
                 "--body-timeout")


def test_the_body_timeout_option_reaches_the_server(tiny_dir, tmp_path):
    """`serve --body-timeout 1`: a client that sends its headers and stalls is answered 408, well
    before the 30 s default would (the socket's own 20 s timeout fails the test otherwise)."""
    server = ServerProcess(tiny_dir, tmp_path / "state", "--body-timeout", "1", "--max-in-flight", "2")
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 100\r\n\r\n{\"mod")
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = s.recv(65536)
                assert chunk, data
                data += chunk
        assert data.startswith(b"HTTP/1.1 408"), data[:200]
    finally:
        assert server.stop() == 0
