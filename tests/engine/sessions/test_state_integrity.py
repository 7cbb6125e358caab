"""The state folder: hostile or damaged manifests, odd files among the blocks, two
processes on one folder, a full disk, and the privacy traces of temporary chats and cache salts.
Each test reproduces a case that lost a conversation, hung, or touched a file outside the state
folder before; the cross-process ones use real subprocesses.
"""
from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest

from engine.api import SessionKind
from engine.cli import main
from engine.generation.generate import Generator, collect
from engine.sessions.manifest import seal
from engine.sessions.manager import SessionError, SessionManager

B = 16
REPO = Path(__file__).resolve().parents[3]
P1 = [int(t) for t in np.random.default_rng(101).integers(3, 420, 40)]
EXTRA = [int(t) for t in np.random.default_rng(102).integers(3, 420, 12)]


def greedy(n: int = 8):
    from engine.api import SamplingParams
    return SamplingParams(greedy=True, repetition_penalty=1.0, max_new_tokens=n)


def sid() -> str:
    return str(uuid.uuid4())


def reference(model, prompt: list[int], n: int = 8) -> list[int]:
    gen = Generator(model)
    return collect(gen.stream(gen.new_cache(), prompt, greedy(n))).token_ids


def manifest_path(state: Path, s: str) -> Path:
    return state / "sessions" / f"{s}.json"


def block_path(state: Path, key: str) -> Path:
    return state / "blocks" / key[:2] / f"{key}.kvb"


@pytest.fixture
def state(tmp_path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def managers(tiny_model, state, monkeypatch):
    monkeypatch.setattr("engine.kvstore.prefix_cache.JANITOR_DELAY_S", 0.01)
    made: list[SessionManager] = []

    def make(**kw) -> SessionManager:
        kw.setdefault("block_tokens", B)
        kw.setdefault("lock_wait_s", 1.0)
        m = SessionManager(tiny_model, kw.pop("state_dir", state), **kw)
        made.append(m)
        return m
    yield make
    for m in made:
        m.shutdown(timeout=5)


def pinned_turn1(make) -> tuple[str, list[int]]:
    m = make()
    s = sid()
    m.open(s, SessionKind.PINNED)
    r = collect(m.generate_tokens(s, P1, greedy()))
    assert m.wait_for_saves() and m.info(s).save_error is None
    m.shutdown()
    return s, r.token_ids


def pinned_chat(make, turns: list[str]) -> tuple[str, list[dict[str, str]]]:
    """A pinned chat (transcript mode) after `turns`, saved and closed; returns (id, transcript)."""
    m = make()
    s = sid()
    m.open(s, SessionKind.PINNED)
    for text in turns:
        collect(m.chat(s, text, sampling=greedy(6)))
        assert m.wait_for_saves() and m.info(s).save_error is None
    transcript = m.transcript(s)
    m.shutdown()
    return s, transcript


def run_in_thread(fn, timeout: float = 120):
    """Runs fn in a thread; fails (instead of hanging the suite) when it does not return."""
    out: dict = {}

    def work() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:     # noqa: BLE001 - re-raised below
            out["error"] = exc
    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "hung (a blocking open?)"
    if "error" in out:
        raise out["error"]
    return out["value"]


# ---- 1. names from a manifest never leave the state folder -----------------------------------
def test_manifest_tail_outside_the_folder_is_never_touched(tiny_model, managers, state, tmp_path):
    s, t1 = pinned_turn1(managers)
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file")
    path = manifest_path(state, s)
    data = json.loads(path.read_text())
    data["tail"] = "../../victim.txt"             # resolved from tails/: tmp_path/victim.txt
    path.write_text(json.dumps(seal(data)))        # an attacker can compute the checksum too
    m = managers()
    info = m.open(s)
    r = collect(m.generate_tokens(s, P1 + t1 + EXTRA, greedy()))
    assert victim.read_text() == "the user's file"
    assert r.token_ids == reference(tiny_model, P1 + t1 + EXTRA)
    assert "bad tail name" in r.figures.fallback_reason
    assert info.manifest_error and "bad tail name" in info.manifest_error


@pytest.mark.parametrize("name", ["../victim", "/abs/victim"])
def test_manifest_block_keys_outside_the_folder_are_never_removed(managers, state, tmp_path, name):
    s, _ = pinned_turn1(managers)
    victim = tmp_path / "victim.kvb"
    victim.write_text("the user's file")
    path = manifest_path(state, s)
    data = json.loads(path.read_text())
    data["blocks"] = [name if name.startswith("..") else str(tmp_path / "victim")] + data["blocks"][1:]
    path.write_text(json.dumps(seal(data)))
    m = managers()
    m.delete(s)                                    # released its blocks: used to unlink the victim
    assert victim.read_text() == "the user's file"
    assert not path.exists()


def test_tails_folder_symlinked_outside_is_not_followed(tiny_model, managers, state, tmp_path):
    s, t1 = pinned_turn1(managers)
    tail = json.loads(manifest_path(state, s).read_text())["tail"]
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / tail).write_text("not Amber's")      # same name as the real tail
    for f in (state / "tails").iterdir():
        f.unlink()
    (state / "tails").rmdir()
    (state / "tails").symlink_to(outside, target_is_directory=True)
    m = managers()
    m.open(s)
    r = collect(m.generate_tokens(s, P1 + t1 + EXTRA, greedy()))
    assert r.figures.fallback_reason and r.token_ids == reference(tiny_model, P1 + t1 + EXTRA)
    m.wait_for_saves()
    m.gc()
    assert (outside / tail).read_text() == "not Amber's"


