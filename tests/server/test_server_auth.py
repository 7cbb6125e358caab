"""Keys and salts: each key its own namespace, a caller's salt only subdivides it, the secret persists."""
from __future__ import annotations

import stat

import pytest

from engine.server.auth import KeyRing, load_secret
from engine.server.errors import ApiError


def test_secret_is_created_once_private_and_reused(tmp_path):
    s1 = load_secret(tmp_path / "server")
    assert len(s1) == 32
    path = tmp_path / "server" / "server-secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_secret(tmp_path / "server") == s1          # stable across restarts: the disk cache stays valid
    path.write_text("garbage")
    assert load_secret(tmp_path / "server") != s1          # a damaged secret is replaced, not trusted


def test_each_key_is_its_own_namespace_and_salts_only_subdivide_it(tmp_path):
    secret = load_secret(tmp_path)
    ring = KeyRing(["alpha", "beta"], secret)
    a, b = ring.caller("Bearer alpha"), ring.caller("bearer beta")
    assert a.namespace != b.namespace
    assert "alpha" not in a.namespace
    salts_a = {a.salt(None), a.salt("x"), a.salt("y")}
    salts_b = {b.salt(None), b.salt("x"), b.salt("y"), b.salt(a.namespace), b.salt(a.salt("x"))}
    assert len(salts_a) == 3 and len(salts_b) == 5 and not salts_a & salts_b
    # Another server (another secret) gives the same key another namespace.
    assert KeyRing(["alpha"], b"\0" * 32).caller("Bearer alpha").namespace != a.namespace


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", "Basic alpha", "Bearer alph", "Bearer alphaa"])
def test_bad_authorization_is_401(tmp_path, header):
    ring = KeyRing(["alpha"], load_secret(tmp_path))
    with pytest.raises(ApiError) as e:
        ring.caller(header)
    assert e.value.status == 401 and e.value.code == "invalid_api_key"


def test_without_keys_everyone_shares_one_namespace(tmp_path):
    ring = KeyRing([], load_secret(tmp_path))
    assert not ring.required
    assert ring.caller(None) == ring.caller("Bearer anything")
