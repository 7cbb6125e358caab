"""The temporary folders a conversion writes into (`.<name>.partial-<pid>`, renamed into place at
the end), and the removal of those a killed conversion left behind.

A leftover is removed only when it is certainly Amber's and certainly dead: a plain folder (never
a symlink, never followed) named as above, holding Amber's mark or only files a conversion writes
(or nothing), whose process is gone. A running conversion's folder, in this process or another,
is never touched.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
from pathlib import Path

import psutil

MARK = ".amber-partial"         # made first in every partial folder, removed just before the rename
_NAME = re.compile(r"\..+\.partial-([0-9]{1,10})\Z")
# What a conversion (and the GPU variant it makes) writes: an unmarked folder holding only these
# is a partial of an Amber older than the mark.
_WRITTEN = {"model.onnx", "model.onnx.data", "config.json", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json", "chat_template.jinja", "amber_import.json", "amber_variant.json", "gpu",
            "amber_ort_form.json", "ort"}


def new_partial(dest: Path) -> Path:
    """A fresh partial folder for `dest` (beside it, marked as Amber's); dead leftovers beside it
    are removed first."""
    remove_dead_partials(dest.parent)
    tmp = dest.parent / f".{dest.name}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    (tmp / MARK).touch()
    return tmp


def unmark(tmp: Path) -> None:
    """Before the rename into place: the finished folder carries no mark."""
    (tmp / MARK).unlink(missing_ok=True)


def publish(tmp: Path, folder: Path) -> None:
    """A finished partial into place: unmarked, every file synced, then renamed over `folder`
    (an existing one is moved aside first and removed after, so a reader never sees half)."""
    unmark(tmp)
    for p in tmp.iterdir():
        with open(p, "rb") as f:
            os.fsync(f.fileno())
    if folder.exists():
        old = folder.parent / f".{folder.name}.old-{os.getpid()}"
        os.replace(folder, old)
        os.replace(tmp, folder)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, folder)


def source_stamp(graph: Path, data_name: str = "model.onnx.data") -> list[object]:
    """Identifies the graph (and its data file) a derived folder was made from: a re-import or a
    new conversion changes it, so the derived folder is stale."""
    data = graph.parent / data_name
    files = [graph] + ([data] if data.is_file() else [])
    return [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files]


def _amber_made(folder: str) -> bool:
    try:
        names = os.listdir(folder)
    except OSError:
        return False
    if MARK in names:
        try:
            return stat.S_ISREG(os.lstat(os.path.join(folder, MARK)).st_mode)
        except OSError:
            return False
    return all(n in _WRITTEN or _NAME.match(n) for n in names)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        return bool(psutil.pid_exists(pid))
    except (OSError, ValueError, OverflowError):
        return True         # unknown: keep it


def remove_dead_partials(parent: Path) -> int:
    """Removes the partial folders in `parent` that conversions killed before their end left;
    returns how many."""
    removed = 0
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return 0
    for entry in entries:
        found = _NAME.match(entry.name)
        if found is None or _alive(int(found.group(1))):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or not _amber_made(entry.path):
                continue
            shutil.rmtree(entry.path)      # removes links inside, never what they point to
        except OSError:
            continue
        removed += 1
    return removed
