"""Tasks cancelled at a store call of an async turn, as a server cancels them (a client gone, a
timeout, a sibling failing): the store call runs to its end and the cancellation is raised
after it, never turned into a tool result; what the run shows afterwards is what the store
holds; the next call of the same run, and the next turn, work on a whole state."""

from __future__ import annotations

import asyncio
import hashlib
import json
import pathlib
import re
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from store_checks import empty_postgres_tables

from memstrata import (
    AgentMind,
    MemoryStack,
    SharedMemory,
    SQLiteStore,
    ToolResults,
    WorkingMemory,
)
from memstrata._bridge import await_, in_thread
from memstrata.stores import PostgresStore

SCHEMA = {
    "type": "object",
    "properties": {
        "tasks": {"type": "object", "additionalProperties": {"type": "string"}},
        "owner": {"type": "string"},
    },
}


class CancellingStore(SQLiteStore):
    """An SQLite store that cancels ``victim`` at the ``at``-th store call made by async layer
    code (1 for the next), and serves every such call in a worker thread, as it does when
    another connection holds the file: the task is suspended in the call when the
    cancellation comes, as it would be on a busy server."""

    victim: asyncio.Task[Any] | None = None
    at = 0
    calls = 0
    cancelled_in: str | None = None
    when: Callable[[str, tuple[Any, ...]], bool] | None = None

    def cancel_at(
        self,
        victim: asyncio.Task[Any],
        at: int = 1,
        when: Callable[[str, tuple[Any, ...]], bool] | None = None,
    ) -> None:
        """Cancels ``victim`` at its ``at``-th store call, or at the first for which
        ``when(method name, arguments)`` holds."""
        self.victim, self.at, self.calls, self.cancelled_in = victim, at, 0, None
        self.when = when

    def _serve_bridged(
        self, name: str, method: Callable[..., Any], args: tuple[Any, ...], kwargs: Any
    ) -> Any:
        self.calls += 1
        chosen = self.when(name, args) if self.when is not None else self.calls == self.at
        if self.victim is not None and chosen:
            self.victim.cancel()
            self.victim, self.cancelled_in = None, name
        return await_(in_thread(method, *args, **kwargs), finish=True)


async def cancelled_call(
    store: CancellingStore,
    call: Any,
    at: int = 1,
    when: Callable[[str, tuple[Any, ...]], bool] | None = None,
) -> str | None:
    """Runs ``call`` (a coroutine) as a task cancelled at a store call (see
    :meth:`CancellingStore.cancel_at`); returns the call it was cancelled in, after checking
    that the cancellation reached the caller."""
    task = asyncio.ensure_future(call)
    store.cancel_at(task, at, when)
    with pytest.raises(asyncio.CancelledError):
        await task
    return store.cancelled_in


def test_a_run_shows_the_working_memory_a_cancelled_update_stored(
    tmp_path: pathlib.Path,
) -> None:
    """A server that times a tool call out and goes on with the run (``asyncio.wait_for``
    around ``acall_tool``, the timeout caught): the update was stored, as its store call ran to
    its end. The run's next prompt shows it, and a replace that follows is no conflict with
    the run's own write."""
    store = CancellingStore(tmp_path / "s.db")
    stack = MemoryStack([WorkingMemory(schema=SCHEMA)], store=store)

    async def main() -> tuple[str, str, dict[str, Any]]:
        async with stack.arun(thread_id="t", resource_id="u") as run:
            first = await run.acall_tool("working-memory/update", {"owner": "first"})
            assert first["ok"], first
            update = run.acall_tool("working-memory/update", json.dumps({"owner": "second"}))
            assert await cancelled_call(store, update) == "put_if_version"
            prompt = "\n".join(m["content"] for m in await run.aprepare([]))
            snapshot = json.dumps(run.layer("working-memory").snapshot)
            replaced = await run.acall_tool(
                "working-memory/replace", json.dumps({"owner": "third", "tasks": {}})
            )
            return prompt, snapshot, replaced

    prompt, snapshot, replaced = asyncio.run(main())
    assert '"owner": "second"' in prompt, prompt
    assert "second" in snapshot, snapshot
    assert replaced["ok"], replaced
    with stack.run(thread_id="t", resource_id="u") as run:
        assert run.layer("working-memory").snapshot == {"owner": "third", "tasks": {}}
    store.close()


