"""MemoryStack and Run: lifecycle, budgets, prompt injection, tool routing, spawn."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from memstrata.exceptions import InvalidInputError, ToolError
from memstrata.stack import Budget, Layer, MemoryStack, RunContext, allocate_budgets
from memstrata.stores import ChangesSince, GetMany, InMemoryStore, Read
from memstrata.stores.base import Answer
from memstrata.tools import Tool


@dataclass
class RecordingLayer:
    """A layer that records every hook the run calls, in order."""

    name: str
    slot: int
    budget: Budget = field(default_factory=lambda: Budget(10, 100))
    events: list[tuple[str, Any]] = field(default_factory=list)
    fail_close: bool = False

    def init(self, ctx: RunContext) -> dict[str, Any]:
        self.events.append(("init", ctx.thread_id))
        return {"ctx": ctx, "calls": []}

    def recall(self, handle: dict[str, Any], budget: int) -> list[dict[str, Any]]:
        self.events.append(("recall", budget))
        return [{"content": f"<{self.name}>"}]

    def observe(self, handle: dict[str, Any], message: dict[str, Any]) -> None:
        self.events.append(("observe", message.get("content")))
        if message.get("content") == "explode":
            raise ToolError("cannot apply", code="invalid_arguments")

    def tools(self, handle: dict[str, Any]) -> list[Tool]:
        def echo(args: dict[str, Any]) -> dict[str, Any]:
            handle["calls"].append(args)
            if args.get("crash"):
                raise RuntimeError("bug")
            return {"ok": True, "echo": args}

        return [
            Tool(
                f"{self.name}/echo",
                "Echo.",
                {
                    "type": "object",
                    "properties": {"n": {"type": "integer"}, "crash": {"type": "boolean"}},
                    "additionalProperties": False,
                },
                echo,
            )
        ]

    def on_spawn(self, handle: dict[str, Any], child: RunContext) -> dict[str, Any]:
        self.events.append(("spawn", child.thread_id))
        return {"ctx": child, "calls": [], "parent": handle}

    def close(self, handle: dict[str, Any], error: BaseException | None) -> None:
        self.events.append(("close", type(error).__name__ if error else None))
        if self.fail_close:
            raise RuntimeError(f"{self.name} flush failed")


def make_stack(*layers: RecordingLayer, total: int = 1000) -> MemoryStack:
    return MemoryStack(list(layers), store=InMemoryStore(), total_budget=total)


def test_recording_layer_satisfies_the_protocol() -> None:
    assert isinstance(RecordingLayer("a", 1), Layer)


def test_budgets_give_minimums_first_then_headroom() -> None:
    a = RecordingLayer("a", 1, Budget(100, 300))
    b = RecordingLayer("b", 2, Budget(200, 1500))
    shares = allocate_budgets([a, b], 1000)
    assert shares["a"] >= 100 and shares["b"] >= 200
    assert shares["a"] <= 300 and shares["b"] <= 1500
    assert sum(shares.values()) == 1000
    # Headroom 200 vs 1300: the extra 700 splits in that proportion (to the nearest token).
    assert abs(shares["a"] - (100 + 700 * 200 / 1500)) < 1
    assert allocate_budgets([a, b], 150) == {"a": 100, "b": 50}
    assert allocate_budgets([a, b], 10_000) == {"a": 300, "b": 1500}


def test_prepare_injects_by_slot_after_system_messages() -> None:
    late, early = RecordingLayer("late", 200), RecordingLayer("early", 50)
    stack = make_stack(late, early)
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]
    with stack.run(thread_id="t") as run:
        out = run.prepare(messages)
    assert [m["content"] for m in out] == ["sys", "<early>", "<late>", "hi"]
    assert out[1]["role"] == "system"
    assert messages == [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}]


def test_tools_are_routed_by_seed_or_wire_name() -> None:
    layer = RecordingLayer("wm", 1)
    with make_stack(layer).run(thread_id="t") as run:
        specs = run.tool_specs("openai")
        assert [s["function"]["name"] for s in specs] == ["wm_echo"]
        assert run.call_tool("wm/echo", {"n": 1}) == {"ok": True, "echo": {"n": 1}}
        assert run.call_tool("wm_echo", '{"n": 2}')["echo"] == {"n": 2}
        assert [s["name"] for s in run.tool_specs("anthropic")] == ["wm_echo"]


@pytest.mark.parametrize("other_name", ["wm/echo", "wm_echo"])  # the same name or wire name
def test_two_layers_offering_one_tool_name_are_refused_at_open_naming_both(
    other_name: str,
) -> None:
    first, other = RecordingLayer("wm", 1), RecordingLayer("other", 2)
    other.tools = lambda handle: [Tool(other_name, "Echo.", {"type": "object"}, dict)]  # type: ignore[method-assign]
    with pytest.raises(InvalidInputError) as info:
        make_stack(first, other).run(thread_id="t").open()
    assert f"tool name {other_name!r} is offered by both layer 'wm' and layer 'other'" in str(
        info.value
    )
    assert [e[0] for e in first.events] == ["init", "close"]  # what opened is closed again


def test_a_tool_whose_name_is_its_wire_name_is_indexed_once() -> None:
    layer = RecordingLayer("wm", 1)
    layer.tools = lambda handle: [Tool("wm_echo", "Echo.", {"type": "object"}, dict)]  # type: ignore[method-assign]
    with make_stack(layer).run(thread_id="t") as run:
        assert [s["function"]["name"] for s in run.tool_specs("openai")] == ["wm_echo"]
        assert run.call_tool("wm_echo", {"n": 1}) == {"n": 1}


@pytest.mark.parametrize(
    ("name", "arguments", "code", "fragment"),
    [
        ("nope", {}, "unknown_tool", "available: wm_echo"),
        ("wm/echo", "{bad json", "invalid_arguments", "not valid JSON"),
        ("wm/echo", {"n": "one"}, "invalid_arguments", "$.n: expected integer"),
        ("wm/echo", {"zzz": 1}, "invalid_arguments", "unexpected field 'zzz'"),
        ("wm/echo", {"crash": True}, "internal_error", "RuntimeError"),
        (None, {}, "unknown_tool", "unknown tool None"),
    ],
)
def test_bad_calls_come_back_as_error_payloads(
    name: Any, arguments: Any, code: str, fragment: str
) -> None:
    with make_stack(RecordingLayer("wm", 1)).run(thread_id="t") as run:
        result = run.call_tool(name, arguments)
    assert result["ok"] is False
    assert result["error"]["code"] == code
    assert fragment in result["error"]["message"]


def test_call_tool_after_close_is_an_error_payload() -> None:
    with make_stack(RecordingLayer("wm", 1)).run(thread_id="t") as run:
        pass
    assert run.call_tool("wm/echo", {})["error"]["code"] == "run_closed"


def test_observe_reports_a_layer_failure_without_raising() -> None:
    a, b = RecordingLayer("a", 1), RecordingLayer("b", 2)
    with make_stack(a, b).run(thread_id="t") as run:
        diagnostics = run.observe({"role": "assistant", "content": "explode"})
    assert len(diagnostics) == 2 and "cannot apply" in diagnostics[0]
    assert ("observe", "explode") in b.events


def test_exception_inside_the_block_is_an_error_close() -> None:
    a, b = RecordingLayer("a", 1), RecordingLayer("b", 2)
    with pytest.raises(KeyError), make_stack(a, b).run(thread_id="t"):
        raise KeyError("boom")
    assert a.events[-1] == ("close", "KeyError")
    assert b.events[-1] == ("close", "KeyError")


def test_every_layer_closes_even_if_one_fails() -> None:
    a, b = RecordingLayer("a", 1), RecordingLayer("b", 2, fail_close=True)
    with pytest.raises(RuntimeError, match="b flush failed"), make_stack(a, b).run(thread_id="t"):
        pass
    assert a.events[-1] == ("close", None)


def test_spawn_calls_on_spawn_and_inherits_scope() -> None:
    layer = RecordingLayer("a", 1)
    stack = make_stack(layer)
    with (
        stack.run(thread_id="parent", resource_id="user") as run,
        run.spawn(thread_id="child") as child,
    ):
        handle = child.layer("a")
        assert handle["ctx"].thread_id == "child"
        assert handle["ctx"].resource_id == "user"
        assert handle["ctx"].parent is run.context
        assert handle["parent"] is run.layer("a")
    assert ("spawn", "child") in layer.events


def test_layer_lookup_names_the_layers() -> None:
    with (
        make_stack(RecordingLayer("a", 1)).run(thread_id="t") as run,
        pytest.raises(InvalidInputError, match="no layer named 'b'; layers: a"),
    ):
        run.layer("b")


def test_stack_configuration_errors() -> None:
    with pytest.raises(InvalidInputError, match="unique"):
        make_stack(RecordingLayer("a", 1), RecordingLayer("a", 2))
    with pytest.raises(InvalidInputError, match="Layer protocol"):
        MemoryStack([object()], store=InMemoryStore())  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match="min <= max"):
        Budget(10, 5)


def test_async_run() -> None:
    layer = RecordingLayer("a", 1)

    async def scenario() -> dict[str, Any]:
        async with make_stack(layer).arun(thread_id="t") as run:
            return await run.acall_tool("a/echo", {"n": 3})

    assert asyncio.run(scenario()) == {"ok": True, "echo": {"n": 3}}
    assert layer.events[0] == ("init", "t") and layer.events[-1] == ("close", None)


def test_prepare_anthropic_moves_prompt_items_into_system() -> None:
    early, late = RecordingLayer("early", 50), RecordingLayer("late", 200)
    conversation = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}],
        },
    ]
    with make_stack(late, early).run(thread_id="t") as run:
        system, messages = run.prepare_anthropic(conversation, system="Be brief.")
        bare_system, _ = run.prepare_anthropic(conversation)
    assert system == "Be brief.\n\n<early>\n\n<late>"
    assert bare_system == "<early>\n\n<late>"
    assert messages == conversation


def test_the_stack_closes_only_a_store_it_opened(tmp_path: Any) -> None:
    passed_in = InMemoryStore()
    stack = MemoryStack([RecordingLayer("a", 1)], store=passed_in)
    stack.close()
    passed_in.put(("still",), "usable", 1)  # not closed by the stack
    owned = MemoryStack([RecordingLayer("a", 1)], store=f"sqlite:///{tmp_path}/owned.db")
    owned.close()
    with pytest.raises(Exception, match="closed"):
        owned.store.get(("x",), "k")


def test_the_stack_is_a_context_manager_that_closes_what_it_opened(tmp_path: Any) -> None:
    from memstrata.stores import SQLiteStore

    with MemoryStack([RecordingLayer("a", 1)], store=f"sqlite:///{tmp_path}/w.db") as stack:
        with stack.run(thread_id="t") as run:
            run.call_tool("a/echo", {"n": 1})
        stack.store.put(("open",), "k", 1)
    with pytest.raises(Exception, match="closed"):
        stack.store.get(("open",), "k")

    async def scenario() -> MemoryStack:
        async with MemoryStack([RecordingLayer("a", 1)], store=f"sqlite:///{tmp_path}/a.db") as s:
            async with s.arun(thread_id="t") as run:
                await run.acall_tool("a/echo", {"n": 1})
            return s

    closed = asyncio.run(scenario())
    with pytest.raises(Exception, match="closed"):
        closed.store.get(("x",), "k")

    with SQLiteStore(tmp_path / "mine.db") as mine:
        with MemoryStack([RecordingLayer("a", 1)], store=mine):
            pass
        mine.put(("still",), "usable", 1)  # the caller's store stays open for the caller
        assert mine.get(("still",), "usable") is not None


def test_a_model_name_given_as_the_gate_is_told_to_wrap_it_in_a_context_gate() -> None:
    with pytest.raises(InvalidInputError, match=r"e\.g\. gate=ContextGate\(model='gpt-4o'\)"):
        MemoryStack([RecordingLayer("a", 1)], store=InMemoryStore(), gate="gpt-4o")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"gate must be a ContextGate .*got 5$"):
        MemoryStack([RecordingLayer("a", 1)], store=InMemoryStore(), gate=5)  # type: ignore[arg-type]


def test_a_gate_among_the_layers_is_told_to_go_to_gate() -> None:
    from memstrata.layers import ContextGate

    gate = ContextGate(max_input_tokens=8000)
    with pytest.raises(InvalidInputError, match=r"a gate, not a layer: .*gate=\.\.\."):
        MemoryStack([RecordingLayer("a", 1), gate], store=InMemoryStore())  # type: ignore[list-item]
    assert MemoryStack([RecordingLayer("a", 1)], store=InMemoryStore(), gate=gate).gate is gate


class ReadCountingStore(InMemoryStore):
    """An in-memory store that records every read_many call."""

    def __init__(self) -> None:
        super().__init__()
        self.read_many_calls: list[list[Read]] = []

    def read_many(self, reads: Sequence[Read]) -> list[Answer]:
        self.read_many_calls.append(list(reads))
        return super().read_many(reads)


@dataclass
class OpeningLayer(RecordingLayer):
    """A RecordingLayer that asks for reads when a run opens and keeps what it was given."""

    reads: list[Read] = field(default_factory=list)

    def opening_reads(self, ctx: RunContext) -> list[Read]:
        return self.reads

    def init(  # type: ignore[override]
        self, ctx: RunContext, opened: Mapping[Read, Answer] | None = None
    ) -> dict[str, Any]:
        handle = super().init(ctx)
        handle["opened"] = opened
        return handle


def test_a_run_opens_with_every_layers_reads_in_one_call() -> None:
    store = ReadCountingStore()
    store.put(("a",), "k", 1)
    mark = store.change_mark(("b",))
    store.put(("b",), "j", 2)
    first = OpeningLayer("first", 1, reads=[GetMany(("a",), ("k", "x"))])
    second = OpeningLayer("second", 2, reads=[ChangesSince(("b",), mark)])
    plain = RecordingLayer("plain", 3)
    stack = MemoryStack([first, second, plain], store=store)
    with stack.run(thread_id="t") as run:
        handles = {name: run.layer(name) for name in ("first", "second", "plain")}
    assert store.read_many_calls == [[*first.reads, *second.reads]]
    assert handles["first"]["opened"] == {first.reads[0]: {"k": store.get(("a",), "k")}}
    (changes,) = handles["second"]["opened"].values()
    assert [i.key for i in changes.items] == ["j"]
    assert "opened" not in handles["plain"]
    # A child run derives its handles from the parent's: nothing is read for it.
    with stack.run(thread_id="t") as run, run.spawn(thread_id="child") as child:
        assert child.layer("first")["parent"] is run.layer("first")
    assert len(store.read_many_calls) == 2


def test_reads_are_looked_up_by_value() -> None:
    assert GetMany(["a"], ["k"]) == GetMany(("a",), ("k",))  # type: ignore[arg-type]
    assert hash(GetMany(["a"], ["k"])) == hash(GetMany(("a",), ("k",)))  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="GetMany or ChangesSince"):
        InMemoryStore().read_many([GetMany(("a",), ("k",)), "k"])  # type: ignore[list-item]


@pytest.mark.parametrize("overhead", [-40, True, "12", 2.5, None])
def test_a_layers_prompt_overhead_that_is_not_a_count_is_refused(overhead: Any) -> None:
    """``prompt_overhead`` raises a layer's max: a negative one would take tokens from it, a
    bool or float would be added as a number, and text would fail inside the split. Each is
    refused by the stack with an error naming the layer and the value."""
    layer = RecordingLayer("odd", 1)
    layer.prompt_overhead = overhead  # type: ignore[attr-defined]
    with pytest.raises(InvalidInputError, match=r"odd.*prompt_overhead.*" + repr(overhead)[:3]):
        MemoryStack([layer], store=InMemoryStore())
    with pytest.raises(InvalidInputError, match="prompt_overhead"):
        allocate_budgets([layer], 1_000)


def test_a_layers_prompt_overhead_may_be_counted_with_the_stacks_counter() -> None:
    """A callable ``prompt_overhead`` is given the stack's token counter; what it returns is
    checked like a plain count."""
    seen: list[Any] = []

    def overhead(tokens: Any) -> Any:
        seen.append(tokens)
        return 25

    layer = RecordingLayer("text", 1, Budget(0, 100))
    layer.prompt_overhead = overhead  # type: ignore[attr-defined]
    stack = MemoryStack([layer], store=InMemoryStore(), total_budget=1_000)
    assert stack.budgets == {"text": 125}
    assert seen == [stack.tokens]
    layer.prompt_overhead = lambda tokens: -1  # type: ignore[attr-defined]
    with pytest.raises(InvalidInputError, match=r"text.*prompt_overhead.*-1"):
        MemoryStack([layer], store=InMemoryStore())


def test_a_run_dropped_without_being_closed_says_its_writes_were_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A run used without ``with`` opens on its first call and is never closed: the mind's
    draft is never flushed, and the run logs so when it is collected."""
    import gc

    from memstrata import AgentMind

    stack = MemoryStack([AgentMind()], store=InMemoryStore())

    def handler_without_with() -> None:
        run = stack.run(thread_id="t-1", agent="bot")
        assert run.call_tool("mind_believe", {"content": "Deploys are on Tuesdays."})["id"]

    handler_without_with()
    gc.collect()
    assert "was opened and never closed" in caplog.text
    assert "with stack.run(" in caplog.text and "'bot'" in caplog.text
    with stack.run(thread_id="t-1", agent="bot") as run:  # the belief was indeed never written
        assert run.call_tool("mind_recall", {"query": "deploys"})["result"] == []

    caplog.clear()
    with stack.run(thread_id="t-2", agent="bot") as closed:
        closed.call_tool("mind_believe", {"content": "Builds run at night."})
    never_opened = stack.run(thread_id="t-3", agent="bot")
    del closed, never_opened
    gc.collect()
    assert "never closed" not in caplog.text
