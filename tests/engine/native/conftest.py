"""The native kernel library, built once per test session into engine/native/_build (the same
place `python -m engine.native.build` and the app use), so a fresh clone's first run builds it."""
from __future__ import annotations

import ctypes

import pytest


@pytest.fixture(scope="session")
def native_lib() -> ctypes.CDLL:
    """The built library via ctypes (skips only when this machine has no C compiler)."""
    import engine.native as native
    from engine.native import build

    if build.find_compiler() is None and native.library_path() is None:
        pytest.skip("no C compiler (cc/gcc/clang) to build the native kernels")
    build.build()
    lib = native.kernels()
    assert lib is not None, f"built {native.library_path()} but it does not load"
    return lib


@pytest.fixture
def native_on(native_lib, monkeypatch) -> ctypes.CDLL:
    """The library, with AMBER_KERNELS unset (auto) for the test."""
    monkeypatch.delenv("AMBER_KERNELS", raising=False)
    return native_lib
