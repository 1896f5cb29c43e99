"""The Pydantic AI adapter, driven by Pydantic AI's real agent loop and its FunctionModel,
scripted per test (no key, no network)."""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from memstrata import AgentMind, Budget, MemoryStack, RunContext, SQLiteStore, WorkingMemory
from memstrata.exceptions import InvalidInputError
from memstrata.integrations.pydantic_ai import MemoryCapability, MemstrataToolset

PROFILE = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "ship": {"type": "string"}},
}

Step = Callable[[list[ModelMessage], AgentInfo], ModelResponse]


class Script:
    """A FunctionModel's function answering with one scripted step per model request; keeps
    the instructions, tools and messages each request was sent."""

    def __init__(self, steps: list[Step | ModelResponse | Exception]) -> None:
        self.steps = list(steps)
        self.calls: list[dict[str, Any]] = []
        self.model = FunctionModel(self.answer)

    def answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.calls.append(
            {"instructions": info.instructions, "tools": info.function_tools, "messages": messages}
        )
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        return step if isinstance(step, ModelResponse) else step(messages, info)


def call(name: str, args: dict[str, Any] | str, call_id: str = "c1") -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=call_id)])


def say(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text)])


def returned(messages: list[ModelMessage]) -> list[Any]:
    """The tool results the model was sent, in order."""
    return [
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


def make_memory(path: Path, **kwargs: Any) -> MemoryCapability:
    stack = MemoryStack([WorkingMemory(schema=PROFILE)], store=SQLiteStore(str(path)))
    return MemoryCapability(stack, thread_id="t1", resource_id="user-42", **kwargs)


def make_agent(memory: MemoryCapability, script: Script) -> Agent[None, str]:
    return Agent(
        script.model,
        name="assistant",
        instructions="You are a release assistant.",
        capabilities=[memory],
    )


def test_memory_written_through_the_toolset_shows_next_call_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    db = tmp_path / "agent.db"
    memory = make_memory(db)
    script = Script(
        [
            call("working-memory_update", {"name": "Priya", "ship": "v2.4 on Friday"}),
            say("Noted, Priya."),
            say("You are Priya."),
        ]
    )
    agent = make_agent(memory, script)

    first = agent.run_sync("I'm Priya.")
    assert first.output == "Noted, Priya."
    # The tool answered with the stack's JSON payload...
    assert returned(script.calls[1]["messages"]) == [{"ok": True, "version": 1}]
    # ...and the next model call of the same run already shows the write.
    before, after = script.calls[0]["instructions"], script.calls[1]["instructions"]
    assert before.startswith("You are a release assistant.")
    assert "<working_memory>" in before and "Priya" not in before
    assert '"name": "Priya"' in after and '"ship": "v2.4 on Friday"' in after

    second = agent.run_sync("Who am I?", message_history=first.all_messages())
    assert second.output == "You are Priya."
    assert '"name": "Priya"' in script.calls[2]["instructions"]

    # A restart: a new MemoryStack on the same SQLite file.
    memory.stack.store.close()
    again = make_memory(db)
    restarted = Script([say("Still Priya.")])
    third = make_agent(again, restarted).run_sync("And now?")
    assert third.output == "Still Priya."
    assert '"name": "Priya"' in restarted.calls[0]["instructions"]
    assert '"ship": "v2.4 on Friday"' in restarted.calls[0]["instructions"]
    again.stack.store.close()


def test_the_tools_carry_the_stacks_json_schemas() -> None:
    stack = MemoryStack([WorkingMemory(schema=PROFILE)], store="memory://")
    script = Script([say("ok")])
    make_agent(MemoryCapability(stack, thread_id="t"), script).run_sync("hi")
    with stack.run(thread_id="t") as run:
        specs = {spec["name"]: spec for spec in run.tool_specs("responses")}
    tools = {tool.name: tool for tool in script.calls[0]["tools"]}
    assert set(tools) == set(specs) == {"working-memory_update", "working-memory_replace"}
    for name, tool in tools.items():
        assert tool.parameters_json_schema == specs[name]["parameters"]
        assert tool.description == specs[name]["description"]
        assert tool.strict is None  # left to the model


def test_strict_schemas_where_the_schema_allows_and_padding_is_stripped() -> None:
    closed = {**PROFILE, "additionalProperties": False}
    for schema, strict in ((closed, True), ({"type": "object"}, False)):
        stack = MemoryStack([WorkingMemory(schema=schema)], store="memory://")
        memory = MemoryCapability(stack, thread_id="t", strict=True)
        script = Script([say("ok")])
        make_agent(memory, script).run_sync("hi")
        update = next(t for t in script.calls[0]["tools"] if t.name == "working-memory_update")
        assert update.strict is strict
        if strict:
            assert update.parameters_json_schema["additionalProperties"] is False
            assert update.parameters_json_schema["required"] == ["name", "ship"]
        else:  # said open, as it is: Pydantic AI's OpenAI profile would close it
            assert update.parameters_json_schema == {"type": "object", "additionalProperties": True}

    # A strict model pads "ship" with null: it is stripped, never stored as null.
    stack = MemoryStack([WorkingMemory(schema=closed)], store="memory://")
    memory = MemoryCapability(stack, thread_id="t", strict=True)
    script = Script([call("working-memory_update", {"name": "Priya", "ship": None}), say("ok")])
    make_agent(memory, script).run_sync("I'm Priya.")
    assert returned(script.calls[1]["messages"])[0]["ok"] is True
    assert '"name": "Priya"' in script.calls[1]["instructions"]
    assert '"ship"' not in script.calls[1]["instructions"]


def test_an_open_object_stays_open_in_the_tool_an_openai_model_is_sent() -> None:
    # Pydantic AI's OpenAI profile closes every object schema that does not say it is open
    # (strict=None), so {"type": "object"} reached the model as "no fields allowed".
    httpx = pytest.importorskip("httpx")
    openai = pytest.importorskip("openai")
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    sent: list[dict[str, Any]] = []

    def answer(request: Any) -> Any:
        sent.append(orjson.loads(request.content))
        reply = {"role": "assistant", "content": "ok"}
        choice = {"index": 0, "finish_reason": "stop", "message": reply}
        return httpx.Response(
            200,
            json={"id": "r", "object": "chat.completion", "created": 0, "model": "gpt-4o"}
            | {"choices": [choice]},
        )

    http = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    client = openai.AsyncOpenAI(api_key="recorded", http_client=http)
    model = OpenAIChatModel("gpt-4o", provider=OpenAIProvider(openai_client=client))
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "notes": {"type": "object"}},
    }
    for layer in (WorkingMemory(schema={"type": "object"}), WorkingMemory(schema=schema)):
        stack = MemoryStack([layer], store="memory://")
        agent = Agent(model, name="bot", capabilities=[MemoryCapability(stack, thread_id="t")])
        assert agent.run_sync("hi").output == "ok"
        tools = {tool["function"]["name"]: tool["function"] for tool in sent[-1]["tools"]}
        parameters = tools["working-memory_update"]["parameters"]
        open_object = parameters["properties"].get("notes", parameters)
        assert open_object.get("additionalProperties", True) is not False, parameters


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


