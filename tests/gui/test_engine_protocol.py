"""Every engine the window is given has the members of `engine.api.ChatEngine`, each callable the
way the protocol says. mypy checks the real engines (engine/conformance.py); this also covers the
GUI tests' fake engine, which mypy does not see, so the fake cannot drift from the real contract."""
from __future__ import annotations

import inspect
from typing import Any

import pytest

from engine.api import ChatEngine
from engine.remote.engine import RemoteEngine
from engine.sessions.manager import SessionManager
from tests.support.fake_engine import FakeEngine

# Everything the protocol declares (methods and read-only properties), not object's own members.
MEMBERS = sorted(name for name in dir(ChatEngine)
                 if not name.startswith("_") and name not in dir(object))


def _parameters(fn: Any) -> dict[str, inspect.Parameter]:
    return {p.name: p for p in inspect.signature(fn).parameters.values() if p.name != "self"}


def test_the_protocol_lists_what_the_window_uses() -> None:
    assert {"provider", "context_window", "model_name", "open", "generate", "pin", "unpin",
            "close", "delete", "info", "stats", "clear_cache", "shutdown"} <= set(MEMBERS)


@pytest.mark.parametrize("impl", [SessionManager, RemoteEngine, FakeEngine], ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", MEMBERS)
def test_an_engine_has_each_member_callable_as_declared(impl: type, name: str) -> None:
    declared = inspect.getattr_static(ChatEngine, name)
    if isinstance(declared, property):
        # A property or a plain attribute (set in __init__): either way it must be readable.
        has = isinstance(inspect.getattr_static(impl, name, None), property) or name in _init_assigns(impl)
        assert has, f"{impl.__name__} has no {name}"
        return
    method = getattr(impl, name, None)
    assert callable(method), f"{impl.__name__} has no method {name}"
    want, got = _parameters(declared), _parameters(method)
    for pname, p in want.items():
        assert pname in got, f"{impl.__name__}.{name} does not take {pname!r}"
        # What the protocol lets a caller leave out, the implementation must default too.
        if p.default is not inspect.Parameter.empty:
            assert got[pname].default is not inspect.Parameter.empty, \
                f"{impl.__name__}.{name}: {pname!r} has no default"
    required = [q for q, p in got.items() if p.default is inspect.Parameter.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    extra = [q for q in required if q not in want]
    assert not extra, f"{impl.__name__}.{name} requires {extra}, which callers never pass"


def _init_assigns(impl: type) -> set[str]:
    """Names given a value in the class body or assigned as `self.NAME = …` in __init__."""
    names = {k for k in vars(impl) if not k.startswith("__")}
    try:
        source = inspect.getsource(impl.__init__)
    except (OSError, TypeError):
        return names
    return names | {line.split("self.", 1)[1].split("=", 1)[0].split(":")[0].strip()
                    for line in source.splitlines() if line.strip().startswith("self.") and "=" in line}
