"""MemoryStack.forget: erasing what the layers keep for a conversation or a user, on every
backend, and nothing of anyone else's."""

from __future__ import annotations

import asyncio
import hashlib
import os
import pathlib
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import pytest
from store_checks import empty_postgres_tables

from memstrata import MemoryStack, ToolResults, WorkingMemory
from memstrata.exceptions import InvalidInputError
from memstrata.stores import InMemoryStore, PostgresStore, SQLiteStore, Store, erase

OBJECT = {"type": "object"}


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    made: Store
    if request.param == "memory":
        made = InMemoryStore()
    elif request.param == "sqlite":
        made = SQLiteStore(tmp_path / "forget.db")
    else:
        url = request.getfixturevalue("postgres_url")
        made = PostgresStore(url)
        empty_postgres_tables(url)
    yield made
    made.close()


def make_stack(store: Store, results: ToolResults | None = None) -> MemoryStack:
    return MemoryStack(
        [
            WorkingMemory(schema=OBJECT, scope="resource"),
            WorkingMemory(schema=OBJECT, name="notes", scope="thread"),
            results if results is not None else ToolResults(threshold_tokens=20),
        ],
        store=store,
    )


def conversation(call_id: str, text: str) -> list[dict[str, Any]]:
    call = {"id": call_id, "type": "function", "function": {"name": "report", "arguments": "{}"}}
    return [
        {"role": "user", "content": "Read the report."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": text},
    ]


def report(user: str, thread: str) -> str:
    return f"report of {user}/{thread}: " + "latency ok " * 200


def turn(stack: MemoryStack, user: str, thread: str) -> list[dict[str, Any]]:
    """A turn writing both working memories and offloading a large tool result."""
    with stack.run(thread_id=thread, resource_id=user) as run:
        run.layer("working-memory").update({"user": user})
        run.layer("notes").update({"thread": thread})
        return run.prepare(conversation("call_1", report(user, thread)))


def read_back(stack: MemoryStack, user: str, thread: str) -> dict[str, Any]:
    with stack.run(thread_id=thread, resource_id=user) as run:
        answer: dict[str, Any] = run.call_tool("read_tool_result", {"call_id": "call_1"})
        return answer


def stored(store: Store) -> set[tuple[tuple[str, ...], str]]:
    return {(item.namespace, item.key) for item in store.list((), limit=10_000)}


def label(scope_id: str) -> str:
    """How ToolResults names a scope in its namespaces."""
    return hashlib.sha256(scope_id.encode()).hexdigest()[:32]


def test_forgets_one_conversation_and_nothing_else(store: Store) -> None:
    stack = make_stack(store)
    for user, thread in [("u1", "t1"), ("u1", "t2"), ("u2", "t3")]:
        turn(stack, user, thread)
    before = stored(store)

    erased = stack.forget(resource_id="u1", thread_id="t1")

    # The thread's notes and its three result records (call, text, chunk); not the user's.
    assert erased == {"working-memory": 0, "notes": 1, "tool-results": 3}
    gone = before - stored(store)
    assert gone == {
        (("notes", "user-thread", "u1", "t1"), "state"),
        *((ns, key) for ns, key in before if ns[:3] == ("tool-results", label("u1"), label("t1"))),
    }
    assert stored(store) <= before
    with stack.run(thread_id="t1", resource_id="u1") as run:
        assert run.layer("notes").snapshot == {}
        assert run.layer("working-memory").snapshot == {"user": "u1"}
    assert read_back(stack, "u1", "t1")["error"]["code"] == "not_found"
    assert read_back(stack, "u1", "t2")["content"].startswith("report of")
    assert read_back(stack, "u2", "t3")["content"].startswith("report of")


def test_forgets_a_user_with_every_conversation_that_named_them(store: Store) -> None:
    stack = make_stack(store)
    for user, thread in [("u1", "t1"), ("u1", "t2"), ("u2", "t3"), ("u2", "t1")]:
        turn(stack, user, thread)
    notes_alone = MemoryStack([WorkingMemory(schema=OBJECT, name="notes")], store=store)
    with notes_alone.run(thread_id="t1") as run:  # a conversation that named no user
        run.layer("notes").update({"thread": "t1, no user"})
    others = {(ns, key) for ns, key in stored(store) if "u1" not in ns and label("u1") not in ns}

    erased = stack.forget(resource_id="u1")

    # Their own state, each conversation's notes, each conversation's three result records.
    assert erased == {"working-memory": 1, "notes": 2, "tool-results": 6}
    assert stored(store) == others
    assert read_back(stack, "u1", "t1")["error"]["code"] == "not_found"
    assert read_back(stack, "u1", "t2")["error"]["code"] == "not_found"
    assert read_back(stack, "u2", "t1")["content"].startswith("report of u2/t1")
    with stack.run(thread_id="t1", resource_id="u2") as run:
        assert run.layer("notes").snapshot == {"thread": "t1"}
    with notes_alone.run(thread_id="t1") as run:
        assert run.layer("notes").snapshot == {"thread": "t1, no user"}
    # Forgetting a conversation that named no user leaves the users' of the same id.
    assert stack.forget(thread_id="t1")["notes"] == 1
    with stack.run(thread_id="t1", resource_id="u2") as run:
        assert run.layer("notes").snapshot == {"thread": "t1"}


def rows_holding(store: Store, text: str) -> list[str]:
    """Every row of every table of the store's database (the store's whole state, for the
    in-memory store) holding ``text``, as text."""
    if isinstance(store, InMemoryStore):
        return [repr(vars(store))] if text in repr(vars(store)) else []
    if isinstance(store, SQLiteStore):
        with sqlite3.connect(store.path) as conn:
            names = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            rows = [
                repr(row)
                for (name,) in names.fetchall()
                for row in conn.execute(f'SELECT * FROM "{name}"')
            ]
        return [row for row in rows if text in row]
    import psycopg

    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.url) as conn:
        names = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        rows = [
            row
            for (name,) in names.fetchall()
            for (row,) in conn.execute(f'SELECT t::text FROM "{name}" AS t')
        ]
    return [row for row in rows if text in row]


