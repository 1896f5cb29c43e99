"""The async forms against the sync ones: same answers, same stored state, on every backend;
no thread hop where nothing waits; a locked SQLite file never blocks the event loop; a
cancelled call leaves no half-written state; tasks on one loop exclude each other in a layer's
critical section."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import re
import sqlite3
import struct
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from loop_timing import loop_lag
from store_checks import ThreadNotingSQLiteStore, empty_postgres_tables

from memstrata import (
    InMemoryStore,
    MemoryStack,
    SharedMemory,
    SQLiteStore,
    TaskLock,
    ToolResults,
    WorkingMemory,
)
from memstrata._bridge import run_sync
from memstrata.embedders import embed_texts
from memstrata.stores import PostgresStore, Store

SCHEMA = {
    "type": "object",
    "properties": {
        "tasks": {"type": "object", "additionalProperties": {"type": "string"}},
        "owner": {"type": "string"},
    },
}
SHARED = ("shared-memory", "async-test")
ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?")
BIG_RESULT = "\n".join(f"row {k}: region eu-{k % 5} latency {k * 7 % 300} ms" for k in range(800))


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def make_store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Any]:
    """Makes an empty store of the backend, each time it is called."""
    made: list[Store] = []

    def make() -> Store:
        store: Store
        if request.param == "memory":
            store = InMemoryStore()
        elif request.param == "sqlite":
            store = SQLiteStore(tmp_path / f"store{len(made)}.db")
        else:
            url = request.getfixturevalue("postgres_url")
            for old in made:
                old.close()
            store = PostgresStore(url)  # makes the tables on a fresh cluster
            empty_postgres_tables(url)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


def stack_on(store: Store) -> MemoryStack:
    return MemoryStack(
        [WorkingMemory(schema=SCHEMA), SharedMemory(store=store, namespace=SHARED), ToolResults()],
        store=store,
    )


def turn_calls(i: int) -> list[tuple[str, str]]:
    return [
        ("working-memory/update", json.dumps({"tasks": {f"t{i % 3}": f"step {i}"}})),
        ("memory_write", json.dumps({"key": f"note-{i % 2}", "value": {"turn": i}})),
        ("memory_list", "{}"),
        ("working-memory/update", '{"tasks": 5}'),  # refused: the state is left as it was
    ]


def conversation(i: int) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a test agent."},
        {"role": "user", "content": f"Turn {i}"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": f"c{i}", "content": f"{BIG_RESULT}\nturn {i}"},
    ]


def sync_turns(stack: MemoryStack, turns: int) -> list[Any]:
    answers: list[Any] = []
    for i in range(turns):
        with stack.run(thread_id="t1", resource_id="u1", agent="a") as run:
            answers.append(run.prepare(conversation(i)))
            answers.append(run.prepare_anthropic(conversation(i)[1:], system="Be brief."))
            answers.extend(run.call_tool(name, args) for name, args in turn_calls(i))
            answers.append(run.observe({"role": "assistant", "content": f"done {i}"}))
            answers.append(run.layer("working-memory").snapshot)
    return answers


async def async_turns(stack: MemoryStack, turns: int) -> list[Any]:
    answers: list[Any] = []
    for i in range(turns):
        async with stack.arun(thread_id="t1", resource_id="u1", agent="a") as run:
            answers.append(await run.aprepare(conversation(i)))
            answers.append(await run.aprepare_anthropic(conversation(i)[1:], system="Be brief."))
            answers.extend([await run.acall_tool(name, args) for name, args in turn_calls(i)])
            answers.append(await run.aobserve({"role": "assistant", "content": f"done {i}"}))
            answers.append(run.alayer("working-memory").snapshot)
    return answers


def stored(store: Store) -> list[tuple[Any, ...]]:
    """What a store holds, without the clock's readings."""
    return [
        (item.namespace, item.key, without_times(item.value), item.version)
        for item in store.list((), limit=10_000)
    ]


