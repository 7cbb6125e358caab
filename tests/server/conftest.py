"""Fixtures for the API server tests: the tiny model (as tests/engine builds it), a real server
process on 127.0.0.1 (`amber-engine serve --port 0`), and in-process servers over a real
SessionManager (for the scheduling tests that need to hold a generation).

Every answer of every server these tests start, child process or in-process, is checked against
OpenAI's OpenAPI spec (tests/support/openapi_check.py): a body or streamed event the spec does
not allow fails the test phase (setup, call or teardown) during which it was sent.
"""
from __future__ import annotations

import contextlib
import importlib
from pathlib import Path
from types import ModuleType
from typing import Iterator

import pytest

from tests.support import openapi_check
from tests.support.loopback_only import loopback_only
from tests.support.server import KEY_A, KEY_B, TINY, DEFAULT_MODEL, ServerProcess
from tests.support.tiny_gguf import write_tiny_gguf


@pytest.fixture(scope="session", autouse=True)
def openapi_checked_in_process() -> Iterator[None]:
    """In-process servers (`serve_in_thread`) make apps checked against the spec."""
    import engine.server.serve as serve
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(serve, "create_app", openapi_check.checked_create_app(serve.create_app))
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    try:
        return (yield)
    finally:
        openapi_check.raise_new()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    try:
        return (yield)
    finally:
        openapi_check.raise_new()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    try:
        return (yield)
    finally:
        openapi_check.raise_new()


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    from engine.convert import convert_gguf
    src = write_tiny_gguf(tmp_path_factory.mktemp("tiny") / "tiny-chat.gguf", TINY)
    return convert_gguf(src.path, tmp_path_factory.mktemp("tiny-model") / "tiny-chat")


@pytest.fixture(scope="session")
def tiny_model(tiny_dir):
    from engine.runtime.model import load_model
    return load_model(tiny_dir, provider="cpu", threads=1)


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
    with contextlib.ExitStack() as stopping:     # every server stopped, then any spec finding raised
        for s in made:
            stopping.callback(s.stop)


@pytest.fixture
def client_a(server):
    import openai
    return openai.OpenAI(base_url=server.url, api_key=KEY_A, max_retries=0, timeout=120)


@pytest.fixture
def client_b(server):
    import openai
    return openai.OpenAI(base_url=server.url, api_key=KEY_B, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def network_attempts() -> Iterator[list[str]]:
    """Every attempt the test process makes to reach beyond loopback during the module (refused)."""
    with loopback_only() as refused:
        yield refused
    assert refused == []


@pytest.fixture
def nothing_beyond_loopback(network_attempts: list[str]) -> Iterator[None]:
    """Fails the test that made an attempt beyond loopback (as it ends)."""
    yield
    assert network_attempts == []


@pytest.fixture(scope="module")
def litellm(network_attempts: list[str]) -> Iterator[ModuleType]:
    """litellm, imported with its price list kept local (it fetches it from GitHub otherwise) and
    no telemetry, while nothing but loopback can be reached."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        patch.setenv("LITELLM_TELEMETRY", "False")
        yield importlib.import_module("litellm")


@pytest.fixture
def default_model_dir() -> Path:
    import os
    home = os.environ.get("AMBER_TEST_HOME")
    if not home:
        pytest.skip("AMBER_TEST_HOME is not set: the real default model is prepared by `make test`")
    path = Path(home).expanduser().resolve() / "models" / DEFAULT_MODEL
    if not (path / "model.onnx").is_file():
        pytest.skip(f"the default model is not prepared at {path} (run: make default-model)")
    return path
