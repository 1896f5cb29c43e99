"""The async path used carelessly: timeouts around waits that are not store calls, and sync
code called on the event loop while an async call is suspended holding a lock."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import numpy as np
import pytest

from memstrata import TaskLock
from memstrata._bridge import await_, run_sync
from memstrata.embedders import embed_texts


class SlowEmbedder:
    """An embedding service that takes seconds to answer."""

    model = "slow"
    dim = 4

    def embed(self, texts: Any) -> Any:
        return np.ones((len(texts), self.dim), dtype=np.float32)

    async def aembed(self, texts: Any) -> Any:
        await asyncio.sleep(2)
        return self.embed(texts)


def test_a_timeout_cuts_off_a_slow_embedder() -> None:
    """Only a store call is awaited to its end once cancelled (a transaction in flight); an
    embedder's request is not, so a timeout around an async call fires on time."""
    cleaned: list[str] = []

    def layer_code() -> Any:
        try:
            return embed_texts(SlowEmbedder(), ["a text"])
        finally:
            cleaned.append("finally ran")

    async def main() -> float:
        start = time.perf_counter()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(run_sync(layer_code), timeout=0.05)
        return time.perf_counter() - start

    assert asyncio.run(main()) < 1.0
    assert cleaned == ["finally ran"]


def test_a_timeout_cuts_off_a_wait_for_a_task_lock() -> None:
    """A task waiting for a TaskLock that another task holds for long can be cancelled: the
    wait is not a store call that must be finished."""
    lock = TaskLock()
    entered: list[str] = []

    def holds() -> None:
        with lock:
            await_(asyncio.sleep(1.5))

    def waits() -> None:
        with lock:
            entered.append("waiter")

    async def main() -> float:
        holder = asyncio.create_task(run_sync(holds))
        await asyncio.sleep(0.02)
        start = time.perf_counter()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(run_sync(waits), timeout=0.05)
        took = time.perf_counter() - start
        await holder
        return took

    assert asyncio.run(main()) < 1.0
    assert entered == []
    # The lock is free again, for a thread as for a task.
    with lock:
        pass


def test_sync_code_on_the_loop_refuses_a_lock_a_suspended_task_holds() -> None:
    """Sync code run directly on the event loop's thread (a sync method called from a
    coroutine) while an async call is suspended holding the same TaskLock would block the loop
    for ever, the holder never resuming: it gets a clear error instead."""
    lock = TaskLock()
    outcome: list[Any] = []

    def holds() -> None:
        with lock:
            await_(asyncio.sleep(0.1))

    async def main() -> None:
        holder = asyncio.create_task(run_sync(holds))
        await asyncio.sleep(0.02)
        try:
            with lock:  # a sync call from a coroutine, as `run.call_tool(...)` would be
                outcome.append("entered")
        except RuntimeError as exc:
            outcome.append(str(exc))
        await holder
        with lock:  # once the holder is done, sync code on the loop gets the lock
            outcome.append("after")

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "the event loop's thread is blocked for ever"
    assert len(outcome) == 2 and outcome[1] == "after"
    assert "suspended" in outcome[0] and "async" in outcome[0], outcome
