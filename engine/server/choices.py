"""A request's `n` choices: one generation for all of them (or one each), submitted, awaited, streamed and
cancelled together."""
from __future__ import annotations

import asyncio
import threading
from typing import Any, AsyncIterator, Callable, Iterator, Sequence

from starlette.requests import Request

from engine.api import GenerationResult, TextChunk
from .auth import Caller
from .service import Run, Service


class Choices:
    """The `n` choices of one request, seen as one: started, awaited, streamed and cancelled
    together. Either ONE run that generates them all (the prompt prefilled once, the choices
    decoded as one batch: `Service.stateless_choices`), or a `Run` each (an engine without token
    prompts)."""

    def __init__(self, runs: list[Run], n: int) -> None:
        self.runs = runs
        self.n = n

    @classmethod
    async def submit(cls, service: Service, caller: Caller,
                     starts: Sequence[Callable[[threading.Event], Iterator[Any]]], request: Request,
                     n: int | None = None) -> "Choices":
        """Submits every start (one for all `n` choices, or one each), then waits for the first
        one's first output: errors before any output (a full queue, a prompt too long: the same
        for every choice) raise ApiError here, with every choice cancelled. Not for the others':
        beyond `max_active` they wait for a place."""
        n = len(starts) if n is None else n
        self = cls([], n)
        try:
            for start in starts:
                self.runs.append(await service.submit(caller, start, request, n if len(starts) == 1 else 1))
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
            if len(self.runs) == 1:
                return await self.runs[0].collect_all()
            return list(await asyncio.gather(*(run.collect() for run in self.runs)))
        finally:
            self.cancel()

    async def events(self) -> AsyncIterator[tuple[int, TextChunk | GenerationResult]]:
        """(choice index, event) as they come from every choice; stops them all if left early."""
        if len(self.runs) == 1:
            try:
                async for index, event in self.runs[0].indexed():
                    yield index, event
            finally:
                self.cancel()
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
