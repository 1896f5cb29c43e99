"""WorkingMemory (seeds 000 and 002) through the stack, on SQLite as users run it."""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest
from store_checks import empty_postgres_tables

from memstrata.exceptions import (
    BudgetExceededError,
    InvalidInputError,
    ReadOnlyError,
    SchemaViolationError,
)
from memstrata.layers import WorkingMemory
from memstrata.layers.wm_journal import read_state
from memstrata.stack import MemoryStack
from memstrata.stores import PostgresStore, SQLiteStore, Store

PROFILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "profile": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "timezone": {"type": "string"},
            },
        },
        "preferences": {"type": "array", "items": {"type": "string"}},
        "goals": {"type": "array", "items": {"type": "string"}},
        "age": {"type": "integer", "minimum": 0},
    },
}

TEMPLATE = "# User Profile\n- Name:\n- Role:\n"


@pytest.fixture
def db(tmp_path: pathlib.Path) -> pathlib.Path:
    return tmp_path / "wm.db"


@pytest.fixture
def store(db: pathlib.Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(db)
    yield s
    s.close()


def stack_with(store: SQLiteStore, **options: Any) -> MemoryStack:
    return MemoryStack([WorkingMemory(**options)], store=store)


def call(run: Any, name: str, args: Any) -> dict[str, Any]:
    result: dict[str, Any] = run.call_tool(name, args)
    return result


def test_update_tool_deep_merges_and_persists(store: SQLiteStore) -> None:
    stack = stack_with(store, schema=PROFILE_SCHEMA)
    with stack.run(thread_id="t1") as run:
        assert call(run, "working-memory/update", {"profile": {"name": "Alice"}})["ok"]
        r = call(run, "working-memory_update", '{"profile": {"timezone": "UTC"}, "goals": ["a"]}')
        assert r == {"ok": True, "version": 2}
        assert run.layer("working-memory").snapshot == {
            "profile": {"name": "Alice", "timezone": "UTC"},
            "goals": ["a"],
        }
    with stack.run(thread_id="t1") as run:
        assert run.layer("working-memory").snapshot["profile"]["name"] == "Alice"
        call(run, "working-memory/update", {"goals": ["b"]})
        # seed 000: arrays replace
        assert run.layer("working-memory").snapshot["goals"] == ["b"]


def test_concurrent_runs_merge_into_each_others_writes(store: SQLiteStore) -> None:
    stack = stack_with(store, schema={"type": "object"})
    with stack.run(thread_id="t") as first, stack.run(thread_id="t") as second:
        call(first, "working-memory/update", {"from_first": 1})
        # `second` loaded before that write: its cached state is stale, and its update must
        # merge into the stored state instead of overwriting it.
        assert call(second, "working-memory/update", {"from_second": 2}) == {
            "ok": True,
            "version": 2,
        }
        assert second.layer("working-memory").snapshot == {"from_first": 1, "from_second": 2}
    stored = read_state(store, ("working-memory", "thread", "t"))
    assert stored == ({"from_first": 1, "from_second": 2}, 2)


def test_state_survives_reopening_the_file(db: pathlib.Path) -> None:
    with SQLiteStore(db) as s1, stack_with(s1, schema=PROFILE_SCHEMA).run(thread_id="t") as run:
        call(run, "working-memory/update", {"profile": {"name": "Bob"}})
    with SQLiteStore(db) as s2, stack_with(s2, schema=PROFILE_SCHEMA).run(thread_id="t") as run:
        assert run.layer("working-memory").snapshot == {"profile": {"name": "Bob"}}


def test_union_arrays_dedupe_equal_values_including_objects(store: SQLiteStore) -> None:
    stack = stack_with(store, schema={"type": "object"}, arrays="union")
    with stack.run(thread_id="t") as run:
        call(run, "working-memory/update", {"goals": ["Learn TS", {"k": 1}]})
        call(run, "working-memory/update", {"goals": ["Build an API", {"k": 1}, "Learn TS"]})
        assert run.layer("working-memory").snapshot == {
            "goals": ["Learn TS", {"k": 1}, "Build an API"]
        }


@pytest.mark.parametrize(
    ("nulls", "expected"),
    [
        ("keep", {"a": None, "b": 2}),
        ("delete", {"b": 2}),
        ("ignore", {"a": 1, "b": 2}),
    ],
)
def test_null_handling(store: SQLiteStore, nulls: str, expected: dict[str, Any]) -> None:
    with stack_with(store, schema={"type": "object"}, nulls=nulls).run(thread_id="t") as run:
        call(run, "working-memory/update", {"a": 1, "b": 1})
        call(run, "working-memory/update", {"a": None, "b": 2})
        assert run.layer("working-memory").snapshot == expected


def test_schema_violation_is_a_tool_error_and_state_is_untouched(store: SQLiteStore) -> None:
    with stack_with(store, schema=PROFILE_SCHEMA).run(thread_id="t") as run:
        call(run, "working-memory/update", {"age": 30})
        result = call(run, "working-memory/update", {"age": -1, "goals": "not a list"})
        assert result["ok"] is False
        assert result["error"]["code"] == "schema_violation"
        details = result["error"]["details"]
        assert any(d.startswith("$.age:") for d in details)
        assert any(d.startswith("$.goals:") for d in details)
        assert run.layer("working-memory").snapshot == {"age": 30}
    item = store.get(("working-memory", "thread", "t"), "state")
    assert item is not None and item.value == {"age": 30} and item.version == 1


def test_strict_mode_null_padding_never_overwrites(store: SQLiteStore) -> None:
    with stack_with(store, schema=PROFILE_SCHEMA).run(thread_id="t") as run:
        spec = run.tool_specs("openai", strict=True)[0]["function"]
        assert spec["strict"] is True
        assert set(spec["parameters"]["required"]) == {"profile", "preferences", "goals", "age"}
        call(run, "working-memory/update", {"age": 30, "goals": ["ship"]})
        # What a strict-mode model sends to change only the name: every other field null.
        padded = {
            "profile": {"name": "Alice", "timezone": None},
            "preferences": None,
            "goals": None,
            "age": None,
        }
        assert call(run, "working-memory_update", padded)["ok"]
        assert run.layer("working-memory").snapshot == {
            "age": 30,
            "goals": ["ship"],
            "profile": {"name": "Alice"},
        }


def test_pydantic_schema(store: SQLiteStore) -> None:
    class Scratchpad(pydantic.BaseModel):
        currentGoal: str = ""
        completedSteps: list[str] = []
        blockers: list[str] = []

    with stack_with(store, schema=Scratchpad).run(thread_id="t") as run:
        ok = call(run, "working-memory/update", {"currentGoal": "Deploy v2"})
        assert ok["ok"]
        bad = call(run, "working-memory/update", {"completedSteps": "write tests"})
        assert bad["error"]["code"] == "schema_violation"
        assert "$.completedSteps" in bad["error"]["message"]
        spec = run.tool_specs("openai")[0]["function"]
        assert "currentGoal" in spec["parameters"]["properties"]
        assert "required" not in spec["parameters"]


def test_budget_overflow_is_refused_with_size_and_limit(store: SQLiteStore) -> None:
    with stack_with(store, schema={"type": "object"}, budget=(10, 60)).run(thread_id="t") as run:
        call(run, "working-memory/update", {"note": "short"})
        result = call(run, "working-memory/update", {"essay": "word " * 500})
        assert result["error"]["code"] == "budget_exceeded"
        assert "limit of 60" in result["error"]["message"]
        assert run.layer("working-memory").snapshot == {"note": "short"}
        with pytest.raises(BudgetExceededError) as info:
            run.layer("working-memory").update({"essay": "word " * 500})
        assert info.value.limit == 60 and info.value.tokens > 60


def test_recall_shows_the_block_and_guidelines(store: SQLiteStore) -> None:
    with stack_with(store, schema={"type": "object"}).run(thread_id="t") as run:
        assert run.prepare([{"role": "user", "content": "hi"}]) == [
            {"role": "user", "content": "hi"}
        ]
        call(run, "working-memory/update", {"goal": "ship"})
        out = run.prepare([{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}])
    assert out[0]["content"] == "S" and out[2]["content"] == "hi"
    block = out[1]["content"]
    assert out[1]["role"] == "system"
    assert block.startswith("<working_memory>\n{") and '"goal": "ship"' in block
    assert "working-memory/update" in block


def test_markdown_template_voltagent_tools(store: SQLiteStore) -> None:
    stack = stack_with(store, template=TEMPLATE, tools="voltagent", scope="conversation")
    with stack.run(thread_id="conv-1", resource_id="u1") as run:
        names = sorted(s["function"]["name"] for s in run.tool_specs())
        assert names == ["clear_working_memory", "get_working_memory", "update_working_memory"]
        got = call(run, "get_working_memory", {})
        assert got == {"content": TEMPLATE, "format": "markdown"}
        call(run, "update_working_memory", {"content": "# Goals\n- ship v2"})
        assert run.layer("working-memory").snapshot == TEMPLATE.rstrip() + "\n\n# Goals\n- ship v2"
        call(run, "update_working_memory", {"content": "Fresh context", "mode": "replace"})
        assert run.layer("working-memory").snapshot == "Fresh context"
        bad = call(run, "update_working_memory", {"content": "x", "mode": "merge"})
        assert bad["error"]["code"] == "invalid_arguments"
        assert call(run, "clear_working_memory", {}) == {"ok": True}
        assert run.layer("working-memory").snapshot == ""
        handle = run.layer("working-memory")
        assert (handle.format, handle.template, handle.schema) == ("markdown", TEMPLATE, None)


def test_voltagent_json_content_accepts_object_or_json_string(store: SQLiteStore) -> None:
    stack = stack_with(store, schema=PROFILE_SCHEMA, tools="voltagent", arrays="union")
    with stack.run(thread_id="t") as run:
        call(run, "update_working_memory", {"content": {"goals": ["Learn TypeScript"]}})
        call(run, "update_working_memory", {"content": '{"goals": ["Build an API"]}'})
        assert run.layer("working-memory").snapshot == {
            "goals": ["Learn TypeScript", "Build an API"]
        }
        call(
            run,
            "update_working_memory",
            {"content": {"profile": {"name": "Bob"}}, "mode": "replace"},
        )
        assert run.layer("working-memory").snapshot == {"profile": {"name": "Bob"}}
        assert run.layer("working-memory").format == "json"


def test_free_form_text(store: SQLiteStore) -> None:
    with stack_with(store).run(thread_id="t") as run:
        assert run.layer("working-memory").format is None
        call(run, "working-memory/update", {"content": "User likes tea."})
        call(run, "working-memory/update", {"content": "User is in Oslo."})
        assert run.layer("working-memory").snapshot == "User likes tea.\n\nUser is in Oslo."
        bad = call(run, "working-memory/update", {"profile": {"a": 1}})
        assert bad["ok"] is False


def test_thread_and_resource_scopes(store: SQLiteStore) -> None:
    per_thread = stack_with(store, schema={"type": "object"})
    per_user = MemoryStack([WorkingMemory(schema={"type": "object"}, scope="user")], store=store)
    with per_thread.run(thread_id="a", resource_id="u") as run:
        call(run, "working-memory/update", {"x": 1})
    with per_thread.run(thread_id="b", resource_id="u") as run:
        assert run.layer("working-memory").snapshot == {}
    with per_user.run(thread_id="a", resource_id="u") as run:
        call(run, "working-memory/update", {"tz": "UTC"})
    with per_user.run(thread_id="b", resource_id="u") as run:
        assert run.layer("working-memory").snapshot == {"tz": "UTC"}
    with pytest.raises(InvalidInputError, match=r"needs stack\.run\(resource_id=\.\.\.\)"):
        per_user.run(thread_id="a").open()


def test_observe_applies_every_legacy_call_in_order(store: SQLiteStore) -> None:
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "1",
                "type": "function",
                "function": {"name": "updateWorkingMemory", "arguments": '{"a": 1}'},
            },
            {"id": "2", "type": "function", "function": {"name": "other", "arguments": '{"a": 9}'}},
            {
                "id": "3",
                "type": "function",
                "function": {"name": "updateWorkingMemory", "arguments": "{bad"},
            },
            {
                "id": "4",
                "type": "function",
                "function": {"name": "updateWorkingMemory", "arguments": '{"a": 2, "b": 3}'},
            },
        ],
    }
    with stack_with(store, schema={"type": "object"}).run(thread_id="t") as run:
        diagnostics = run.observe(message)
        assert run.layer("working-memory").snapshot == {"a": 2, "b": 3}
        assert run.layer("working-memory").version == 2
    assert len(diagnostics) == 1 and "call 2" in diagnostics[0]


