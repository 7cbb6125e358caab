"""A model's fingerprint: a stable hash of its graph, weights and tokenizer, cached beside it.

Hashing reads every byte of the weights (seconds for a multi-GB model), so whoever writes a model
folder (the converter, the default model's staging) caches it then, and a loader only checks the
cache's stamp. A folder Amber cannot write keeps its cache in Amber's data folder instead.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from engine.base import paths
from engine.base.safefs import atomic_write

CACHE_FILE = "amber_fingerprint.json"
SPARE_DIR = "fingerprints"     # under Amber's data folder: caches of read-only model folders
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
    caches = _caches(model_dir, graph, variant)
    found = _lookup(caches, stamp)
    if found is not None:
        return found
    fp = _hash(files, variant)
    for cache in caches:
        try:
            atomic_write(cache, json.dumps({"fingerprint": fp, "stamp": stamp}), parents=cache != caches[0])
            break
        except OSError:
            continue   # a read-only model folder: the spare cache; neither: compute again next time
    return fp


def cached_fingerprint(model_dir: Path, graph: Path, variant: str = "") -> str | None:
    """The cached fingerprint when its stamp still matches the files, else None (nothing is read
    but the cache and the files' sizes and times)."""
    return _lookup(_caches(model_dir, graph, variant), _stamp(_hashed_files(model_dir, graph)))


def _caches(model_dir: Path, graph: Path, variant: str) -> list[Path]:
    """Beside the model, then the spare one in Amber's data folder (keyed by the folder's path)."""
    beside = (graph.parent if variant else model_dir) / CACHE_FILE
    try:
        key = hashlib.blake2b(f"{graph.resolve()}|{variant}".encode(), digest_size=12).hexdigest()
        return [beside, paths.amber_home() / SPARE_DIR / f"{key}.json"]
    except (OSError, RuntimeError, ValueError):   # no usable data folder (or an unresolvable path)
        return [beside]


def _lookup(caches: list[Path], stamp: list[list[object]]) -> str | None:
    """The first cache whose stamp matches the files'."""
    for cache in caches:
        try:
            cached = json.loads(cache.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(cached, dict) and cached.get("stamp") == stamp and isinstance(cached.get("fingerprint"), str):
            return str(cached["fingerprint"])
    return None


def _hash(files: list[Path], variant: str) -> str:
    h = hashlib.blake2b(digest_size=16)
    if variant:
        h.update(f"variant:{variant}".encode() + b"\0")
    for p in files:
        h.update(p.name.encode() + b"\0")
        with open(p, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
    return h.hexdigest()
