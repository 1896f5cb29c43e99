"""The OpenAI Agents SDK adapter, driven by the SDK's real agent loop and a fake model that
answers with recorded responses (no key, no network)."""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import (
    Agent,
    FunctionTool,
    ModelResponse,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.models.interface import Model
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from store_checks import ThreadNotingSQLiteStore

from memstrata import (
    AgentMind,
    Budget,
    ContextGate,
    MemoryStack,
    RunContext,
    SQLiteStore,
    ToolResults,
    WorkingMemory,
)
from memstrata.exceptions import InvalidInputError
from memstrata.integrations.openai_agents import AgentsMemory, MemstrataSession
from memstrata.stores import erase


def synchronously(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Runs an async test on a fresh event loop (the suite has no async plugin)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


set_tracing_disabled(True)  # nothing to export to: no key, no network

PROFILE = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "ship": {"type": "string"}},
}


def call(name: str, arguments: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call",
        id=f"fc_{call_id}",
        call_id=call_id,
        name=name,
        arguments=json.dumps(arguments),
        status="completed",
    )


def say(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        type="message",
        id="msg_1",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


class FakeModel(Model):
    """The SDK's Model interface answering with recorded outputs, one per call; keeps what it
    was sent."""

    def __init__(self, outputs: list[list[Any] | Exception]) -> None:
        self.outputs = list(outputs)
        self.calls: list[dict[str, Any]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        self.calls.append(
            {
                "instructions": system_instructions,
                "input": input if isinstance(input, str) else list(input),
                "tools": tools,
            }
        )
        output = self.outputs.pop(0)
        if isinstance(output, Exception):
            raise output
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the fake model does not stream")


class StreamingFakeModel(FakeModel):
    """FakeModel that streams: each recorded output comes as one completed response."""

    async def stream_response(  # type: ignore[override]
        self, system_instructions: str | None, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        self.calls.append({"instructions": system_instructions, "input": input})
        output = self.outputs.pop(0)
        await asyncio.sleep(0.01)  # a provider's latency: the stream's task yields here
        response = Response(
            id="resp_1",
            created_at=0,
            model="fake",
            object="response",
            output=output,
            parallel_tool_calls=True,
            tool_choice="auto",
            tools=[],
        )
        yield ResponseCompletedEvent(
            type="response.completed", response=response, sequence_number=0
        )


def make_memory(path: Path, **kwargs: Any) -> AgentsMemory:
    stack = MemoryStack([WorkingMemory(schema=PROFILE)], store=SQLiteStore(str(path)))
    return AgentsMemory(stack, thread_id="t1", resource_id="user-42", **kwargs)


def make_agent(memory: AgentsMemory, model: Model, tools: list[Any] | None = None) -> Agent[Any]:
    return Agent(
        name="assistant",
        instructions=memory.instructions("You are a release assistant."),
        tools=[*(tools or []), *memory.tools()],
        model=model,
    )


@synchronously
async def test_memory_written_by_a_tool_shows_next_turn_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    db = tmp_path / "agent.db"
    memory = make_memory(db)
    model = FakeModel(
        [
            # Turn 1: the model writes working memory (strict: it pads "ship" with null).
            [call("working-memory_update", {"name": "Priya", "ship": None}, "call_1")],
            [say("Noted, Priya.")],
            # Turn 2: it answers from what the instructions show.
            [say("You are Priya.")],
        ]
    )
    agent = make_agent(memory, model)
    session = memory.session()

    first = await memory.run(agent, "I'm Priya.", session=session)
    assert first.final_output == "Noted, Priya."
    # The tool answered with the stack's JSON payload...
    outputs = [i for i in model.calls[1]["input"] if i.get("type") == "function_call_output"]
    assert json.loads(outputs[0]["output"])["ok"] is True
    # ...and the second call of the same turn already shows the write.
    assert '"name": "Priya"' in model.calls[1]["instructions"]
    assert model.calls[0]["instructions"].startswith("You are a release assistant.")
    assert "Priya" not in model.calls[0]["instructions"]
    # The padded null was stripped: "ship" was never stored as null.
    assert '"ship"' not in model.calls[1]["instructions"]

    second = await memory.run(agent, "Who am I?", session=session)
    assert second.final_output == "You are Priya."
    assert '"name": "Priya"' in model.calls[2]["instructions"]
    # The session gave the model the first turn's history.
    texts = json.dumps(model.calls[2]["input"])
    assert "I'm Priya." in texts and "Noted, Priya." in texts and "call_1" in texts

    # A restart: a new store object on the same SQLite file.
    memory.stack.store.close()
    again = make_memory(db)
    history = await again.session().get_items()
    roles = [item.get("role") or item.get("type") for item in history]
    assert roles == [
        "user",
        "function_call",
        "function_call_output",
        "assistant",
        "user",
        "assistant",
    ]
    restarted = FakeModel([[say("Still Priya.")]])
    third = await again.run(make_agent(again, restarted), "And now?", session=again.session())
    assert third.final_output == "Still Priya."
    assert '"name": "Priya"' in restarted.calls[0]["instructions"]
    assert "Noted, Priya." in json.dumps(restarted.calls[0]["input"])
    again.stack.store.close()


def test_tools_are_function_tools_strict_where_the_schema_allows(tmp_path: Path) -> None:
    closed = {**PROFILE, "additionalProperties": False}
    for schema, strict in ((closed, True), ({"type": "object"}, False)):
        stack = MemoryStack([WorkingMemory(schema=schema)], store="memory://")
        tools = AgentsMemory(stack, thread_id="t").tools()
        assert all(isinstance(t, FunctionTool) for t in tools)
        by_name = {t.name: t for t in tools}
        update = by_name["working-memory_update"]
        assert update.strict_json_schema is strict
        if strict:
            assert update.params_json_schema["additionalProperties"] is False
            assert update.params_json_schema["required"] == ["name", "ship"]
        else:
            assert update.params_json_schema == {"type": "object"}


def test_tools_listed_before_the_agent_exists_name_the_option_a_mind_needs() -> None:
    # The tools are listed for Agent(tools=...), before any agent's name is known: an AgentMind
    # stores under the agent scope, which then has to come from AgentsMemory(agent=...).
    stack = MemoryStack([WorkingMemory(), AgentMind()], store="memory://")
    with pytest.raises(InvalidInputError, match=r"AgentsMemory\(agent=\.\.\.\)"):
        AgentsMemory(stack, thread_id="t").tools()
    names = {t.name for t in AgentsMemory(stack, thread_id="t", agent="helper").tools()}
    assert "mind_believe" in names


@synchronously
async def test_a_scope_a_layer_lacks_is_named_as_the_option_that_gives_it() -> None:
    # A user-scoped working memory needs the user: the error names AgentsMemory's option, not
    # the agent's (giving agent= would not help) nor stack.run's (the caller never calls it).
    stack = MemoryStack([WorkingMemory(scope="resource")], store="memory://")
    for memory in (
        AgentsMemory(stack, thread_id="t"),
        AgentsMemory(stack, thread_id="t", agent="a"),
    ):
        with pytest.raises(InvalidInputError, match=r"needs AgentsMemory\(resource_id=\.\.\.\)$"):
            memory.tools()
        agent = Agent(name="assistant", model=FakeModel([[say("hi")]]))
        with pytest.raises(InvalidInputError, match=r"needs AgentsMemory\(resource_id=\.\.\.\)$"):
            await memory.run(agent, "hi")


@synchronously
async def test_an_agent_built_from_another_conversations_memory_is_refused() -> None:
    """The SDK's idiom is an Agent built once: one built from a module-level AgentsMemory and
    run by each request's own would answer every user from the module-level conversation."""
    stack = MemoryStack([WorkingMemory(schema=PROFILE)], store="memory://")
    shared = AgentsMemory(stack, thread_id="default")
    model = FakeModel([[call("working-memory_update", {"name": "Ana"}, "c1")], [say("hi")]])
    agent = make_agent(shared, model)
    mine = AgentsMemory(stack, thread_id="t2", resource_id="ana")
    with pytest.raises(InvalidInputError, match="another AgentsMemory"):
        await mine.run(agent, "I'm Ana.")
    with pytest.raises(InvalidInputError, match="another AgentsMemory"):
        await mine.run(make_agent(mine, model), "I'm Ana.", session=shared.session())
    # So is an agent it hands off to.
    billing = Agent(name="billing", tools=shared.tools(), model=model)
    handoff_model = FakeModel([[call("transfer_to_billing", {}, "h1")]])
    front = Agent(name="front", tools=mine.tools(), handoffs=[billing], model=handoff_model)
    model.outputs = [[call("working-memory_update", {"name": "Ana"}, "c1")], [say("hi")]]
    await mine.run(front, "I'm Ana.")
    sent = model.calls[-1]["input"]
    output = next(i for i in sent if i.get("call_id") == "c1" and "output" in i)
    assert "another AgentsMemory" in output["output"]
    with stack.run(thread_id="default") as run:
        assert run.layer("working-memory").snapshot == {}
    # An agent used as a tool inside the turn keeps its own memory's short runs.
    inner_memory = AgentsMemory(stack, thread_id="inner")
    inner = make_agent(
        inner_memory,
        FakeModel([[call("working-memory_update", {"name": "Bo"}, "i1")], [say("inner")]]),
    )
    outer_model = FakeModel([[call("helper", {"input": "go"}, "o1")], [say("outer")]])
    outer = Agent(
        name="outer",
        instructions=mine.instructions(),
        tools=[inner.as_tool(tool_name="helper", tool_description="helps"), *mine.tools()],
        model=outer_model,
    )
    assert (await mine.run(outer, "go")).final_output == "outer"
    with stack.run(thread_id="inner") as run:
        assert run.layer("working-memory").snapshot == {"name": "Bo"}


class Recorder:
    """A layer that records its runs' lifecycle."""

    name, slot, budget = "recorder", 10, Budget(0, 10)

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def init(self, ctx: RunContext) -> None:
        self.events.append(("open", ctx.agent))

    def recall(self, handle: None, budget: int) -> list[dict[str, Any]]:
        return []

    def observe(self, handle: None, message: dict[str, Any]) -> None:
        pass

    def tools(self, handle: None) -> list[Any]:
        return []

    def on_spawn(self, handle: None, child: RunContext) -> None:
        return None

    def close(self, handle: None, error: BaseException | None) -> None:
        self.events.append(("close", None if error is None else type(error).__name__))


@synchronously
async def test_one_run_per_turn_closed_with_the_error_when_the_agent_raises() -> None:
    recorder = Recorder()
    stack = MemoryStack([recorder, WorkingMemory()], store="memory://")
    memory = AgentsMemory(stack, thread_id="t")
    tools = memory.tools()
    recorder.events.clear()  # listing the tools opened a run of its own
    model = FakeModel(
        [
            [call("working-memory_update", {"name": "Priya"}, "c1")],
            [say("ok")],
            RuntimeError("the provider is down"),
        ]
    )
    agent = Agent(name="assistant", instructions=memory.instructions(), tools=tools, model=model)

    await memory.run(agent, "hi")
    # One run for the whole turn: two model calls and a tool call inside it.
    assert recorder.events == [("open", "assistant"), ("close", None)]
    with pytest.raises(RuntimeError, match="provider is down"):
        await memory.run(agent, "again")
    assert recorder.events[2:] == [("open", "assistant"), ("close", "RuntimeError")]


@synchronously
async def test_a_streamed_run_inside_a_turn_and_a_call_after_it_closed() -> None:
    """``Runner.run_streamed`` runs the agent in a task of its own: consumed inside ``turn()``
    it is one memstrata run; a tool call the SDK still makes after the block (a client that
    went away) is answered ``run_closed`` and writes nothing, as docs/integrations.md says."""
    from agents import Runner

    recorder = Recorder()
    stack = MemoryStack([recorder, WorkingMemory(schema=PROFILE)], store="memory://")
    memory = AgentsMemory(stack, thread_id="t", resource_id="u")
    tools = memory.tools()
    recorder.events.clear()

    model = StreamingFakeModel(
        [[call("working-memory_update", {"name": "Ana"}, "c1")], [say("ok")]]
    )
    agent = Agent(name="assistant", instructions=memory.instructions(), tools=tools, model=model)
    async with memory.turn(agent.name):
        result = Runner.run_streamed(agent, "I'm Ana.")
        async for _ in result.stream_events():
            pass
    assert result.final_output == "ok"
    assert recorder.events == [("open", "assistant"), ("close", None)]
    assert '"name": "Ana"' in model.calls[1]["instructions"]

    calls = [call("working-memory_update", {"ship": "v2"}, "c2")]
    model = StreamingFakeModel([calls, [say("ok")]])
    agent = Agent(name="assistant", tools=tools, model=model)
    async with memory.turn(agent.name):
        result = Runner.run_streamed(agent, "Ship v2.")
        async for _ in result.stream_events():
            break  # the client went away before the tool call
    async for _ in result.stream_events():
        pass
    output = next(i for i in model.calls[1]["input"] if i.get("type") == "function_call_output")
    assert json.loads(output["output"])["error"]["code"] == "run_closed"
    with stack.run(thread_id="t", resource_id="u") as run:
        assert run.layer("working-memory").snapshot == {"name": "Ana"}


@synchronously
async def test_a_bad_tool_call_is_an_error_payload_the_model_reads() -> None:
    stack = MemoryStack([WorkingMemory(schema=PROFILE)], store="memory://")
    memory = AgentsMemory(stack, thread_id="t", strict=False)
    model = FakeModel([[call("working-memory_update", {"name": 42}, "c1")], [say("sorry")]])
    result = await memory.run(make_agent(memory, model), "hi")
    assert result.final_output == "sorry"
    output = next(i for i in model.calls[1]["input"] if i.get("type") == "function_call_output")
    payload = json.loads(output["output"])
    assert payload["ok"] is False and payload["error"]["code"] == "schema_violation"


@synchronously
async def test_a_call_to_a_tool_the_agent_lacks_is_an_error_the_model_reads() -> None:
    """The SDK raises ModelBehaviorError out of Runner.run by default for a tool it was not
    given (the legacy ``updateWorkingMemory`` a model may still know): one made-up name must
    not end the turn."""
    from agents import RunConfig
    from agents.exceptions import ModelBehaviorError

    stack = MemoryStack([WorkingMemory(schema=PROFILE)], store="memory://")
    memory = AgentsMemory(stack, thread_id="t", resource_id="u")
    model = FakeModel(
        [
            [call("updateWorkingMemory", {"name": "Priya"}, "c1")],
            [call("working-memory_update", {"name": "Priya"}, "c2")],
            [say("noted")],
        ]
    )
    result = await memory.run(make_agent(memory, model), "hi")
    assert result.final_output == "noted"
    output = next(i for i in model.calls[1]["input"] if i.get("type") == "function_call_output")
    assert "updateWorkingMemory" in output["output"]
    assert '"name": "Priya"' in model.calls[2]["instructions"]
    # A run_config the caller gives keeps its own choice.
    model = FakeModel([[call("updateWorkingMemory", {"name": "Ana"}, "c1")], [say("x")]])
    with pytest.raises(ModelBehaviorError):
        await memory.run(make_agent(memory, model), "hi", run_config=RunConfig())


@synchronously
async def test_session_history_is_offloaded_and_pruned_to_recoverable_placeholders(
    tmp_path: Path,
) -> None:
    big = "\n".join(f"line {i}: " + "log output " * 20 for i in range(400))
    stack = MemoryStack(
        [ToolResults(threshold_tokens=500)],
        store=SQLiteStore(str(tmp_path / "s.db")),
        gate=ContextGate(max_input_tokens=1100, keep_recent=1, checkpoints_dir=tmp_path),
    )
    memory = AgentsMemory(stack, thread_id="t1")

    @function_tool
    def fetch_logs(day: int) -> str:
        """Fetch the day's build logs."""
        return big if day == 1 else f"day {day}: " + "small output " * 100

    model = FakeModel(
        [
            [call("fetch_logs", {"day": 1}, "logs_1")],
            [say("Day 1 had 400 lines.")],
            [call("fetch_logs", {"day": 2}, "logs_2")],
            [call("fetch_logs", {"day": 3}, "logs_3")],
            [say("Days 2 and 3 were short.")],
            [say("ok")],
        ]
    )
    agent = make_agent(memory, model, tools=[fetch_logs])
    session = memory.session()
    await memory.run(agent, "How was day 1?", session=session)
    await memory.run(agent, "And days 2 and 3?", session=session)

    # Stored as it came: the session keeps every body.
    stored = stack.store.changes(("openai-agents-session", "t1")).items
    assert big in [item.value.get("output") for item in stored]

    await memory.run(agent, "Thanks.", session=session)
    # What the model was shown never goes back into the store: 4 + 6 + 2 items, as they came.
    stored = stack.store.changes(("openai-agents-session", "t1")).items
    assert len([item for item in stored if item.key != "head"]) == 12
    assert big in [item.value.get("output") for item in stored]
    sent = model.calls[-1]["input"]
    outputs = {i["call_id"]: i["output"] for i in sent if i.get("type") == "function_call_output"}
    # The large result was offloaded, the old small one pruned; the latest stays verbatim.
    assert big not in outputs.values()
    assert outputs["logs_1"].startswith(("[summarized: call_id=logs_1", "[tool result offloaded"))
    assert len(outputs["logs_1"]) < 2000
    assert outputs["logs_2"].startswith("[summarized: call_id=logs_2")
    assert outputs["logs_3"].startswith("day 3:")
    # Each placeholder can be read back through the stack's own tool.
    async with memory.turn() as run:
        for call_id, prefix in (("logs_1", "line 0:"), ("logs_2", "day 2:")):
            page = await run.acall_tool("read_tool_result", {"call_id": call_id})
            assert page["content"].startswith(prefix), page


@synchronously
async def test_session_protocol(tmp_path: Path) -> None:
    from agents.memory import Session

    memory = make_memory(tmp_path / "p.db")
    session = memory.session()
    assert isinstance(session, Session) and isinstance(session, MemstrataSession)
    assert session.session_id == "t1"
    assert await session.get_items() == []
    assert await session.pop_item() is None
    items = [{"role": "user", "content": f"m{i}"} for i in range(12)]
    await session.add_items(items[:5])
    await session.add_items(items[5:])
    assert await session.get_items() == items  # in order past ten (keys sort as numbers)
    assert await session.get_items(limit=2) == items[-2:]
    assert await session.pop_item() == items[-1]
    assert await session.get_items(limit=1) == [items[-2]]
    await session.add_items([{"role": "user", "content": "after pop"}])
    assert (await session.get_items())[-1]["content"] == "after pop"
    await session.clear_session()
    assert await session.get_items() == []
    # Another thread's history is a wall away.
    other = AgentsMemory(memory.stack, thread_id="t2").session()
    await other.add_items([{"role": "user", "content": "elsewhere"}])
    assert await session.get_items() == []
    memory.stack.store.close()


@synchronously
async def test_two_users_who_share_a_thread_id_never_share_a_session_or_memory(
    tmp_path: Path,
) -> None:
    """Thread ids are the caller's and often short ("1"): the session of a conversation whose
    runs name a user is that user's, as the working memory and the tool results are."""
    stack = MemoryStack([WorkingMemory(schema=PROFILE)], store=SQLiteStore(str(tmp_path / "u.db")))
    alice = AgentsMemory(stack, thread_id="1", resource_id="alice").session()
    bob = AgentsMemory(stack, thread_id="1", resource_id="bob").session()
    nobody = AgentsMemory(stack, thread_id="1").session()
    await alice.add_items([{"role": "user", "content": "my PIN is 4321"}])
    assert await bob.get_items() == []
    assert await nobody.get_items() == []
    await bob.add_items([{"role": "user", "content": "hello"}])
    await bob.clear_session()
    assert await bob.pop_item() is None
    assert [i["content"] for i in await alice.get_items()] == ["my PIN is 4321"]
    assert bob.session_id == alice.session_id == "1"  # the SDK's id stays the thread
    # Nor their working memory, through the tools and the instructions.
    ana = AgentsMemory(stack, thread_id="1", resource_id="alice")
    write = FakeModel([[call("working-memory_update", {"name": "Alice"}, "c1")], [say("ok")]])
    await ana.run(make_agent(ana, write), "I'm Alice.")
    bo = AgentsMemory(stack, thread_id="1", resource_id="bob")
    read = FakeModel([[say("hi")]])
    await bo.run(make_agent(bo, read), "Who am I?")
    assert "Alice" not in str(read.calls[0]["instructions"])
    for bad in ("", 42, "x" * 300):
        with pytest.raises(InvalidInputError, match="resource_id"):
            AgentsMemory(stack, thread_id="1", resource_id=bad)  # type: ignore[arg-type]
    stack.store.close()


@synchronously
async def test_a_users_sessions_are_erased_by_their_namespace(tmp_path: Path) -> None:
    """What docs/privacy.md says to run when a user asks to be forgotten: every session of the
    user goes, whatever the thread; another user's of the same thread ids stays."""
    stack = MemoryStack([WorkingMemory(schema=PROFILE)], store=SQLiteStore(str(tmp_path / "u.db")))
    sessions = {
        (user, thread): AgentsMemory(stack, thread_id=thread, resource_id=user).session()
        for user in ("alice", "bob")
        for thread in ("1", "2")
    }
    for (user, thread), session in sessions.items():
        await session.add_items([{"role": "user", "content": f"{user} in {thread}"}])

    assert erase(stack.store, ("openai-agents-session", "user-thread", "alice")) > 0

    for (user, thread), session in sessions.items():
        kept = [item["content"] for item in await session.get_items()]
        assert kept == ([] if user == "alice" else [f"{user} in {thread}"])
    stack.store.close()


@pytest.mark.parametrize("head", [b'{"next": 0}', b'{"next": "two"}', b"[3]", b'{"next": -1}'])
@synchronously
async def test_a_session_head_rewritten_by_another_program_overwrites_no_history(
    tmp_path: Path, head: bytes
) -> None:
    """The head record says where the next item goes; one another program rewrote (behind
    the history, or not a count at all) must not make add_items write over stored items: the
    call fails naming the head, and the history is whole."""
    memory = make_memory(tmp_path / "s.db")
    session = memory.session()
    items = [{"role": "user", "content": f"m{i}"} for i in range(3)]
    await session.add_items(items)
    with sqlite3.connect(tmp_path / "s.db") as raw:
        changed = raw.execute("UPDATE items SET value = ? WHERE key = 'head'", (head,)).rowcount
    assert changed == 1
    with pytest.raises(InvalidInputError, match="head"):
        await session.add_items([{"role": "user", "content": "new"}])
    assert await session.get_items() == items
    memory.stack.store.close()


def session_items() -> list[dict[str, Any]]:
    big = "\n".join(f"row {i}: " + "log output " * 20 for i in range(400))
    return [
        {"role": "user", "content": "Show me the logs."},
        {"type": "function_call", "call_id": "c1", "name": "logs", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": big},
        {"role": "user", "content": "Thanks."},
        {"role": "user", "content": "One more."},
    ]


def session_on(store: SQLiteStore) -> MemstrataSession:
    stack = MemoryStack([WorkingMemory(schema=PROFILE), ToolResults()], store=store)
    return AgentsMemory(stack, thread_id="t1", resource_id="user-42").session()


def test_the_session_runs_on_the_loop_and_matches_its_sync_forms(tmp_path: Path) -> None:
    """The session's methods make no thread hop for a store call that need not wait: every
    record read or written runs on the event loop's thread; the history and the records are
    those the sync forms leave."""
    items = session_items()
    noted = ThreadNotingSQLiteStore(tmp_path / "async.db")
    session = session_on(noted)

    async def main() -> tuple[int, Any, list[Any], list[Any]]:
        await session.add_items(items[:2])
        await session.add_items(items[2:])
        popped = await session.pop_item()
        history = await session.get_items()
        await session.add_items([{"role": "user", "content": "after"}])
        return threading.get_ident(), popped, history, await session.get_items(limit=2)

    loop_thread, popped, history, latest = asyncio.run(main())
    assert noted.threads == {loop_thread}

    plain = SQLiteStore(str(tmp_path / "sync.db"))
    sync = session_on(plain)
    sync._append(items[:2])
    sync._append(items[2:])
    assert popped == sync._pop() == items[-1]
    with sync.memory.stack.run(thread_id="t1", resource_id="user-42") as run:
        assert history == sync._for_model(run, [item for _, item in sync._stored()])
    sync._append([{"role": "user", "content": "after"}])
    assert latest == [item for _, item in sync._stored()][-2:]
    assert items[2]["output"] not in [i.get("output") for i in history]  # offloaded for the model

    def records(store: SQLiteStore) -> list[tuple[Any, ...]]:
        found = store.changes(("openai-agents-session", "t1")).items
        return [(i.key, i.value, i.version) for i in found]

    assert records(noted) == records(plain)
    noted.close()
    plain.close()


@synchronously
async def test_runner_run_directly_still_reaches_the_memory(tmp_path: Path) -> None:
    from agents import Runner

    memory = make_memory(tmp_path / "d.db")
    model = FakeModel(
        [[call("working-memory_update", {"name": "Ana", "ship": None}, "c1")], [say("hi Ana")]]
    )
    # No memory.run: each tool call and each rendering opens a short run of the same scope.
    result = await Runner.run(make_agent(memory, model), "I'm Ana.")
    assert result.final_output == "hi Ana"
    assert '"name": "Ana"' in model.calls[1]["instructions"]
    assert '"ship"' not in model.calls[1]["instructions"]
    memory.stack.store.close()


def test_the_example_runs_without_a_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    path = Path(__file__).resolve().parent.parent / "examples" / "openai_agents_sdk.py"
    spec = importlib.util.spec_from_file_location("openai_agents_sdk", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    db = str(tmp_path / "example.db")
    first = asyncio.run(example.main("I'm Priya.", db))
    assert '"ship": "v2.4 on Friday"' in first
    # A second process on the same file: memory and history are there.
    assert '"name": "Priya"' in asyncio.run(example.main("Again.", db))
    store = SQLiteStore(db)
    stored = store.changes(("openai-agents-session", "cli")).items
    assert len([item for item in stored if item.key != "head"]) == 6
    store.close()


@synchronously
async def test_a_short_run_whose_writes_cannot_be_committed_is_an_error_payload(
    tmp_path: Path,
) -> None:
    # Runner.run directly: the call's short run flushes the mind's draft after the tool
    # answered. When that fails (another process holds the database's write lock past the busy
    # timeout), the model reads an error payload, not the tool's "created".
    import sqlite3

    from agents import Runner

    from memstrata import AgentMind

    db = tmp_path / "locked.db"
    stack = MemoryStack([AgentMind()], store=SQLiteStore(str(db), busy_timeout=0.2))
    with stack.run(agent="assistant"):
        pass  # the tables exist
    memory = AgentsMemory(stack, thread_id="t1", agent="assistant", strict=False)
    belief = {"content": "Staging uses a different API key.", "confidence": "high"}
    model = FakeModel([[call("mind_believe", belief, "c1")], [say("noted")]])
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        result = await Runner.run(make_agent(memory, model), "remember")
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert result.final_output == "noted"
    output = next(i for i in model.calls[1]["input"] if i.get("type") == "function_call_output")
    payload = json.loads(output["output"])
    assert payload["ok"] is False and payload["error"]["code"] == "memory_unavailable"
    assert payload["error"]["retry"] is True
    assert "busy" in payload["error"]["message"]
    assert "the call's writes were not committed" in payload["error"]["message"]
    stack.store.close()
