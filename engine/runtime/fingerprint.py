"""A model's fingerprint: a stable hash of its graph, weights and tokenizer, cached beside it."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from engine.base.safefs import atomic_write

CACHE_FILE = "amber_fingerprint.json"
_CHUNK = 1 << 20


def _hashed_files(model_dir: Path, graph: Path) -> list[Path]:
    """The graph, its external data files, and the tokenizer files, in a fixed order."""
    files = [graph]
    files += sorted(p for p in graph.parent.iterdir()
                    if p.is_file() and p != graph and (p.name.startswith(graph.name) or p.suffix == ".data"))
    files += [model_dir / n for n in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
              if (model_dir / n).is_file()]
    return files


def _stamp(files: list[Path]) -> list[list[object]]:
    return [[str(p.name), p.stat().st_size, p.stat().st_mtime_ns] for p in files]


def model_fingerprint(model_dir: Path, graph: Path, variant: str = "") -> str:
    """BLAKE2b over the model's files; recomputed only when a file's size or mtime changed.

    A variant graph in a subfolder (the float16 GPU variant in gpu/) has its own fingerprint, cached
    in that subfolder: its graph and weights differ, and the variant's name is hashed too, so KV
    saved from one variant is never taken for the other's."""
    files = _hashed_files(model_dir, graph)
    stamp = _stamp(files)
    cache = (graph.parent if variant else model_dir) / CACHE_FILE
    try:
        cached = json.loads(cache.read_text())
        if cached.get("stamp") == stamp:
            return str(cached["fingerprint"])
    except (OSError, ValueError, KeyError):
        pass
    h = hashlib.blake2b(digest_size=16)
    if variant:
        h.update(f"variant:{variant}".encode() + b"\0")
    for p in files:
        h.update(p.name.encode() + b"\0")
        with open(p, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
    fp = h.hexdigest()
    try:
        atomic_write(cache, json.dumps({"fingerprint": fp, "stamp": stamp}))
    except OSError:
        pass   # a read-only model folder: compute again next time
    return fp
