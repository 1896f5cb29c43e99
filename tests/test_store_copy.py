"""Copying a memory between stores (``memstrata copy``, ``copy_store``): every layer reads the
copy as it read the original, nothing is overwritten, and a copy stopped part way finishes when
run again. Real SQLite files and a real PostgreSQL cluster."""

from __future__ import annotations

import json
import pathlib
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from store_checks import fresh_store

from memstrata import AgentMind, MemoryStack, SharedMemory, ToolResults, WorkingMemory
from memstrata.cli import main
from memstrata.exceptions import CopyConflictError, InvalidInputError
from memstrata.stores import InMemoryStore, Item, SQLiteStore, Store, copy_store
from memstrata.stores.base import Namespace

RUN = {"thread_id": "chat-1", "resource_id": "user-42", "agent": "agent-a"}
LOGS = "\n".join(f"row {i}: status=ok latency={i % 97}ms" for i in range(400))


def _stack(store: Store) -> MemoryStack:
    """The layers of a server: a thread's working memory and its user's, the agent's mind, its
    shared memory and tool results kept in the store."""
    return MemoryStack(
        [
            WorkingMemory(),
            WorkingMemory(name="human", scope="resource"),
            AgentMind(),
            SharedMemory(store=store, namespace=("shared-memory", "agent-a")),
            ToolResults(threshold_tokens=200),
        ],
        store=store,
    )


def _conversation(call_id: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Check the logs."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "logs", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": LOGS},
    ]


def _live_a_few_turns(store: Store) -> None:
    stack = _stack(store)
    turns = [
        ("working-memory_update", {"content": "Plan: move the memory to PostgreSQL."}),
        ("human_update", {"content": "Priya likes tea."}),
        ("mind_set_goal", {"description": "Track the staging migration", "priority": "high"}),
        ("mind_believe", {"content": "Staging runs PostgreSQL 15.", "confidence": "high"}),
        ("mind_reflect", {"content": "Cite a source for every figure.", "pin": True}),
        ("memory_write", {"key": "top_source", "value": {"url": "https://example.com"}}),
        ("working-memory_update", {"content": "Plan: copy, verify, switch the servers."}),
        ("mind_believe", {"content": "The copy keeps every version.", "confidence": "medium"}),
    ]
    for n, (tool, arguments) in enumerate(turns):
        with stack.run(**RUN) as run:
            answer = run.call_tool(tool, arguments)
            assert "error" not in answer, answer
            run.prepare(_conversation(f"call_{n}"))
    stack.close()


def _what_the_layers_read(store: Store) -> dict[str, Any]:
    """What a server on ``store`` shows and answers: the prompt, recall, a tool result read
    back, shared memory and the working memories' versions."""
    stack = _stack(store)
    with stack.run(**RUN) as run:
        prompt = run.prepare([{"role": "user", "content": "Where were we?"}])
        seen = {
            "prompt": prompt,
            "recall": run.call_tool("mind_recall", {"query": "staging database PostgreSQL"}),
            "tool result": run.call_tool("read_tool_result", {"call_id": "call_3"}),
            "shared": run.call_tool("memory_read", {"keys": ["shared:top_source"]}),
            "wm version": run.layer("working-memory").version,
            "human version": run.layer("human").version,
        }
    stack.close()
    return seen


def _times(i: Item) -> tuple[Any, ...]:
    return (i.created_at, i.updated_at, i.expires_at)


def _everything(store: Store) -> list[tuple[Any, ...]]:
    return [
        (i.namespace, i.key, orjson.dumps(i.value), i.version, *_times(i))
        for i in sorted(store.list((), limit=10_000), key=lambda i: (i.namespace, i.key))
    ]


PAIRS = [("sqlite", "postgres"), ("postgres", "sqlite"), ("sqlite", "sqlite"), ("memory", "sqlite")]


