"""Static checks that the engines are what they are used as: mypy (`make lint`) verifies these
assignments, so a method missing from `SessionManager` or `RemoteEngine`, or one whose signature
drifted from `ChatEngine`, fails the lint. Nothing here runs: the imports are for the type checker
only (importing this module loads nothing)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .api import ChatEngine, TokenEngine
    from .remote.engine import RemoteEngine
    from .sessions.manager import SessionManager

    _LOCAL: type[ChatEngine] = SessionManager
    _REMOTE: type[ChatEngine] = RemoteEngine
    _TOKENS: type[TokenEngine] = SessionManager     # what the API server's token prompts use
