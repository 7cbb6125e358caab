"""The state folder's rules for every folder Amber writes, and the odd entries that used to stop a chat
from being saved or print a traceback.

- A folder below the state folder that is a symlink (`sessions/prev/`, `sessions/damaged/`,
  `locks/`, `blocks/`, `server/`, `server/responses/`) is never written through: the command
  stops with one line naming it (exit 2), nothing appears where the link points, and nothing the
  user wrote is lost.
- A manifest replaced by a FIFO, a symlink or a folder is moved aside (the entry itself) and the
  user is told once; the chat saves again.
- A symlinked chat lock, a read-only state folder for `serve`, and a previous version made odd
  in the middle of its rename: one line (exit 2) or a chat that goes on, never a traceback.

The commands run in this process (`engine.cli.main`), as the CLI tests of test_state_integrity do.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import uuid
from pathlib import Path

import pytest

from engine.api import SamplingParams, SessionKind
from engine.cli import main
from engine.generation.generate import collect
from engine.sessions.manager import SessionManager


def sid() -> str:
    return str(uuid.uuid4())


def manifest_path(state: Path, s: str) -> Path:
    return state / "sessions" / f"{s}.json"


def user_turns(state: Path, s: str) -> list[str]:
    data = json.loads(manifest_path(state, s).read_text())
    return [t["content"] for t in data["transcript"] if t["role"] == "user"]


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("amber-engine: error:")]


@pytest.fixture
def turn(tiny_dir, tmp_path, capsys):
    """turn(session, text) -> (exit code, stderr): one pinned chat turn of `amber-engine generate`."""
    state = tmp_path / "state"

    def run(s: str, text: str) -> tuple[int, str]:
        capsys.readouterr()
        rc = main(["generate", "--model", str(tiny_dir), "--session", s, "--pinned", "--greedy", "--max-tokens", "3",
                   "--state-dir", str(state), "--chat", text])
        return rc, capsys.readouterr().err
    run.state = state           # type: ignore[attr-defined]
    return run


@pytest.fixture
def outside(tmp_path) -> Path:
    """A folder outside the state folder that symlinks point at: nothing may appear in it."""
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


def symlink_folder(state: Path, folder: str, target: Path) -> None:
    link = state / folder
    if link.is_dir():
        shutil.rmtree(link)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=True)


# ---- every folder Amber writes: never through a symlink ------------------------------------------
@pytest.mark.parametrize("folder", ["sessions/prev", "sessions/damaged", "locks", "blocks"])
def test_a_symlinked_folder_is_never_written_through(turn, outside, folder):
    state, s = turn.state, sid()
    assert turn(s, "Hello there")[0] == 0
    symlink_folder(state, folder, outside)
    manifest = manifest_path(state, s)
    if folder == "sessions/damaged":
        manifest.write_bytes(manifest.read_bytes()[:-30])     # damaged: it would be moved aside there
    before = manifest.read_bytes()
    # Long enough for full KV blocks (128 tokens each): the pinned save writes blocks/.
    rc, err = turn(s, "Tell me more " * 15 if folder == "blocks" else "Tell me more")
    assert rc == 2 and "Traceback" not in err
    errors = error_lines(err)
    assert len(errors) == 1 and f"{folder} is not a plain folder" in errors[0], err
    assert list(outside.iterdir()) == []
    assert manifest.read_bytes() == before         # the saved chat (even a damaged one) is as it was


def test_symlinked_server_folders_are_never_written_through(tiny_model, tmp_path, outside):
    import openai

    from engine.server import serve_in_thread
    state = tmp_path / "state"
    symlink_folder(state, "server/responses", outside)
    manager = SessionManager(tiny_model, state, block_tokens=16)
    handle = serve_in_thread(manager, state_dir=state)
    try:
        client = openai.OpenAI(base_url=handle.url, api_key="none", max_retries=0)
        with pytest.raises(openai.InternalServerError) as info:
            client.responses.create(model="tiny-chat", input="Hello there", max_output_tokens=3, store=True)
        message = str(info.value)
        assert "could not be stored" in message and "server/responses is not a plain folder" in message
        # Not stored: nothing to continue from, nothing written where the link points.
        # served (its text may be empty: a random model's 3 sampled tokens can be a broken character)
        served = client.responses.create(model="tiny-chat", input="Hello", max_output_tokens=3, store=False)
        assert served.status in ("completed", "incomplete") and served.usage.input_tokens > 0
    finally:
        handle.stop()
        manager.shutdown()
    assert list(outside.iterdir()) == []


def test_a_stored_response_is_never_deleted_through_a_symlinked_folder(tiny_model, tmp_path, outside):
    import openai

    from engine.server import serve_in_thread
    state = tmp_path / "state"
    manager = SessionManager(tiny_model, state, block_tokens=16)
    handle = serve_in_thread(manager, state_dir=state)
    try:
        client = openai.OpenAI(base_url=handle.url, api_key="none", max_retries=0)
        r = client.responses.create(model="tiny-chat", input="Hello there", max_output_tokens=3, store=True)
        responses = state / "server" / "responses"
        for f in responses.iterdir():
            shutil.move(str(f), outside / f.name)
        responses.rmdir()
        responses.symlink_to(outside, target_is_directory=True)
        kept = sorted(p.name for p in outside.iterdir())
        with pytest.raises(openai.InternalServerError) as info:
            client.responses.delete(r.id)
        assert "could not be deleted" in str(info.value)
    finally:
        handle.stop()
        manager.shutdown()
    assert sorted(p.name for p in outside.iterdir()) == kept


def test_serve_refuses_a_symlinked_server_folder(tiny_dir, tmp_path, outside, run_cli):
    state = tmp_path / "state"
    symlink_folder(state, "server", outside)      # where the server keeps its secret
    proc = run_cli("serve", "--model", tiny_dir, "--state-dir", state, "--port", "0", "--provider", "cpu",
                   timeout=90)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "amber-engine: error: the state folder cannot be used: server is not a plain folder (a symlink?)"]
    assert list(outside.iterdir()) == []


# ---- a manifest replaced by a FIFO, a symlink or a folder ---------------------------------------
def make_odd(path: Path, odd: str, target: Path) -> None:
    path.unlink()
    if odd == "fifo":
        os.mkfifo(path)
    elif odd == "symlink":
        path.symlink_to(target)
    else:
        path.mkdir()
        (path / "notes.txt").write_text("the user's notes")


def check_moved(aside: Path, odd: str, target: Path) -> None:
    """The odd entry itself sits in damaged/, as it was (what a symlink points to untouched)."""
    mode = os.lstat(aside).st_mode
    if odd == "fifo":
        assert stat.S_ISFIFO(mode)
    elif odd == "symlink":
        assert stat.S_ISLNK(mode) and os.readlink(aside) == str(target)
    else:
        assert stat.S_ISDIR(mode) and (aside / "notes.txt").read_text() == "the user's notes"
    assert target.read_text() == "the user's file"


@pytest.mark.parametrize("odd", ["fifo", "symlink", "directory"])
def test_a_manifest_replaced_by_an_odd_entry_is_moved_aside_once(turn, tmp_path, odd):
    state, s = turn.state, sid()
    assert turn(s, "Hello there")[0] == 0
    assert turn(s, "Tell me more")[0] == 0
    target = tmp_path / "elsewhere.json"
    target.write_text("the user's file")
    make_odd(manifest_path(state, s), odd, target)
    rc, err = turn(s, "Go on")
    assert rc == 0 and "Traceback" not in err and not error_lines(err), err
    notes = [line for line in err.splitlines() if "moved to sessions/damaged/" in line]
    assert len(notes) == 1 and "restored the previous version" in notes[0], err
    aside = list((state / "sessions" / "damaged").glob(f"{s}.*.json"))
    assert len(aside) == 1
    check_moved(aside[0], odd, target)
    rc, err = turn(s, "And then?")
    assert rc == 0 and "damaged" not in err, err              # told once
    assert user_turns(state, s) == ["Hello there", "Go on", "And then?"]
    check_moved(aside[0], odd, target)


@pytest.mark.parametrize("odd", ["fifo", "symlink", "directory"])
def test_a_manifest_replaced_while_the_chat_is_open_is_moved_aside(tiny_model, tmp_path, odd):
    """The window (or the server) keeps the chat open while something takes its manifest's place:
    the next save moves it aside and succeeds, and the turn after says so once."""
    state, s = tmp_path / "state", sid()
    target = tmp_path / "elsewhere.json"
    target.write_text("the user's file")
    m = SessionManager(tiny_model, state, block_tokens=16)
    try:
        m.open(s, SessionKind.PINNED)
        greedy = SamplingParams(greedy=True, max_new_tokens=3)
        collect(m.chat(s, "Hello there", sampling=greedy))
        assert m.wait_for_saves() and m.info(s).save_error is None
        make_odd(manifest_path(state, s), odd, target)
        collect(m.chat(s, "Go on", sampling=greedy))
        assert m.wait_for_saves() and m.info(s).save_error is None
        assert "moved to sessions/damaged/" in m.info(s).manifest_error
        r = collect(m.chat(s, "And then?", sampling=greedy))
        assert "moved to sessions/damaged/" in r.figures.fallback_reason
        r = collect(m.chat(s, "Once more", sampling=greedy))
        assert r.figures.fallback_reason is None
        assert m.wait_for_saves() and m.info(s).save_error is None
        # closing saves once more; waited for here, not within shutdown's shorter bound, which a
        # loaded machine can outlast (the read below would then find the previous version)
        m.close(s)
        assert m.wait_for_saves()
    finally:
        m.shutdown()
    assert user_turns(state, s) == ["Hello there", "Go on", "And then?", "Once more"]
    aside = list((state / "sessions" / "damaged").glob(f"{s}.*.json"))
    assert len(aside) == 1
    check_moved(aside[0], odd, target)


# ---- one line, never a traceback ------------------------------------------------------------------
@pytest.mark.parametrize("odd", ["symlink", "directory"])
def test_an_odd_chat_lock_is_one_line(turn, tmp_path, odd):
    state, s = turn.state, sid()
    assert turn(s, "Hello there")[0] == 0
    lock = state / "locks" / f"{s}.lock"
    assert not lock.exists()             # removed when the chat was closed
    victim = tmp_path / "victim"
    victim.write_text("mine")
    if odd == "symlink":
        lock.symlink_to(victim)
    else:
        lock.mkdir()
    rc, err = turn(s, "Tell me more")
    assert rc == 2 and "Traceback" not in err
    assert err.strip().splitlines() == [f"amber-engine: error: this chat cannot be locked (session {s}): "
                                        f"locks/{s}.lock is a symlink or not a regular file; remove it"]
    assert victim.read_text() == "mine"


def read_only(monkeypatch, root: Path) -> None:
    """The folder `root` as on a read-only file system: every change below it fails with EROFS
    (after EEXIST, as Linux checks), reads work. Fault injection, like the full-disk test's."""
    top = os.path.abspath(root)

    def inside(path: object) -> bool:
        p = os.path.abspath(os.fspath(path))      # type: ignore[arg-type]
        return p == top or p.startswith(top + os.sep)

    def refused(path: object) -> OSError:
        return OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))    # type: ignore[arg-type]

    real_open, real_mkdir, real_access = os.open, os.mkdir, os.access
    writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | getattr(os, "O_APPEND", 0)

    def ro_open(path, flags, *args, **kw):
        if inside(path) and flags & writes:
            raise refused(path)
        return real_open(path, flags, *args, **kw)

    def ro_mkdir(path, *args, **kw):
        if inside(path):
            if os.path.lexists(path):
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(path))
            raise refused(path)
        return real_mkdir(path, *args, **kw)
    def ro_access(path, mode, *args, **kw):
        return False if inside(path) and mode & os.W_OK else real_access(path, mode, *args, **kw)
    monkeypatch.setattr(os, "access", ro_access)
    monkeypatch.setattr(os, "open", ro_open)
    monkeypatch.setattr(os, "mkdir", ro_mkdir)
    for name in ("unlink", "rmdir", "rename", "replace"):
        real = getattr(os, name)

        def changed(path, *args, _real=real, **kw):
            if inside(path):
                raise refused(path)
            return _real(path, *args, **kw)
        monkeypatch.setattr(os, name, changed)


