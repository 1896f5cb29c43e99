"""The async path used carelessly: timeouts around waits that are not store calls, and sync
code called on the event loop while an async call is suspended holding a lock, a cancelled close,
event loops in several threads sharing a store."""

from __future__ import annotations

import asyncio
import pathlib
import sqlite3
import sys
import threading
import time
from typing import Any

import numpy as np
import psycopg
import pytest
from store_checks import HeldRecord, empty_postgres_tables

from memstrata import AgentMind, Budget, MemoryStack, SharedMemory, SQLiteStore, TaskLock
from memstrata._bridge import await_, run_sync
from memstrata.embedders import embed_texts
from memstrata.stores import PostgresStore


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


class ClosingLog:
    """A user's layer that writes one record to the store when a run closes."""

    name, slot, budget = "closing-log", 50, Budget(10, 20)

    def init(self, ctx: Any) -> Any:
        return ctx

    def recall(self, handle: Any, budget: Any) -> list[Any]:
        return []

    def observe(self, handle: Any, message: Any) -> None:
        pass

    def tools(self, handle: Any) -> list[Any]:
        return []

    def on_spawn(self, handle: Any, child: Any) -> None:
        return None

    def close(self, handle: Any, error: BaseException | None) -> None:
        handle.store.put(("closing-log",), "last", {"closed": True})


def test_a_cancelled_close_still_closes_every_layer(tmp_path: pathlib.Path) -> None:
    """A cancellation that reaches ``async with stack.arun(...)``'s exit while a layer's close
    waits for the store is raised once every layer had its close: the agent mind's goal set
    in the run is flushed, not dropped."""
    store = SQLiteStore(tmp_path / "s.db")
    stack = MemoryStack([AgentMind(), ClosingLog()], store=store)

    async def main() -> None:
        other: sqlite3.Connection | None = None

        async def turn() -> None:
            nonlocal other
            async with stack.arun(agent="a") as run:
                result = await run.acall_tool("mind_set_goal", {"description": "ship it"})
                assert result.get("status") == "ok", result
                # Another process holds the file as the run closes: the log's put waits.
                other = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
                other.execute("BEGIN IMMEDIATE")

        task = asyncio.create_task(turn())
        while other is None:
            assert not task.done(), task
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.sleep(0.05)
        other.execute("COMMIT")
        other.close()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert store.get(("closing-log",), "last") is not None
    with stack.run(agent="a") as run:
        header = "\n".join(str(m["content"]) for m in run.prepare([]))
    assert "ship it" in header
    store.close()