def test_a_forgotten_user_leaves_no_trace_once_the_retention_passed(store: Store) -> None:
    """Past the tombstones' retention, no row of any table names a forgotten user: their
    namespaces are gone whole, and how far their numbering went is kept in no row naming
    them. Another user's rows stay; the forgotten user's conversation, come back, starts
    empty and is read by a server that held it before."""
    stack = make_stack(store)
    turn(stack, "priya-4c1e", "chat-9b2d")
    turn(stack, "ravi-77aa", "chat-9b2d")
    other_server = make_stack(store)
    with other_server.run(thread_id="chat-9b2d", resource_id="priya-4c1e") as run:
        assert run.layer("notes").snapshot == {"thread": "chat-9b2d"}
    store.tombstone_retention = 0.0
    stack.forget(resource_id="priya-4c1e")
    time.sleep(0.01)
    store.purge_expired()
    assert rows_holding(store, "priya-4c1e") == []
    assert rows_holding(store, "ravi-77aa")  # the scan finds what is there
    with other_server.run(thread_id="chat-9b2d", resource_id="priya-4c1e") as run:
        assert run.layer("notes").snapshot == {}
        run.layer("notes").update({"thread": "again"})
    with stack.run(thread_id="chat-9b2d", resource_id="priya-4c1e") as run:
        assert run.layer("notes").snapshot == {"thread": "again"}


def test_a_conversation_prepared_again_after_forget_stores_its_results_again(
    store: Store,
) -> None:
    """The layer remembers what it decided for a conversation; forgetting the conversation
    forgets those decisions too, so a notice never names a result that is gone."""
    stack = make_stack(store)
    first = turn(stack, "u1", "t1")
    stack.forget(resource_id="u1", thread_id="t1")

    again = turn(stack, "u1", "t1")

    assert again[-1]["content"] == first[-1]["content"]  # the same notice...
    # ...naming a result that is there.
    assert read_back(stack, "u1", "t1")["content"].startswith("report of")


def test_another_server_notices_the_erasure(tmp_path: pathlib.Path) -> None:
    """Two servers on one SQLite file: the one that did not erase stores the result again at
    its next offload instead of pointing the model at nothing."""
    one = make_stack(SQLiteStore(tmp_path / "shared.db"))
    two = make_stack(SQLiteStore(tmp_path / "shared.db"))
    turn(one, "u1", "t1")
    turn(two, "u1", "t1")

    one.forget(resource_id="u1", thread_id="t1")
    turn(two, "u1", "t1")

    assert read_back(one, "u1", "t1")["content"].startswith("report of")
    one.store.close()
    two.store.close()


