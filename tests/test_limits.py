"""Every limit in docs/tools.md's Limits table: a write past it gets an error that names the limit
(and the option that sets it), a tool call gets an error payload saying so, and nothing stored
changes. Limits tested elsewhere are named where they are (see the end of this file)."""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from memstrata import AgentMind, MemoryStack, SharedMemory, SQLiteStore, WorkingMemory
from memstrata.exceptions import InvalidInputError, LimitExceededError, NestingTooDeepError
from memstrata.stores import Store, codec
from memstrata.tools import MAX_ARGUMENT_BYTES


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "limits.db")
    yield s
    s.close()


def rows(store: Store) -> list[tuple[Any, ...]]:
    return [(i.namespace, i.key, i.version, json.dumps(i.value)) for i in store.list(limit=10**6)]


def refused(result: dict[str, Any], *fragments: str, code: str = "limit_exceeded") -> None:
    assert result["ok"] is False, result
    assert result["error"]["code"] == code, result
    for fragment in fragments:
        assert fragment in result["error"]["message"], result


# Working memory -------------------------------------------------------------------------------


def test_working_memory_state_bytes(store: SQLiteStore) -> None:
    layer = WorkingMemory(schema={"type": "object"}, budget=(0, 10**9), max_state_bytes=2_000)
    with MemoryStack([layer], store=store).run(thread_id="t") as run:
        assert run.call_tool("working-memory/update", {"a": "x" * 1_000})["ok"] is True
        before = rows(store)
        result = run.call_tool("working-memory/update", {"b": "y" * 1_000})
        refused(result, "max_state_bytes", "2,000", "bytes")
        assert rows(store) == before
        with pytest.raises(LimitExceededError) as err:
            run.layer("working-memory").update({"b": "y" * 1_000})
        assert (err.value.setting, err.value.limit) == ("max_state_bytes", 2_000)
        assert err.value.size > 2_000
        # Replacing with something smaller is how the model gets back under it.
        assert run.call_tool("working-memory/update", {"a": "short"})["ok"] is True
    text = WorkingMemory(budget=(0, 10**9), max_state_bytes=100, name="notes")
    with MemoryStack([text], store=store).run(thread_id="t") as run:
        refused(run.call_tool("notes/update", {"content": "z" * 200}), "max_state_bytes")


def test_working_memory_default_state_limit_is_one_mebibyte() -> None:
    assert WorkingMemory().max_state_bytes == 1 << 20
    for bad in (0, -1, 1.5, True, "big"):
        with pytest.raises(InvalidInputError, match="max_state_bytes"):
            WorkingMemory(max_state_bytes=bad)  # type: ignore[arg-type]


def test_working_memory_state_nested_past_the_storage_depth(store: SQLiteStore) -> None:
    deep: Any = 1
    for _ in range(codec.MAX_STORED_DEPTH + 5):
        deep = {"k": deep}
    layer = WorkingMemory(schema={"type": "object"}, budget=(0, 10**9))
    with MemoryStack([layer], store=store).run(thread_id="t") as run:
        before = rows(store)
        result = run.call_tool("working-memory/update", {"deep": deep})
        refused(result, "254", code="invalid_arguments")
        assert rows(store) == before
        with pytest.raises(NestingTooDeepError):
            run.layer("working-memory").update({"deep": deep})


# Shared memory --------------------------------------------------------------------------------


def test_shared_memory_value_bytes(store: SQLiteStore) -> None:
    memory = SharedMemory(store=store, namespace=("shared", "w"), max_value_bytes=500)
    with MemoryStack([memory], store=store).run(thread_id="t") as run:
        assert run.call_tool("memory_write", {"key": "a", "value": "x" * 400})["ok"] is True
        before = rows(store)
        refused(
            run.call_tool("memory_write", {"key": "a", "value": "x" * 600}),
            "max_value_bytes",
            "500",
        )
        assert rows(store) == before
    with pytest.raises(LimitExceededError) as err:
        memory.set(key="step:1", kind="step_result", value=list(range(1_000)))
    assert err.value.setting == "max_value_bytes" and err.value.limit == 500
    assert memory.get_value("shared:a") == "x" * 400


def test_shared_memory_entries(store: SQLiteStore) -> None:
    memory = SharedMemory(store=store, namespace=("shared", "w"), max_entries=3)
    for i in range(3):
        memory.set(key=f"step:{i}", kind="step_result", value=i)
    with MemoryStack([memory], store=store).run(thread_id="t") as run:
        before = rows(store)
        refused(run.call_tool("memory_write", {"key": "new", "value": 1}), "max_entries", "3")
        assert rows(store) == before
        # Overwriting a key at the limit is not a new entry.
        memory.set(key="step:0", kind="step_result", value="again")
    with pytest.raises(LimitExceededError, match="max_entries"):
        memory.set(key="task:x", kind="task_result", value=1)
    assert len(memory) == 3
    # A memory reopened over a store that already holds more keeps every entry it finds.
    reopened = SharedMemory(store=store, namespace=("shared", "w"), max_entries=2)
    assert len(reopened) == 3
    for bad in (0, -5, 2.0, None):
        with pytest.raises(InvalidInputError, match="max_entries"):
            SharedMemory(max_entries=bad)  # type: ignore[arg-type]


