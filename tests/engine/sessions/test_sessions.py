"""engine.sessions.manager on the tiny converted chat model: pinned resume after a restart, crashes while
saving, damaged/foreign/old KV files, ENOSPC, temporary sessions, concurrency, pin/unpin/delete,
incremental saves, startup clean-up and the memory budget.

Most tests use 16-token blocks, so a 40-token history already spans blocks and a tail.
"""
from __future__ import annotations

import errno
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest

from engine.api import GenerationResult, SamplingParams, SessionKind
from engine.generation.generate import Generator, collect
from engine.kvstore.kvfile import FORMAT_VERSION, MAGIC, looks_like_kv_file
from engine.sessions.manifest import seal
from engine.sessions.manager import SessionError, SessionManager

B = 16                                     # block size used by these tests
REPO = Path(__file__).resolve().parents[3]


def greedy(max_new_tokens: int = 8) -> SamplingParams:
    return SamplingParams(greedy=True, repetition_penalty=1.0, max_new_tokens=max_new_tokens)


def random_prompt(n: int, seed: int = 0) -> list[int]:
    return [int(t) for t in np.random.default_rng(100 + seed).integers(3, 420, n)]


def bookkeeping(rel: str) -> bool:
    """Amber's own bookkeeping, not session data: lock files and the previous manifest versions."""
    return rel.startswith(("locks/", "sessions/prev/"))


def files(root: Path) -> list[str]:
    """Every file under root, relative, sorted (bookkeeping left out)."""
    return sorted(rel for p in Path(root).rglob("*") if p.is_file()
                  and not bookkeeping(rel := str(p.relative_to(root))))


def kinds(root: Path) -> dict[str, int]:
    out = {"manifest": 0, "block": 0, "tail": 0, "other": 0}
    for f in files(root):
        out["manifest" if f.endswith(".json") else "block" if f.endswith(".kvb")
            else "tail" if f.endswith(".kvt") else "other"] += 1
    return out


def sid() -> str:
    return str(uuid.uuid4())


def reference(model, prompt: list[int], n: int = 8) -> list[int]:
    """Greedy tokens of a fresh computation (no sessions, no disk)."""
    gen = Generator(model)
    return collect(gen.stream(gen.new_cache(), prompt, greedy(n))).token_ids


def cache_of(manager: SessionManager, session_id: str):
    return manager._open[session_id].cache   # white-box: to compare KV contents exactly