def tool_turn(results: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """A conversation whose tool calls, with these (call_id, result) pairs, came back."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "look it up"}]
    for call_id, result in results:
        call = {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
    return messages


def test_a_reused_call_id_cancelled_as_its_newer_result_is_stored_keeps_each_notice_right(
    tmp_path: pathlib.Path,
) -> None:
    """A server that reuses call ids (``call_0`` at every turn) offloads a newer result under
    one that holds an older: the older moves to an id of its own, and the notice already made
    for it must name that id. Cancelled as the newer result's record is written, the next
    prompt still points each notice at its own result, never the older at the newer."""
    store = CancellingStore(tmp_path / "s.db")
    stack = MemoryStack([ToolResults(threshold_tokens=50)], store=store)
    older = "\n".join(f"older row {i}: eu-{i % 5}" for i in range(200))
    newer = "\n".join(f"newer row {i}: us-{i % 7}" for i in range(200))
    newer_hash = hashlib.sha256(newer.encode()).hexdigest()

    def newer_pointer(name: str, args: tuple[Any, ...]) -> bool:
        return name == "put" and args[1] == "call_0" and newer_hash in str(args[2])

    async def main() -> list[dict[str, Any]]:
        async with stack.arun(thread_id="t", resource_id="u") as run:
            await run.aprepare(tool_turn([("call_0", older)]))
            both = tool_turn([("call_0", older), ("call_0", newer)])
            prepared = run.aprepare(both)
            assert await cancelled_call(store, prepared, when=newer_pointer) == "put"
            prompt = await run.aprepare(both)
            pages = []
            for message in prompt:
                if message["role"] == "tool":
                    named = re.search(r'call_id="([^"]+)"', message["content"])
                    assert named, message["content"]
                    reading = run.acall_tool("read_tool_result", {"call_id": named.group(1)})
                    pages.append(await reading)
            return pages

    pages = asyncio.run(main())
    assert [page["content"].split(":")[0] for page in pages] == ["older row 0", "newer row 0"]
    store.close()


def test_a_postgres_connection_whose_release_is_interrupted_is_closed_and_counted_out(
    postgres_url: str,
) -> None:
    """A store call failing inside its transaction gives its connection back rolling the
    transaction back; a second cancellation during that rollback (a server's shutdown and a
    timeout both cancelling, anyio delivering a cancellation at every await) must not lose
    the connection: it is closed, so the server ends the transaction and its locks, and its
    place in the loop's connections is given back. Else, ``max_size`` such calls later, every
    call on the loop waits for ever."""
    store = PostgresStore(postgres_url, max_size=2)
    empty_postgres_tables(postgres_url)

    async def interrupted() -> None:
        async with store._aconnection() as conn:
            await conn.execute("BEGIN")
            await conn.execute("SELECT pg_advisory_xact_lock(42)")
            rollback = conn.rollback

            async def cancelled_rollback() -> None:
                asyncio.current_task().cancel()  # type: ignore[union-attr]
                await rollback()

            conn.rollback = cancelled_rollback
            raise RuntimeError("a call failing in its transaction")

    async def ended(call: Any) -> asyncio.Future[Any]:
        """``call`` run as a task, once done; a hang (the connections lost) fails the test
        instead of stalling it."""
        task = asyncio.ensure_future(call)
        await asyncio.wait((task,), timeout=10)
        assert task.done(), "the call waits for a connection that never comes back"
        return task

    async def main() -> Any:
        for _ in range(3):
            with pytest.raises(asyncio.CancelledError):
                (await ended(interrupted())).result()
        return (await ended(store.aget(("k",), "k"))).result()

    assert asyncio.run(main()) is None
    with psycopg.connect(postgres_url, autocommit=True) as other:
        # The transactions were ended with their connections: the lock is free.
        assert other.execute("SELECT pg_try_advisory_lock(42)").fetchone() == (True,)
    store.close()


def test_a_turn_cancelled_at_each_of_its_store_calls_leaves_a_whole_state(
    tmp_path: pathlib.Path,
) -> None:
    """A whole turn (open, prepare offloading a result, a working-memory update, mind tools,
    a shared-memory write, the close flushing the mind's draft) cancelled at its first store
    call, then its second, and so on to the last: each time the cancellation reaches the
    caller, the working memory holds both fields of the update or neither, the goal set in
    the turn is stored once (flushed as the run closed) or not at all, and the next turn works
    on what is there."""
    big = "\n".join(f"row {i}: region eu-{i % 5}" for i in range(400))

    async def turn(stack: MemoryStack, i: int) -> None:
        async with stack.arun(thread_id="t", resource_id="u", agent="a") as run:
            await run.aprepare(tool_turn([(f"call_{i}", f"{big}\nturn {i}")]))
            patch = {"owner": f"o{i}", "tasks": {f"t{i}": f"step {i}"}}
            assert (await run.acall_tool("working-memory/update", patch))["ok"]
            goal = await run.acall_tool("mind_set_goal", {"description": f"finish task {i}"})
            assert goal["status"] == "ok", goal
            written = await run.acall_tool("memory_write", {"key": f"k{i}", "value": i})
            assert written["ok"], written

    cuts = 0
    for at in range(1, 40):
        store = CancellingStore(tmp_path / f"s{at}.db")
        layers = [
            WorkingMemory(schema=SCHEMA),
            AgentMind(),
            SharedMemory(store=store, namespace=("shared-memory", "turns")),
            ToolResults(threshold_tokens=50),
        ]
        stack = MemoryStack(layers, store=store)
        asyncio.run(turn(stack, 0))

        async def cut(store: CancellingStore, stack: MemoryStack, at: int) -> str | None:
            task = asyncio.ensure_future(turn(stack, 1))
            store.cancel_at(task, at)
            try:
                await task
            except asyncio.CancelledError:
                assert store.cancelled_in is not None
                return store.cancelled_in
            assert store.cancelled_in is None  # a cancellation never ends as a result
            return None

        if asyncio.run(cut(store, stack, at)) is None:
            break  # the turn makes fewer store calls: every one was cut
        cuts += 1
        with stack.run(thread_id="t", resource_id="u", agent="a") as run:
            state = run.layer("working-memory").snapshot
            goals = run.call_tool("mind_recall", {"type": "goal", "query": "finish task"})
            # The next turn works on it.
            assert run.call_tool("working-memory/update", {"owner": "next"})["ok"]
            assert run.call_tool("memory_write", {"key": "k1", "value": "next"})["ok"]
        whole = {"owner": "o1", "tasks": {"t0": "step 0", "t1": "step 1"}}
        assert state in (whole, {"owner": "o0", "tasks": {"t0": "step 0"}}), (at, state)
        descriptions = sorted(g["content"] for g in goals["result"])
        assert descriptions in (["finish task 0"], ["finish task 0", "finish task 1"]), (
            at,
            store.cancelled_in,
            descriptions,
        )
        store.close()
    assert cuts >= 8, cuts
