"""Helpers for the API server tests (and the GUI's remote-engine tests): the tiny model's
config, API keys, and `ServerProcess` (a real `amber-engine serve` child whose answers are
checked against OpenAI's OpenAPI spec)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from . import openapi_check
from .tiny_gguf import TinyConfig

REPO = Path(__file__).resolve().parents[2]
TINY = TinyConfig(n_layers=2, n_embd=64, n_head=4, n_head_kv=2, head_dim=16, n_ff=128,
                  context_length=512, seed=7)
KEY_A, KEY_B = "key-a-" + "1" * 20, "key-b-" + "2" * 20
DEFAULT_MODEL = "SmolLM2-135M-Instruct"



class ServerProcess:
    """`amber-engine serve` in a child process (run as `python -m tests.support.checked_serve`:
    the same CLI, every answer checked against OpenAI's spec); `url` is its base URL (…/v1).
    `stop()` raises OpenApiViolation for answers that did not match and no test reported yet."""

    def __init__(self, model_dir: Path, state_dir: Path, *extra: str) -> None:
        env = dict(os.environ)
        env["AMBER_HOME"] = str(state_dir.parent / "amber-home")
        env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env.pop("AMBER_API_KEYS", None)
        self.violations = openapi_check.new_log()
        env[openapi_check.SPEC_ENV] = str(openapi_check.spec_json())
        env[openapi_check.LOG_ENV] = str(self.violations.path)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.checked_serve", "serve", "--model", str(model_dir), "--port", "0",
             "--provider", "cpu", "--state-dir", str(state_dir), *extra],
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
        """SIGTERM (a graceful shutdown that saves pinned sessions); returns the exit code, once
        every answer the server sent is known to match the spec (OpenApiViolation if not)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        openapi_check.raise_new([self.violations])
        return self.proc.returncode
