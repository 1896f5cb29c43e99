"""The integrations' async paths against the same work hopping to a worker thread.

LangGraph's ``abatch`` on ``MemstrataStore`` (a get and a put in a namespace already read) and
the OpenAI Agents SDK session's ``add_items`` (one item), on SQLite. Each runs on the event
loop (see memstrata._bridge); the peers are the same calls as an async wrapper around a sync
library usually runs them, ``asyncio.to_thread``, and the sync calls with no loop at all. Each
timed call makes ``CALLS`` awaits inside one ``run_until_complete``, so the loop's own start and
stop cost is shared out. Target: the async path faster than the thread hop (the ratio against
``asyncio.to_thread`` >= 1x); its ratio to the sync calls is printed too (each store call on the
loop sets SQLite's busy timeout to 0 and back around its statements: two statements more).
"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from benchkit import compare

pytest.importorskip("langgraph.store.base")
pytest.importorskip("agents")

from langgraph.store.base import GetOp, PutOp

from memstrata import MemoryStack, SQLiteStore, WorkingMemory
from memstrata.integrations.langgraph import MemstrataStore
from memstrata.integrations.openai_agents import AgentsMemory

CALLS = 20
TARGET = "async path faster than asyncio.to_thread (>= 1x)"


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()


def awaited(
    loop: asyncio.AbstractEventLoop, call: Callable[[], Awaitable[Any]]
) -> Callable[[], None]:
    async def calls() -> None:
        for _ in range(CALLS):
            await call()

    return lambda: loop.run_until_complete(calls())


def repeated(call: Callable[[], Any]) -> Callable[[], None]:
    def calls() -> None:
        for _ in range(CALLS):
            call()

    return calls


def test_langgraph_abatch(
    benchmark: object, loop: asyncio.AbstractEventLoop, tmp_path: pathlib.Path
) -> None:
    store = MemstrataStore(SQLiteStore(tmp_path / "lg.db"), index=None)
    ops = [GetOp(("memories", "u1"), "m1"), PutOp(("memories", "u1"), "m2", {"text": "noted"})]
    store.batch([PutOp(("memories", "u1"), "m1", {"text": "first"})])
    got = loop.run_until_complete(store.abatch(ops))[0]
    assert got is not None and got.value == store.batch(ops)[0].value == {"text": "first"}
    ratios = compare(
        benchmark,
        f"langgraph abatch on SQLite (x{CALLS})",
        awaited(loop, lambda: store.abatch(ops)),
        {
            "sync batch": repeated(lambda: store.batch(ops)),
            "asyncio.to_thread(batch)": awaited(loop, lambda: asyncio.to_thread(store.batch, ops)),
        },
        target=TARGET,
    )
    print(f"  async / sync: {1 / ratios['sync batch']:.2f}x")
    store.store.close()


def test_agents_session_add_items(
    benchmark: object, loop: asyncio.AbstractEventLoop, tmp_path: pathlib.Path
) -> None:
    store = SQLiteStore(tmp_path / "session.db")
    memory = AgentsMemory(MemoryStack([WorkingMemory()], store=store), thread_id="t1")
    session = memory.session()
    item = [{"role": "user", "content": "one more message"}]
    ratios = compare(
        benchmark,
        f"openai-agents session add_items on SQLite (x{CALLS})",
        awaited(loop, lambda: session.add_items(item)),
        {
            "sync form": repeated(lambda: session._append(item)),
            "asyncio.to_thread(sync form)": awaited(
                loop, lambda: asyncio.to_thread(session._append, item)
            ),
        },
        target=TARGET,
    )
    print(f"  async / sync: {1 / ratios['sync form']:.2f}x")
    store.close()