def test_one_run_per_agent_run_closed_with_the_error_when_the_agent_raises() -> None:
    recorder = Recorder()
    stack = MemoryStack([recorder, WorkingMemory()], store="memory://")
    script = Script(
        [
            call("working-memory_update", {"name": "Priya"}),
            say("ok"),
            RuntimeError("the provider is down"),
        ]
    )
    agent = make_agent(MemoryCapability(stack, thread_id="t"), script)
    assert recorder.events == []  # building the agent opens no run

    agent.run_sync("hi")
    # One run for the whole agent run: two model calls, a tool call and the tool listings.
    assert recorder.events == [("open", "assistant"), ("close", None)]
    with pytest.raises(RuntimeError, match="provider is down"):
        agent.run_sync("again")
    assert recorder.events[2:] == [("open", "assistant"), ("close", "RuntimeError")]


def test_the_scope_given_wins_over_the_agent_name() -> None:
    recorder = Recorder()
    stack = MemoryStack([recorder], store="memory://")
    make_agent(
        MemoryCapability(stack, thread_id="t", agent="planner"), Script([say("ok")])
    ).run_sync("hi")
    assert recorder.events == [("open", "planner"), ("close", None)]


def test_an_agent_without_a_name_names_the_option_a_mind_needs() -> None:
    stack = MemoryStack([WorkingMemory(), AgentMind()], store="memory://")
    memory = MemoryCapability(stack, thread_id="t")
    agent = Agent(Script([say("ok")]).model, capabilities=[memory])
    with pytest.raises(InvalidInputError, match=r"MemoryCapability\(agent=\.\.\.\)"):
        asyncio.run(agent.run("hi"))  # awaited here: no frame to take a variable's name from
    named = Agent(Script([say("ok")]).model, name="helper", capabilities=[memory])
    assert named.run_sync("hi").output == "ok"


def test_two_users_who_share_a_thread_id_never_share_memory() -> None:
    stack = MemoryStack([WorkingMemory(schema=PROFILE)], store="memory://")
    agent = Agent(Script([call("working-memory_update", {"name": "Ana"}), say("ok")]).model)
    agent.run_sync("hi", capabilities=[MemoryCapability(stack, thread_id="1", resource_id="ana")])
    script = Script([say("ok")])
    bo = MemoryCapability(stack, thread_id="1", resource_id="bo")
    Agent(script.model).run_sync("hi", capabilities=[bo])
    assert "Ana" not in str(script.calls[0]["instructions"])
    with stack.run(thread_id="1", resource_id="ana") as run:
        assert run.layer("working-memory").snapshot == {"name": "Ana"}