@pytest.fixture
def state(tmp_path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def managers(tiny_model, state, monkeypatch):
    """managers(**kw) -> a new SessionManager over the tiny model and `state`; all shut down at the end."""
    # The cache janitor waits this long after a write before a pass; shutdown waits for it.
    monkeypatch.setattr("engine.kvstore.prefix_cache.JANITOR_DELAY_S", 0.01)
    made: list[SessionManager] = []

    def make(**kw) -> SessionManager:
        kw.setdefault("block_tokens", B)
        m = SessionManager(tiny_model, kw.pop("state_dir", state), **kw)
        made.append(m)
        return m
    yield make
    for m in made:
        m.shutdown(timeout=5)


P1 = random_prompt(40, seed=1)           # turn 1: 40 tokens; + 8 generated -> 47 in the cache
EXTRA = random_prompt(12, seed=2)        # turn 2 adds these after turn 1's reply


def turn2(turn1_tokens: list[int]) -> list[int]:
    return P1 + turn1_tokens + EXTRA


def pinned_turn1(make) -> tuple[str, list[int]]:
    """A pinned session after turn 1, saved, its manager shut down. Returns (id, turn-1 tokens)."""
    m = make()
    s = sid()
    assert m.open(s, SessionKind.PINNED).kind == SessionKind.PINNED
    r = collect(m.generate_tokens(s, P1, greedy()))
    assert m.wait_for_saves()
    info = m.info(s)
    assert info.save_error is None and not info.saving
    assert info.tokens == len(P1) + len(r.token_ids) - 1 == 47
    m.shutdown()
    return s, r.token_ids


# ---- resume after a restart -------------------------------------------------------------------
def test_pinned_resume_equals_uninterrupted_generation(tiny_model, managers, state):
    s, t1 = pinned_turn1(managers)
    assert kinds(state) == {"manifest": 1, "block": 2, "tail": 1, "other": 0}
    p2 = turn2(t1)

    # A session that never stopped.
    live = managers(state_dir=state.parent / "live")
    other = sid()
    live.open(other, SessionKind.TEMPORARY)
    assert collect(live.generate_tokens(other, P1, greedy())).token_ids == t1
    never = collect(live.generate_tokens(other, p2, greedy()))

    m = managers()
    info = m.open(s)
    assert info.kind == SessionKind.PINNED and info.kv_location.value == "disk" and info.tokens == 47
    assert info.kv_bytes_disk > 0 and info.kv_bytes_memory == 0
    r = collect(m.generate_tokens(s, p2, greedy()))
    f = r.figures
    assert f.resume == "disk" and f.fallback_reason is None
    assert f.reused_tokens == 47 and f.prefilled_tokens == len(p2) - 47 == 1 + len(EXTRA)
    assert f.resume_ms > 0
    assert r.token_ids == never.token_ids == reference(tiny_model, p2)
    # The KV loaded from disk is bit-identical to the KV computed in memory.
    got, want = cache_of(m, s), cache_of(live, other)
    assert got.tokens == want.tokens
    assert np.array_equal(got.export(0, len(got)), want.export(0, len(want)))


def test_float16_store_halves_the_bytes_and_resumes_within_fp16_rounding(tiny_model, managers, state):
    """The optional float16 KV store: half the bytes on disk, loaded back into the float32 cache as
    the float16 rounding of the KV computed in memory, then generation continues from disk."""
    s, t1 = pinned_turn1(lambda **kw: managers(kv_store="float16", **kw))
    p2 = turn2(t1)
    lossless_s, _ = pinned_turn1(lambda **kw: managers(state_dir=state.parent / "lossless", **kw))
    m = managers(kv_store="float16")
    full = managers(state_dir=state.parent / "lossless")
    assert m.stats()["kv_store_dtype"] == "float16" and full.stats()["kv_store_dtype"] == "float32"
    info, info_full = m.open(s), full.open(lossless_s)
    payload_half = info.tokens * tiny_model.kv.bytes_per_token // 2
    assert payload_half <= info.kv_bytes_disk < payload_half + 4096 * 4        # headers: token ids, JSON
    assert info.kv_bytes_disk < 0.6 * info_full.kv_bytes_disk
    r = collect(m.generate_tokens(s, p2, greedy()))
    assert r.figures.resume == "disk" and r.figures.fallback_reason is None and r.figures.reused_tokens == 47
    # The reference: the same history computed in memory, rounded to float16 and back.
    live = managers(state_dir=state.parent / "live")
    other = sid()
    live.open(other, SessionKind.TEMPORARY)
    collect(live.generate_tokens(other, p2, greedy(1)))
    got, want = cache_of(m, s).export(0, 47), cache_of(live, other).export(0, 47)
    assert got.dtype == np.float32
    assert np.array_equal(got, want.astype(np.float16).astype(np.float32))
    assert not np.array_equal(got, want)              # it really is the rounded copy


def test_changing_the_kv_store_setting_re_prefills_once_and_keeps_the_chat(tiny_model, managers, state):
    s, t1 = pinned_turn1(managers)                   # saved losslessly
    p2 = turn2(t1)
    m = managers(kv_store="float16")
    assert m.open(s).kind == SessionKind.PINNED
    r = collect(m.generate_tokens(s, p2, greedy()))
    assert r.figures.resume != "disk" and "another KV store setting" in (r.figures.fallback_reason or "")
    assert r.token_ids == reference(tiny_model, p2)   # nothing the user wrote is lost
    assert m.wait_for_saves()
    m.shutdown()
    again = managers(kv_store="float16")
    again.open(s)
    r2 = collect(again.generate_tokens(s, p2 + r.token_ids[:-1] + EXTRA, greedy()))
    assert r2.figures.resume == "disk" and r2.figures.fallback_reason is None


def test_kv_saved_under_another_setting_survives_a_run_with_this_one(tiny_model, managers, state):
    """A manager with the other KV store setting (or another model) cannot use a pinned chat's KV,
    but must not treat it as evictable cache or orphan tails: switching back resumes from disk."""
    s, t1 = pinned_turn1(managers)
    before = kinds(state)
    other = managers(kv_store="float16", cache_disk_bytes=0, cache_max_age_s=0.0)   # evicts all it may
    assert other.cache_gc() is not None and other.gc() is not None
    assert other.open(s).tokens == 0 and kinds(state) == before      # blocks and tail all still there
    other.shutdown()
    back = managers()
    back.open(s)
    r = collect(back.generate_tokens(s, turn2(t1), greedy()))
    assert r.figures.resume == "disk" and r.figures.fallback_reason is None and r.figures.reused_tokens == 47


def test_resaving_under_the_new_setting_releases_the_old_kv(tiny_model, managers, state):
    s, t1 = pinned_turn1(managers)
    old_tails = {p.name for p in (state / "tails").iterdir()}
    m = managers(kv_store="float16", cache_disk_bytes=0, cache_max_age_s=0.0)
    m.open(s)
    collect(m.generate_tokens(s, turn2(t1), greedy()))      # re-prefilled, saved as float16
    assert m.wait_for_saves()
    assert old_tails.isdisjoint(p.name for p in (state / "tails").iterdir())
    m.cache_gc()
    lossless_keys = managers().store.keys_for(P1 + t1, None)
    assert not any(m.store.has(k) for k in lossless_keys)   # no longer pinned: evicted by the budget


def test_unknown_kv_store_setting_is_refused(tiny_model, state):
    with pytest.raises(ValueError, match="unknown KV store 'int4'"):
        SessionManager(tiny_model, state, kv_store="int4")


def test_chat_transcript_resumes_and_reuses_the_saved_history(tiny_model, managers, state):
    m = managers()
    s = sid()
    m.open(s, "pinned")
    r1 = collect(m.chat(s, "What is the capital of France?", system="Be brief.", sampling=greedy()))
    m.wait_for_saves()
    saved = list(cache_of(m, s).tokens)
    m.shutdown()

    m2 = managers()
    m2.open(s)
    assert m2.transcript(s) == [{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "What is the capital of France?"},
                                {"role": "assistant", "content": r1.text}]
    r2 = collect(m2.chat(s, "And Spain?", sampling=greedy()))
    history = m2.transcript(s)[:-1]
    prompt2 = m2.generator.encode_chat(history)
    from engine.generation.generate import common_prefix
    assert r2.figures.resume == "disk" and r2.figures.fallback_reason is None
    assert r2.figures.reused_tokens == common_prefix(saved, prompt2) >= len(saved) - len(r1.token_ids)
    assert r2.figures.prefilled_tokens == len(prompt2) - r2.figures.reused_tokens
    assert r2.token_ids == reference(tiny_model, prompt2)


# ---- crash while saving ------------------------------------------------------------------------
CHILD = r'''
import json, os, sys, time
from pathlib import Path
import engine.kvstore.kvfile as kvfile, engine.sessions.manager as sessions
from engine.api import SamplingParams
from engine.generation.generate import collect
from engine.runtime.model import load_model
from engine.sessions.manager import SessionManager

model_dir, state, sid, mode, n, p1, p2 = sys.argv[1:8]
n, p1, p2 = int(n), json.loads(p1), json.loads(p2)
m = SessionManager(load_model(model_dir, provider="cpu", threads=1), state, block_tokens=16)
m.open(sid, "pinned")
sp = SamplingParams(greedy=True, repetition_penalty=1.0, max_new_tokens=8)
t1 = collect(m.generate_tokens(sid, p1, sp)).token_ids
assert m.wait_for_saves()
listing = sorted(str(p.relative_to(state)) for p in Path(state).rglob("*") if p.is_file()
                 and not str(p.relative_to(state)).startswith(("locks/", "sessions/prev/")))
print("SAVED1", json.dumps({"tokens": t1, "files": listing}), flush=True)
real, writes = kvfile.atomic_write, []

def patched(path, chunks):
    if mode == "block" and len(writes) == n:
        # Half a temp file on disk, then hang until SIGKILL.
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(bytes(chunks[0])[:20])
            f.flush()
        print("BLOCKED", path.name, flush=True)
        time.sleep(600)
    out = real(path, chunks)
    writes.append(path.name)
    if mode == "exit" and len(writes) == n:
        print("EXIT", json.dumps(writes), flush=True)
        os._exit(3)
    return out

kvfile.atomic_write = sessions.atomic_write = patched
collect(m.generate_tokens(sid, p1 + t1 + p2, sp))
m.wait_for_saves()
print("SAVED2", json.dumps(writes), flush=True)
'''


def _run_child(tiny_dir: Path, state: Path, s: str, mode: str, n: int, script: Path) -> tuple[dict, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, str(script), str(tiny_dir), str(state), s, mode, str(n),
                             json.dumps(P1), json.dumps(EXTRA)], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    saved1, last = None, ""
    timer = threading.Timer(60, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            last = line
            if line.startswith("SAVED1 "):
                saved1 = json.loads(line.split(" ", 1)[1])
            elif line.startswith("BLOCKED"):
                os.kill(proc.pid, signal.SIGKILL)
                break
            elif line.startswith(("EXIT", "SAVED2")):
                break
        proc.wait(30)
    finally:
        timer.cancel()
        proc.kill()
    assert saved1 is not None, proc.stderr.read()
    return saved1, last


# The second turn writes 2 new blocks, the tail, then the manifest (4 atomic writes).
@pytest.mark.parametrize("mode,n", [("block", 0), ("block", 1), ("block", 2), ("block", 3), ("exit", 2),
                                    ("exit", 4)],
                         ids=["in-1st-block", "in-2nd-block", "in-tail", "in-manifest", "after-tail",
                              "after-manifest"])
def test_killed_while_saving_keeps_a_valid_state(tiny_model, tiny_dir, managers, state, tmp_path, mode, n):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    s = sid()
    saved1, last = _run_child(tiny_dir, state, s, mode, n, script)
    assert last.startswith("BLOCKED" if mode == "block" else "EXIT"), last
    t1 = saved1["tokens"]
    assert t1 == reference(tiny_model, P1)
    new_state = mode == "exit" and n == 4          # the manifest was written before the crash

    m = managers()
    report = m.startup_report
    left = files(state)
    assert not [f for f in left if f.endswith(".tmp")]
    if mode == "block":
        assert report["temp_files"] >= 1
    extra = sorted(set(left) - set(saved1["files"]))
    if not new_state:
        # The previous state is intact. Besides it, only complete blocks written before the crash
        # remain: unreferenced, they are the shared prefix cache's disk tier (valid KV files).
        assert saved1["files"] and set(saved1["files"]) <= set(left)
        assert all(f.endswith(".kvb") and looks_like_kv_file(state / f) for f in extra), extra
        assert len(extra) == (0 if n == 0 else 1 if (mode, n) == ("block", 1) else 2)
    else:
        assert kinds(state) == {"manifest": 1, "block": 4, "tail": 1, "other": 0}
        assert report["orphan_tails"] == 1          # the old tail the crash left behind
    info = m.open(s)
    assert info.tokens == (67 if new_state else 47)
    p2 = turn2(t1)
    r = collect(m.generate_tokens(s, p2, greedy()))
    assert r.figures.resume == "disk" and r.figures.fallback_reason is None
    if new_state:
        assert r.figures.reused_tokens == len(p2) - 1
    else:
        # 47 from the session's files, or 48 when the shared cache had the crashed turn's third block.
        assert r.figures.reused_tokens == (47 if not extra else 48)
        assert r.figures.cache_tokens_disk == (0 if not extra else B)
    assert r.token_ids == reference(tiny_model, p2)


# ---- damaged, foreign and old files ------------------------------------------------------------
def _header(path: Path) -> tuple[int, dict]:
    data = path.read_bytes()
    assert data[:8] == MAGIC
    n = int.from_bytes(data[8:12], "little")
    return 12 + n, json.loads(data[12:12 + n])


def damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    end, header = _header(path)
    if how == "truncated":
        del data[-100:]
    elif how == "bitflip":
        data[-7] ^= 0x10
    elif how == "fingerprint":
        fp = header["fingerprint"]
        data[12:end] = data[12:end].replace(f'"fingerprint":"{fp}"'.encode(),
                                            f'"fingerprint":"{fp[::-1]}"'.encode())
        assert fp[::-1] != fp
    elif how == "version":
        data[12:end] = data[12:end].replace(b'"version":%d,' % FORMAT_VERSION, b'"version":7,')
    path.write_bytes(bytes(data))
    if how in ("fingerprint", "version"):
        assert _header(path)[1] != header


REASONS = {"truncated": "truncated", "bitflip": "checksum", "fingerprint": "another model", "version": "version 7"}


@pytest.mark.parametrize("target", ["block", "tail"])
@pytest.mark.parametrize("how", list(REASONS))
def test_damaged_files_are_detected_answered_correctly_and_repaired(tiny_model, managers, state, target, how):
    s, t1 = pinned_turn1(managers)
    manifest = json.loads((state / "sessions" / f"{s}.json").read_text())
    assert len(manifest["blocks"]) == 2 and manifest["tail"]
    if target == "block":
        key = manifest["blocks"][1]
        path, valid = state / "blocks" / key[:2] / f"{key}.kvb", B
    else:
        path, valid = state / "tails" / manifest["tail"], 2 * B
    damage(path, how)

    p2 = turn2(t1)
    m = managers()
    r = collect(m.generate_tokens(m.open(s).session_id, p2, greedy()))
    f = r.figures
    assert f.fallback_reason and REASONS[how] in f.fallback_reason, f.fallback_reason
    assert path.name in f.fallback_reason
    assert f.reused_tokens == valid and f.resume == "disk"
    assert f.prefilled_tokens == len(p2) - valid
    assert r.token_ids == reference(tiny_model, p2)
    assert m.wait_for_saves()
    assert m.info(s).save_error is None
    m.shutdown()

    # Repaired by that save: the next resume uses every saved token, no fallback.
    m2 = managers()
    assert not [x for x in files(state) if x.endswith(".tmp")]
    info = m2.open(s)
    assert info.tokens == len(p2) + 7
    r2 = collect(m2.generate_tokens(s, p2, greedy()))
    assert r2.figures.fallback_reason is None and r2.figures.resume == "disk"
    assert r2.figures.reused_tokens == len(p2) - 1
    assert r2.token_ids == r.token_ids
    assert m2.wait_for_saves()
    # Every block the manifest names is there; the tail is the new one.
    man = json.loads((state / "sessions" / f"{s}.json").read_text())
    assert all((state / "blocks" / k[:2] / f"{k}.kvb").is_file() for k in man["blocks"])
    assert kinds(state)["tail"] == 1 and kinds(state)["other"] == 0, files(state)
    assert (state / "tails" / man["tail"]).is_file()


def test_manifest_of_another_model_falls_back_and_is_repaired(tiny_model, managers, state):
    s, t1 = pinned_turn1(managers)
    path = state / "sessions" / f"{s}.json"
    data = json.loads(path.read_text())
    data["fingerprint"] = "0" * len(data["fingerprint"])
    path.write_text(json.dumps(seal(data)))     # a valid manifest (checksummed), of another model
    p2 = turn2(t1)
    m = managers()
    m.open(s)
    r = collect(m.generate_tokens(s, p2, greedy()))
    assert r.figures.fallback_reason and "another model" in r.figures.fallback_reason
    assert r.token_ids == reference(tiny_model, p2)
    m.wait_for_saves()
    m.shutdown()
    m2 = managers()
    m2.open(s)
    r2 = collect(m2.generate_tokens(s, p2, greedy()))
    assert r2.figures.fallback_reason is None and r2.figures.resume == "disk"
    assert r2.token_ids == r.token_ids


def test_damaged_shared_block_is_repaired(tiny_model, managers, state):
    m = managers()
    a, b = sid(), sid()
    for x, tail in ((a, random_prompt(5, seed=3)), (b, random_prompt(5, seed=4))):
        m.open(x, "pinned")
        collect(m.generate_tokens(x, P1[:32] + tail, greedy(4)))
    m.wait_for_saves()
    m.shutdown()
    shared = json.loads((state / "sessions" / f"{a}.json").read_text())["blocks"][0]
    assert shared == json.loads((state / "sessions" / f"{b}.json").read_text())["blocks"][0]
    damage(state / "blocks" / shared[:2] / f"{shared}.kvb", "bitflip")
    prompt = P1[:32] + random_prompt(5, seed=3) + EXTRA
    m1 = managers()
    m1.open(a)
    r = collect(m1.generate_tokens(a, prompt, greedy(4)))
    assert r.figures.fallback_reason and "checksum" in r.figures.fallback_reason
    m1.wait_for_saves()
    m1.shutdown()
    m2 = managers()
    m2.open(a)
    r2 = collect(m2.generate_tokens(a, prompt, greedy(4)))
    assert r2.figures.fallback_reason is None


# ---- ENOSPC ------------------------------------------------------------------------------------
def test_enospc_while_saving_keeps_the_session_working(tiny_model, managers, state, monkeypatch):
    m = managers()
    s = sid()
    m.open(s, "pinned")
    r1 = collect(m.chat(s, "Hello there", sampling=greedy()))
    m.wait_for_saves()
    manifest = state / "sessions" / f"{s}.json"
    before_bytes, before_files = manifest.read_bytes(), files(state)

    def full(path, chunks):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    monkeypatch.setattr("engine.kvstore.kvfile.atomic_write", full)

    r2 = collect(m.chat(s, "Tell me more", sampling=greedy()))
    assert r2.figures.finish_reason in ("length", "eos")
    m.wait_for_saves()
    info = m.info(s)
    assert info.save_error and "No space left on device" in info.save_error
    assert info.save_error.startswith("saving the session failed")
    assert manifest.read_bytes() == before_bytes and files(state) == before_files
    # Still works in memory: the third turn reuses the whole in-memory history.
    r3 = collect(m.chat(s, "Thanks", sampling=greedy()))
    assert r3.figures.resume == "memory" and r3.figures.reused_tokens > info.tokens // 2
    transcript = m.transcript(s)
    assert [t["content"] for t in transcript if t["role"] == "user"] == ["Hello there", "Tell me more", "Thanks"]
    assert transcript[1]["content"] == r1.text

    monkeypatch.undo()
    collect(m.chat(s, "Once more", sampling=greedy()))
    m.wait_for_saves()
    assert m.info(s).save_error is None
    assert json.loads(manifest.read_text())["transcript"][-2]["content"] == "Once more"
    assert kinds(state)["other"] == 0


# ---- temporary sessions ------------------------------------------------------------------------
def test_temporary_sessions_write_nothing_and_free_memory(tiny_model, managers, state):
    psutil = pytest.importorskip("psutil")
    proc = psutil.Process()
    m = managers()
    prompt = random_prompt(60, seed=5)

    def one(i: int) -> None:
        s = m.open(None, "temporary").session_id
        r = collect(m.generate_tokens(s, prompt + [3 + i], greedy(6)))
        assert r.figures.generated_tokens >= 1
        assert m.info(s).kv_bytes_memory > 0
        m.close(s)
        with pytest.raises(SessionError):
            m.info(s)

    one(0)
    gc.collect()
    after_first = proc.memory_info().rss
    for i in range(1, 50):
        one(i)
    gc.collect()
    rss = proc.memory_info().rss
    assert rss <= after_first * 1.05, f"RSS grew from {after_first} to {rss}"
    assert m.stats()["open_sessions"] == 0 and m.stats()["memory_bytes"] == 0
    m.wait_for_saves()
    assert files(state) == []
    # A temporary chat (transcript mode) writes nothing either.
    s = m.open(None, SessionKind.TEMPORARY).session_id
    collect(m.chat(s, "hi", sampling=greedy(4)))
    m.wait_for_saves()
    assert files(state) == []
    with pytest.raises(SessionError, match="temporary"):
        m.pin(s)
    with pytest.raises(SessionError, match="temporary"):
        m.open(s, "pinned")


# ---- concurrency -------------------------------------------------------------------------------
def test_concurrent_sessions_equal_sequential(tiny_model, managers):
    m = managers()
    prompts = [random_prompt(30 + 5 * i, seed=10 + i) for i in range(4)]
    sequential = [reference(tiny_model, p, 12) for p in prompts]
    ids = [m.open(None, "regular").session_id for _ in prompts]
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(prompts))

    def work(i: int) -> None:
        try:
            barrier.wait(10)
            results[i] = collect(m.generate_tokens(ids[i], prompts[i], greedy(12))).token_ids
        except BaseException as exc:   # noqa: BLE001 # pragma: no cover - reported below
            errors.append(exc)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert [results[i] for i in range(len(prompts))] == sequential


def test_same_session_twice_at_once_is_refused(managers):
    m = managers()
    s = m.open(None, "regular").session_id
    first_chunk, release = threading.Event(), threading.Event()
    out: dict[str, object] = {}

    def slow_consumer() -> None:
        events = m.generate_tokens(s, random_prompt(30, seed=6), greedy(20))
        got = []
        for e in events:
            got.append(e)
            if len(got) == 1:
                first_chunk.set()
                release.wait(30)
        out["result"] = got[-1]

    t = threading.Thread(target=slow_consumer)
    t.start()
    assert first_chunk.wait(30)
    with pytest.raises(SessionError, match="already generating"):
        collect(m.generate_tokens(s, random_prompt(10, seed=7), greedy(3)))
    with pytest.raises(SessionError, match="already generating"):
        collect(m.chat(s, "hello", sampling=greedy(3)))
    release.set()
    t.join(30)
    assert isinstance(out["result"], GenerationResult)
    # Free again once the first stream has ended.
    assert collect(m.generate_tokens(s, random_prompt(10, seed=7), greedy(3))).figures.generated_tokens == 3


def test_pinned_session_saved_when_consumer_stops_at_the_result(managers, state):
    m = managers()
    s = m.open(None, "pinned").session_id
    for event in m.generate_tokens(s, P1, greedy()):
        if isinstance(event, GenerationResult):
            break
    m.wait_for_saves()
    assert kinds(state)["manifest"] == 1


# ---- pin / unpin / delete ----------------------------------------------------------------------
def test_pin_unpin_delete_round_trip(tiny_model, managers, state):
    m = managers()
    s = m.open(None, "regular").session_id
    collect(m.generate_tokens(s, P1, greedy()))
    m.wait_for_saves()
    assert files(state) == []                      # regular, no transcript: nothing on disk
    m.pin(s)
    m.wait_for_saves()
    assert m.info(s).kind == SessionKind.PINNED
    assert kinds(state) == {"manifest": 1, "block": 2, "tail": 1, "other": 0}
    assert m.info(s).kv_bytes_disk == sum(p.stat().st_size for p in state.rglob("*.kv?"))
    assert m.stats()["cache"]["disk"]["pinned_bytes"] > 0
    m.unpin(s)
    assert m.info(s).kind == SessionKind.REGULAR
    # The private tail goes; the full blocks stay as unpinned shared cache (budget and age apply).
    assert kinds(state) == {"manifest": 0, "block": 2, "tail": 0, "other": 0}
    assert m.stats()["cache"]["disk"]["pinned_bytes"] == 0
    assert m.info(s).kv_bytes_disk == 0 and m.info(s).tokens == 47   # still in memory
    m.pin(s)
    m.wait_for_saves()
    assert kinds(state) == {"manifest": 1, "block": 2, "tail": 1, "other": 0}
    m.delete(s)
    assert files(state) == []
    with pytest.raises(SessionError):
        m.info(s)
    m.shutdown()
    m2 = managers()
    assert m2.list_sessions() == []


def test_shared_blocks_are_stored_once_and_survive_deleting_one_session(tiny_model, managers, state):
    m = managers()
    a, b = sid(), sid()
    prompt_a = P1[:32] + random_prompt(6, seed=3)
    prompt_b = P1[:32] + random_prompt(9, seed=4)
    for x, p in ((a, prompt_a), (b, prompt_b)):
        m.open(x, "pinned")
        collect(m.generate_tokens(x, p, greedy(4)))
    m.wait_for_saves()
    man = {x: json.loads((state / "sessions" / f"{x}.json").read_text()) for x in (a, b)}
    assert man[a]["blocks"] == man[b]["blocks"] and len(man[a]["blocks"]) == 2
    assert kinds(state) == {"manifest": 2, "block": 2, "tail": 2, "other": 0}
    assert m.stats()["disk_blocks"] == 2
    m.delete(a)
    assert kinds(state) == {"manifest": 1, "block": 2, "tail": 1, "other": 0}
    m.shutdown()

    m2 = managers()
    assert m2.startup_report["stray_blocks"] == 0
    m2.open(b)
    r = collect(m2.generate_tokens(b, prompt_b + EXTRA, greedy(4)))
    assert r.figures.resume == "disk" and r.figures.fallback_reason is None
    assert r.figures.reused_tokens == len(prompt_b)      # the saved 44 share 41 with the new prompt
    assert r.token_ids == reference(tiny_model, prompt_b + EXTRA, 4)
    m2.delete(b)
    m2.wait_for_saves()
    assert files(state) == []


def test_cache_salt_separates_shared_blocks(managers, state):
    m = managers()
    a = m.open(None, "pinned", cache_salt="alice").session_id
    b = m.open(None, "pinned", cache_salt="bob").session_id
    for x in (a, b):
        collect(m.generate_tokens(x, P1[:32] + [5], greedy(2)))
    m.wait_for_saves()
    assert kinds(state)["block"] == 4
    assert m.info(a).cache_salt == "alice"


def test_open_as_regular_unpins_a_pinned_session(tiny_model, state):
    # Not from `managers`: a deadlocked manager cannot be shut down (its lock is held forever).
    m = SessionManager(tiny_model, state, block_tokens=B)
    s = m.open(None, "pinned").session_id
    collect(m.generate_tokens(s, P1, greedy()))
    m.wait_for_saves()
    done = threading.Event()

    def unpin_by_open() -> None:
        m.open(s, "regular")
        done.set()
    threading.Thread(target=unpin_by_open, daemon=True).start()
    assert done.wait(3), "open(kind='regular') did not return"
    assert m.info(s).kind == SessionKind.REGULAR
    m.shutdown()


# ---- incremental save --------------------------------------------------------------------------
def test_a_short_turn_on_a_long_history_writes_one_block_and_one_tail(tiny_model, managers, state, monkeypatch):
    m = managers(block_tokens=32)
    s = m.open(None, "pinned").session_id
    long_prompt = random_prompt(300, seed=8)
    r1 = collect(m.generate_tokens(s, long_prompt, greedy(10)))
    m.wait_for_saves()
    before = set(files(state))
    assert kinds(state) == {"manifest": 1, "block": 9, "tail": 1, "other": 0}   # 309 = 9 x 32 + 21

    import engine.kvstore.kvfile as kvfile      # blocks, tails and manifests are all written through it
    written: list[tuple[str, int]] = []
    real_kv = kvfile.atomic_write

    def spy(real):
        def wrapper(path, chunks):
            n = real(path, chunks)
            written.append((Path(path).name, n))
            return n
        return wrapper
    monkeypatch.setattr(kvfile, "atomic_write", spy(real_kv))

    p2 = long_prompt + r1.token_ids + random_prompt(10, seed=9)     # ~20 new tokens this turn
    collect(m.generate_tokens(s, p2, greedy(10)))
    m.wait_for_saves()
    blocks = [w for w in written if w[0].endswith(".kvb")]
    tails = [w for w in written if w[0].endswith(".kvt")]
    manifests = [w for w in written if w[0].endswith(".json")]
    assert len(blocks) <= 1 and len(tails) == 1 and len(manifests) == 1, written
    assert len(written) == len(blocks) + 2
    after = set(files(state))
    assert len([f for f in after - before if f.endswith(".kvb")]) == len(blocks) == 1   # 330 tokens: 10 blocks
    assert [f for f in before - after] == [f for f in before if f.endswith(".kvt")]    # the old tail went
    kv_bytes = sum(n for _, n in blocks + tails)
    assert kv_bytes < sum(p.stat().st_size for p in state.rglob("*.kvb")) / 4


# ---- startup clean-up --------------------------------------------------------------------------
def test_startup_removes_stray_files(tiny_model, managers, state):
    s, t1 = pinned_turn1(managers)
    good = files(state)
    stray_key = "ab" + "0" * 38
    (state / "blocks" / "ab").mkdir(parents=True, exist_ok=True)
    strays = [state / "blocks" / "ab" / f"{stray_key}.kvb",
              state / "blocks" / "ab" / f".{stray_key}.kvb.999.tmp",
              state / "sessions" / f".{s}.json.999.tmp",
              state / "tails" / f"{sid()}.deadbeef.kvt",
              state / "tails" / f".{s}.cafe.kvt.999.tmp"]
    for p in strays:
        p.write_bytes(MAGIC + b"junk")
    m = managers()
    assert files(state) == good
    rep = m.startup_report
    assert rep["stray_blocks"] == 1 and rep["orphan_tails"] == 1 and rep["temp_files"] == 3
    m.open(s)
    r = collect(m.generate_tokens(s, turn2(t1), greedy()))
    assert r.figures.resume == "disk" and r.figures.fallback_reason is None and r.figures.reused_tokens == 47


def test_gc_reports_and_removes_orphans(managers, state):
    s, _ = pinned_turn1(managers)
    m = managers()
    (state / "tails" / f"{sid()}.0000.kvt").write_bytes(b"x")
    report = m.gc()
    assert report["orphan_tails"] == 1 and report["stray_blocks"] == 0
    assert kinds(state) == {"manifest": 1, "block": 2, "tail": 1, "other": 0}


# ---- memory budget -----------------------------------------------------------------------------
def test_memory_budget_drops_the_lru_idle_regular_session_never_a_temporary(tiny_model, managers):
    one = 2 * 2 * 2 * 256 * 16 * 4          # layers x (k, v) x kv_heads x capacity x head_dim x 4 B
    m = managers(memory_budget_bytes=int(1.5 * one))
    t = m.open(None, "temporary").session_id
    a = m.open(None, "regular").session_id
    b = m.open(None, "regular").session_id
    pa, pb, pt = random_prompt(30, seed=11), random_prompt(30, seed=12), random_prompt(30, seed=13)
    collect(m.generate_tokens(t, pt, greedy(4)))
    assert m.info(t).kv_bytes_memory == one
    ra = collect(m.generate_tokens(a, pa, greedy(4)))
    st = m.stats()
    assert st["evictions"] == 0 and st["over_budget_by_temporary"] and st["memory_bytes"] == 2 * one
    collect(m.generate_tokens(b, pb, greedy(4)))
    st = m.stats()
    assert st["evictions"] == 1 and st["memory_bytes"] == 2 * one
    assert st["temporary_bytes"] == one and st["over_budget_by_temporary"]
    assert m.info(a).kv_location.value == "none" and m.info(a).kv_bytes_memory == 0
    assert m.info(t).kv_location.value == "memory" and m.info(b).kv_location.value == "memory"
    # The dropped session is rebuilt: its own KV is gone; only the prompt's one full block comes
    # back from the shared prefix cache, the rest is prefilled. It answers the same.
    again = collect(m.generate_tokens(a, pa, greedy(4)))
    f = again.figures
    assert f.reused_tokens == B == f.cache_tokens_memory + f.cache_tokens_disk
    assert f.prefilled_tokens == len(pa) - B
    assert again.token_ids == ra.token_ids
    assert m.stats()["evictions"] == 2 and m.info(b).kv_location.value == "none"
    assert m.info(t).kv_location.value == "memory"


def test_memory_budget_drops_the_least_recently_used_of_two_idle_sessions(tiny_model, managers):
    """Use order, not open order or a clock's reading: `a` opened first but used again after `b`,
    so `b` is the one dropped when `c` goes over budget (then `a`, once `b` comes back)."""
    one = 2 * 2 * 2 * 256 * 16 * 4
    m = managers(memory_budget_bytes=int(2.5 * one))
    a, b, c = (m.open(None, "regular").session_id for _ in range(3))
    pa, pb, pc = random_prompt(30, seed=21), random_prompt(30, seed=22), random_prompt(30, seed=23)
    first_a = collect(m.generate_tokens(a, pa, greedy(4)))
    collect(m.generate_tokens(b, pb, greedy(4)))
    collect(m.generate_tokens(a, pa + first_a.token_ids + random_prompt(5, seed=24), greedy(4)))
    assert m.stats()["evictions"] == 0
    collect(m.generate_tokens(c, pc, greedy(4)))
    assert m.stats()["evictions"] == 1
    assert [m.info(x).kv_location.value for x in (a, b, c)] == ["memory", "none", "memory"]
    collect(m.generate_tokens(b, pb, greedy(4)))
    assert m.stats()["evictions"] == 2
    assert [m.info(x).kv_location.value for x in (a, b, c)] == ["none", "memory", "memory"]


def test_evicted_pinned_session_resumes_from_disk(tiny_model, managers):
    one = 2 * 2 * 2 * 256 * 16 * 4
    m = managers(memory_budget_bytes=int(1.5 * one))
    p = m.open(None, "pinned").session_id
    r1 = collect(m.generate_tokens(p, P1, greedy()))
    m.wait_for_saves()
    other = m.open(None, "regular").session_id
    collect(m.generate_tokens(other, random_prompt(20, seed=14), greedy(2)))
    assert m.stats()["evictions"] == 1
    info = m.info(p)
    assert info.kv_location.value == "disk" and info.tokens == 47
    r2 = collect(m.generate_tokens(p, turn2(r1.token_ids), greedy()))
    assert r2.figures.resume == "disk" and r2.figures.reused_tokens == 47
    assert r2.token_ids == reference(tiny_model, turn2(r1.token_ids))


# ---- the context window through a session ------------------------------------------------------
def test_session_prompt_over_the_window_is_reported_not_crashed(tiny_model, managers):
    m = managers()
    s = m.open(None, "pinned").session_id
    r = collect(m.generate_tokens(s, random_prompt(600, seed=15), greedy()))
    assert r.figures.finish_reason == "context_full" and r.token_ids == []
    ok = collect(m.generate_tokens(s, P1, greedy()))
    assert ok.token_ids == reference(tiny_model, P1)


# ---- bounded waits -----------------------------------------------------------------------------
def _stuck_save(managers, monkeypatch):
    """A manager whose pinned save hangs in the writer thread until `release` is set (or 30 s
    pass); `written` is set once a hung write has gone on. Returns (manager, release, written)."""
    import engine.kvstore.kvfile as kvfile
    release, written = threading.Event(), threading.Event()
    real = kvfile.atomic_write

    def slow(path, chunks):
        release.wait(30)
        try:
            return real(path, chunks)
        finally:
            written.set()
    monkeypatch.setattr(kvfile, "atomic_write", slow)
    m = managers()
    s = m.open(None, "pinned").session_id
    collect(m.generate_tokens(s, P1, greedy()))
    assert m.info(s).saving
    return m, release, written


def test_wait_for_saves_returns_false_on_timeout(managers, monkeypatch):
    m, release, _ = _stuck_save(managers, monkeypatch)
    try:
        assert m.wait_for_saves(timeout=0.2) is False
    finally:
        release.set()
    assert m.wait_for_saves(timeout=30) is True


def test_shutdown_is_bounded_when_a_save_hangs(managers, monkeypatch):
    m, release, written = _stuck_save(managers, monkeypatch)
    try:
        m.shutdown(timeout=0.3)
        assert not written.is_set()      # it returned while the save still hung (not 30 s later)
    finally:
        release.set()


# ---- plain-attention (optimum) graphs ----------------------------------------------------------
def test_pinned_resume_on_a_plain_attention_model(plain_model, tmp_path, monkeypatch):
    """Exact-size caches (no shared buffer): saved blocks and tail load back by concatenation."""
    monkeypatch.setattr("engine.kvstore.prefix_cache.JANITOR_DELAY_S", 0.01)
    state = tmp_path / "plain-state"
    m = SessionManager(plain_model, state, block_tokens=B)
    try:
        s = m.open(None, "pinned").session_id
        t1 = collect(m.generate_tokens(s, P1, greedy())).token_ids
        assert m.wait_for_saves()
    finally:
        m.shutdown()
    m2 = SessionManager(plain_model, state, block_tokens=B)
    try:
        m2.open(s)
        r = collect(m2.generate_tokens(s, turn2(t1), greedy()))
        assert r.figures.resume == "disk" and r.figures.reused_tokens == 47 and r.figures.fallback_reason is None
        assert r.token_ids == reference(plain_model, turn2(t1))
        cache = cache_of(m2, s)
        assert cache.keys[0].shape[2] == len(cache)
    finally:
        m2.shutdown()
