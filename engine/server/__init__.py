"""Amber's OpenAI-compatible API server over the engine's sessions (FastAPI + uvicorn; no Qt).

Entry points kept stable for other code and tests:
    serve_in_thread(engine, host="127.0.0.1", port=0, state_dir=None, config=None) -> ServerHandle
        (handle.url is "http://127.0.0.1:<port>/v1"; handle.stop())
    `python -m engine serve --port 0` prints "amber-engine: serving http://127.0.0.1:<port>/v1" as
    its first stdout line once it accepts connections.
"""
from __future__ import annotations

from .app import create_app
from .serve import LOOPBACK, ServerHandle, serve_forever, serve_in_thread
from .service import DEFAULT_MODEL_ALIAS, ServerConfig

__all__ = ["DEFAULT_MODEL_ALIAS", "LOOPBACK", "ServerConfig", "ServerHandle", "create_app", "serve_forever",
           "serve_in_thread"]