# Agent mind -----------------------------------------------------------------------------------


def test_agent_mind_entries_per_namespace(store: SQLiteStore) -> None:
    stack = MemoryStack([AgentMind(max_entries=3)], store=store)
    with stack.run(agent="a") as run:
        assert run.call_tool("mind_believe", {"content": "Paris is in France."})["status"] == "ok"
        assert run.call_tool("mind_reflect", {"content": "Check sources twice."})["status"] == "ok"
        assert run.call_tool("mind_set_goal", {"description": "Map the suppliers."})["status"]
        # The draft counts: three entries are pending, none is stored yet.
        assert rows(store) == []
        for name, args in [
            ("mind_believe", {"content": "Quantum dots glow in ultraviolet light."}),
            ("mind_reflect", {"content": "Another observation about tooling."}),
            ("mind_set_goal", {"description": "A fourth thing to track."}),
        ]:
            refused(run.call_tool(name, args), "max_entries", "3")
        # Restating a belief updates it, which adds nothing.
        updated = run.call_tool("mind_believe", {"content": "Paris is in France!"})
        assert updated["action"] == "updated_draft", updated
    assert len(rows(store)) == 3
    with stack.run(agent="a") as run:
        before = rows(store)
        refused(run.call_tool("mind_believe", {"content": "Rust has no garbage collector."}))
        handle = run.layer("agent-mind")
        assert handle.entry_count() == 3
        with pytest.raises(LimitExceededError) as err:
            handle.reflect("Programmatic writes meet the same limit.")
        assert (err.value.setting, err.value.limit, err.value.size) == ("max_entries", 3, 4)
    assert rows(store) == before
    # Another agent's namespace has its own count.
    with stack.run(agent="b") as run:
        assert run.call_tool("mind_believe", {"content": "Paris is in France."})["status"] == "ok"
    assert AgentMind().max_entries == 100_000
    with pytest.raises(InvalidInputError, match="max_entries"):
        AgentMind(max_entries=0)


# Stores and tool calls ------------------------------------------------------------------------


def test_one_stored_value_has_a_ceiling(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert codec.MAX_VALUE_BYTES == 16 << 20
    monkeypatch.setattr(codec, "MAX_VALUE_BYTES", 1_000)  # read at every write
    store.put(("ns",), "k", "small")
    before = rows(store)
    with pytest.raises(LimitExceededError, match="MAX_VALUE_BYTES") as err:
        store.put(("ns",), "k", "x" * 2_000)
    assert err.value.limit == 1_000 and err.value.size == 2_002
    with pytest.raises(LimitExceededError):
        store.update(("ns",), "k", lambda _old: ["y"] * 1_000)
    assert rows(store) == before


def test_the_real_ceiling_refuses_a_value_over_16_mib(store: SQLiteStore) -> None:
    with pytest.raises(LimitExceededError, match="16,777,216"):
        store.put(("ns",), "big", "x" * (16 << 20))
    assert rows(store) == []


def test_tool_arguments_over_one_mebibyte_are_refused(store: SQLiteStore) -> None:
    layer = WorkingMemory(schema={"type": "object"}, budget=(0, 10**9), max_state_bytes=10**8)
    with MemoryStack([layer], store=store).run(thread_id="t") as run:
        text = json.dumps({"a": "x" * MAX_ARGUMENT_BYTES})
        result = run.call_tool("working-memory/update", text)
        refused(result, "1,048,576", code="invalid_arguments")
        assert rows(store) == []


@pytest.mark.parametrize(
    ("tool", "extra"),
    [
        ("mind_update_goal", {"progress": "drafted"}),
        ("mind_complete_goal", {}),
        ("mind_unpin_reflection", {}),
    ],
)
def test_a_mind_entry_id_in_a_tool_call_is_at_most_64_characters(
    store: SQLiteStore, tool: str, extra: dict[str, Any]
) -> None:
    """A model names entries only to find them (memstrata makes every new entry's id), so an id
    past 64 characters is refused before any lookup, and nothing stored changes."""
    with MemoryStack([AgentMind()], store=store).run(agent="a") as run:
        goal = run.call_tool("mind_set_goal", {"description": "Ship the report"})
    assert goal.get("ok", True) is not False, goal
    before = rows(store)
    assert len(goal["id"]) <= 64
    with MemoryStack([AgentMind()], store=store).run(agent="a") as run:
        result = run.call_tool(tool, {"id": goal["id"] + "x" * 64, **extra})
        refused(result, "64", code="invalid_arguments")
    assert rows(store) == before


# Tested beside their code: kernel nesting (MAX_DEPTH, tests/test_merge.py), store namespace
# and key lengths (tests/test_stores.py), a working-memory block's token budget
# (tests/test_working_memory.py), memory_write key suffixes (tests/test_shared_memory.py), the
# mind's tag and text lengths and goal/pin caps (tests/test_agent_mind.py), call_id length
# (tests/test_security.py).
