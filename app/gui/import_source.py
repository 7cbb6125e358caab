"""Which GGUF file (or ONNX model folder) a model folder was imported from, so importing the same
one again is noticed (and said) instead of converting or copying it a second time.

A file's fingerprint hashes its size, its first 8 MiB (the header: metadata and tensor index) and
16 samples spread over the rest: instant even for a many-GB file, and two different models (whose
weights differ throughout) do not share it."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from engine.base.safefs import atomic_write

SOURCE_FILE = "amber_source.json"     # written beside an imported model, after its conversion
IMPORT_REPORT = "amber_import.json"   # the converter's report (names the source file and size)
HEAD_BYTES = 8 << 20
SAMPLES, SAMPLE_BYTES = 16, 256 << 10


class AlreadyImported(Exception):
    """The file was imported before: `name` is its model folder (in the picker)."""

    def __init__(self, src: Path, name: str) -> None:
        super().__init__(f"{src.name} is already imported as “{name}”")
        self.name = name


def source_fingerprint(path: Path) -> str:
    """A GGUF file's fingerprint; an ONNX model folder's covers each file's name and content."""
    h = hashlib.blake2b(digest_size=16)
    if path.is_dir():
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            h.update(f.relative_to(path).as_posix().encode() + b"\0")
            _sample(f, h)
    else:
        _sample(path, h)
    return h.hexdigest()


def _sample(path: Path, h: Any) -> None:
    size = path.stat().st_size
    h.update(str(size).encode() + b"\0")
    with open(path, "rb") as f:
        h.update(f.read(HEAD_BYTES))
        rest = size - HEAD_BYTES
        if rest > 0:
            for i in range(SAMPLES):
                f.seek(HEAD_BYTES + rest * i // SAMPLES)
                h.update(f.read(SAMPLE_BYTES))
            f.seek(max(HEAD_BYTES, size - SAMPLE_BYTES))
            h.update(f.read(SAMPLE_BYTES))


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def find_import(models: Path, src: Path, fingerprint: str) -> str | None:
    """The model folder under `models` imported from this file, if any. Folders imported before
    fingerprints were recorded match by the source's name and size in the converter's report."""
    try:
        folders = sorted(p for p in models.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return None
    size = src.stat().st_size if src.is_file() else None
    for folder in folders:
        recorded = _read(folder / SOURCE_FILE)
        if recorded:
            if recorded.get("fingerprint") == fingerprint:
                return folder.name
            continue
        report = _read(folder / IMPORT_REPORT)
        if size is not None and report.get("source") == src.name and report.get("source_bytes") == size:
            return folder.name
    return None


def record_import(dest: Path, src: Path, fingerprint: str) -> None:
    atomic_write(dest / SOURCE_FILE, json.dumps({"fingerprint": fingerprint, "source": src.name}),
                 private=True, parents=True)
