"""SharedMemory(scope="thread"): one stack serving many conversations gives each its own shared
memory, so nothing one user's model writes through ``memory_write`` reaches another user.

With the default scope ("workflow") every run of the stack shares one memory, as NodeTool's
one-per-workflow-run memory does: a server holding one stack for every user shared each
user's writes with all the others (the first test shows that is still what "workflow" means).
"""

from __future__ import annotations

import pathlib
import re
from typing import Any

import pytest

from memstrata import MemoryStack, SharedMemory, SQLiteStore, memory_keys
from memstrata.exceptions import InvalidInputError
from memstrata.layers import shared_memory
from memstrata.stores import InMemoryStore, Store


def write(stack: MemoryStack, *, user: str | None, thread: str, key: str, value: Any) -> None:
    with stack.run(thread_id=thread, resource_id=user) as run:
        answer = run.call_tool("memory_write", {"key": key, "value": value})
        assert answer["key"] == f"shared:{key}", answer


def seen(stack: MemoryStack, *, user: str | None, thread: str) -> dict[str, Any]:
    """Everything the run's model can list and read."""
    with stack.run(thread_id=thread, resource_id=user) as run:
        keys = [e["key"] for e in run.call_tool("memory_list", {})["entries"]]
        if not keys:
            return {}
        read = run.call_tool("memory_read", {"keys": keys})
        return {key: entry["value"] for key, entry in read["entries"].items()}


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Any:
    from store_checks import empty_postgres_tables

    from memstrata.stores import PostgresStore

    if request.param == "sqlite":
        opened: Store = SQLiteStore(tmp_path / "m.db")
    else:
        url = request.getfixturevalue("postgres_url")
        opened = PostgresStore(url)
        empty_postgres_tables(url)
    yield opened
    opened.close()


def test_the_workflow_scope_is_one_memory_for_every_run(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    stack = MemoryStack([SharedMemory(store=store)], store=store)
    write(stack, user="alice", thread="1", key="card", value="4111-secret")
    assert seen(stack, user="bob", thread="2") == {"shared:card": "4111-secret"}
    store.close()


def test_each_conversation_has_its_own_memory(store: Store) -> None:
    stack = MemoryStack([SharedMemory(store=store, scope="thread")], store=store)
    write(stack, user="alice", thread="1", key="card", value="4111-secret")
    write(stack, user="bob", thread="1", key="note", value="bob's")  # the same thread id
    write(stack, user=None, thread="1", key="anon", value="nobody's")
    assert seen(stack, user="alice", thread="1") == {"shared:card": "4111-secret"}
    assert seen(stack, user="bob", thread="1") == {"shared:note": "bob's"}
    assert seen(stack, user=None, thread="1") == {"shared:anon": "nobody's"}
    assert seen(stack, user="alice", thread="2") == {}
    # Another server on the same store sees each conversation's writes, and only its own.
    other = MemoryStack([SharedMemory(store=store, scope="thread")], store=store)
    assert seen(other, user="alice", thread="1") == {"shared:card": "4111-secret"}
    assert seen(other, user="bob", thread="2") == {}


def test_executors_write_into_one_conversation(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    memory = SharedMemory(store=store, scope="thread")
    stack = MemoryStack([memory], store=store)
    step = memory.for_thread("report-17", resource_id="alice")
    assert memory.for_thread("report-17", resource_id="alice") is step
    step.set(key=memory_keys.task("research"), kind="task_result", value={"n": 3}, title="R")
    with stack.run(thread_id="report-17", resource_id="alice") as run:
        run.layer("shared-memory").require([memory_keys.task("research")])
        assert "- task:research — R" in run.prepare([])[0]["content"]
        read = run.call_tool("memory_read", {"keys": ["task:research"]})
        assert read["entries"]["task:research"]["value"] == {"n": 3}
    assert seen(stack, user="bob", thread="report-17") == {}
    store.close()


def test_forget_erases_a_user_s_conversations_and_no_one_else_s(store: Store) -> None:
    stack = MemoryStack([SharedMemory(store=store, scope="thread")], store=store)
    for user, thread in (("alice", "1"), ("alice", "2"), ("bob", "1"), (None, "1")):
        write(stack, user=user, thread=thread, key="k", value=f"{user}-{thread}")
    assert stack.forget(resource_id="alice") == {"shared-memory": 2}
    assert seen(stack, user="alice", thread="1") == {}
    assert seen(stack, user="alice", thread="2") == {}
    assert seen(stack, user="bob", thread="1") == {"shared:k": "bob-1"}
    # A thread alone is the conversation of runs that named no user.
    assert stack.forget(thread_id="1") == {"shared-memory": 1}
    assert seen(stack, user=None, thread="1") == {}
    assert seen(stack, user="bob", thread="1") == {"shared:k": "bob-1"}
    assert stack.forget(resource_id="bob", thread_id="1") == {"shared-memory": 1}
    assert seen(stack, user="bob", thread="1") == {}


def test_the_workflow_scope_forgets_nothing(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    stack = MemoryStack([SharedMemory(store=store)], store=store)
    write(stack, user="alice", thread="1", key="k", value="v")
    assert stack.forget(resource_id="alice") == {"shared-memory": 0}
    assert seen(stack, user="alice", thread="1") == {"shared:k": "v"}
    store.close()


def test_conversations_past_those_kept_in_process_are_read_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.setattr(shared_memory, "CONVERSATIONS_KEPT", 2)
    store = SQLiteStore(tmp_path / "m.db")
    memory = SharedMemory(store=store, scope="thread")
    stack = MemoryStack([memory], store=store)
    for i in range(5):
        write(stack, user="u", thread=str(i), key="k", value=i)
    assert len(memory._conversations) == 2
    assert [seen(stack, user="u", thread=str(i)) for i in range(5)] == [
        {"shared:k": i} for i in range(5)
    ]
    store.close()


def test_bad_settings_and_calls_are_refused_by_name(tmp_path: pathlib.Path) -> None:
    with pytest.raises(InvalidInputError, match="give store="):
        SharedMemory(scope="thread")
    with pytest.raises(InvalidInputError, match="scope must be 'workflow' or 'thread'"):
        SharedMemory(store=InMemoryStore(), scope="user")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="too deep for scope 'thread'"):
        SharedMemory(store=InMemoryStore(), scope="thread", namespace=tuple("abcdefghijklm"))
    with pytest.raises(InvalidInputError, match="for_thread is for"):
        SharedMemory(store=InMemoryStore()).for_thread("t")
    memory = SharedMemory(store=InMemoryStore(), scope="thread")
    for bad in ("", None, 7, "x" * 257):
        with pytest.raises(InvalidInputError, match="thread_id"):
            memory.for_thread(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="resource_id"):
        memory.for_thread("t", resource_id="")
    # Its own entries would be read by no run and erased by no forget.
    with pytest.raises(InvalidInputError, match=re.escape("memory.for_thread(thread_id")):
        memory.set(key=memory_keys.input("topic"), kind="input", value="x")
    assert len(memory) == 0
    stack = MemoryStack([memory], store=InMemoryStore())
    with pytest.raises(InvalidInputError, match=re.escape("needs stack.run(thread_id=...)")):
        stack.run(resource_id="u").open()