@pytest.fixture(params=PAIRS)
def two_stores(
    request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> Iterator[tuple[Store, Store]]:
    source_kind, target_kind = request.param
    source = _store(source_kind, request, tmp_path / "source")
    target = _store(target_kind, request, tmp_path / "target")
    yield source, target
    source.close()
    target.close()


def _store(kind: str, request: pytest.FixtureRequest, where: pathlib.Path) -> Store:
    where.mkdir()
    return fresh_store(kind, request, where)


def test_every_layer_reads_the_copy_as_it_read_the_original(
    two_stores: tuple[Store, Store],
) -> None:
    source, target = two_stores
    _live_a_few_turns(source)
    before = _everything(source)
    assert any(ns[0] == "tool-results" and item_expires for ns, *_, item_expires in before)
    result = copy_store(source, target)
    assert result.records == len(before) and not result.already and result.target_only == 0
    labels = {"working-memory", "human", "mind", "shared-memory", "tool-results"}
    assert set(result.copied) == labels
    assert _everything(target) == before == _everything(source)
    on_target = _what_the_layers_read(target)
    on_source = _what_the_layers_read(source)
    assert on_target == on_source
    assert "--- AGENT MIND ---" in json.dumps(on_target["prompt"])
    assert on_target["tool result"]["content"].startswith("row 0: status=ok")
    assert on_target["wm version"] == 2 and on_target["human version"] == 1


def test_a_server_on_the_target_follows_writes_after_the_copy(
    two_stores: tuple[Store, Store],
) -> None:
    source, target = two_stores
    _live_a_few_turns(source)
    namespace = ("mind", "agent-a")
    mark = target.change_mark(namespace)
    copy_store(source, target)
    # The copied records are changes since a mark taken before: a server caught up through
    # changes (the mind's catch-up) sees them.
    changed = target.changes(namespace, mark)
    assert {i.key for i in changed.items} == {i.key for i in source.list(namespace)}
    # And the stack writes on from the copied versions.
    stack = _stack(target)
    with stack.run(**RUN) as run:
        assert run.call_tool("working-memory_update", {"content": "Switched."})["version"] == 3
    stack.close()


def test_langgraph_store_items_are_copied_and_searchable(
    two_stores: tuple[Store, Store],
) -> None:
    pytest.importorskip("langgraph.store.base")
    from memstrata.integrations.langgraph import MemstrataStore

    source, target = two_stores
    MemstrataStore(source).put(("users", "u1"), "pref", {"text": "Priya likes green tea"})
    copy_store(source, target)
    copied = MemstrataStore(target)
    got = copied.get(("users", "u1"), "pref")
    assert got is not None and got.value == {"text": "Priya likes green tea"}
    hits = copied.search(("users",), query="green tea")
    assert [hit.key for hit in hits] == ["pref"]


def _records(n: int, namespace: Namespace = ("notes", "a")) -> list[Item]:
    now = time.time()
    return [Item(namespace, f"k{i:04}", {"i": i}, 1 + i % 3, now - 60, now - 30) for i in range(n)]


def test_a_target_holding_other_records_is_refused_untouched(tmp_path: pathlib.Path) -> None:
    source, target = InMemoryStore(), SQLiteStore(tmp_path / "target.db")
    source.restore_items(_records(20))
    source.put(("other",), "x", 1)
    target.put(("notes", "a"), "k0003", "the target's own")
    target.put(("notes", "a"), "k0007", {"i": 7})  # the same value, another version
    before = _everything(target)
    with pytest.raises(CopyConflictError, match="2 of the 21 keys") as refused:
        copy_store(source, target)
    assert refused.value.records == [(("notes", "a"), "k0003"), (("notes", "a"), "k0007")]
    assert "nothing was written" in str(refused.value) and refused.value.copied == 0
    assert _everything(target) == before
    # Other namespaces can still be copied.
    assert copy_store(source, target, [("other",)]).copied == {"other": 1}


def test_a_copy_stopped_part_way_finishes_when_run_again(tmp_path: pathlib.Path) -> None:
    source, target = SQLiteStore(tmp_path / "source.db"), SQLiteStore(tmp_path / "target.db")
    source.restore_items(_records(1200) + _records(30, ("mind", "b")))
    # Part of it copied (whole pages), as a copy that failed after a few transactions leaves it.
    first = copy_store(source, target, [("notes", "a")], page=100)
    assert first.copied == {"notes": 1200}
    again = copy_store(source, target, page=100)
    assert again.copied == {"mind": 30} and again.already == {"notes": 1200}
    assert _everything(target) == _everything(source)


def test_a_failure_mid_copy_leaves_whole_pages_and_a_rerun_finishes(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, target = InMemoryStore(), SQLiteStore(tmp_path / "target.db")
    source.restore_items(_records(250))
    stop_writing_on_page(monkeypatch, 3, OSError("disk unplugged"))
    with pytest.raises(OSError, match="disk unplugged"):
        copy_store(source, target, page=100)
    assert len(_everything(target)) == 200  # two whole pages
    monkeypatch.undo()  # the disk is back
    assert copy_store(source, target, page=100).already == {"notes": 200}
    assert _everything(target) == _everything(source)


def test_expired_records_are_not_copied(tmp_path: pathlib.Path) -> None:
    source, target = SQLiteStore(tmp_path / "source.db"), SQLiteStore(tmp_path / "target.db")
    source.put(("tool-results", "t"), "gone", "old", ttl=0.05)
    source.put(("tool-results", "t"), "kept", "new", ttl=3600)
    time.sleep(0.1)
    result = copy_store(source, target)
    assert result.copied == {"tool-results": 1}
    assert [i.key for i in target.list(())] == ["kept"]
    assert target.get(("tool-results", "t"), "kept") == source.get(("tool-results", "t"), "kept")


def test_a_record_changed_in_the_source_meanwhile_is_reported(tmp_path: pathlib.Path) -> None:
    source, target = SQLiteStore(tmp_path / "source.db"), SQLiteStore(tmp_path / "target.db")
    source.restore_items(_records(10))
    real = target.restore_items

    def then_a_server_writes(items: Any) -> Any:
        written = real(items)
        source.put(("notes", "a"), "k0004", "changed by a server")
        source.put(("notes", "a"), "new", "written by a server")
        return written

    target.restore_items = then_a_server_writes  # type: ignore[method-assign]
    with pytest.raises(CopyConflictError, match="2 records of the source differ") as differs:
        copy_store(source, target)
    assert differs.value.records == [(("notes", "a"), "k0004"), (("notes", "a"), "new")]
    assert differs.value.copied == 10


def test_the_target_being_the_source_is_refused(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "one.db")
    store.put(("a",), "k", 1)
    again = SQLiteStore(str(tmp_path / "." / "one.db"))
    for target in (store, again):
        with pytest.raises(InvalidInputError, match="the target is the source store itself"):
            copy_store(store, target)


def test_postgres_under_another_url_is_the_same_store(postgres_url: str) -> None:
    from memstrata.stores import PostgresStore

    with (
        PostgresStore(postgres_url) as one,
        PostgresStore(postgres_url.replace("127.0.0.1", "localhost")) as other,
        pytest.raises(InvalidInputError, match="the target is the source store itself"),
    ):
        copy_store(one, other)


@pytest.mark.parametrize(
    ("prefixes", "named"),
    [
        ("mind", "prefixes must be a list"),
        ([("mind", "")], "label 1 is empty"),
        ([["a\x1fb"]], "unit-separator"),
    ],
)
def test_bad_prefixes_are_named(prefixes: Any, named: str) -> None:
    with pytest.raises(InvalidInputError, match=named):
        copy_store(InMemoryStore(), InMemoryStore(), prefixes)


def test_the_command_copies_sqlite_to_postgres_and_back(
    tmp_path: pathlib.Path, empty_postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = SQLiteStore(tmp_path / "agent.db")
    _live_a_few_turns(source)
    before = _everything(source)
    source.close()
    there = ["copy", "--from", f"sqlite:///{tmp_path}/agent.db", "--to", empty_postgres_url]
    assert main([*there, "--json"]) == 0
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert summary["records"] == len(before) and summary["already"] == {}
    assert "copying [" in err and "verifying [" in err
    # Back into a new file; then the same copy again: all there already, nothing written.
    back = ["copy", "--from", empty_postgres_url, "--to", f"sqlite:///{tmp_path}/back.db"]
    assert main(back) == 0
    assert main(back) == 0
    out, _err = capsys.readouterr()
    assert f"the target holds all {len(before)} of the source's, checked" in out
    with SQLiteStore(tmp_path / "back.db") as copied:
        assert _everything(copied) == before


def test_the_command_refuses_clearly(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "agent.db"
    with SQLiteStore(db) as store:
        store.put(("notes",), "k", 1)
    with SQLiteStore(tmp_path / "taken.db") as taken:
        taken.put(("notes",), "k", "theirs")
    cases = [
        (["--from", f"sqlite:///{db}", "--to", f"sqlite:///{db}"], "name the same store"),
        (["--from", f"sqlite:///{tmp_path}/nope.db", "--to", "memory://"], "no SQLite database"),
        (["--from", "mysql://x/y", "--to", "memory://"], "unknown store URL scheme 'mysql'"),
        (["--from", f"sqlite:///{db}", "--to", "sqlite://host/x.db"], "has a host"),
        (["--from", f"sqlite:///{db}", "--to", "memory://", "a//b"], "namespace 'a//b'"),
        (
            ["--from", f"sqlite:///{db}", "--to", f"sqlite:///{tmp_path}/taken.db"],
            "already holds other records",
        ),
    ]
    for arguments, named in cases:
        assert main(["copy", *arguments]) == 2, arguments
        _out, err = capsys.readouterr()
        assert named in err and "Traceback" not in err, (arguments, err)
    assert not (tmp_path / "nope.db").exists()


def test_an_openai_agents_session_is_copied(two_stores: tuple[Store, Store]) -> None:
    pytest.importorskip("agents")
    import asyncio

    from memstrata.integrations.openai_agents import AgentsMemory

    source, target = two_stores
    said = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, Priya."}]

    async def items(store: Store, add: list[Any]) -> list[Any]:
        stack = MemoryStack([WorkingMemory()], store=store)
        session = AgentsMemory(stack, thread_id="chat-7", resource_id="user-42").session()
        if add:
            await session.add_items(add)
        return await session.get_items()

    assert asyncio.run(items(source, said)) == said
    copy_store(source, target)
    assert asyncio.run(items(target, [])) == said


def stop_writing_on_page(monkeypatch: pytest.MonkeyPatch, page: int, error: BaseException) -> None:
    """SQLiteStore.restore_items (a copy writes a page of records per call) raises ``error`` at
    its ``page``-th call, as a full disk or Ctrl-C would there; the calls before it write."""
    real = SQLiteStore.restore_items
    calls = 0

    def restore_items(self: SQLiteStore, items: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == page:
            raise error
        return real(self, items)

    monkeypatch.setattr(SQLiteStore, "restore_items", restore_items)


def test_the_command_reports_a_failure_mid_copy_on_a_line_of_its_own(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with SQLiteStore(tmp_path / "agent.db") as source:
        source.restore_items(_records(1200))
    stop_writing_on_page(monkeypatch, 2, sqlite3.OperationalError("database or disk is full"))
    copy = [
        "copy",
        "--from",
        f"sqlite:///{tmp_path}/agent.db",
        "--to",
        f"sqlite:///{tmp_path}/t.db",
    ]
    assert main(copy) == 2
    _out, err = capsys.readouterr()
    assert "500/1200\nmemstrata: database or disk is full" in err
    monkeypatch.undo()  # the disk is back
    assert main(copy) == 0  # run again: finishes
    out, _err = capsys.readouterr()
    assert "copied 700 record(s)" in out


def test_a_record_written_to_the_target_during_the_copy_is_left_and_reported(
    tmp_path: pathlib.Path,
) -> None:
    source, target = InMemoryStore(), SQLiteStore(tmp_path / "target.db")
    source.restore_items(_records(10))
    real = target.restore_items

    def a_server_writes_first(items: Any) -> Any:
        target.put(("notes", "a"), "k0001", "a server's")
        return real(items)

    target.restore_items = a_server_writes_first  # type: ignore[method-assign]
    with pytest.raises(CopyConflictError, match="1 records were written to the target") as race:
        copy_store(source, target)
    assert race.value.records == [(("notes", "a"), "k0001")] and race.value.copied == 9
    assert target.get(("notes", "a"), "k0001").value == "a server's"  # type: ignore[union-attr]


def test_postgres_restore_waits_for_an_update_in_progress(empty_postgres_url: str) -> None:
    """A server creating the record meanwhile finishes first, and the copy then leaves its
    record: without the record's lock, the copy's row would be written under the update, which
    would then write over it as if it had been absent."""
    import threading

    from memstrata.stores import PostgresStore

    namespace = ("working-memory", "thread", "chat-1")
    with PostgresStore(empty_postgres_url) as server, PostgresStore(empty_postgres_url) as copier:
        locked, released = threading.Event(), threading.Event()

        def hold(old: Any) -> Any:
            locked.set()
            released.wait(30)
            return {"by": "server", "saw": old}

        updating = threading.Thread(target=server.update, args=(namespace, "state", hold))
        updating.start()
        assert locked.wait(10)
        now = time.time()
        copied: list[Any] = []
        copying = threading.Thread(
            target=lambda: copied.append(
                copier.restore_items([Item(namespace, "state", "copied", 5, now, now)])
            )
        )
        copying.start()
        time.sleep(0.3)
        assert copied == []  # waiting for the record's lock
        released.set()
        updating.join(10)
        copying.join(10)
        assert copied == [[]]
        got = copier.get(namespace, "state")
        assert got is not None and got.value == {"by": "server", "saw": None}


def test_a_store_of_your_own_without_restore_items_is_refused_by_name() -> None:
    class Mine(InMemoryStore):
        restore_items = Store.restore_items

    source = InMemoryStore()
    source.put(("a",), "k", 1)
    with pytest.raises(NotImplementedError, match="Mine does not provide restore_items"):
        copy_store(source, Mine())


@pytest.mark.parametrize("stop", ["interrupt", "failure"])
def test_a_copy_stopped_mid_way_says_what_the_target_holds_and_a_rerun_finishes(
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stop: str,
) -> None:
    """Ctrl-C (or a failing disk) on the third page: two whole pages written, the third not;
    the message says so and how to finish, not a traceback."""
    with SQLiteStore(tmp_path / "agent.db") as source:
        source.restore_items(_records(1200))
    error = KeyboardInterrupt() if stop == "interrupt" else OSError("disk unplugged")
    stop_writing_on_page(monkeypatch, 3, error)
    copy = [
        "copy",
        "--from",
        f"sqlite:///{tmp_path}/agent.db",
        "--to",
        f"sqlite:///{tmp_path}/t.db",
    ]
    assert main(copy) == (130 if stop == "interrupt" else 2)
    _out, err = capsys.readouterr()
    said = err.splitlines()[-1]
    assert "Traceback" not in err and said.startswith("memstrata: "), err
    assert ("interrupted" if stop == "interrupt" else "disk unplugged") in said, said
    assert "1000 of the 1200 records" in said and "run the same command again" in said, said
    with SQLiteStore(tmp_path / "t.db") as target:
        assert len(_everything(target)) == 1000  # two whole pages
    monkeypatch.undo()  # the disk is back
    assert main(copy) == 0
    out, _err = capsys.readouterr()
    assert "copied 200 record(s)" in out


@pytest.mark.parametrize("target", ["memory://", "sqlite:///:memory:"])
def test_the_command_refuses_a_target_gone_when_it_ends(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    """A store in the command's own memory: the copy would report every record copied and
    checked, and be gone a moment later."""
    with SQLiteStore(tmp_path / "agent.db") as source:
        source.restore_items(_records(3))
    assert main(["copy", "--from", f"sqlite:///{tmp_path}/agent.db", "--to", target]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "copied" not in err
    assert err == (
        f"memstrata: --to {target} is a store in this command's own memory, gone when it "
        "ends: copy into a SQLite file or a PostgreSQL database\n"
    )