def test_a_scope_a_layer_lacks_is_named_as_the_option_that_gives_it() -> None:
    # A user-scoped working memory needs the user: the error names the capability's option, not
    # the agent's name (naming the agent would not help).
    stack = MemoryStack([WorkingMemory(scope="resource")], store="memory://")
    for name in (None, "assistant"):
        agent = Agent(Script([say("hi")]).model, name=name)
        memory = MemoryCapability(stack, thread_id="t")
        with pytest.raises(
            InvalidInputError, match=r"needs MemoryCapability\(resource_id=\.\.\.\)$"
        ):
            agent.run_sync("hi", capabilities=[memory])


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ({"name": 42}, "schema_violation"),
        ('{"name": "Priya"', "invalid_arguments"),
        ("[1, 2]", "invalid_arguments"),
        ('{"name": 123456789012345678901234}', "invalid_arguments"),  # past 64 bits
        ({"nickname": "P"}, "schema_violation"),
    ],
)
def test_a_bad_call_is_an_error_payload_the_model_reads(
    args: dict[str, Any] | str, code: str
) -> None:
    closed = {**PROFILE, "additionalProperties": False}
    stack = MemoryStack([WorkingMemory(schema=closed)], store="memory://")
    script = Script([call("working-memory_update", args), say("sorry")])
    result = make_agent(MemoryCapability(stack, thread_id="t"), script).run_sync("hi")
    assert result.output == "sorry"
    (payload,) = returned(script.calls[1]["messages"])
    assert payload["ok"] is False and payload["tool"] == "working-memory_update"
    assert payload["error"]["code"] == code, payload
    # The stack answered: no retry prompt from the framework, nothing stored.
    parts = [p for m in script.calls[1]["messages"] for p in getattr(m, "parts", [])]
    assert not any(isinstance(p, RetryPromptPart) for p in parts)
    assert "<working_memory>\n</working_memory>" in script.calls[1]["instructions"]


def test_concurrent_runs_of_one_agent_keep_their_own_conversations() -> None:
    stack = MemoryStack([WorkingMemory(schema=PROFILE)], store="memory://")

    def step(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # Each conversation's own turn, whatever order the two runs reach the model in.
        if returned(messages):
            return say("ok")
        prompt = str(messages[0].parts[-1].content)  # type: ignore[union-attr]
        return call("working-memory_update", {"name": prompt})

    script = Script([step, step, step, step])
    agent = Agent(script.model, name="assistant")  # one agent, a capability per run

    async def both() -> None:
        await asyncio.gather(
            *(
                agent.run(name, capabilities=[MemoryCapability(stack, thread_id=name)])
                for name in ("Ana", "Bo")
            )
        )

    asyncio.run(both())
    for name in ("Ana", "Bo"):
        with stack.run(thread_id=name) as run:
            assert run.layer("working-memory").snapshot == {"name": name}


def test_the_toolset_alone_still_reaches_the_memory() -> None:
    stack = MemoryStack([WorkingMemory(schema=PROFILE)], store="memory://")
    memory = MemoryCapability(stack, thread_id="t")
    toolset = memory.get_toolset()
    assert isinstance(toolset, MemstrataToolset) and toolset.id == "memstrata"
    script = Script([call("working-memory_update", {"name": "Ana"}), say("hi Ana")])
    # No capability: each listing and call opens a short run of the same scope.
    result = Agent(script.model, toolsets=[toolset]).run_sync("I'm Ana.")
    assert result.output == "hi Ana"
    assert returned(script.calls[1]["messages"]) == [{"ok": True, "version": 1}]
    with stack.run(thread_id="t") as run:
        assert run.layer("working-memory").snapshot == {"name": "Ana"}


def test_the_example_runs_without_a_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    path = Path(__file__).resolve().parent.parent / "examples" / "pydantic_ai_agent.py"
    spec = importlib.util.spec_from_file_location("pydantic_ai_agent", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    db = str(tmp_path / "example.db")
    first = asyncio.run(example.main("I'm Priya.", db))
    assert '"ship": "v2.4 on Friday"' in first
    # A second process on the same file: the memory is there from the first request.
    assert '"name": "Priya"' in asyncio.run(example.main("Again.", db))


def test_a_short_run_whose_writes_cannot_be_committed_is_an_error_payload(tmp_path: Path) -> None:
    # The toolset alone: the call's short run flushes the mind's draft after the tool answered.
    # When that fails (another process holds the database's write lock past the busy timeout),
    # the model reads an error payload, not the tool's "created", and the agent run goes on.
    import sqlite3

    from memstrata import AgentMind

    db = tmp_path / "locked.db"
    stack = MemoryStack([AgentMind()], store=SQLiteStore(db, busy_timeout=0.2))
    with stack.run(agent="assistant"):
        pass  # the tables exist
    toolset = MemoryCapability(stack, thread_id="t1").get_toolset()
    belief = {"content": "Staging uses a different API key.", "confidence": "high"}
    script = Script([call("mind_believe", belief), say("noted")])
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        result = Agent(script.model, name="assistant", toolsets=[toolset]).run_sync("remember")
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert result.output == "noted"
    (payload,) = returned(script.calls[1]["messages"])
    assert payload["ok"] is False and payload["error"]["code"] == "memory_unavailable"
    assert payload["error"]["retry"] is True
    assert "busy" in payload["error"]["message"]
    assert "the call's writes were not committed" in payload["error"]["message"]
