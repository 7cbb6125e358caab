"""Fuzzing the state folder as a whole: generated mutations of a real one (a pinned chat with its
previous version, a damaged copy moved aside, a tail, blocks and locks), made at rest or while
Amber renames a file into place, then the commands a user runs on it.

Property: every command (`generate`, `sessions list/show/gc/delete`, `cache stats/clear`) ends with
exit 0 or 2, at most one error line and no traceback, within a bounded time; nothing outside the
state folder is touched (the targets of the symlinks put in it). Example counts come from the
Hypothesis profile (tests/fuzz/conftest.py), a fraction of them: each example runs ten commands.
"""
from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz_util import scaled
from tests.support.tiny_gguf import TinyConfig, write_tiny_gguf

CFG = TinyConfig(n_layers=1, n_embd=32, n_head=2, n_head_kv=1, head_dim=16, n_ff=64, context_length=512)
SID = "3f2c1a9e-7b4d-4c55-9a0e-2d3b4c5d6e7f"
KINDS = ["delete", "truncate", "bitflip", "empty", "folder", "file", "fifo", "symlink", "loop"]
COMMAND_S = 120


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from engine.convert import convert_gguf
    root = tmp_path_factory.mktemp("fuzz-state")
    return convert_gguf(write_tiny_gguf(root / "tiny.gguf", CFG).path, root / "model", gpu_variant=False)


def run(argv: list[str]) -> tuple[object, str]:
    """`amber-engine ARGV` in this process: (exit code, or the exception that escaped; stderr)."""
    from engine.cli import main
    out: dict[str, object] = {}
    err = io.StringIO()

    def work() -> None:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            try:
                out["rc"] = main(argv)
            except SystemExit as exc:
                out["rc"] = exc.code
            except BaseException as exc:     # noqa: BLE001 - the property: reported below
                out["rc"] = exc
    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(COMMAND_S)
    assert not t.is_alive(), f"{argv[0]} hung"
    return out["rc"], err.getvalue()


def chat(model: Path, state: Path, text: str) -> list[str]:
    return ["generate", "--model", str(model), "--state-dir", str(state), "--session", SID, "--pinned",
            "--greedy", "--max-tokens", "3", "--chat", text]


@pytest.fixture(scope="module")
def template(model_dir, tmp_path_factory) -> Path:
    state = tmp_path_factory.mktemp("fuzz-state-template") / "state"
    for text in ("Hello there", "Tell me more " * 15):       # the second turn fills a KV block
        assert run(chat(model_dir, state, text))[0] == 0
    manifest = state / "sessions" / f"{SID}.json"
    manifest.write_bytes(manifest.read_bytes()[:-30])
    assert run(chat(model_dir, state, "Go on"))[0] == 0       # moved aside: sessions/damaged/ exists
    return state


def entries(state: Path) -> list[str]:
    return sorted(str(p.relative_to(state)) for p in state.rglob("*"))


def mutate(path: Path, kind: str, outside: Path) -> None:
    """`path` damaged or replaced (a symlink points into `outside`)."""
    if kind in ("truncate", "bitflip", "empty"):
        if not path.is_file() or path.is_symlink():
            return
        data = bytearray(path.read_bytes())
        if kind == "empty":
            data = bytearray()
        elif kind == "truncate":
            data = data[:len(data) // 2]
        elif data:
            data[len(data) // 2] ^= 0x10
        path.write_bytes(bytes(data))
        return
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    if kind == "folder":
        path.mkdir()
        (path / "x").write_text("x")
    elif kind == "file":
        path.write_text("junk")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        path.symlink_to(outside)
    elif kind == "loop":
        path.symlink_to(path.name)


def snapshot(folder: Path) -> list[tuple[str, bytes]]:
    return sorted((str(p.relative_to(folder)), p.read_bytes() if p.is_file() else b"")
                  for p in folder.rglob("*"))


@settings(deadline=None, max_examples=scaled(0.1, minimum=3))
@given(data=st.data())
def test_a_mutated_state_folder_never_gives_a_traceback(model_dir, template, data):
    names = entries(template)
    at_rest = data.draw(st.lists(st.tuples(st.sampled_from(names), st.sampled_from(KINDS)), max_size=2))
    mid_rename = data.draw(st.none() | st.tuples(st.integers(0, 4), st.sampled_from(["src", "dst"]),
                                                 st.sampled_from(KINDS)))
    with tempfile.TemporaryDirectory() as tmp:
        state, outside = Path(tmp) / "state", Path(tmp) / "outside"
        shutil.copytree(template, state, symlinks=True)
        outside.mkdir()
        (outside / "keep.txt").write_text("not Amber's")
        for name, kind in at_rest:
            if os.path.lexists(state / name):
                mutate(state / name, kind, outside)
        before = snapshot(outside)
        real_replace = os.replace
        seen = [0]

        def replaced(src, dst, *args, **kw):      # the mutation lands as Amber renames a file into place
            if mid_rename is not None and str(dst).startswith(str(state)):
                if seen[0] == mid_rename[0]:
                    victim = Path(src if mid_rename[1] == "src" else dst)
                    if os.path.lexists(victim) or mid_rename[1] == "dst":
                        mutate(victim, mid_rename[2], outside)
                seen[0] += 1
            return real_replace(src, dst, *args, **kw)
        where = ["--model", str(model_dir), "--state-dir", str(state)]
        os.replace = replaced
        try:
            results = [run(chat(model_dir, state, "And then?"))]
        finally:
            os.replace = real_replace
        for argv in (["sessions", "list", *where], ["sessions", "show", SID, *where], ["sessions", "gc", *where],
                     ["cache", "stats", *where], ["cache", "clear", *where], chat(model_dir, state, "Once more"),
                     ["sessions", "delete", SID, *where], chat(model_dir, state, "Again")):
            results.append(run(argv))
        for rc, err in results:
            errors = [line for line in err.splitlines() if line.startswith("amber-engine: error:")]
            assert rc in (0, 2) and "Traceback" not in err and len(errors) <= 1, (rc, err)
            assert rc == 0 or errors, err
        assert snapshot(outside) == before
