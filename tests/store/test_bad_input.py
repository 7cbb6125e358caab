"""Databases Amber cannot use: a clear StoreError naming the file, and the file untouched."""
from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from app.store import ConversationStore, StoreError

from .helpers import raw, sha256

REPO = Path(__file__).resolve().parents[2]


def populated(path: Path) -> None:
    with ConversationStore(path) as store:
        c = store.create_conversation()
        for i in range(50):
            store.add_message(c.id, "user", f"message number {i} " + "text " * 200)


def refused(path: Path, reason: str, **kwargs: int) -> StoreError:
    """Opening `path` raises a StoreError for `reason` naming the file, changing no byte."""
    before = sha256(path)
    with pytest.raises(StoreError) as info:
        ConversationStore(path, **kwargs)
    assert info.value.reason == reason, info.value
    assert str(path) in str(info.value) and info.value.path == path
    assert sha256(path) == before
    assert not list(path.parent.glob(f"{path.name}.backup-*"))
    return info.value


def test_random_bytes(db_path: Path) -> None:
    db_path.write_bytes(os.urandom(64 * 1024))
    err = refused(db_path, "corrupt")
    assert "damaged" in str(err) and "not changed" in str(err)


def test_damaged_sqlite_file(db_path: Path) -> None:
    populated(db_path)
    data = bytearray(db_path.read_bytes())
    page = 4096
    data[page:page * 6] = os.urandom(page * 5)  # valid header, garbage pages behind it
    db_path.write_bytes(bytes(data))
    refused(db_path, "corrupt")


def test_someone_elses_database(db_path: Path) -> None:
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE invoices (n INTEGER)")
    conn.commit()
    conn.close()
    refused(db_path, "corrupt")


def test_newer_amber(db_path: Path) -> None:
    populated(db_path)
    conn = raw(db_path)
    conn.execute("UPDATE alembic_version SET version_num = '0042_from_the_future'")
    conn.close()
    err = refused(db_path, "newer")
    assert "newer version of Amber" in str(err) and "0042_from_the_future" in str(err)


def test_locked_by_another_program(db_path: Path) -> None:
    populated(db_path)
    other = raw(db_path)
    other.execute("BEGIN IMMEDIATE")  # e.g. another Amber in the middle of a long write
    try:
        start = time.monotonic()
        err = refused(db_path, "locked", busy_timeout_ms=200)
        assert time.monotonic() - start < 5
        assert "locked" in str(err)
    finally:
        other.execute("ROLLBACK")
        other.close()
    with ConversationStore(db_path) as store:  # fine again once the lock is released
        assert len(store.list_conversations()) == 1


def _open_as_unprivileged(path: Path) -> str:
    """Open the store in a child without root's file-permission override; return the error reason.

    As root the child keeps uid 0 (so it can still reach a checkout in a private folder and the
    venv's interpreter) but runs with an empty capability bounding set: no CAP_DAC_OVERRIDE, so the
    permission bits apply to it as to the file's owner."""
    code = ("import sys\nfrom app.store import ConversationStore, StoreError\n"
            "try:\n    ConversationStore(sys.argv[1])\nexcept StoreError as e:\n"
            "    print(e.reason)\n    print(e)\nelse:\n    print('opened')\n")
    cmd = [sys.executable, "-c", code, str(path)]
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv")
        cmd = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", *cmd]
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture
def shared_dir() -> Path:
    """A folder the unprivileged user can traverse (pytest's tmp_path is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="amber-store-ro-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("case", ["file", "folder"])
def test_read_only(shared_dir: Path, case: str) -> None:
    path = shared_dir / "amber.sqlite3"
    populated(path)
    for extra in path.parent.glob("amber.sqlite3-*"):
        extra.unlink()
    if case == "file":  # folder writable by all, file by nobody
        shared_dir.chmod(0o777)
        path.chmod(0o444)
    else:  # file writable by all, folder (where -wal and -shm go) by nobody
        path.chmod(0o666)
        shared_dir.chmod(0o555)
    before = sha256(path)
    out = _open_as_unprivileged(path)
    assert out.splitlines()[0] == "read_only", out
    assert "read-only" in out and str(path) in out
    assert sha256(path) == before


def test_folder_cannot_be_created(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(StoreError) as info:
        ConversationStore(blocker / "sub" / "amber.sqlite3")
    assert info.value.reason == "read_only"


def test_path_is_a_folder(tmp_path: Path) -> None:
    with pytest.raises(StoreError) as info:
        ConversationStore(tmp_path)
    assert info.value.reason == "io"
