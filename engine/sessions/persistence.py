"""Sessions on disk: the serial writer's jobs (saves, spills, manifests), loading saved KV with
repair, block references, and startup reconcile / gc. Owns no thread and no lock of its own: it
runs on the manager's writer thread or under the manager's lock (docs/DESIGN.md, "Locking")."""
from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from engine.base.safefs import UnsafePathError, check_inside, make_folder, unlink_inside
from engine.generation.chat_history import ChatPlanner
from engine.generation.history import HistoryFormatError, TokenHistory
from engine.kvstore.blockstore import BlockStore
from engine.kvstore.kvfile import KVFileError, KVShape, looks_like_kv_file, read_kv_file, write_kv_file
from engine.kvstore.prefix_cache import PrefixCache
from engine.api import SessionKind
from engine.runtime.kvcache import KVCache, KVSnapshot
from engine.runtime.model import LoadedModel
from engine.sessions import refs as refs_mod
from engine.sessions.locks import LockTimeout, StateLocks
from engine.sessions.manifest import Manifest, ManifestDir, canonical_id
from engine.sessions.refs import BlockRefs
from engine.sessions.session import LOAD_THREADS, Session, nothing
from engine.sessions.writer import SerialWriter

_Session = Session


class SessionFiles:
    """What a session manager keeps in its state folder (sessions/, tails/, blocks/)."""

    def __init__(self, model: LoadedModel, planner: ChatPlanner, state_dir: Path, shape: KVShape,
                 store: BlockStore, manifests: ManifestDir, locks: StateLocks, refs: BlockRefs,
                 prefix: PrefixCache, writer: SerialWriter, lock: threading.RLock,
                 open_sessions: Callable[[], Iterable[Session]]) -> None:
        self.model = model
        self.planner = planner
        self.state_dir = state_dir
        self.shape = shape
        self.store = store
        self.block_tokens = store.block_tokens
        self.manifests = manifests
        self.sessions_dir = manifests.root
        self.tails_dir = state_dir / "tails"
        self.locks = locks
        self.refs = refs
        self.prefix = prefix
        self.writer = writer
        self.lock = lock                    # the manager's lock (references and session fields)
        self.open_sessions = open_sessions  # called under `lock`

    def spill(self, s: _Session, cache: KVCache) -> None:
        """A closed or evicted regular session's full blocks go to the disk tier (in the writer)."""
        B = self.block_tokens
        tokens = list(cache.tokens)
        keys = self.store.keys_for(tokens, s.salt)

        def job() -> None:
            try:
                for i, key in enumerate(keys):
                    if not self.prefix.has_disk(key) and not self.store.has(key):
                        self.store.write(key, tokens[i * B:(i + 1) * B], cache.export(i * B, (i + 1) * B))
                        self.prefix.note_written(key)
            finally:
                cache.clear()
        self.writer.submit(job)

    def load_from_disk(self, s: _Session, room: int) -> None:
        """Fills the cache from the block store, with buffers for `room` positions; on any failure
        keeps the valid prefix, notes the reason and repairs the store (the rest is re-prefilled
        from the token history)."""
        assert s.cache is not None
        B = self.block_tokens
        expected = self.store.keys_for(s.disk_tokens, s.salt)
        damaged: Path | None = None
        try:
            if expected != s.disk_keys:
                raise KVFileError("the manifest's block list does not match its tokens")
            s.cache.reserve(min(self.model.context_window, max(room, len(s.disk_tokens) + 1)))
            chunks = [s.disk_tokens[i * B:(i + 1) * B] for i in range(len(s.disk_keys))]
            if s.cache.layout.shared_buffer:
                # Each block is read straight into its place in the buffers, several at a time
                # (reads and checksums release the GIL); positions become valid in order.
                with ThreadPoolExecutor(max_workers=LOAD_THREADS) as pool:
                    reads = [pool.submit(self.store.read_into, key, toks, s.cache.block_views(i * B, len(toks)))
                             for i, (key, toks) in enumerate(zip(s.disk_keys, chunks, strict=True))]
                    try:
                        for key, toks, fut in zip(s.disk_keys, chunks, reads, strict=True):
                            damaged = self.store.path(key)
                            fut.result()
                            s.cache.commit_loaded(toks)
                    finally:
                        for fut in reads:
                            fut.cancel()
            else:
                for key, toks in zip(s.disk_keys, chunks, strict=True):
                    damaged = self.store.path(key)
                    s.cache.append_block(self.store.read(key, toks), toks)
            tail_toks = s.disk_tokens[len(s.disk_keys) * B:]
            if tail_toks:
                if not s.tail_file:
                    damaged = None
                    raise KVFileError("the manifest names no tail file")
                damaged = self.tails_dir / s.tail_file
                try:
                    check_inside(self.state_dir, damaged)      # no symlinked tails folder
                except UnsafePathError as exc:
                    raise KVFileError(str(exc)) from None
                tail = read_kv_file(damaged, self.shape, tail_toks)
                s.cache.append_block(tail, tail_toks)
        except KVFileError as exc:
            note = f"saved KV unusable ({exc}); re-prefilled {len(s.disk_tokens) - len(s.cache)} tokens"
            s.repair_note = f"{s.repair_note}; {note}" if s.repair_note else note   # after a manifest error
            self._repair(s, len(s.cache), damaged)

    def _repair(self, s: _Session, valid_tokens: int, damaged: Path | None) -> None:
        """Removes the damaged file (a damaged block is useless to every session that shares it; the
        next save writes it again) and shortens the manifest to the valid prefix."""
        B = self.block_tokens
        keep = valid_tokens // B
        guard = self.refs.deletion_guard() if damaged is not None and damaged.suffix == ".kvb" else nothing()
        try:
            with guard, self.lock:
                for key in s.disk_keys[keep:]:
                    self.refs.discard(key, s.id)
                s.disk_keys = s.disk_keys[:keep]
                s.disk_tokens = s.disk_tokens[:keep * B]
                s.tail_file = None

                # Removed now, not in the writer: this turn's save must see the block missing and
                # write it again rather than reference the damaged file. Only inside the folder,
                # never through a symlink (names come from untrusted files).
                if damaged is not None:
                    unlink_inside(self.state_dir, damaged, empty_dirs=True)
        except LockTimeout:
            pass    # the damaged file stays; the next save writes the block again or fails clearly
        if damaged is not None and damaged.suffix == ".kvb":
            self.prefix.note_removed(damaged.stem)
        self.writer.submit(lambda: self._write_manifest(s, s.disk_tokens, s.disk_keys, None))

    def save_async(self, s: _Session, publish: bool = False) -> None:
        """Takes a snapshot of what changed (a handle on the buffers, no copy: docs/DESIGN.md, "KV on
        the device") and queues the copy and the file writes. `publish`: the writer also offers the
        full blocks to the prefix cache's memory tier from the same snapshot (a device cache)."""
        with self.lock:
            if s.kind == SessionKind.TEMPORARY:
                return
            transcript = list(s.transcript)
            if s.kind == SessionKind.REGULAR:
                job: Callable[[], None] = partial(self.write_regular, s, transcript)
            elif s.cache is None:
                # Pinned but not in memory: what is on disk stays; only the transcript may change.
                job = partial(self._write_pinned_manifest, s)   # reads s when run
            else:
                snap = s.cache.snapshot()
                keys = self.store.keys_for(snap.tokens, s.salt)
                known = set(s.disk_keys)
                # Incremental: only blocks not on disk yet, and the new tail, are copied and written.
                new = [i for i, k in enumerate(keys) if k not in known and not self.store.has(k)]
                for key in keys:     # referenced from now on: the janitor must not take them
                    self.refs.add(key, s.id)
                history = s.history
                job = partial(self._save_snapshot, s, snap, keys, new, transcript, history, publish)
            s.pending_saves += 1
        self.writer.submit(job).add_done_callback(lambda f: self._saved(s, f))

    def _write_pinned_manifest(self, s: _Session) -> None:
        self._write_manifest(s, s.disk_tokens, s.disk_keys, s.tail_file)

    def _save_snapshot(self, s: _Session, snap: KVSnapshot, keys: list[str], new: list[int],
                       transcript: list[dict[str, str]], history: TokenHistory, publish: bool) -> None:
        """The writer's half of a pinned save: copies the snapshot (device → host here, never on the
        generating thread), lets the cache go on, then writes the files."""
        B = self.block_tokens
        tokens = snap.tokens
        try:
            if publish:
                self.publish_blocks(snap, tokens, s.salt)
            if s.kind != SessionKind.PINNED:
                return   # unpinned or deleted while queued
            new_blocks = [(keys[i], tokens[i * B:(i + 1) * B], snap.export(i * B, (i + 1) * B)) for i in new]
            tail_toks = tokens[len(keys) * B:]
            tail = snap.export(len(keys) * B, len(tokens)) if tail_toks else None
        finally:
            snap.release()
        self._write_pinned(s, tokens, keys, new_blocks, tail_toks, tail, transcript, history)

    def publish_blocks(self, source: KVCache | KVSnapshot, tokens: list[int], salt: str | None) -> None:
        """Offers the full blocks of `tokens` to the memory tier (those not there yet are copied)."""
        B = self.block_tokens
        for i, key in enumerate(self.store.keys_for(tokens, salt)):
            if not self.prefix.has_memory(key):
                self.prefix.put_memory(key, tokens[i * B:(i + 1) * B], source.export(i * B, (i + 1) * B))

    def publish_async(self, s: _Session) -> None:
        """`publish_blocks` from a snapshot in the writer (a device cache: the copy is a download)."""
        assert s.cache is not None
        salt = s.salt
        if all(self.prefix.has_memory(k) for k in self.store.keys_for(s.cache.tokens, salt)):
            return      # nothing new: no download
        snap = s.cache.snapshot()

        def job() -> None:
            with snap:
                self.publish_blocks(snap, snap.tokens, salt)
        self.writer.submit(job)

    def _saved(self, s: _Session, fut: Future[Any]) -> None:
        with self.lock:
            s.pending_saves -= 1
            exc = fut.exception()
            s.save_error = None if exc is None else f"saving the session failed: {exc}"

    def _write_pinned(self, s: _Session, tokens: list[int], keys: list[str],
                      new_blocks: list[tuple[str, list[int], np.ndarray]], tail_toks: list[int],
                      tail: np.ndarray | None, transcript: list[dict[str, str]],
                      history: TokenHistory | None = None) -> None:
        if s.kind != SessionKind.PINNED:
            return   # unpinned or deleted while queued
        # Shared from the first block to the manifest: another process's gc or cache clear waits,
        # then sees the manifest naming these blocks (engine/sessions/locks.py).
        with self.locks.blocks(shared=True, timeout=refs_mod.BLOCKS_LOCK_WAIT_S):
            for key, toks, payload in new_blocks:
                if not self.store.has(key):
                    self.store.write(key, toks, payload)
                    self.prefix.note_written(key)
            # A block that was on disk at the snapshot may have been evicted by another process
            # since: the manifest then covers only the blocks that are there (the rest of the KV
            # is recomputed on resume; the transcript is complete either way).
            present = next((i for i, k in enumerate(keys) if not self.store.has(k)), len(keys))
            dropped = keys[present:]
            if dropped:
                tokens, keys, tail, tail_toks = tokens[:present * self.block_tokens], keys[:present], None, []
            tail_name = None
            if tail is not None:
                tail_name = f"{s.id}.{uuid.uuid4().hex[:8]}.kvt"
                make_folder(self.state_dir, self.tails_dir)     # never through a symlinked folder
                write_kv_file(self.tails_dir / tail_name, self.shape, tail_toks, tail, {"session": s.id})
            old_tail = s.tail_file
            with self.lock:     # a session field: set under the manager's lock, even here
                s.transcript = transcript if transcript else s.transcript
            # The manifest goes last: a crash before this line leaves the previous state valid.
            self._write_manifest(s, tokens, keys, tail_name, kind=SessionKind.PINNED, history=history)
        with self.lock:
            for key in s.disk_keys + dropped:
                if key not in keys:
                    self.refs.discard(key, s.id)
            for key in keys:
                self.refs.add(key, s.id)
            s.disk_tokens, s.disk_keys, s.tail_file = tokens, keys, tail_name
        if old_tail and old_tail != tail_name:
            unlink_inside(self.state_dir, self.tails_dir / old_tail)
        self._drop_foreign(s)       # the manifest no longer names them
        # Blocks this session no longer uses stay as unpinned shared cache (budget and age apply).
        self.prefix.trigger()

    def _drop_foreign(self, s: _Session) -> None:
        """Releases KV saved under another model or store setting (see `_Session.foreign_keys`)
        once the manifest no longer names it; the blocks stay as shared cache."""
        with self.lock:
            self._unreference(s, s.foreign_keys, remove_blocks=False)
            tail, s.foreign_keys, s.foreign_tail = s.foreign_tail, [], None
        if tail:
            unlink_inside(self.state_dir, self.tails_dir / tail)

    def _unreference(self, s: _Session, keys: list[str], remove_blocks: bool) -> list[str]:
        """Drops the session's references to `keys` (call under the manager lock: a concurrent save
        cannot start referencing a block being removed); with `remove_blocks`, removes those no
        other pinned session uses and returns them."""
        for key in keys:
            self.refs.discard(key, s.id)
        removed = [key for key in keys if remove_blocks and not self.refs.is_pinned(key)]
        for key in removed:
            self.store.remove(key)
        return removed

    def write_regular(self, s: _Session, transcript: list[dict[str, str]] | None = None) -> None:
        """A regular session keeps only its manifest (transcript); pinned files are released."""
        self._release_files(s)
        if transcript is not None:
            with self.lock:
                s.transcript = transcript
        if s.transcript:
            self._write_manifest(s, [], [], None, kind=SessionKind.REGULAR)
        else:
            self.manifests.remove(s.id)

    def _release_files(self, s: _Session, remove_blocks: bool = False) -> None:
        """Drops the session's block references and its private tail. Unpinning leaves the blocks to
        the shared cache (budget and age apply); deleting removes those no other pinned session uses
        (in this process or, by their manifests, in any other)."""
        with self.refs.deletion_guard() if remove_blocks else nothing(), self.lock:
            removed = self._unreference(s, s.disk_keys + s.foreign_keys, remove_blocks)
            tails = [t for t in (s.tail_file, s.foreign_tail) if t]
            s.tail_file = s.foreign_tail = None
            s.disk_keys, s.disk_tokens, s.foreign_keys = [], [], []
        for key in removed:
            self.prefix.note_removed(key)
        if not remove_blocks:
            self.prefix.trigger()
        for tail in tails:
            unlink_inside(self.state_dir, self.tails_dir / tail)

    def delete_files(self, session_id: str) -> None:
        s = self.read_manifest(session_id, repair=False) or _Session(session_id, SessionKind.REGULAR, None)
        s.kind = SessionKind.TEMPORARY   # stops queued saves of this session
        self._release_files(s, remove_blocks=True)
        self.manifests.remove(session_id)
        for stray in self.tails_dir.glob(f"{session_id}.*") if self.tails_dir.is_dir() else []:
            unlink_inside(self.state_dir, stray)

    def _write_manifest(self, s: _Session, tokens: list[int], keys: list[str], tail: str | None,
                        kind: SessionKind | None = None, history: TokenHistory | None = None) -> None:
        check_inside(self.state_dir, self.manifests.path(s.id))
        history = history if history is not None else s.history
        moved = self.manifests.write(Manifest(
            s.id, (kind or s.kind).value, self.shape.fingerprint, s.salt, self.block_tokens, list(tokens),
            list(keys), tail, list(s.transcript), time.time(),
            history=history.to_json() if history.ids else None))    # token-exact history (engine.generation.history)
        if moved is not None:       # something had taken the manifest's place since it was read: say so once
            with self.lock:
                s.manifest_error = f"damaged manifest: {moved}"
                s.repair_note = f"{s.repair_note}; {s.manifest_error}" if s.repair_note else s.manifest_error

    def read_manifest(self, sid: str, repair: bool = True) -> _Session | None:
        """The session as its manifest describes it (engine.sessions.manifest validates every field). A
        damaged manifest is moved aside (with `repair`) and the previous version used; the reason
        is kept in `manifest_error` and becomes the next turn's fallback_reason. None: no manifest."""
        loaded = self.manifests.load(sid, repair=repair)
        m = loaded.manifest
        if m is None:
            if loaded.error is None:
                return None
            s = _Session(sid, SessionKind.REGULAR, None)
        else:
            s = _Session(sid, SessionKind(m.kind), m.cache_salt, transcript=list(m.transcript))
        if loaded.error is not None:
            s.manifest_error = f"damaged manifest: {loaded.error}"
            s.repair_note = s.manifest_error
        if m is None:
            return s
        same_model = m.fingerprint == self.shape.fingerprint
        if m.history is not None and m.fingerprint.split("/")[0] == self.model.fingerprint:
            try:   # the same tokenizer made it (a KV store change keeps it valid)
                s.history = TokenHistory.from_json(m.history, self.planner.vocab_size)
            except HistoryFormatError:
                pass   # the next turn tokenizes the conversation afresh
        same_layout = m.block_tokens == self.block_tokens
        if s.kind == SessionKind.PINNED:
            if same_model and same_layout:
                s.disk_tokens, s.disk_keys, s.tail_file = m.tokens, m.blocks, m.tail
            elif m.tokens:
                s.foreign_keys, s.foreign_tail = m.blocks, m.tail
                if not same_model and m.fingerprint.split("/")[0] == self.model.fingerprint:
                    why = "saved with another KV store setting"
                else:
                    why = "made by another model" if not same_model else "an older store format"
                note = f"saved KV unusable ({why}); re-prefilled from the history"
                s.repair_note = f"{s.repair_note}; {note}" if s.repair_note else note
        return s

    def disk_bytes(self, s: _Session) -> int:
        total = sum(self.store.size(k) for k in s.disk_keys)
        if s.tail_file:
            try:
                total += (self.tails_dir / s.tail_file).stat().st_size
            except OSError:
                pass
        return total

    def reconcile(self) -> dict[str, int]:
        """Crash leftovers: temp files, tails and blocks no live manifest refers to. Files another
        live process may still rename or reference are left alone: temp files whose writer's pid
        lock is held, tails of a chat open in another process (engine/sessions/locks.py)."""
        report = {"temp_files": 0, "orphan_tails": 0, "bad_manifests": 0}
        live_tails: set[str] = set()
        keep_sessions: set[str] = set()          # damaged, no previous version: keep its files
        for folder in (self.sessions_dir, self.manifests.prev):
            report["temp_files"] += self._remove_dead_temp_files(folder.glob(".*.tmp") if folder.is_dir() else [])
        for sid in self.manifests.ids():
            s = self.read_manifest(sid, repair=False)
            if s is None:
                continue
            if s.manifest_error:
                report["bad_manifests"] += 1
                keep_sessions.add(sid)
            for key in s.disk_keys + s.foreign_keys:
                self.refs.add(key, s.id)
            live_tails.update(t for t in (s.tail_file, s.foreign_tail) if t)
        with self.lock:
            for s in self.open_sessions():
                live_tails.update(t for t in (s.tail_file, s.foreign_tail) if t)
                keep_sessions.add(s.id)
        if self.tails_dir.is_dir():
            for f in self.tails_dir.iterdir():
                if f.name.endswith(".tmp"):
                    report["temp_files"] += self._remove_dead_temp_files([f])
                    continue
                if f.name in live_tails:
                    continue
                owner = f.name.split(".", 1)[0]
                if owner in keep_sessions or (canonical_id(owner) and self.locks.session_live_elsewhere(owner)):
                    continue      # a live writer's fresh tail: its manifest is about to name it
                if unlink_inside(self.state_dir, f):
                    report["orphan_tails" if f.suffix == ".kvt" else "temp_files"] += 1
        report["temp_files"] += self.store.remove_temp_files(self.locks.pid_alive)
        # Unreferenced blocks are the shared cache's disk tier, kept within its budget and age;
        # files that are not Amber KV blocks at all are strays.
        try:
            with self.refs.deletion_guard():
                report["stray_blocks"] = self.store.remove_misplaced_files()
                for key in list(self.store.keys_on_disk()):
                    if not self.refs.is_pinned(key) and not looks_like_kv_file(self.store.path(key)):
                        self.store.remove(key)
                        report["stray_blocks"] += 1
        except LockTimeout:
            report["stray_blocks"] = 0
        self.locks.remove_stale_pid_locks()
        self.prefix.rebuild_index()
        swept = self.prefix.enforce()
        report["expired_blocks"], report["evicted_blocks"] = swept["expired"], swept["evicted"]
        return report

    def _remove_dead_temp_files(self, paths: Any) -> int:
        """Temp files (`.<name>.<pid>.tmp`) whose writer is gone; a live writer's stay."""
        n = 0
        for tmp in paths:
            pid = tmp.name.rsplit(".", 2)[-2] if tmp.name.count(".") >= 2 else ""
            if pid.isdigit() and self.locks.pid_alive(int(pid)):
                continue
            if unlink_inside(self.state_dir, tmp):
                n += 1
        return n
