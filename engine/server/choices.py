"""A request's `n` choices: one generation each, submitted, awaited, streamed and cancelled together."""
from __future__ import annotations

import asyncio
import threading
from typing import Any, AsyncIterator, Callable, Iterator, Sequence

from starlette.requests import Request

from engine.api import GenerationResult, TextChunk
from .auth import Caller
from .service import Run, Service


class Choices:
    """The `n` generations of one request (each a `Run` of its own, so a batching engine decodes
    them together), seen as one: started, awaited, streamed and cancelled together."""

    def __init__(self, runs: list[Run]) -> None:
        self.runs = runs

    @classmethod
    async def submit(cls, service: Service, caller: Caller,
                     starts: Sequence[Callable[[threading.Event], Iterator[Any]]], request: Request) -> "Choices":
        """Submits every choice, then waits for the first one's first output: errors before any
        output (a full queue, a prompt too long: the same for every choice) raise ApiError here,
        with every choice cancelled. Not for the others': beyond `max_active` they wait for a place."""
        self = cls([])
        try:
            for start in starts:
                self.runs.append(await service.submit(caller, start, request))
            await self.runs[0].first()
        except BaseException:
            self.cancel()
            raise
        return self

    @property
    def queue_ms(self) -> float:
        return self.runs[0].queue_ms

    async def collect(self) -> list[GenerationResult]:
        try:
            return list(await asyncio.gather(*(run.collect() for run in self.runs)))
        finally:
            self.cancel()

    async def events(self) -> AsyncIterator[tuple[int, TextChunk | GenerationResult]]:
        """(choice index, event) as they come from every choice; stops them all if left early."""
        if len(self.runs) == 1:
            async for event in self.runs[0].events():
                yield 0, event
            return
        queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        done = object()

        async def pump(index: int, run: Run) -> None:
            try:
                async for event in run.events():
                    queue.put_nowait((index, event))
            except Exception as exc:    # noqa: BLE001 - raised to the consumer below
                queue.put_nowait((index, exc))
            finally:
                queue.put_nowait((index, done))
        tasks = [asyncio.ensure_future(pump(i, run)) for i, run in enumerate(self.runs)]
        try:
            left = len(tasks)
            while left:
                index, item = await queue.get()
                if item is done:
                    left -= 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield index, item
        finally:
            for task in tasks:
                task.cancel()
            self.cancel()

    def cancel(self) -> None:
        for run in self.runs:
            run.cancel()


def computed_once(compute: Callable[[], list[int] | None]) -> Callable[[], list[int] | None]:
    """`compute` run by the first caller only (a prompt's tokens, shared by a request's choices,
    which start on threads of their own); later callers get a copy of its result, or its error."""
    lock = threading.Lock()
    made: list[list[int] | None] = []
    failed: list[BaseException] = []

    def get() -> list[int] | None:
        with lock:
            if not made and not failed:
                try:
                    made.append(compute())
                except Exception as exc:    # noqa: BLE001 - raised to every caller below
                    failed.append(exc)
            if failed:
                raise failed[0]
            return None if made[0] is None else list(made[0])
    return get