def test_observe_accepts_anthropic_tool_use_blocks(store: SQLiteStore) -> None:
    message = {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "noted"},
            {"type": "tool_use", "id": "x", "name": "updateWorkingMemory", "input": {"k": "v"}},
        ],
    }
    with stack_with(store, schema={"type": "object"}).run(thread_id="t") as run:
        assert run.observe(message) == []
        assert run.layer("working-memory").snapshot == {"k": "v"}


def test_read_only_blocks_every_write_path(store: SQLiteStore) -> None:
    with stack_with(store, schema={"type": "object"}).run(thread_id="t") as run:
        call(run, "working-memory/update", {"seed": 1})
    stack = stack_with(store, schema={"type": "object"}, read_only=True)
    with stack.run(thread_id="t") as run:
        assert run.tool_specs() == []
        assert call(run, "working-memory/update", {"x": 1})["error"]["code"] == "unknown_tool"
        run.observe(
            {
                "role": "assistant",
                "tool_calls": [
                    {"function": {"name": "updateWorkingMemory", "arguments": '{"x": 1}'}}
                ],
            }
        )
        with pytest.raises(ReadOnlyError):
            run.layer("working-memory").update({"x": 1})
        with pytest.raises(ReadOnlyError):
            run.layer("working-memory").clear()
        assert run.layer("working-memory").snapshot == {"seed": 1}
        assert "<working_memory>" in run.prepare([])[0]["content"]