# ---- 2. a damaged manifest is moved aside, the previous version is used ----------------------
@pytest.mark.parametrize("how", ["truncated", "bitflip", "swapped"])
def test_damaged_manifest_keeps_the_conversation(managers, state, how):
    s, transcript = pinned_chat(managers, ["Hello there", "Tell me more"])
    path = manifest_path(state, s)
    raw = path.read_bytes()
    if how == "truncated":
        damaged = raw[: len(raw) // 2]
    elif how == "bitflip":
        i = raw.index(b"Tell me more") + 3
        damaged = raw[:i] + bytes([raw[i] ^ 0x01]) + raw[i + 1:]
    else:                                            # another chat's manifest under this name
        other, _ = pinned_chat(managers, ["Something else"])
        damaged = manifest_path(state, other).read_bytes()
    path.write_bytes(damaged)

    m = managers()
    info = m.open(s)
    # The previous version (after turn 1) is used, not an empty history (nor another chat's).
    assert m.transcript(s) == transcript[:2]
    assert info.manifest_error and "damaged manifest" in info.manifest_error
    aside = list((state / "sessions" / "damaged").glob(f"{s}.*.json"))
    assert len(aside) == 1 and aside[0].read_bytes() == damaged     # moved aside, never overwritten
    r = collect(m.chat(s, "Go on", sampling=greedy(6)))
    assert r.figures.fallback_reason and "damaged manifest" in r.figures.fallback_reason
    assert m.wait_for_saves() and m.info(s).save_error is None
    m.shutdown()
    assert aside[0].read_bytes() == damaged
    m2 = managers()
    m2.open(s)
    assert [t["content"] for t in m2.transcript(s) if t["role"] == "user"] == ["Hello there", "Go on"]
    assert m2.info(s).manifest_error is None
    m2.delete(s)            # the user forgets the chat: no copy of its text stays, damaged or not
    assert not [p for p in (state / "sessions").rglob(f"{s}*.json")]


def test_damaged_manifest_is_reported_by_the_cli(tiny_dir, state, capsys):
    s = sid()
    common = ["generate", "--model", str(tiny_dir), "--session", s, "--pinned", "--greedy", "--max-tokens", "4",
              "--state-dir", str(state)]
    assert main([*common, "--chat", "Hello there"]) == 0
    assert main([*common, "--chat", "Tell me more"]) == 0
    capsys.readouterr()
    path = manifest_path(state, s)
    path.write_bytes(path.read_bytes()[:-40])
    assert main([*common, "--chat", "Go on"]) == 0
    out, err = capsys.readouterr()
    assert out.strip() and "Traceback" not in err
    assert err.startswith(f"amber-engine: note: damaged manifest: {s}.json: not valid JSON"), err
    path.write_bytes(path.read_bytes()[:-40])
    assert main([*common, "--chat", "And?", "--json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert "damaged manifest" in data["manifest_error"] and "damaged manifest" in data["fallback_reason"]
    assert "restored the previous version" in data["manifest_error"]
    assert len(list((state / "sessions" / "damaged").glob(f"{s}.*.json"))) == 2


# ---- 3. one bad manifest affects its own session only ------------------------------------------
BAD = {"list": [], "null": None, "kind": {"kind": "pinnad"}, "tokens": {"tokens": "12"},
       "blocks": {"blocks": [1, 2]}, "transcript": {"transcript": "hi"}, "salt": {"cache_salt": 3},
       "nested": {"transcript": [{"role": "user", "content": ["x"]}]}}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_manifest_affects_only_its_session(tiny_dir, managers, state, capsys, case):
    good, t1 = pinned_turn1(managers)
    bad = sid()
    template = json.loads(manifest_path(state, good).read_text())
    value = BAD[case]
    if isinstance(value, dict):
        data = {**template, "session_id": bad, "version": 1, **value}
        data.pop("checksum", None)
    else:
        data = value
    manifest_path(state, bad).write_text(json.dumps(data))

    m = managers()
    listed = {i.session_id: i for i in m.list_sessions()}
    assert m.open(good).tokens == 47
    assert set(listed) == {good, bad} and listed[bad].manifest_error and not listed[good].manifest_error
    assert m.startup_report["bad_manifests"] == 1
    assert collect(m.generate_tokens(good, P1 + t1 + EXTRA, greedy())).figures.fallback_reason is None
    assert m.open(bad).manifest_error          # opens as an empty chat, the reason kept
    assert isinstance(m.gc(), dict)
    m.shutdown()
    manifest_path(state, bad).write_text(json.dumps(data))     # damaged again, for the commands
    where = ["--state-dir", str(state), "--model", str(tiny_dir)]
    for cmd in (["sessions", "list"], ["sessions", "gc"], ["cache", "stats"], ["cache", "gc"], ["cache", "clear"]):
        assert main([*cmd, *where]) == 0, cmd
        out, err = capsys.readouterr()
        assert "Traceback" not in err and out
    assert main(["sessions", "show", good, *where]) == 0


# ---- 9. odd files where a block should be -------------------------------------------------------
@pytest.mark.parametrize("odd", ["directory", "fifo", "symlink"])
def test_odd_file_in_the_block_folder(tiny_model, managers, state, tmp_path, odd):
    s, t1 = pinned_turn1(managers)
    key = json.loads(manifest_path(state, s).read_text())["blocks"][1]
    path = block_path(state, key)
    path.unlink()
    target = tmp_path / "elsewhere.kvb"
    if odd == "directory":
        path.mkdir()
    elif odd == "fifo":
        os.mkfifo(path)
    else:
        target.write_text("outside")
        path.symlink_to(target)
    m = run_in_thread(lambda: managers())
    m.open(s)
    p2 = P1 + t1 + EXTRA
    r = run_in_thread(lambda: collect(m.generate_tokens(s, p2, greedy())))
    assert r.figures.fallback_reason and path.name in r.figures.fallback_reason
    assert r.figures.reused_tokens == B and r.token_ids == reference(tiny_model, p2)
    assert m.wait_for_saves() and m.info(s).save_error is None
    assert path.is_file() and not path.is_symlink()        # replaced by the real block
    if odd == "symlink":
        assert target.read_text() == "outside"
    run_in_thread(m.gc)


# ---- 4. two processes on one pinned session -----------------------------------------------------
HOLDER = r'''
import sys, time
from engine.runtime.model import load_model
from engine.sessions.manager import SessionManager
from engine.generation.generate import collect
from engine.api import SamplingParams
model_dir, state, sid = sys.argv[1:4]
m = SessionManager(load_model(model_dir, provider="cpu", threads=1), state, block_tokens=16)
m.open(sid, "pinned")
collect(m.chat(sid, "first process", sampling=SamplingParams(greedy=True, max_new_tokens=4)))
m.wait_for_saves()
print("READY", flush=True)
sys.stdin.readline()
m.shutdown()
print("DONE", flush=True)
'''


def _child(script: str, tmp_path: Path, *args: str) -> subprocess.Popen:
    path = tmp_path / "child.py"
    path.write_text(script)
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, str(path), *args], cwd=REPO, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    timer = threading.Timer(240, proc.kill)
    timer.daemon = True
    timer.start()
    return proc


def _wait_for(proc: subprocess.Popen, word: str) -> None:
    for line in proc.stdout:
        if line.startswith(word):
            return
    raise AssertionError(proc.stderr.read())


def test_second_process_on_a_pinned_session_fails_clearly(tiny_dir, managers, state, tmp_path, run_cli, capsys):
    s = sid()
    holder = _child(HOLDER, tmp_path, str(tiny_dir), str(state), s)
    try:
        _wait_for(holder, "READY")
        m = managers()
        with pytest.raises(SessionError, match="open in another Amber process"):
            m.open(s, "pinned")
        proc = run_cli("generate", "--model", tiny_dir, "--session", s, "--pinned", "--chat", "second",
                       "--state-dir", state, env={"AMBER_LOCK_WAIT_S": "0.5"})
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert proc.stderr.strip().splitlines() == [
            f"amber-engine: error: this chat is open in another Amber process (session {s}); "
            "close it there, or try again"]
        # Listing only looks: it works while the chat is open elsewhere.
        assert main(["sessions", "list", "--state-dir", str(state), "--model", str(tiny_dir)]) == 0
        assert s in capsys.readouterr().out
        holder.stdin.write("\n")
        holder.stdin.flush()
        _wait_for(holder, "DONE")
    finally:
        holder.kill()
        holder.wait(30)
    # Released: the second process gets the chat, with the first one's turn.
    m.open(s, "pinned")
    assert m.transcript(s)[0]["content"] == "first process"


# ---- 5. gc and cache clear in another process spare a live writer's files ----------------------
WRITER = r'''
import json, os, sys, time
from pathlib import Path
import engine.kvstore.kvfile as kvfile, engine.sessions.manager as sessions
from engine.runtime.model import load_model
from engine.sessions.manager import SessionManager
from engine.generation.generate import collect
from engine.api import SamplingParams
model_dir, state, sid, prompt = sys.argv[1:5]
m = SessionManager(load_model(model_dir, provider="cpu", threads=1), state, block_tokens=16)
m.open(sid, "pinned")
real = kvfile.atomic_write

def paused(path, chunks):
    if path.name.endswith(".json"):
        # Blocks and the tail are written; the manifest's temp file is half written: pause here.
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(bytes(chunks[0])[:20])
        print("PAUSED", json.dumps(sorted(str(p.relative_to(state)) for p in Path(state).rglob("*")
                                          if p.is_file() and "locks" not in p.parts)), flush=True)
        sys.stdin.readline()
        tmp.unlink()
        kvfile.atomic_write = sessions.atomic_write = real
    return real(path, chunks)

kvfile.atomic_write = sessions.atomic_write = paused
collect(m.generate_tokens(sid, json.loads(prompt),
                         SamplingParams(greedy=True, repetition_penalty=1.0, max_new_tokens=8)))
m.wait_for_saves()
print("SAVED", json.dumps(m.info(sid).save_error), flush=True)
m.shutdown()
'''


def test_gc_and_cache_clear_in_another_process_spare_a_live_writer(tiny_model, tiny_dir, managers, state,
                                                                  tmp_path, monkeypatch):
    monkeypatch.setattr("engine.sessions.refs.BLOCKS_LOCK_WAIT_S", 0.5)
    s = sid()
    writer = _child(WRITER, tmp_path, str(tiny_dir), str(state), s, json.dumps(P1))
    try:
        for line in writer.stdout:
            if line.startswith("PAUSED"):
                listing = json.loads(line.split(" ", 1)[1])
                break
        else:
            raise AssertionError(line + writer.stderr.read())
        temp = [f for f in listing if f.endswith(".tmp")]
        tails = [f for f in listing if f.endswith(".kvt")]
        blocks = [f for f in listing if f.endswith(".kvb")]
        assert len(temp) == 1 and len(tails) == 1 and len(blocks) == 2
        m = managers()           # its startup clean-up, then gc and cache clear, while the writer is mid-save
        m.gc()
        m.cache_gc()
        for f in temp + tails + blocks:
            assert (state / f).exists(), f
        with pytest.raises(SessionError, match="busy"):
            m.clear_cache()      # the writer holds the block lock until its manifest is down
        for f in temp + tails + blocks:
            assert (state / f).exists(), f
        writer.stdin.write("\n")
        writer.stdin.flush()
        for line in writer.stdout:
            if line.startswith("SAVED"):
                assert json.loads(line.split(" ", 1)[1]) is None
                break
        else:
            raise AssertionError(writer.stderr.read())
        writer.wait(60)
    finally:
        writer.kill()
    assert m.clear_cache() == 0         # now referenced by the manifest: pinned, kept
    m.open(s)
    r = collect(m.generate_tokens(s, P1 + reference(tiny_model, P1) + EXTRA, greedy()))
    assert r.figures.resume == "disk" and r.figures.fallback_reason is None
    assert r.figures.reused_tokens == 47


# ---- 6. a full disk: the CLI says so ------------------------------------------------------------
def test_full_disk_on_a_pinned_turn_exits_non_zero_with_one_line(tiny_dir, state, capsys, monkeypatch):
    s = sid()
    common = ["generate", "--model", str(tiny_dir), "--session", s, "--pinned", "--greedy", "--max-tokens", "4",
              "--state-dir", str(state)]
    assert main([*common, "--chat", "Hello there"]) == 0
    capsys.readouterr()
    manifest = manifest_path(state, s).read_bytes()

    def full(path, chunks):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    monkeypatch.setattr("engine.kvstore.kvfile.atomic_write", full)
    rc = main([*common, "--chat", "Tell me more"])
    out, err = capsys.readouterr()
    assert rc == 2 and out.strip()                      # the reply is still printed
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert lines[0].startswith("amber-engine: error: couldn't save to disk") and "No space left" in lines[0]
    assert manifest_path(state, s).read_bytes() == manifest   # the saved chat is intact
    rc = main([*common, "--chat", "Tell me more", "--json"])
    out, err = capsys.readouterr()
    assert rc == 2 and "No space left" in json.loads(out)["save_error"]


# ---- privacy: temporary reads leave no trace; the cache salt is the session's own ---------------
def test_temporary_session_reading_shared_blocks_leaves_no_trace(managers, state):
    m = managers()
    regular = m.open(None, "regular").session_id
    collect(m.generate_tokens(regular, P1, greedy()))
    m.close(regular)                  # its full blocks go to the shared disk tier
    m.shutdown()
    blocks = sorted(state.rglob("*.kvb"))
    assert len(blocks) == 2
    import time
    an_hour_ago = time.time() - 3600
    for b in blocks:
        os.utime(b, (an_hour_ago, an_hour_ago))     # atime = mtime: a read would update it (relatime)
    times = {str(p): (p.stat().st_mtime_ns, p.stat().st_atime_ns) for p in state.rglob("*") if p.is_file()}

    m2 = managers()                   # a new process: nothing in memory
    t = m2.open(None, "temporary").session_id
    r = collect(m2.generate_tokens(t, P1 + EXTRA, greedy()))
    assert r.figures.cache_tokens_disk == 2 * B       # it did read them
    m2.close(t)
    m2.shutdown()
    assert {str(p): (p.stat().st_mtime_ns, p.stat().st_atime_ns) for p in state.rglob("*") if p.is_file()} == times
    assert sorted(times) == sorted(str(p) for p in state.rglob("*") if p.is_file())


def test_reopening_a_salted_session_needs_its_salt(managers, state):
    m = managers()
    s = m.open(None, "pinned", cache_salt="alice").session_id
    collect(m.generate_tokens(s, P1, greedy(4)))
    m.wait_for_saves()
    with pytest.raises(SessionError, match="another cache salt"):
        m.open(s, cache_salt="bob")
    m.shutdown()
    m2 = managers()
    with pytest.raises(SessionError, match="has a cache salt"):
        m2.open(s)
    with pytest.raises(SessionError, match="another cache salt"):
        m2.open(s, cache_salt="bob")
    assert m2.open(s, cache_salt="alice").cache_salt == "alice"
    # An unsalted chat given a salt (the GUI after a remote engine salted it) takes it from now on.
    plain = m2.open(None, "pinned").session_id
    collect(m2.generate_tokens(plain, P1, greedy(4)))
    m2.wait_for_saves()
    m2.shutdown()
    m3 = managers()
    assert m3.open(plain, cache_salt="carol").cache_salt == "carol"
    r = collect(m3.generate_tokens(plain, P1 + EXTRA, greedy(4)))
    assert "now has a cache salt" in r.figures.fallback_reason
    m3.wait_for_saves()
    m3.shutdown()
    m4 = managers()
    with pytest.raises(SessionError, match="has a cache salt"):
        m4.open(plain)
    m4.open(plain, cache_salt="carol")
    r = collect(m4.generate_tokens(plain, P1 + EXTRA, greedy(4)))
    assert r.figures.fallback_reason is None and r.figures.resume == "disk"


def test_lock_files_exist_for_open_chats_only(managers, state):
    m = managers()
    ids = [m.open(None, kind).session_id for kind in ("regular", "pinned", "regular")]
    for x in ids:
        collect(m.generate_tokens(x, P1[:20], greedy(2)))
    assert {p.name for p in (state / "locks").glob("*-*-*.lock")} == {f"{x}.lock" for x in ids}
    for x in ids:
        m.close(x)
    assert m.wait_for_saves()
    assert not list((state / "locks").glob("*-*-*.lock"))
    m2 = managers()                     # and the closed chats open at once elsewhere
    assert m2.open(ids[1]).kind == SessionKind.PINNED


def test_threads_of_one_process_share_a_chat_lock(managers):
    m = managers(lock_wait_s=5.0)
    s = sid()
    barrier = threading.Barrier(4)
    got: list[str] = []

    def work() -> None:
        barrier.wait()
        got.append(m.open(s, "pinned").session_id)
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert got == [s] * 4          # none of them mistook the others for another process


def test_a_block_evicted_before_the_save_is_never_named_by_the_manifest(tiny_model, managers, state):
    s, t1 = pinned_turn1(managers)
    m = managers()
    m.open(s)
    gate = threading.Event()
    m._writer.submit(lambda: gate.wait(60))          # white-box: hold the writer, as a busy disk would
    p2 = P1 + t1 + EXTRA
    collect(m.generate_tokens(s, p2, greedy()))      # its save is queued behind the gate
    first = json.loads(manifest_path(state, s).read_text())["blocks"][0]
    block_path(state, first).unlink()                # another process's eviction, after the snapshot
    gate.set()
    assert m.wait_for_saves() and m.info(s).save_error is None
    saved = json.loads(manifest_path(state, s).read_text())
    assert all(block_path(state, k).is_file() for k in saved["blocks"])
    assert saved["tail"] is None or (state / "tails" / saved["tail"]).is_file()
    m.shutdown()
    m2 = managers()
    m2.open(s)
    r = collect(m2.generate_tokens(s, p2 + [5], greedy()))
    assert r.figures.fallback_reason is None and r.token_ids == reference(tiny_model, p2 + [5])


def test_odd_files_among_unreferenced_blocks_are_harmless(tiny_model, managers, state, tmp_path):
    """Shared-cache blocks nobody references: a FIFO, a folder, a symlink to a file outside, and a
    symlinked two-letter folder. Startup, a lookup that would hit them, gc and cache clear neither
    hang nor follow the links."""
    m = managers()
    r = m.open(None, "regular").session_id
    collect(m.generate_tokens(r, P1, greedy(2)))
    m.close(r)                                   # two shared blocks on disk
    m.shutdown()
    keys = m.store.keys_for(P1, None)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    block_path(state, keys[0]).unlink()
    os.mkfifo(block_path(state, keys[0]))         # the first block: a FIFO
    block_path(state, keys[1]).unlink()
    block_path(state, keys[1]).symlink_to(outside / "keep.txt")
    odd_key = "ee" + "1" * 38
    (state / "blocks" / "ee").symlink_to(outside, target_is_directory=True)
    (outside / f"{odd_key}.kvb").write_text("not a block")
    m2 = run_in_thread(lambda: managers())
    t = m2.open(None, "temporary").session_id
    res = run_in_thread(lambda: collect(m2.generate_tokens(t, P1 + EXTRA, greedy())))
    assert res.token_ids == reference(tiny_model, P1 + EXTRA)
    run_in_thread(m2.gc)
    run_in_thread(m2.clear_cache)
    assert (outside / "keep.txt").read_text() == "mine"
    assert (outside / f"{odd_key}.kvb").read_text() == "not a block"