@pytest.mark.parametrize("command", ["serve", "generate", "sessions"])
def test_a_read_only_state_folder_is_one_line(turn, tiny_dir, capsys, monkeypatch, command):
    """`serve` and a pinned turn stop with one line naming the cause; listing only reads: it works."""
    state, s = turn.state, sid()
    assert turn(s, "Hello there")[0] == 0
    (state / "locks" / "pid-999999999.lock").touch()     # a writer that is gone: startup removes its lock
    monkeypatch.delenv("AMBER_ORT_SPIN_US", raising=False)       # `serve` sets it for its model
    read_only(monkeypatch, state)
    where = ["--model", str(tiny_dir), "--state-dir", str(state)]
    argv = {"serve": ["serve", *where, "--port", "0", "--provider", "cpu"],
            "generate": ["generate", *where, "--session", s, "--chat", "Tell me more", "--max-tokens", "3"],
            "sessions": ["sessions", "list", *where]}[command]
    capsys.readouterr()
    rc = main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    if command == "sessions":
        assert rc == 0 and s in out and not err
        return
    assert rc == 2
    if command == "serve":
        assert err.strip().splitlines() == [
            f"amber-engine: error: the state folder cannot be used: {state} is read-only"]
    else:
        assert err.strip().splitlines() == [f"amber-engine: error: this chat cannot be locked (session {s}): "
                                            "Read-only file system"]


