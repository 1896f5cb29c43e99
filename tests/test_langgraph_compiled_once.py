"""An agent compiled once serving every request, built with LangGraph's ``create_react_agent``
(``memstrata_tools(stack)`` and ``react_prompt(stack)``) or LangChain's ``create_agent``
(``MemstrataMiddleware(stack)``): the tools and the prompt take the run the server opened around
the call, and nothing else.

The model is scripted from what it is sent (the user's line and the system prompt), so
concurrent requests through one compiled graph each get their own answers, and the prompt
each model call saw is kept to check whose memory it showed.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import pytest

pytest.importorskip("langgraph.prebuilt")

from langgraph.prebuilt import create_react_agent
from scripted_chat_models import PerUserModel

from memstrata import MemoryStack, SQLiteStore, WorkingMemory
from memstrata.exceptions import InvalidInputError
from memstrata.integrations.langgraph import memory_prompt, memstrata_tools, react_prompt
from memstrata.stores import InMemoryStore


def user_scoped_stack(store: Any) -> MemoryStack:
    return MemoryStack([WorkingMemory(schema={"type": "object"}, scope="resource")], store=store)


def react_agent(stack: MemoryStack, model: PerUserModel) -> Any:
    return create_react_agent(
        model, memstrata_tools(stack), prompt=react_prompt(stack, system="Be brief.")
    )


def middleware_agent(stack: MemoryStack, model: PerUserModel) -> Any:
    from langchain.agents import create_agent

    from memstrata.integrations.langchain_agents import MemstrataMiddleware

    return create_agent(model, middleware=[MemstrataMiddleware(stack, system="Be brief.")])


Build = Callable[[MemoryStack, PerUserModel], Any]


@pytest.fixture(params=[react_agent, middleware_agent], ids=["create_react_agent", "create_agent"])
def compiled(request: pytest.FixtureRequest) -> Build:
    """How the one agent of a server is built."""
    if request.param is middleware_agent:
        pytest.importorskip("langchain.agents.middleware")
    return request.param


USERS = [f"user-{i}" for i in range(8)]


def test_one_graph_serves_users_on_threads_each_with_their_own_memory(
    tmp_path: pathlib.Path, compiled: Build
) -> None:
    stack = user_scoped_stack(SQLiteStore(tmp_path / "m.db"))
    model = PerUserModel(prompts={})
    agent = compiled(stack, model)
    start = threading.Barrier(len(USERS))
    answers: dict[str, Any] = {}

    def request(user: str) -> None:
        start.wait()
        with stack.run(thread_id="1", resource_id=user):  # every user's thread is "1"
            out = agent.invoke({"messages": [("user", f"remember {user}-secret")]})
            answers[user] = orjson.loads(out["messages"][2].content)

    threads = [threading.Thread(target=request, args=(u,)) for u in USERS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == {u: {"ok": True, "version": 1} for u in USERS}
    for user in USERS:
        with stack.run(thread_id="other", resource_id=user) as run:
            assert run.layer("working-memory").snapshot == {"fact": f"{user}-secret"}
        # The prompt after the write showed the user's own fact, and nobody else's.
        after = model.prompts[f"{user}-secret"][-1]
        assert f"{user}-secret" in after
        assert [u for u in USERS if f"{u}-secret" in after] == [user]
    stack.store.close()


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_one_graph_serves_concurrent_async_requests_each_with_their_own_memory(
    tmp_path: pathlib.Path, compiled: Build, backend: str
) -> None:
    store = SQLiteStore(tmp_path / "m.db") if backend == "sqlite" else InMemoryStore()
    stack = user_scoped_stack(store)
    model = PerUserModel(prompts={})
    agent = compiled(stack, model)

    async def request(user: str) -> Any:
        async with stack.arun(thread_id="1", resource_id=user):
            out = await agent.ainvoke({"messages": [("user", f"remember {user}-secret")]})
            return orjson.loads(out["messages"][2].content)

    async def main() -> list[Any]:
        return await asyncio.gather(*(request(u) for u in USERS))

    assert asyncio.run(main()) == [{"ok": True, "version": 1}] * len(USERS)
    for user in USERS:
        with stack.run(resource_id=user) as run:
            assert run.layer("working-memory").snapshot == {"fact": f"{user}-secret"}
        after = model.prompts[f"{user}-secret"][-1]
        assert [u for u in USERS if f"{u}-secret" in after] == [user]
    store.close()


def test_a_call_with_no_run_open_writes_nothing_and_says_why(
    caplog: pytest.LogCaptureFixture, compiled: Build
) -> None:
    store = InMemoryStore()
    stack = user_scoped_stack(store)
    [update] = [t for t in memstrata_tools(stack) if t.name == "working-memory_update"]
    with caplog.at_level(logging.ERROR, logger="memstrata.langchain"):
        answer = orjson.loads(update.invoke({"fact": "lost"}))
        assert orjson.loads(asyncio.run(update.ainvoke({"fact": "lost"}))) == answer
    assert answer["ok"] is False and answer["error"]["code"] == "no_run", answer
    assert "stack.run" in answer["error"]["message"]
    assert "no run of its stack open" in caplog.text
    # The prompt refuses: one without the user's memory would pass for one with it.
    with pytest.raises(InvalidInputError, match="no memory run is open"):
        memory_prompt(stack)
    agent = compiled(stack, PerUserModel(prompts={}))
    state = {"messages": [("user", "remember x")]}
    with pytest.raises(InvalidInputError, match="no memory run is open"):
        agent.invoke(state)
    with pytest.raises(InvalidInputError, match="no memory run is open"):
        asyncio.run(agent.ainvoke(state))
    assert store.list(("working-memory",)) == []


def test_a_run_of_another_stack_or_another_thread_is_not_used() -> None:
    store = InMemoryStore()
    stack, other = user_scoped_stack(store), user_scoped_stack(store)
    [update] = [t for t in memstrata_tools(stack) if t.name == "working-memory_update"]
    with other.run(resource_id="intruder"):
        assert orjson.loads(update.invoke({"fact": "x"}))["error"]["code"] == "no_run"
    with stack.run(resource_id="owner") as run:
        seen: list[Any] = []
        elsewhere = threading.Thread(target=lambda: seen.append(stack.current_run()))
        elsewhere.start()
        elsewhere.join()
        assert seen == [None]  # a thread started plainly does not share the context

        async def in_a_thread() -> Any:
            return await asyncio.to_thread(stack.current_run)  # copies the context

        assert asyncio.run(in_a_thread()) is run
        assert orjson.loads(update.invoke({"fact": "mine"})) == {"ok": True, "version": 1}
    assert stack.current_run() is None
    with stack.run(resource_id="intruder") as run:
        assert run.layer("working-memory").snapshot == {}


def test_the_innermost_open_run_answers() -> None:
    stack = user_scoped_stack(InMemoryStore())
    with stack.run(thread_id="t", resource_id="u") as outer:
        with stack.run(thread_id="t", resource_id="u") as inner:  # the same scope again
            assert stack.current_run() is inner
            inner.close()  # closed inside its block: the next one out answers
            assert stack.current_run() is outer
        with outer.spawn(thread_id="sub-task") as child:  # a sub-agent of the request
            assert stack.current_run() is child
        assert stack.current_run() is outer
    opened = stack.run(resource_id="plain").open()  # not entered with `with`: not found
    assert stack.current_run() is None
    opened.close()


def test_two_requests_runs_open_in_one_context_give_neither(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Requests streamed by sync generators, each holding its run open across a yield, stepped
    on one thread (a pooled worker's context is the thread's own): bob's run, entered last,
    was found by alice's tool call, which wrote alice's note into bob's memory."""
    store = InMemoryStore()
    stack = user_scoped_stack(store)
    [update] = [t for t in memstrata_tools(stack) if t.name == "working-memory_update"]

    def request(user: str) -> Any:
        with stack.run(thread_id="t", resource_id=user):
            yield "started"
            yield orjson.loads(update.invoke({"fact": f"{user}-secret"}))

    alice, bob = request("alice"), request("bob")
    next(alice), next(bob)
    with caplog.at_level(logging.ERROR, logger="memstrata"):
        assert next(alice)["error"]["code"] == "no_run"
        assert next(bob)["error"]["code"] == "no_run"
    assert "different conversations, users or agents are open in one context" in caplog.text
    for user in ("alice", "bob"):
        with stack.run(resource_id=user) as run:
            assert run.layer("working-memory").snapshot == {}
    with (
        stack.run(resource_id="alice"),
        stack.run(resource_id="bob"),
        pytest.raises(InvalidInputError, match="no memory run is open"),
    ):
        memory_prompt(stack)


