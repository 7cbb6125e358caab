"""A conversion killed before its end leaves `.<name>.partial-<pid>/` beside its destination; the next
conversion there removes it, and only it: never a live conversion's folder, never a folder that
is not Amber's, never anything through a symlink."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from engine.convert import convert_gguf
from engine.onnx.partials import MARK

REPO = Path(__file__).resolve().parents[3]
# A conversion that stops at its first progress report (its partial folder made) until killed.
KILLED = r'''
import sys
from pathlib import Path
from engine.convert import convert_gguf

def tick(done, total, what):
    print("CONVERTING", flush=True)
    sys.stdin.readline()
convert_gguf(Path(sys.argv[1]), Path(sys.argv[2]), progress=tick, gpu_variant=False)
'''


def child(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen([sys.executable, *args], cwd=REPO, env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_a_killed_conversions_partial_folder_is_removed_by_the_next(tiny_source, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    killed = child("-c", KILLED, str(tiny_source.path), str(models / "first"))
    try:
        line = killed.stdout.readline()
        assert line.startswith("CONVERTING"), line + killed.stderr.read()
        partial = models / f".first.partial-{killed.pid}"
        assert partial.is_dir() and any(partial.iterdir())
    finally:
        killed.kill()
        killed.wait(60)
    dead = killed.pid
    # Beside it: a live process's partial, an unmarked folder of the user's with a partial's
    # name, and a symlink named as a partial pointing out of the folder.
    live = child("-c", "import sys; sys.stdin.read()")
    try:
        running = models / f".other.partial-{live.pid}"
        running.mkdir()
        (running / MARK).touch()
        (running / "model.onnx.data").write_bytes(b"half written")
        users = models / f".mine.partial-{dead}"
        users.mkdir()
        (users / "notes.txt").write_text("the user's notes")
        outside = tmp_path / "outside"
        outside.mkdir()
        (outside / "model.onnx.data").write_text("not Amber's")
        link = models / f".link.partial-{dead}"
        link.symlink_to(outside, target_is_directory=True)

        dest = convert_gguf(tiny_source.path, models / "second", gpu_variant=False)

        assert not partial.exists()
        assert (dest / "model.onnx").is_file() and not (dest / MARK).exists()
        assert (running / "model.onnx.data").read_bytes() == b"half written"
        assert (users / "notes.txt").read_text() == "the user's notes"
        assert link.is_symlink() and (outside / "model.onnx.data").read_text() == "not Amber's"
    finally:
        live.kill()
        live.wait(60)
    assert sorted(p.name for p in models.iterdir()) == sorted(
        [".link.partial-%d" % dead, ".mine.partial-%d" % dead, running.name, "second"])