def test_results_in_files(tmp_path: pathlib.Path) -> None:
    results_dir = tmp_path / "calls"
    results = ToolResults(tool_calls_dir=results_dir, threshold_tokens=20)
    stack = make_stack(InMemoryStore(), results)
    for user, thread in [("u1", "t1"), ("u1", "t2"), ("u2", "t3")]:
        turn(stack, user, thread)
    # A run without a user keeps its results apart.
    with MemoryStack([results], store=stack.store).run(thread_id="t9") as run:
        run.prepare(conversation("call_1", report("-", "t9")))

    def files() -> set[str]:
        return {
            str(path.relative_to(results_dir)) for path in results_dir.rglob("*") if path.is_file()
        }

    before = files()
    assert stack.forget(resource_id="u1", thread_id="t1")["tool-results"] == 2  # text, blob
    assert stack.forget(thread_id="t9")["tool-results"] == 2
    assert read_back(stack, "u1", "t1")["error"]["code"] == "not_found"
    assert read_back(stack, "u1", "t2")["content"].startswith("report of")
    assert stack.forget(resource_id="u1")["tool-results"] == 2
    assert not (results_dir / "resources" / label("u1")).exists()
    assert not (results_dir / "threads" / label("t9")).exists()
    assert files() == {name for name in before if label("u2") in name}
    assert read_back(stack, "u2", "t3")["content"].startswith("report of")
    # Prepared again, the conversation's result is stored again, not pointed at in vain.
    turn(stack, "u1", "t1")
    assert read_back(stack, "u1", "t1")["content"].startswith("report of")
    nothing = {"working-memory": 0, "notes": 0, "tool-results": 0}
    assert stack.forget(resource_id="nobody") == nothing


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_a_symlink_planted_in_a_results_directory_is_removed_not_followed(
    tmp_path: pathlib.Path,
) -> None:
    results_dir = tmp_path / "calls"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the library's")
    stack = make_stack(
        InMemoryStore(), ToolResults(tool_calls_dir=results_dir, threshold_tokens=20)
    )
    turn(stack, "u1", "t1")
    thread_dir = results_dir / "resources" / label("u1") / "threads" / label("t1")
    (thread_dir / "planted").symlink_to(outside, target_is_directory=True)
    (thread_dir / "planted-file").symlink_to(outside / "keep.txt")

    stack.forget(resource_id="u1")

    assert (outside / "keep.txt").read_text() == "not the library's"
    assert not thread_dir.exists()


def test_expired_records_are_deleted_too(tmp_path: pathlib.Path) -> None:
    """A record past its TTL is invisible but still in the file until purged: forget
    deletes it."""
    path = tmp_path / "ttl.db"
    stack = make_stack(SQLiteStore(path), ToolResults(threshold_tokens=20, ttl=0.2))
    turn(stack, "u1", "t1")
    time.sleep(0.3)

    stack.forget(resource_id="u1")

    with sqlite3.connect(path) as db:
        left = db.execute("SELECT count(*) FROM items WHERE namespace LIKE ?", ("tool-results%",))
        assert left.fetchone()[0] == 0
    stack.store.close()


def test_async(store: Store) -> None:
    stack = make_stack(store)
    turn(stack, "u1", "t1")

    async def main() -> dict[str, int]:
        return await stack.aforget(resource_id="u1", thread_id="t1")

    assert asyncio.run(main()) == {"working-memory": 0, "notes": 1, "tool-results": 3}
    assert read_back(stack, "u1", "t1")["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({}, "thread_id, a resource_id"),
        ({"resource_id": 42}, "resource_id must be a str"),
        ({"thread_id": ""}, "thread_id is empty"),
        ({"thread_id": "t\ud800"}, "thread_id"),
        ({"resource_id": "u" * 300}, "resource_id"),
    ],
)
def test_bad_ids_are_refused_naming_them(arguments: dict[str, Any], named: str) -> None:
    store = InMemoryStore()
    stack = make_stack(store)
    turn(stack, "u1", "t1")
    before = stored(store)
    with pytest.raises(InvalidInputError, match=named):
        stack.forget(**arguments)
    assert stored(store) == before