def test_event_loops_in_several_threads_share_a_postgres_store(postgres_url: str) -> None:
    """Each thread's loop gets its own connections; loops starting at once in several threads
    (one having ended before them) must not trip over each other's bookkeeping."""
    store = PostgresStore(postgres_url)
    empty_postgres_tables(postgres_url)
    store.put(("loops",), "k", {"v": 1})
    errors: list[str] = []
    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # thread switches as often as they can come
    try:
        for _ in range(100):
            asyncio.run(store.aget(("loops",), "k"))  # leaves an ended loop behind
            start = threading.Barrier(6)

            def read(start: threading.Barrier = start) -> None:
                start.wait()
                try:
                    item = asyncio.run(store.aget(("loops",), "k"))
                    assert item is not None and item.value == {"v": 1}
                except BaseException as exc:
                    errors.append(repr(exc))

            threads = [threading.Thread(target=read) for _ in range(6)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
    finally:
        sys.setswitchinterval(switching)
        store.close()
    assert errors == []


def test_a_sync_tool_call_in_a_coroutine_fails_clearly_on_a_held_shared_memory(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``run.call_tool`` (sync) called in a coroutine while another task's ``acall_tool`` waits
    for PostgreSQL holding the shared memory's lock: the sync call would block the loop
    waiting for a task that the loop never resumes. It fails, logged with the reason, and the
    suspended write completes."""
    store = PostgresStore(postgres_url)
    empty_postgres_tables(postgres_url)
    memory = SharedMemory(store=store, namespace=("shared-memory", "misuse"))
    stack = MemoryStack([memory], store=store)
    outcome: list[Any] = []

    async def main() -> None:
        async def write_async() -> None:
            async with stack.arun(thread_id="a", resource_id="u", agent="a") as run:
                outcome.append(await run.acall_tool("memory_write", {"key": "a", "value": 1}))

        task = asyncio.create_task(write_async())
        while not memory._lock._lock.locked():
            assert not task.done(), task
            await asyncio.sleep(0)
        with stack.run(thread_id="b", resource_id="u", agent="a") as run:
            outcome.append(run.call_tool("memory_write", {"key": "b", "value": 2}))
        await task

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "the event loop's thread is blocked for ever"
    refused, written = outcome
    assert refused["ok"] is False and refused["error"]["code"] == "internal_error", refused
    assert "suspended on this thread's event loop" in caplog.text
    assert written["ok"] is True, written
    assert [item.key for item in store.list(("shared-memory", "misuse"))] == ["shared:a"]
    store.close()


def abandon_in_a_closed_loop(start: Any, until: Any) -> Any:
    """Runs ``start()`` (a coroutine) as a task of a hand-managed event loop until ``until()``
    holds, then closes the loop with the task still suspended, as code that closes its loop
    without cancelling its tasks does. Returns the task (kept, so it is not collected)."""
    loop = asyncio.new_event_loop()

    async def begin() -> Any:
        task = asyncio.ensure_future(start())
        deadline = time.perf_counter() + 10
        while not until():
            assert not task.done() and time.perf_counter() < deadline, task
            await asyncio.sleep(0.005)
        return task

    task = loop.run_until_complete(begin())
    loop.close()
    return task


def test_a_task_lock_left_by_a_closed_loop_is_taken_over(caplog: pytest.LogCaptureFixture) -> None:
    """The holder is suspended in a task of a loop closed under it: nothing resumes it. The
    next user, on a new loop or on a thread, takes the lock over instead of waiting for ever,
    and the lock excludes as before afterwards."""
    lock = TaskLock()

    def holds() -> None:
        with lock:
            await_(asyncio.sleep(3600))

    abandoned = abandon_in_a_closed_loop(lambda: run_sync(holds), lock._lock.locked)
    entered: list[str] = []

    def uses(who: str) -> None:
        with lock:
            entered.append(who)

    async def on_a_new_loop() -> None:
        await asyncio.wait_for(run_sync(uses, "new loop"), timeout=5)

    asyncio.run(on_a_new_loop())
    assert "taken over" in caplog.text
    thread = threading.Thread(target=uses, args=("thread",))
    thread.start()
    thread.join(5)
    assert entered == ["new loop", "thread"]
    assert not lock._lock.locked()

    # A second abandoned holder, met by a thread first this time.
    again = abandon_in_a_closed_loop(lambda: run_sync(holds), lock._lock.locked)
    thread = threading.Thread(target=uses, args=("thread, first",))
    thread.start()
    thread.join(5)
    assert entered[-1] == "thread, first" and not lock._lock.locked()
    del abandoned, again  # collecting them must not release the lock a new holder has
    with lock:
        import gc

        gc.collect()
        assert lock._lock.locked()
    assert not lock._lock.locked()


def test_a_task_lock_held_in_a_stopped_loop_on_this_thread_fails_clearly() -> None:
    """The holder's loop is stopped, not closed, on this very thread: it could run again, but
    not while another loop on the thread waits for it. The waiter fails, naming both ways out."""
    lock = TaskLock()

    def holds() -> None:
        with lock:
            await_(asyncio.sleep(3600))

    loop = asyncio.new_event_loop()

    async def begin() -> Any:
        task = asyncio.ensure_future(run_sync(holds))
        while not lock._lock.locked():
            await asyncio.sleep(0.005)
        return task

    task = loop.run_until_complete(begin())

    def uses() -> None:
        with lock:
            pass

    async def elsewhere() -> None:
        await asyncio.wait_for(run_sync(uses), timeout=5)

    with pytest.raises(RuntimeError, match="another event loop on this thread, which is not"):
        asyncio.run(elsewhere())
    task.cancel()  # the loop is still usable: its task ends and leaves the lock
    with pytest.raises(asyncio.CancelledError):
        loop.run_until_complete(task)
    loop.close()
    assert not lock._lock.locked()


def test_shared_memory_left_locked_by_a_closed_loop_is_usable_from_the_next(
    tmp_path: pathlib.Path,
) -> None:
    """A write suspended (the SQLite file locked by another process) when its hand-managed loop
    is closed holds the shared memory's lock; the next loop's write goes through."""
    store = SQLiteStore(tmp_path / "s.db")
    memory = SharedMemory(store=store, namespace=("shared-memory", "closed-loop"))
    stack = MemoryStack([memory], store=store)
    with stack.run(thread_id="t", resource_id="u", agent="a") as run:
        assert run.call_tool("memory_write", {"key": "first", "value": 0})["ok"] is True
    other = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")

    async def write_a() -> None:
        async with stack.arun(thread_id="t", resource_id="u", agent="a") as run:
            await run.acall_tool("memory_write", {"key": "a", "value": 1})

    abandoned = abandon_in_a_closed_loop(write_a, memory._lock._lock.locked)
    other.execute("COMMIT")
    other.close()

    async def write_b() -> Any:
        async with stack.arun(thread_id="t", resource_id="u", agent="a") as run:
            return await asyncio.wait_for(
                run.acall_tool("memory_write", {"key": "b", "value": 2}), timeout=5
            )

    assert asyncio.run(write_b())["ok"] is True
    with stack.run(thread_id="t", resource_id="u", agent="a") as run:
        listed = run.call_tool("memory_list", {})
    assert "shared:b" in [entry["key"] for entry in listed["entries"]], listed
    del abandoned
    store.close()


def test_a_postgres_update_abandoned_in_a_closed_loop_leaves_no_record_locked(
    postgres_url: str,
) -> None:
    """An update suspended waiting for a record's lock when its loop is closed: once the lock
    is free its transaction takes it and would hold it for as long as the connection stays
    open, stopping every writer of the record. The next loop's first call closes that
    connection, so the server rolls the transaction back, and writers go on."""
    store = PostgresStore(postgres_url)
    empty_postgres_tables(postgres_url)
    namespace = ("closed-loop",)
    held = HeldRecord(postgres_url, namespace, "k")

    def waiting_for_a_lock() -> bool:
        with psycopg.connect(postgres_url) as conn:
            (waiting,) = conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
        return bool(waiting)

    abandoned = abandon_in_a_closed_loop(
        lambda: store.aupdate(namespace, "k", lambda _v: {"by": "abandoned"}), waiting_for_a_lock
    )
    held.release()

    async def next_loop() -> Any:
        return await asyncio.wait_for(
            store.aupdate(namespace, "k", lambda _v: {"by": "next loop"}), timeout=5
        )

    item = asyncio.run(next_loop())
    assert (item.value, item.version) == ({"by": "next loop"}, 3)  # the abandoned one wrote nothing
    other = PostgresStore(postgres_url, lock_timeout=5)  # another server writes on too
    assert other.update(namespace, "k", lambda _v: {"by": "other"}).version == 4
    other.close()
    del abandoned
    store.close()


def test_the_first_async_calls_of_a_process_made_from_several_threads_at_once() -> None:
    """The first ``run_sync`` sets the bridge up (greenlet imported, its worker type made): in
    a fresh process, event loops started in several threads at the same moment each run their
    sync code bridged, every call, the first ones too."""
    import subprocess
    import textwrap

    code = textwrap.dedent(
        """
        import asyncio, threading
        from memstrata._bridge import await_, bridged, run_sync

        start = threading.Barrier(8)
        answers = []

        def sync_code():
            await_(asyncio.sleep(0))  # fails unless the code runs bridged
            return bridged()

        async def first_call():
            start.wait()  # every thread's loop is running: they meet the setup at once
            return await run_sync(sync_code)

        def thread():
            try:
                answers.append(asyncio.run(first_call()))
                for _ in range(2):
                    answers.append(asyncio.run(run_sync(sync_code)))
            except BaseException as exc:
                answers.append(repr(exc))

        threads = [threading.Thread(target=thread) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(answers)
        """
    )
    for _ in range(3):
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == repr([True] * 24), done.stdout


def test_a_postgres_record_an_abandoned_update_locked_is_freed_for_the_calls_that_follow(
    postgres_url: str,
) -> None:
    """An update suspended waiting for a record's lock when its loop is closed takes the lock
    once it is free and holds it while its connection stays open. The calls that follow on the
    same store free it, whatever they run on: the sync methods, or a loop that was already
    running before the other one closed (not only a loop's first call)."""
    store = PostgresStore(postgres_url, lock_timeout=3)
    empty_postgres_tables(postgres_url)
    namespace = ("closed-loop-then",)

    def waiting_for_a_lock() -> bool:
        with psycopg.connect(postgres_url) as conn:
            (waiting,) = conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
        return bool(waiting)

    def abandon_an_update(key: str) -> Any:
        held = HeldRecord(postgres_url, namespace, key)
        abandoned = abandon_in_a_closed_loop(
            lambda: store.aupdate(namespace, key, lambda _v: {"by": "abandoned"}),
            waiting_for_a_lock,
        )
        held.release()
        return abandoned

    # A loop that runs all along, in its own thread, and has used the store before.
    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever)
    thread.start()
    try:

        def on_the_running_loop(coro: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(coro, running).result(30)

        assert on_the_running_loop(store.aget(namespace, "none")) is None
        first = abandon_an_update("sync")
        assert store.update(namespace, "sync", lambda _v: {"by": "sync"}).value == {"by": "sync"}
        second = abandon_an_update("async")
        item = on_the_running_loop(store.aupdate(namespace, "async", lambda _v: {"by": "loop"}))
        assert item.value == {"by": "loop"}
    finally:
        running.call_soon_threadsafe(running.stop)
        thread.join(10)
        running.close()
    del first, second
    store.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_tool_calls_of_runs_in_flight_when_the_store_closes_say_it_is_closed(
    backend: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> None:
    """A server shutting down closes the store while turns are still running: their tool
    calls answer that the memory's store is closed (nothing written, no use calling again),
    on SQLite as on PostgreSQL; not an internal error logged as a bug."""
    store: SQLiteStore | PostgresStore
    if backend == "sqlite":
        store = SQLiteStore(tmp_path / "s.db")
    else:
        url = request.getfixturevalue("postgres_url")
        store = PostgresStore(url)
        empty_postgres_tables(url)
    memory = SharedMemory(store=store, namespace=("shared-memory", "closing"))
    stack = MemoryStack([memory], store=store)

    async def main() -> list[Any]:
        async with stack.arun(agent="a") as run:
            ok = await run.acall_tool("memory_write", {"key": "k", "value": 1})
            assert ok["ok"], ok
            await store.aclose()
            return [
                await run.acall_tool("memory_write", {"key": "k", "value": 2}),
                await run.acall_tool("memory_list", {}),
            ]

    for answer in asyncio.run(main()):
        assert answer["error"]["code"] == "memory_unavailable", answer
        assert "store is closed" in answer["error"]["message"], answer
        assert answer["error"]["retry"] is False, answer


def test_a_run_another_task_is_opening_is_whole_when_used(tmp_path: pathlib.Path) -> None:
    """A run used by several tasks before it is open (a model's parallel tool calls on a run
    opened by its first call, or ``aopen`` in one task and a call in another): the agent
    mind's first load waits in a worker thread, and the other tasks wait for the open to end;
    none finds a run without its layers (told "unknown tool", or a KeyError from prepare)."""
    store = SQLiteStore(tmp_path / "s.db")
    stack = MemoryStack(
        [AgentMind(), SharedMemory(store=store, namespace=("shared-memory", "open"))],
        store=store,
    )

    async def main() -> list[Any]:
        run = stack.arun(agent="a")
        answers = await asyncio.gather(
            run.acall_tool("mind_set_goal", {"description": "the first call opens the run"}),
            run.acall_tool("memory_write", {"key": "k", "value": 1}),
            run.aprepare([{"role": "user", "content": "hi"}]),
        )
        await run.aclose()
        run = stack.arun(agent="a")
        opened = await asyncio.gather(run.aopen(), run.aprepare([]))
        await run.aclose()
        return [*answers, opened[1]]

    goal, written, prepared, prepared_after_open = asyncio.run(main())
    assert goal.get("status") == "ok", goal
    assert written["ok"], written
    assert any("first call opens" in str(m["content"]) for m in prepared_after_open)
    assert prepared and prepared[-1] == {"role": "user", "content": "hi"}
    store.close()