def test_state_failing_the_schema_at_load_is_moved_aside(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    store.put(("working-memory", "thread", "t"), "state", {"age": "old-format"})
    with (
        caplog.at_level(logging.WARNING),
        stack_with(store, schema=PROFILE_SCHEMA).run(thread_id="t") as run,
    ):
        handle = run.layer("working-memory")
        assert handle.snapshot == {}
        kept = handle.quarantined()
    assert len(kept) == 1 and kept[0]["state"] == {"age": "old-format"}
    assert kept[0]["key"].startswith("quarantine/") and kept[0]["violations"]
    assert "moved aside" in caplog.text
    # Reset to the empty state, over the version it read (a write racing with it would stand).
    assert read_state(store, ("working-memory", "thread", "t")) == ({}, 2)


def test_spawn_clones_resource_scope_but_not_thread_scope(store: SQLiteStore) -> None:
    resource = MemoryStack(
        [WorkingMemory(schema={"type": "object"}, scope="resource")], store=store
    )
    with resource.run(thread_id="p", resource_id="u") as run:
        call(run, "working-memory/update", {"plan": ["a"]})
        with run.spawn(thread_id="child") as child:
            assert child.layer("working-memory").snapshot == {"plan": ["a"]}
            child.layer("working-memory").state["plan"].append("mutated")
        assert run.layer("working-memory").snapshot == {"plan": ["a"]}
    thread = stack_with(store, schema={"type": "object"})
    with thread.run(thread_id="p") as run:
        call(run, "working-memory/update", {"plan": ["a"]})
        with run.spawn(thread_id="child") as child:
            assert child.layer("working-memory").snapshot == {}


def test_programmatic_update_errors(store: SQLiteStore) -> None:
    with stack_with(store, schema=PROFILE_SCHEMA).run(thread_id="t") as run:
        handle = run.layer("working-memory")
        with pytest.raises(SchemaViolationError) as info:
            handle.update({"age": "x"})
        assert info.value.violations[0].startswith("$.age")
        with pytest.raises(InvalidInputError, match="must be an object"):
            handle.update(["not", "a", "dict"])
        with pytest.raises(InvalidInputError, match="mode must be"):
            handle.update({"age": 1}, mode="merge")
        snap = handle.snapshot
        snap["age"] = 99
        assert handle.snapshot == {}


def test_configuration_errors() -> None:
    with pytest.raises(InvalidInputError, match="scope must be one of"):
        WorkingMemory(scope="global")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="not both"):
        WorkingMemory(schema={"type": "object"}, template="# x")
    with pytest.raises(InvalidInputError, match="not a valid JSON Schema"):
        WorkingMemory(schema={"type": 12})


