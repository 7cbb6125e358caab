"""Fixtures for the API server tests: the tiny model (as tests/engine builds it), a real server
process on 127.0.0.1 (`python -m engine serve --port 0`), and in-process servers over a real
SessionManager (for the scheduling tests that need to hold a generation).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

ENGINE_TESTS = Path(__file__).resolve().parents[1] / "engine"
sys.path.insert(0, str(ENGINE_TESTS))

from tiny_gguf import TinyConfig, write_tiny_gguf  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TINY = TinyConfig(n_layers=2, n_embd=64, n_head=4, n_head_kv=2, head_dim=16, n_ff=128,
                  context_length=512, seed=7)
KEY_A, KEY_B = "key-a-" + "1" * 20, "key-b-" + "2" * 20
DEFAULT_MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    from engine.convert import convert_gguf
    src = write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny-chat.gguf", TINY)
    return convert_gguf(src.path, tmp_path_factory.mktemp("tiny-model") / "tiny-chat")


@pytest.fixture(scope="session")
def tiny_model(tiny_dir):
    from engine.model import load_model
    return load_model(tiny_dir, provider="cpu", threads=1)


class ServerProcess:
    """`python -m engine serve` in a child process; `url` is its base URL (…/v1)."""

    def __init__(self, model_dir: Path, state_dir: Path, *extra: str) -> None:
        env = dict(os.environ)
        env["AMBER_HOME"] = str(state_dir.parent / "amber-home")
        env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env.pop("AMBER_API_KEYS", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "engine", "serve", "--model", str(model_dir), "--port", "0", "--provider", "cpu",
             "--state-dir", str(state_dir), *extra],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self._first_line(120)
        if not line.startswith("amber-engine: serving http://127.0.0.1:"):
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line!r} {self.proc.stderr.read()}")
        self.url = line.split()[-1]
        self.base = self.url[:-len("/v1")]
        self.port = int(self.base.rsplit(":", 1)[1])

    def _first_line(self, timeout: float) -> str:
        out: list[str] = []
        t = threading.Thread(target=lambda: out.append(self.proc.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        return out[0].strip() if out else ""

    def stop(self) -> int:
        """SIGTERM (a graceful shutdown that saves pinned sessions); returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


@pytest.fixture(scope="module")
def server(tiny_dir, tmp_path_factory) -> Iterator[ServerProcess]:
    """One server over the tiny model, keys A and B, for the module's tests."""
    s = ServerProcess(tiny_dir, tmp_path_factory.mktemp("server") / "state", "--api-key", KEY_A, "--api-key", KEY_B)
    yield s
    assert s.stop() == 0


@pytest.fixture
def start_server(tmp_path) -> Iterator:
    """start_server(model_dir, state_dir, *args) -> ServerProcess, all stopped at the end."""
    made: list[ServerProcess] = []

    def start(model_dir: Path, state_dir: Path, *extra: str) -> ServerProcess:
        s = ServerProcess(model_dir, state_dir, *extra)
        made.append(s)
        return s
    yield start
    for s in made:
        s.stop()


@pytest.fixture
def client_a(server):
    import openai
    return openai.OpenAI(base_url=server.url, api_key=KEY_A, max_retries=0, timeout=120)


@pytest.fixture
def client_b(server):
    import openai
    return openai.OpenAI(base_url=server.url, api_key=KEY_B, max_retries=0, timeout=120)


@pytest.fixture
def default_model_dir() -> Path:
    home = os.environ.get("AMBER_TEST_HOME")
    if not home:
        pytest.skip("AMBER_TEST_HOME is not set: the real default model is prepared by `make test`")
    path = Path(home).expanduser().resolve() / "models" / DEFAULT_MODEL
    if not (path / "model.onnx").is_file():
        pytest.skip(f"the default model is not prepared at {path} (run: make default-model)")
    return path