@pytest.mark.parametrize("when", ["into a new name", "over the previous one"])
def test_a_previous_version_made_a_folder_mid_rename_does_not_stop_the_chat(turn, monkeypatch, when):
    """Another program puts a folder where Amber is renaming the previous version of a manifest
    (`sessions/prev/<id>.json`): at most that one save fails, with one line; the chat saves again."""
    state, s = turn.state, sid()
    assert turn(s, "Hello there")[0] == 0
    if when == "over the previous one":
        assert turn(s, "Tell me more")[0] == 0
    prev = state / "sessions" / "prev" / f"{s}.json"
    real_replace = os.replace
    hit: list[str] = []

    def replaced(src, dst, *args, **kw):
        if Path(dst) == prev and not hit:
            hit.append(str(dst))
            victim = Path(src) if when == "into a new name" else prev
            victim.unlink()
            victim.mkdir()         # a folder where the file was, at the moment of the rename
        return real_replace(src, dst, *args, **kw)
    monkeypatch.setattr(os, "replace", replaced)
    rc, err = turn(s, "Go on")
    monkeypatch.setattr(os, "replace", real_replace)
    assert hit and "Traceback" not in err and len(error_lines(err)) == rc // 2
    for text in ("And then?", "Once more"):
        rc, err = turn(s, text)
        assert rc == 0 and not error_lines(err), err
    assert user_turns(state, s)[-2:] == ["And then?", "Once more"]
    assert prev.is_file()