@pytest.fixture(params=["sqlite", "postgres"])
def two_connections(
    request: pytest.FixtureRequest, db: pathlib.Path
) -> Iterator[tuple[Store, Store]]:
    """Two connections to one store, as two processes would hold."""
    if request.param == "sqlite":
        yield SQLiteStore(db), SQLiteStore(db)
        return
    url = request.getfixturevalue("postgres_url")
    first = PostgresStore(url)
    empty_postgres_tables(url)
    yield first, PostgresStore(url)


def test_a_long_lived_layer_starts_each_run_from_the_current_state(
    two_connections: tuple[Store, Store],
) -> None:
    """The layer keeps the last checked state between runs, but a write by anyone else (another
    connection: another process), a deletion, or an invalid state written behind its back
    shows in the next run exactly as a fresh layer would see it."""
    store, other = two_connections
    layer = WorkingMemory(schema=PROFILE_SCHEMA)
    stack = MemoryStack([layer], store=store)
    ns = ("working-memory", "thread", "t1")
    with stack.run(thread_id="t1") as run:
        assert call(run, "working-memory/update", {"profile": {"name": "Alice"}})["ok"]
    with stack.run(thread_id="t1") as run:
        kept = run.layer("working-memory").state
        assert kept == {"profile": {"name": "Alice"}}
    with stack.run(thread_id="t1") as run:
        assert run.layer("working-memory").state is kept  # nothing changed: nothing re-read
    # Another process's layer appends (a journal patch: this one merges just that in) ...
    elsewhere = MemoryStack([WorkingMemory(schema=PROFILE_SCHEMA)], store=other)
    with elsewhere.run(thread_id="t1") as run:
        assert call(run, "working-memory/update", {"profile": {"name": "Bob"}})["ok"]
    with stack.run(thread_id="t1") as run:
        assert run.layer("working-memory").state == {"profile": {"name": "Bob"}}
        assert run.layer("working-memory").version == 2
        assert "Bob" in run.prepare([])[0]["content"]
    # ... replaces (a new snapshot) ...
    with elsewhere.run(thread_id="t1") as run:
        run.layer("working-memory").update({"age": 41}, mode="replace")
    with stack.run(thread_id="t1") as run:
        assert run.layer("working-memory").state == {"age": 41}
    # ... or the rows are deleted and written again: version 1 again.
    other.delete(ns, "journal")
    other.delete(ns, "state")
    with elsewhere.run(thread_id="t1") as run:
        assert call(run, "working-memory/update", {"profile": {"name": "Cy"}})["ok"]
    with stack.run(thread_id="t1") as run:
        assert run.layer("working-memory").version == 1
        assert run.layer("working-memory").state == {"profile": {"name": "Cy"}}
    # A state written behind the layers' backs (an older memstrata wrote only the snapshot).
    other.delete(ns, "journal")
    other.put(ns, "state", {"age": "not a number"})
    with stack.run(thread_id="t1") as run:
        assert run.layer("working-memory").state == {}
        assert run.layer("working-memory").quarantined()[0]["state"] == {"age": "not a number"}
    other.close()
    store.close()