class CallersLayer:
    """A layer of the caller's, doing nothing but what a test gives its forget."""

    name, slot = "remembers", 50
    budget = WorkingMemory().budget

    def init(self, ctx: Any) -> None:
        return None

    def recall(self, handle: Any, budget: int) -> list[Any]:
        return []

    def observe(self, handle: Any, message: Any) -> None:
        pass

    def tools(self, handle: Any) -> list[Any]:
        return []

    def on_spawn(self, handle: Any, child: Any) -> None:
        return None

    def close(self, handle: Any, error: Any) -> None:
        pass


def test_a_custom_layer_forgets_through_the_protocol() -> None:
    calls: list[tuple[str | None, str | None]] = []

    class Remembers(CallersLayer):
        def forget(self, store: Store, *, resource_id: str | None, thread_id: str | None) -> int:
            calls.append((resource_id, thread_id))
            return 7

    stack = MemoryStack([Remembers()], store=InMemoryStore())
    assert stack.forget(thread_id="t1") == {"remembers": 7}
    assert calls == [(None, "t1")]


def test_erase_takes_whole_labels(store: Store) -> None:
    store.put(("wm", "t1"), "a", 1)
    store.put(("wm", "t1", "sub"), "b", 2)
    store.put(("wm", "t10"), "c", 3)
    assert erase(store, ("wm", "t1")) == 2
    assert stored(store) == {(("wm", "t10"), "c")}
    with pytest.raises(InvalidInputError):
        erase(store, ("wm", 5))  # type: ignore[arg-type]


class FailsToForget(CallersLayer):
    """A layer of the caller's whose forget fails (its own database is down)."""

    name, slot = "fails", 1

    def forget(self, store: Store, *, resource_id: str | None, thread_id: str | None) -> int:
        raise RuntimeError("the layer's own database is down")


def test_a_layer_failing_to_forget_does_not_keep_the_others_from_erasing(
    tmp_path: pathlib.Path,
) -> None:
    """Every layer gets its turn and expired records are purged; the failure is raised after,
    so the caller knows to call again."""
    path = tmp_path / "fails.db"
    store = SQLiteStore(path)
    stack = MemoryStack(
        [FailsToForget(), *make_stack(store, ToolResults(threshold_tokens=20, ttl=0.2)).layers],
        store=store,
    )
    assert stack.layers[0].name == "fails"  # the failing layer comes first
    turn(stack, "u1", "t1")
    turn(stack, "u2", "t2")
    time.sleep(0.3)

    with pytest.raises(RuntimeError, match="database is down"):
        stack.forget(resource_id="u1")

    assert {ns for ns, _ in stored(store)} == {
        ("notes", "user-thread", "u2", "t2"),
        ("working-memory", "resource", "u2"),
    }
    with sqlite3.connect(path) as db:
        left = db.execute("SELECT count(*) FROM items WHERE namespace LIKE ?", ("tool-results%",))
        assert left.fetchone()[0] == 0  # purged, expired or not
    store.close()


def test_a_run_writing_files_while_its_user_is_erased_stores_its_result(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """forget removing the directory a run is writing a result into (between the run opening
    it and writing) does not fail the run's prepare: the result is written again, as a record
    stored after an erasure is in a store."""
    from memstrata.layers import tool_result_storage

    results_dir = tmp_path / "calls"
    stack = make_stack(
        InMemoryStore(), ToolResults(tool_calls_dir=results_dir, threshold_tokens=20)
    )
    turn(stack, "u1", "t0")  # the user's directory exists
    written = tool_result_storage.write_atomic
    erased: list[dict[str, int]] = []

    def erased_first(*args: Any, **kwargs: Any) -> None:
        if not erased:
            erased.append(stack.forget(resource_id="u1"))
        written(*args, **kwargs)

    monkeypatch.setattr(tool_result_storage, "write_atomic", erased_first)

    turn(stack, "u1", "t1")

    assert erased and erased[0]["tool-results"] == 2
    assert read_back(stack, "u1", "t1")["content"].startswith("report of")
