"""Cross-process locks on the state folder (`state/locks/`), with a bounded wait.

The rules (docs/DESIGN.md, "Locking"):
- `locks/<session id>.lock`, exclusive: held by the process that has the (pinned or regular)
  session open, from `open` to `close`/`delete`/shutdown. A second process waits a bounded time,
  then gets "this chat is open in another Amber process".
- `locks/pid-<pid>.lock`, exclusive: held by every process that writes to the folder. Temp files
  carry their writer's pid; clean-up removes one only when that pid's lock is free (the writer is
  gone), so gc never takes a live writer's temp file.
- `locks/blocks.lock`: shared while a save writes blocks and then the manifest that names them,
  exclusive while blocks are deleted (cache eviction, expiry, clear, gc); the deleter re-reads
  every manifest on disk under it, so a block another process just wrote and referenced is never
  taken.
Locks are `flock` (Linux, macOS) or `msvcrt.locking` (Windows, exclusive only); the OS drops them
when a process dies, so a crash never leaves a folder locked.
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
import time
from pathlib import Path
from typing import Iterator

from engine.base.safefs import UnsafePathError, make_folder, unlink_inside
from engine.config import DEFAULT_LOCK_WAIT_S, settings

try:
    import fcntl
except ImportError:         # Windows
    fcntl = None            # type: ignore[assignment]
    import msvcrt

POLL_S = 0.05
DEFAULT_WAIT_S = DEFAULT_LOCK_WAIT_S


class LockTimeout(TimeoutError):
    """The lock stayed held by another process for the whole wait."""


def default_wait_s() -> float:
    """`AMBER_LOCK_WAIT_S` (seconds a second process waits for a chat), else 10."""
    return settings().lock_wait_s


def _try(fd: int, shared: bool) -> bool:
    try:
        if fcntl is not None:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        else:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError:
        return False
    return True


def _unlock(fd: int) -> None:
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)
        else:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    except OSError:
        pass


class FileLock:
    """One lock file; `acquire` waits at most `timeout` seconds (0: one try). Its folder is made
    below `state` (never through a symlink); the file itself must be a regular file (UnsafePathError)."""

    def __init__(self, path: Path, state: Path) -> None:
        self.path = Path(path)
        self.state = Path(state)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, timeout: float, shared: bool = False) -> None:
        if self._fd is not None:
            return
        make_folder(self.state, self.path.parent)
        deadline = time.monotonic() + timeout
        while True:
            fd = _open_lock_file(self.path)
            if _try(fd, shared):
                # The file may have been removed (delete) between our open and our lock: then
                # this lock guards nothing; start again on the file that is there now.
                try:
                    same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
                except OSError:
                    same = False
                if same:
                    self._fd = fd
                    return
                _unlock(fd)
            os.close(fd)
            if time.monotonic() >= deadline:
                raise LockTimeout(str(self.path))
            time.sleep(POLL_S)

    def release(self, remove: bool = False) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if remove:
            self.path.unlink(missing_ok=True)   # while still held: no one can hold the old inode
        _unlock(fd)
        os.close(fd)


def _open_lock_file(path: Path) -> int:
    """The lock file's descriptor (created if missing): never through a symlink, never a FIFO or
    a folder in its place (UnsafePathError naming it)."""
    odd = UnsafePathError(f"locks/{path.name} is a symlink or not a regular file; remove it")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0),
                     0o600)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise odd from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise odd
    return fd


def held_elsewhere(path: Path) -> bool:
    """True when some process (this one included, through another lock object) holds the lock."""
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False            # no lock file: nobody holds it
    try:
        if _try(fd, shared=False):
            _unlock(fd)
            return False
        return True
    finally:
        os.close(fd)


class StateLocks:
    """The locks of one state folder, for one SessionManager."""

    def __init__(self, state_dir: Path) -> None:
        self.state = Path(state_dir)
        self.root = self.state / "locks"
        self._sessions: dict[str, FileLock] = {}
        self._sessions_mutex = threading.Lock()      # the dict only: never held while waiting
        self._blocks = FileLock(self.root / "blocks.lock", self.state)
        self._blocks_depth = 0
        self._blocks_mutex = threading.RLock()      # the file lock is per process: count in-process users
        self._guard = threading.local()

    # ---- sessions -------------------------------------------------------------------------------
    def session_path(self, sid: str) -> Path:
        return self.root / f"{sid}.lock"

    def lock_session(self, sid: str, timeout: float) -> None:
        """Holds the chat's lock for this process; waits at most `timeout` for another process.
        Threads of this process share it (one that waits sees another one's success)."""
        deadline = time.monotonic() + timeout
        lock = FileLock(self.session_path(sid), self.state)
        while True:
            with self._sessions_mutex:
                if sid in self._sessions:
                    return
                try:
                    lock.acquire(0)
                except LockTimeout:
                    pass
                else:
                    self._sessions[sid] = lock
                    return
            if time.monotonic() >= deadline:
                raise LockTimeout(str(lock.path))
            time.sleep(POLL_S)

    def unlock_session(self, sid: str, remove: bool = False) -> None:
        with self._sessions_mutex:
            lock = self._sessions.pop(sid, None)
        if lock is not None:
            lock.release(remove=remove)

    def held_sessions(self) -> set[str]:
        with self._sessions_mutex:
            return set(self._sessions)

    def holds(self, sid: str) -> bool:
        with self._sessions_mutex:
            lock = self._sessions.get(sid)
        return lock is not None and lock.held

    def session_live_elsewhere(self, sid: str) -> bool:
        return sid not in self.held_sessions() and held_elsewhere(self.session_path(sid))

    def release_all(self) -> None:
        for sid in self.held_sessions():
            self.unlock_session(sid, remove=True)

    # ---- writer processes ----------------------------------------------------------------------
    def hold_process(self) -> None:
        """Marks this process as a writer of the folder (before its first temp file)."""
        try:
            _process_lock(self.root).acquire(0)
        except (LockTimeout, OSError):
            pass    # the same pid in another container: its temp files merely look live

    def pid_alive(self, pid: int) -> bool:
        if pid == os.getpid():
            return True
        return held_elsewhere(self.root / f"pid-{pid}.lock")

    def remove_stale_pid_locks(self) -> None:
        if not self.root.is_dir():
            return
        for p in self.root.glob("pid-*.lock"):
            try:
                pid = int(p.stem[4:])
            except ValueError:
                continue
            if not self.pid_alive(pid):
                unlink_inside(self.state, p)     # never through a symlinked folder

    # ---- the block store ------------------------------------------------------------------------
    @contextlib.contextmanager
    def blocks(self, shared: bool, timeout: float) -> Iterator[None]:
        """The folder-wide block lock, re-entrant within this process."""
        # Threads of one process share the file lock; an exclusive user also excludes the
        # process's own writers through the mutex.
        if not self._blocks_mutex.acquire(timeout=timeout):
            raise LockTimeout(str(self._blocks.path))
        try:
            if self._blocks_depth == 0:
                self._blocks.acquire(timeout, shared=shared)
            self._blocks_depth += 1
        except BaseException:
            self._blocks_mutex.release()
            raise
        try:
            yield
        finally:
            self._blocks_depth -= 1
            if self._blocks_depth == 0:
                self._blocks.release()
            self._blocks_mutex.release()


_process_locks: dict[str, FileLock] = {}
_process_mutex = threading.Lock()


def _process_lock(root: Path) -> FileLock:
    """One pid lock per process and folder (`root`: the locks folder), held until the process ends."""
    key = os.path.normpath(str(root))
    with _process_mutex:
        lock = _process_locks.get(key)
        if lock is None or not lock.path.exists():
            lock = FileLock(Path(root) / f"pid-{os.getpid()}.lock", Path(root).parent)
            _process_locks[key] = lock
        return lock
