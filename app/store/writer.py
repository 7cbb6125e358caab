"""The single writer: one background thread runs every write, each in its own transaction."""
from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, TypeVar

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from . import errors
from .errors import StoreError

T = TypeVar("T")


class Writer:
    """Serialises writes: `run(fn)` runs `fn(session)` in one transaction on the writer thread."""

    def __init__(self, engine: Engine, path: Path) -> None:
        self._path = path
        self._sessions = sessionmaker(engine, expire_on_commit=False)
        # One thread, one connection: writes never contend with each other inside Amber, and
        # SQLite's single-writer lock is only ever waited on by other processes.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="amber-store-writer")
        self._thread_ident: int | None = None
        self._closed = False
        self._lock = threading.Lock()

    def run(self, fn: Callable[[Session], T]) -> T:
        """Run `fn` in one write transaction and return its result (re-raising its error)."""
        if threading.get_ident() == self._thread_ident:
            raise RuntimeError("a store write must not start another write")
        with self._lock:
            if self._closed:
                raise StoreError(f"The conversation store for {self._path} is closed.",
                                 path=self._path, reason="closed")
            future = self._executor.submit(self._transaction, fn)
        return future.result()

    def _transaction(self, fn: Callable[[Session], T]) -> T:
        self._thread_ident = threading.get_ident()
        try:
            # Session.begin(): BEGIN IMMEDIATE ... COMMIT, or ROLLBACK if fn raises.
            with self._sessions.begin() as session:
                return fn(session)
        except IntegrityError:
            raise  # a broken constraint is a bug or bad input, not a database problem
        except (DBAPIError, sqlite3.Error, UnicodeDecodeError) as exc:
            raise errors.from_sqlite(exc, self._path) from exc

    def close(self) -> None:
        """Finish the writes already queued, then stop the thread."""
        with self._lock:
            self._closed = True
        self._executor.shutdown(wait=True)
