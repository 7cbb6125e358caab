"""engine.base.safefs.atomic_write: the one way Amber replaces a file."""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from engine.base import safefs
from engine.base.safefs import atomic_write, temp_path

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes and symlinks")


def _fixed_temp_name(monkeypatch, path):
    """Makes atomic_write use one known temp name, so that a test can put something there first."""
    name = temp_path(path)
    monkeypatch.setattr(safefs, "temp_path", lambda p: name)
    return name


def test_temp_names_are_fresh_and_name_their_writer():
    names = {temp_path(Path("/x/f.json")).name for _ in range(50)}
    assert len(names) == 50
    assert all(n.startswith(".f.json.") and n.rsplit(".", 2)[-2] == str(os.getpid()) for n in names)


def test_text_bytes_and_chunks_replace_the_file_and_leave_no_temp(tmp_path):
    path = tmp_path / "a" / "f.json"
    assert atomic_write(path, "é", parents=True) == 2
    assert path.read_text(encoding="utf-8") == "é"
    assert atomic_write(path, [b"ab", memoryview(b"cd")]) == 4
    assert path.read_bytes() == b"abcd"
    assert atomic_write(path, b"x") == 1
    assert os.listdir(path.parent) == ["f.json"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temp(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"old")

    def chunks():
        yield b"new"
        raise RuntimeError("disk gone")

    with pytest.raises(RuntimeError):
        atomic_write(path, chunks())
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["f"]


@posix_only
def test_a_symlink_at_the_temp_name_is_refused_and_its_target_untouched(tmp_path, monkeypatch):
    target = tmp_path / "elsewhere"
    target.write_bytes(b"keep")
    path = tmp_path / "f"
    planted = _fixed_temp_name(monkeypatch, path)
    planted.symlink_to(target)
    with pytest.raises(OSError):
        atomic_write(path, b"evil")
    assert target.read_bytes() == b"keep" and not path.exists()


@posix_only
def test_a_fifo_at_the_temp_name_is_refused_without_blocking(tmp_path, monkeypatch):
    path = tmp_path / "f"
    os.mkfifo(_fixed_temp_name(monkeypatch, path))
    with pytest.raises(OSError):         # ENXIO (no reader) or UnsafePathError: never a hang
        atomic_write(path, b"x")


@posix_only
def test_private_files_are_owner_only_even_over_a_leftover_temp(tmp_path, monkeypatch):
    path = tmp_path / "token"
    leftover = _fixed_temp_name(monkeypatch, path)
    leftover.write_bytes(b"stale")
    leftover.chmod(0o644)
    atomic_write(path, "secret", private=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == "secret"