def without_times(value: Any) -> Any:
    """``value`` with every number that reads as a time of the last day (seconds or
    milliseconds since the epoch) and every ISO 8601 time replaced by ``"<time>"``."""
    now = time.time()
    if isinstance(value, str):
        return ISO_TIME.sub("<time>", value)
    if isinstance(value, dict):
        return {k: without_times(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_times(v) for v in value]
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if is_number and (now - 86_400 < value < now + 60 or now - 86_400 < value / 1000 < now + 60):
        return "<time>"
    return value


def test_async_forms_answer_and_store_what_the_sync_forms_do(make_store: Any) -> None:
    sync_store = make_store()
    sync_answers = sync_turns(stack_on(sync_store), 4)
    sync_state = stored(sync_store)
    async_store = make_store()
    async_answers = asyncio.run(async_turns(stack_on(async_store), 4))
    assert without_times(async_answers) == without_times(sync_answers)
    assert stored(async_store) == sync_state
    # The turns did store something, and the refused update was refused.
    assert any(key == "note-1" or key == "shared:note-1" for _ns, key, _v, _ver in sync_state)
    refusals = [a for a in sync_answers if isinstance(a, dict) and a.get("ok") is False]
    assert len(refusals) == 4


def test_store_async_twins_match_the_sync_methods(make_store: Any) -> None:
    sync_store = make_store()
    ns = ("notes", "u1")

    def bump(value: Any) -> Any:
        return {"n": (value or {}).get("n", 0) + 1}

    sync_store.put(ns, "a", {"x": 1})
    sync_store.update(ns, "a", bump)
    mark = sync_store.change_mark(ns)
    sync_store.put_if_version(ns, "b", [1, 2], expected_version=0)
    sync_answers = [
        sync_store.get(ns, "a"),
        sync_store.stamp(ns, "a") is not None,
        sync_store.delete(ns, "b"),
        sync_store.changes(ns, mark).removed,
        [i.value for i in sync_store.list(ns)],
    ]
    sync_state = stored(sync_store)
    async_store = make_store()

    async def twins() -> list[Any]:
        await async_store.aput(ns, "a", {"x": 1})
        await async_store.aupdate(ns, "a", bump)
        mark = await async_store.achange_mark(ns)
        await async_store.aput_if_version(ns, "b", [1, 2], expected_version=0)
        return [
            await async_store.aget(ns, "a"),
            await async_store.astamp(ns, "a") is not None,
            await async_store.adelete(ns, "b"),
            (await async_store.achanges(ns, mark)).removed,
            [i.value for i in await async_store.alist(ns)],
        ]

    async_answers = asyncio.run(twins())
    assert async_answers[0].value == sync_answers[0].value == {"n": 1}
    assert async_answers[1:] == sync_answers[1:] == [True, True, ["b"], [{"n": 1}]]
    assert stored(async_store) == sync_state


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_an_async_turn_on_an_embedded_store_makes_no_thread_hop(
    backend: str, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = InMemoryStore() if backend == "memory" else SQLiteStore(tmp_path / "s.db")
    stack = stack_on(store)
    sync_turns(stack, 1)  # the first load of each namespace may go to a thread
    hops: list[Any] = []

    async def no_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(fn)
        return fn(*args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", no_thread)
    answers = asyncio.run(async_turns(stack, 2))
    assert hops == []
    assert answers[-1] == {"tasks": {"t0": "step 0", "t1": "step 1"}}
    store.close()


def lock_file(path: pathlib.Path) -> sqlite3.Connection:
    """Another process's view: a connection holding the database's write lock."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


def test_a_locked_sqlite_file_does_not_block_the_event_loop(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    stack = stack_on(store)
    sync_turns(stack, 1)

    async def main() -> tuple[float, dict[str, Any], list[Any]]:
        other = lock_file(tmp_path / "s.db")
        async with stack.arun(thread_id="t1", resource_id="u1", agent="a") as run:
            update = asyncio.create_task(
                run.acall_tool("working-memory/update", '{"owner": "locked-out"}')
            )
            put = asyncio.create_task(store.aput(("direct",), "k", {"v": 1}))
            lag = await loop_lag(0.4)  # the lock is held all along
            assert not update.done() and not put.done()
            other.execute("COMMIT")
            other.close()
            answer = await update
            await put
        return lag, answer, stored(store)

    lag, answer, state = asyncio.run(main())
    assert lag < 0.1  # the writers wait in worker threads; the loop ticks on
    assert answer["ok"] is True
    assert (("direct",), "k", {"v": 1}, 1) in state
    with stack.run(thread_id="t1", resource_id="u1", agent="a") as run:
        assert run.layer("working-memory").snapshot["owner"] == "locked-out"
    store.close()


def log_frames(path: pathlib.Path) -> tuple[int, int]:
    """(frames in the SQLite database's write-ahead log, frames of it copied into the
    database), from the WAL-index header of ``<path>-shm`` (https://www.sqlite.org/walformat.html:
    mxFrame at byte 16, nBackfill at byte 96, native byte order)."""
    header = pathlib.Path(f"{path}-shm").read_bytes()[:100]
    return struct.unpack_from("=I", header, 16)[0], struct.unpack_from("=I", header, 96)[0]


def test_an_sqlite_checkpoint_never_runs_on_the_event_loop(tmp_path: pathlib.Path) -> None:
    """A write that fills the log past SQLite's checkpoint threshold (1000 frames): the
    checkpoint copies the log into the database and syncs it to disk, tens of milliseconds of
    I/O (~90 ms measured, more on a slow disk). Run inline with the write, it would block the
    loop: it runs in a worker thread, which the write waits for."""
    store = SQLiteStore(tmp_path / "s.db")
    value = {"text": "x" * 20_000}  # three 8 KiB pages a write

    async def main() -> tuple[int, tuple[int, int], tuple[int, int]]:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(1))
        busy, free = threading.Event(), threading.Event()

        def occupy() -> None:
            busy.set()
            free.wait(10)

        occupied = asyncio.ensure_future(asyncio.to_thread(occupy))
        while not busy.is_set():
            await asyncio.sleep(0)
        for i in range(1000):
            # Layer code's path (run_sync): inline, as nothing waits for the file.
            write = asyncio.ensure_future(run_sync(store.put, ("log",), f"k{i}", value))
            for _ in range(3):
                await asyncio.sleep(0)
            if not write.done():
                break  # waiting for the worker thread: the checkpoint's
        waiting = log_frames(tmp_path / "s.db")
        free.set()
        await occupied
        await write
        return i, waiting, log_frames(tmp_path / "s.db")

    writes, waiting, after = asyncio.run(main())
    assert writes < 999, "no write waited for a checkpoint in a worker thread"
    assert waiting[0] >= 1000 and waiting[1] == 0, waiting  # not checkpointed inline
    assert after[1] == after[0], after  # checkpointed in the thread
    assert store.get(("log",), f"k{writes}") is not None
    store.close()


def test_an_sqlite_write_that_starts_the_log_again_runs_off_the_loop(
    tmp_path: pathlib.Path,
) -> None:
    """Once a checkpoint (here another connection's) copied the whole log into the database,
    the next write starts the log again from its first frame, and SQLite syncs the log's new
    header to disk before it writes (synchronous=NORMAL syncs then): that write runs in a
    worker thread; the write after it, which appends to the log, inline."""
    path = tmp_path / "s.db"
    store = ThreadNotingSQLiteStore(path)
    for i in range(10):
        store.put(("log",), f"k{i}", {"text": "x" * 20_000})
    other = sqlite3.connect(path)
    other.execute("PRAGMA wal_checkpoint(PASSIVE)")
    other.close()
    written, copied = log_frames(path)
    assert written == copied > 20

    async def main() -> tuple[int, set[int], tuple[int, int], set[int]]:
        store.threads.clear()
        await run_sync(store.put, ("log",), "again", {"n": 1})
        restarted, first = log_frames(path), set(store.threads)
        store.threads.clear()
        await run_sync(store.put, ("log",), "after", {"n": 2})
        return threading.get_ident(), first, restarted, set(store.threads)

    loop, first, restarted, second = asyncio.run(main())
    assert restarted[0] < 10, restarted  # the log started again
    assert first and loop not in first
    assert second == {loop}
    assert store.get(("log",), "again") is not None
    store.close()


def test_a_replaced_sqlite_file_is_opened_again_off_the_loop(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that finds the database file replaced (a restored copy renamed onto it) opens
    the file now at the path: the old log emptied into its file (a checkpoint, synced to disk)
    and the new file opened and migrated, in a worker thread. The write itself is refused,
    as the sync form refuses it."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path)
    stack = MemoryStack([WorkingMemory(schema=SCHEMA)], store=store)
    with stack.run(thread_id="t") as run:
        assert run.call_tool("working-memory/update", {"owner": "first"})["ok"]
    sqlite3.connect(tmp_path / "copy.db").close()
    os.replace(tmp_path / "copy.db", path)
    opened_on: list[int] = []
    real_connect = SQLiteStore._connect

    def noting_connect(self: SQLiteStore) -> None:
        opened_on.append(threading.get_ident())
        real_connect(self)

    monkeypatch.setattr(SQLiteStore, "_connect", noting_connect)

    async def main() -> tuple[int, dict[str, Any], dict[str, Any]]:
        async with stack.arun(thread_id="t") as run:
            refused = await run.acall_tool("working-memory/update", {"owner": "second"})
            again = await run.acall_tool("working-memory/update", {"owner": "third"})
        return threading.get_ident(), refused, again

    loop, refused, again = asyncio.run(main())
    assert opened_on and loop not in opened_on
    assert refused["error"]["code"] == "memory_unavailable", refused
    assert again["ok"], again
    store.close()


def test_a_cancelled_write_leaves_the_state_whole(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "s.db")
    stack = stack_on(store)
    sync_turns(stack, 1)
    with stack.run(thread_id="t1", resource_id="u1", agent="a") as run:
        before = run.layer("working-memory").snapshot
    patch = {"owner": "cancelled", "tasks": {"t9": "x"}}

    async def main() -> None:
        other = lock_file(tmp_path / "s.db")
        async with stack.arun(thread_id="t1", resource_id="u1", agent="a") as run:
            call = asyncio.create_task(run.acall_tool("working-memory/update", json.dumps(patch)))
            await asyncio.sleep(0.05)
            call.cancel()
            # The other connection lets go while the cancelled call still waits in its worker
            # thread; awaited first, the call would wait out the busy timeout (30 s).
            other.execute("COMMIT")
            other.close()
            with pytest.raises(asyncio.CancelledError):
                await call

    asyncio.run(main())
    with stack.run(thread_id="t1", resource_id="u1", agent="a") as run:
        after = run.layer("working-memory").snapshot
    # The write was one transaction: in the store whole (it ran on in its thread) or not at all.
    assert after in (
        before,
        {**before, "owner": "cancelled", "tasks": {**before["tasks"], "t9": "x"}},
    )
    # Every row of the working memory decodes, and the next turn works on it.
    assert sync_turns(stack, 1)[-1]["tasks"]["t0"] == "step 0"
    store.close()


def test_cancelled_postgres_turns_leave_the_state_whole(postgres_url: str) -> None:
    store = PostgresStore(postgres_url)
    empty_postgres_tables(postgres_url)
    stack = stack_on(store)
    sync_turns(stack, 1)
    cancelled = 0

    async def main() -> None:
        nonlocal cancelled
        for i in range(40):
            try:
                # Cancelled at a different point of the turn each time.
                await asyncio.wait_for(async_turns(stack, 1), timeout=0.0005 * i)
            except asyncio.TimeoutError:
                cancelled += 1

    asyncio.run(main())
    assert cancelled > 0
    answers = sync_turns(stack, 1)
    assert answers[-1]["tasks"]["t0"] == "step 0"
    notes = [a for a in answers if isinstance(a, dict) and a.get("ok") and "key" in str(a)]
    assert notes
    store.close()


def test_concurrent_async_writes_to_shared_memory_keep_their_order(postgres_url: str) -> None:
    """Writes to one SharedMemory from tasks on one loop: each waits for PostgreSQL while it
    holds the memory's lock, so the next task must wait for the lock, not walk in (a
    threading.RLock would let it: same thread) and number its entry the same."""
    store = PostgresStore(postgres_url)
    empty_postgres_tables(postgres_url)
    stack = stack_on(store)
    memory = stack.layers[1]
    assert isinstance(memory, SharedMemory)

    async def write(i: int) -> dict[str, Any]:
        async with stack.arun(thread_id=f"t{i}", resource_id="u1", agent="a") as run:
            result: dict[str, Any] = await run.acall_tool(
                "memory_write", json.dumps({"key": f"k{i:02d}", "value": i})
            )
            return result

    async def main() -> list[dict[str, Any]]:
        return await asyncio.gather(*(write(i) for i in range(20)))

    results = asyncio.run(main())
    assert all(r["ok"] for r in results), results
    sequences = [item.value["sequence"] for item in store.list(SHARED, limit=100)]
    assert sorted(sequences) == list(range(1, 21))
    store.close()


def test_a_task_lock_held_by_a_thread_does_not_block_the_loop() -> None:
    """A task waiting for a TaskLock a thread holds is suspended; the loop ticks on, and the
    task gets the lock when the thread lets go."""
    lock = TaskLock()
    held = threading.Event()
    release = threading.Event()

    def thread_holds() -> None:
        with lock:
            held.set()
            release.wait(5)

    def critical(order: list[str]) -> None:
        with lock, lock:  # re-entrant for its holder
            order.append("task")

    async def main() -> tuple[float, list[str]]:
        holder = threading.Thread(target=thread_holds)
        holder.start()
        held.wait(5)
        order: list[str] = []
        task = asyncio.create_task(run_sync(critical, order))
        lag = await loop_lag(0.2)
        assert order == [] and not task.done()
        order.append("thread let go")
        release.set()
        await task
        holder.join()
        return lag, order

    lag, order = asyncio.run(main())
    assert lag < 0.1
    assert order == ["thread let go", "task"]


class NetworkEmbedder:
    """An embedding service's client: ``aembed`` waits for the network (a sleep here)."""

    model = "network"
    dim = 4

    def embed(self, texts: Any) -> Any:
        return np.ones((len(texts), self.dim), dtype=np.float32)

    async def aembed(self, texts: Any) -> Any:
        await asyncio.sleep(0.02)
        return self.embed(texts)


def test_a_store_callback_that_embeds_lets_no_other_task_into_its_transaction(
    tmp_path: pathlib.Path,
) -> None:
    """An update's fn runs while SQLite holds the connection and a write transaction; if it
    suspended (to await an embedder), another task's write would go into that transaction
    and be rolled back with it."""
    store = SQLiteStore(tmp_path / "s.db")
    ns = ("callbacks",)

    def embeds_then_refuses(_value: Any) -> Any:
        embed_texts(NetworkEmbedder(), ["a text"])
        raise ValueError("refused after embedding")

    def update() -> None:
        with pytest.raises(ValueError, match="refused after embedding"):
            store.update(ns, "a", embeds_then_refuses)

    async def main() -> None:
        first = asyncio.create_task(run_sync(update))
        second = asyncio.create_task(run_sync(store.put, ns, "b", {"kept": True}))
        await asyncio.gather(first, second)

    asyncio.run(main())
    assert store.get(ns, "a") is None
    kept = store.get(ns, "b")
    assert kept is not None and kept.value == {"kept": True}
    store.close()


def test_an_async_run_opens_with_one_native_read_on_postgres(postgres_url: str) -> None:
    """The opening reads of every layer (read_many) are served by the store's async twin under
    an async run: a sync read there would hold the event loop for a round trip."""
    store = PostgresStore(postgres_url)
    empty_postgres_tables(postgres_url)
    stack = stack_on(store)
    sync_turns(stack, 1)
    native = store.aread_many
    served: list[int] = []

    async def counting(reads: Any) -> Any:
        served.append(len(reads))
        return await native(reads)

    store.aread_many = counting  # type: ignore[method-assign]
    answers = asyncio.run(async_turns(stack, 1))
    assert served  # the working memory opens with one read of its state and journal
    assert answers[-1]["tasks"]["t0"] == "step 0"
    store.close()


def test_a_call_cancelled_under_anyio_waits_for_its_store_call_without_spinning() -> None:
    """anyio (Starlette, FastAPI, MCP servers) delivers a cancelled scope's cancellation again
    at every turn of the loop. A bridged call waits for its store call in flight to finish
    (its writes whole); it must wait idle, not spin the loop (which also starves the worker
    thread doing the store call of the GIL)."""
    import resource

    import anyio

    from memstrata._bridge import await_, in_thread

    def store_call() -> int:
        time.sleep(0.6)
        return 1

    outcome: list[str] = []
    spent: list[float] = []

    async def main() -> None:
        async with anyio.create_task_group() as group:

            async def call() -> None:
                try:
                    await run_sync(lambda: await_(in_thread(store_call), finish=True))
                except BaseException as exc:
                    outcome.append(type(exc).__name__)
                    raise

            group.start_soon(call)
            await anyio.sleep(0.1)
            before = resource.getrusage(resource.RUSAGE_SELF)
            group.cancel_scope.cancel()
        after = resource.getrusage(resource.RUSAGE_SELF)
        spent.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)

    started = time.perf_counter()
    anyio.run(main)
    waited = time.perf_counter() - started
    assert outcome == ["CancelledError"]  # raised once the store call was done
    assert waited >= 0.5
    assert spent[0] < 0.2, f"{spent[0]:.2f} s of CPU while waiting 0.5 s: the loop spun"