def test_learning_the_tools_shapes_writes_nothing(tmp_path: pathlib.Path) -> None:
    from memstrata import AgentMind, HashingEmbedder, SharedMemory, TeamState, ToolResults

    store = SQLiteStore(tmp_path / "m.db")
    layers = [
        WorkingMemory(schema={"type": "object"}, scope="resource"),
        AgentMind(embedder=HashingEmbedder()),
        ToolResults(tool_calls_dir=tmp_path / "results"),
        SharedMemory(store=store, namespace=("workflow", "w")),
        TeamState(state_dir=tmp_path / "team"),
    ]
    stack = MemoryStack(layers, store=store)
    tools = memstrata_tools(stack)
    assert {"working-memory_update", "mind_recall", "memory_write"} <= {t.name for t in tools}
    assert store.list_after((), None) == []
    written = [f for f in tmp_path.rglob("*") if f.is_file() and not f.name.startswith("m.db")]
    assert written == []  # no result file, no team-state document
    assert stack.current_run() is None
    store.close()


@pytest.mark.parametrize("function", [memstrata_tools, memory_prompt, react_prompt])
def test_anything_but_a_run_or_a_stack_is_refused_by_name(function: Any) -> None:
    with pytest.raises(InvalidInputError, match="takes a Run or a MemoryStack, got dict"):
        function({"thread_id": "t"})


def test_sequence_of_prompts_is_the_requests_own_after_each_write(
    tmp_path: pathlib.Path, compiled: Build
) -> None:
    # Two requests of the same user, one after the other, through the same compiled graph:
    # the second request's first prompt already shows what the first one wrote.
    stack = user_scoped_stack(SQLiteStore(tmp_path / "m.db"))
    model = PerUserModel(prompts={})
    agent = compiled(stack, model)
    for fact in ("first", "second"):
        with stack.run(thread_id="t", resource_id="u"):
            agent.invoke({"messages": [("user", f"remember {fact}")]})
    prompts: Sequence[str] = model.prompts["second"]
    assert "first" in prompts[0] and "second" not in prompts[0]
    assert "second" in prompts[-1]
    stack.store.close()
