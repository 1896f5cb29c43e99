"""Failure injection: the store's infrastructure fails under a running stack (a database locked
past its timeout, a PostgreSQL backend ended, a full disk, the database file deleted under an
open store, a process killed mid-write), with real SQLite files and a real throwaway PostgreSQL
cluster. What must hold: the model reads an error payload saying the memory is unavailable and
whether to call again, never ``ok: true`` for a write that did not happen and never an exception
past ``call_tool``; nothing stored is lost or half-written; once the failure passes, the same
store works again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import re
import select
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import postgres_cluster
import psycopg
import pytest
from store_checks import end_other_backends, end_the_backend_waiting_for_a_lock

from memstrata import AgentMind, MemoryStack, WorkingMemory
from memstrata.exceptions import StorageRaceError
from memstrata.stores import PostgresStore, SQLiteStore
from memstrata.tools import Tool

UNAVAILABLE = "memory_unavailable"


def _wm_stack(store: Any) -> MemoryStack:
    wm = WorkingMemory(budget=(0, 50_000))
    return MemoryStack([wm, AgentMind()], store=store, total_budget=100_000)


def _held_write_lock(path: pathlib.Path) -> sqlite3.Connection:
    """Another process's connection holding the database's write lock."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


def _unavailable(result: dict[str, Any], *, retry: bool) -> str:
    assert result["ok"] is False, result
    error = result["error"]
    assert error["code"] == UNAVAILABLE, result
    assert error["retry"] is retry, result
    message: str = error["message"]
    assert message.startswith("the memory is unavailable"), message
    return message


@pytest.fixture
def pg_url(empty_postgres_url: str) -> str:
    return empty_postgres_url


# call_tool: a store failure is the memory's, not the model's ----------------------------------


def test_a_locked_sqlite_file_is_memory_unavailable_not_a_tool_bug(
    tmp_path: pathlib.Path,
) -> None:
    path = tmp_path / "m.db"
    store = SQLiteStore(path, busy_timeout=0.05)
    with _wm_stack(store).run(thread_id="t", agent="a") as run:
        assert run.call_tool("working-memory/update", {"content": "one"})["ok"] is True
        other = _held_write_lock(path)
        try:
            message = _unavailable(
                run.call_tool("working-memory/update", {"content": "two"}), retry=True
            )
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert "busy" in message and "nothing was written" in message, message
        assert str(tmp_path) not in message
        assert run.call_tool("working-memory/update", {"content": "three"})["ok"] is True
        assert run.layer("working-memory").snapshot == "one\n\nthree"
    store.close()


def test_a_full_database_is_memory_unavailable_and_writable_once_there_is_room(
    tmp_path: pathlib.Path,
) -> None:
    """SQLite answering SQLITE_FULL (a full disk; here the file capped by ``max_page_count``)
    reaches the model as the memory's failure, named by SQLite's code, never its driver text;
    with room again, the same store writes."""
    store = SQLiteStore(tmp_path / "m.db")
    with _wm_stack(store).run(thread_id="t", agent="a") as run:
        assert run.call_tool("working-memory/update", {"content": "one"})["ok"] is True
        (pages,) = store._conn.execute("PRAGMA page_count").fetchone()
        store._conn.execute(f"PRAGMA max_page_count = {pages}")
        result = run.call_tool("working-memory/update", {"content": "many words " * 3000})
        message = _unavailable(result, retry=True)
        assert "SQLITE_FULL" in message and "nothing was written" in message, message
        assert run.layer("working-memory").snapshot == "one"
        store._conn.execute("PRAGMA max_page_count = 1073741823")
        assert run.call_tool("working-memory/update", {"content": "two"})["ok"] is True
    with _wm_stack(store).run(thread_id="t", agent="a") as run:
        assert run.layer("working-memory").snapshot == "one\n\ntwo"
    store.close()


def test_a_storage_race_is_memory_unavailable_not_bad_arguments(tmp_path: pathlib.Path) -> None:
    def racing(_args: dict[str, Any]) -> Any:
        raise StorageRaceError("working memory t kept changing")

    store = SQLiteStore(tmp_path / "m.db")
    with MemoryStack([WorkingMemory()], store=store).run(thread_id="t") as run:
        run._tools["wm/race"] = ("working-memory", Tool("wm/race", "x", {}, racing))
        message = _unavailable(run.call_tool("wm/race", {}), retry=True)
    assert "nothing was written" in message
    store.close()


def test_a_postgres_lock_timeout_is_memory_unavailable_naming_no_sql(pg_url: str) -> None:
    """A table held locked by another session past the store's lock_timeout: the call answers
    in about that time, as the memory's failure (it was answered as the model's
    invalid_arguments, with the server's text quoting the SQL statement)."""
    with (
        PostgresStore(pg_url, lock_timeout=0.2) as store,
        _wm_stack(store).run(thread_id="t", agent="a") as run,
    ):
        assert run.call_tool("working-memory/update", {"content": "one"})["ok"] is True
        with psycopg.connect(pg_url, autocommit=True) as admin, admin.transaction():
            admin.execute("LOCK TABLE memstrata_items IN ACCESS EXCLUSIVE MODE")
            result = run.call_tool("working-memory/update", {"content": "two"})
        message = _unavailable(result, retry=True)
        assert "busy" in message and "nothing was written" in message, message
        assert "memstrata_items" not in message and "LINE" not in message, message
        assert run.call_tool("working-memory/update", {"content": "three"})["ok"] is True
        assert run.layer("working-memory").snapshot == "one\n\nthree"


# PostgreSQL: connections ended, the server restarted ----------------------------------------


@contextlib.contextmanager
def _state_row_locked(url: str) -> Iterator[None]:
    """Another session holding the working memory's row (as a server mid-update does)."""
    with psycopg.connect(url, autocommit=True) as holder:
        holder.execute("BEGIN")
        holder.execute("SELECT 1 FROM memstrata_items WHERE key = 'state' FOR UPDATE")
        try:
            yield
        finally:
            holder.execute("ROLLBACK")


def _ended_midway(result: dict[str, Any]) -> None:
    message = _unavailable(result, retry=True)
    assert "connection failed" in message and "is not known" in message, message
    assert "Read the memory before writing it again" in message, message


def test_a_write_whose_postgres_connection_ends_midway_is_memory_unavailable(pg_url: str) -> None:
    """The backend of a tool call's write is ended while the write waits for a record: the
    model reads that the memory failed and that the write's fate is unknown (it was not saved:
    nothing commits on an ended connection), and the next call on the same run writes."""
    with PostgresStore(pg_url) as store, _wm_stack(store).run(thread_id="t", agent="a") as run:
        assert run.call_tool("working-memory/update", {"content": "one"})["ok"] is True
        answers: list[dict[str, Any]] = []
        with _state_row_locked(pg_url):
            writer = threading.Thread(
                target=lambda: answers.append(
                    run.call_tool("working-memory/update", {"content": "two"})
                )
            )
            writer.start()
            end_the_backend_waiting_for_a_lock(pg_url)
            writer.join(10)
        _ended_midway(answers[0])
        assert run.call_tool("working-memory/update", {"content": "three"})["ok"] is True
    with PostgresStore(pg_url) as store, _wm_stack(store).run(thread_id="t", agent="a") as run:
        assert run.layer("working-memory").snapshot == "one\n\nthree"


def test_an_async_write_whose_postgres_connection_ends_midway_is_memory_unavailable(
    pg_url: str,
) -> None:
    """As above, through ``acall_tool`` and the store's async connections."""

    async def turn() -> tuple[dict[str, Any], dict[str, Any]]:
        async with _wm_stack(store).arun(thread_id="t", agent="a") as run:
            assert (await run.acall_tool("working-memory/update", {"content": "one"}))["ok"]
            with _state_row_locked(pg_url):
                ender = asyncio.create_task(
                    asyncio.to_thread(end_the_backend_waiting_for_a_lock, pg_url)
                )
                ended = await run.acall_tool("working-memory/update", {"content": "two"})
                await ender
            after = await run.acall_tool("working-memory/update", {"content": "three"})
            return ended, after

    with PostgresStore(pg_url) as store:
        ended, after = asyncio.run(turn())
        _ended_midway(ended)
        assert after["ok"] is True, after
        with _wm_stack(store).run(thread_id="t", agent="a") as run:
            assert run.layer("working-memory").snapshot == "one\n\nthree"


def _restart(url: str) -> None:
    """``pg_ctl restart`` (fast: the server ends every connection) of a throwaway cluster."""
    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute("SHOW data_directory").fetchone()
    assert row is not None
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    log = os.path.join(os.path.dirname(row[0]), "server.log")
    subprocess.run(
        [*as_user, postgres_cluster._bin("pg_ctl"), "-D", row[0], "-m", "fast", "-w", "-l", log,
         "restart"],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip


def test_a_stack_open_across_a_server_restart_writes_on(tmp_path: pathlib.Path) -> None:
    """The server restarts under an open stack (a sync run and an async one): every later call
    gets a fresh connection and writes, with no call failing and no restart of the process."""
    if os.environ.get("MEMSTRATA_TEST_POSTGRES_URL"):
        pytest.skip("restarts a server of its own; MEMSTRATA_TEST_POSTGRES_URL names a shared one")
    with postgres_cluster.throwaway_cluster() as url, PostgresStore(url, max_size=4) as store:
        stack = _wm_stack(store)
        with stack.run(thread_id="t", agent="a") as run:
            assert run.call_tool("working-memory/update", {"content": "one"})["ok"] is True
            _restart(url)
            for n in range(3):
                result = run.call_tool("working-memory/update", {"content": f"sync {n}"})
                assert result["ok"] is True, result
            assert run.call_tool("mind_believe", {"content": "Restarts pass."})["status"] == "ok"

        async def turn() -> list[dict[str, Any]]:
            async with stack.arun(thread_id="t", agent="a") as run:
                await run.acall_tool("working-memory/update", {"content": "async"})
                await asyncio.to_thread(_restart, url)
                return [
                    await run.acall_tool("working-memory/update", {"content": f"async {n}"})
                    for n in range(3)
                ]

        assert all(result["ok"] is True for result in asyncio.run(turn()))
        with stack.run(thread_id="t", agent="a") as run:
            text = run.layer("working-memory").snapshot
            assert text.split("\n\n") == ["one", "sync 0", "sync 1", "sync 2", "async"] + [
                f"async {n}" for n in range(3)
            ]
            found = run.call_tool("mind_recall", {"query": "restarts"})
            assert "Restarts pass." in str(found), found


# SQLite: the file deleted or replaced under an open store -----------------------------------


def _remove_database(path: pathlib.Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(f"{path}{suffix}")


def test_a_write_after_the_sqlite_file_was_deleted_is_refused_then_goes_to_the_new_file(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The database file is deleted under an open store: a write must not land in the unlinked
    file, where no other process (nor this one, restarted) would ever read it. It is refused,
    naming the file, and the store reopens the path: the next write goes where the next
    process looks."""
    path = tmp_path / "m.db"
    store = SQLiteStore(path)
    with _wm_stack(store).run(thread_id="t", agent="a") as run:
        assert run.call_tool("working-memory/update", {"content": "one"})["ok"] is True
        _remove_database(path)
        message = _unavailable(
            run.call_tool("working-memory/update", {"content": "two"}), retry=True
        )
        assert "nothing was written" in message and str(tmp_path) not in message, message
        assert f"{path} was deleted or replaced" in caplog.text
        assert run.call_tool("working-memory/update", {"content": "three"})["ok"] is True
    with pytest.raises(sqlite3.OperationalError, match="deleted or replaced"):
        _remove_database(path)
        store.put(("notes",), "k", 1)
    store.put(("notes",), "k", 2)
    store.close()
    reopened = SQLiteStore(path)
    item = reopened.get(("notes",), "k")
    assert item is not None and item.value == 2
    rows = reopened.get_many(("working-memory", "thread", "t"), ["state"])
    assert rows == {}  # the file holding "three" was deleted with the notes' first write
    reopened.close()


def test_a_write_after_the_sqlite_file_was_replaced_goes_to_the_file_now_there(
    tmp_path: pathlib.Path,
) -> None:
    """An operator restores a copy over the open file (a rename onto its path): writes go to
    the restored file, the first one refused so that the caller knows its reads came from the
    file that was replaced."""
    path, copy = tmp_path / "m.db", tmp_path / "copy.db"
    store = SQLiteStore(path)
    store.put(("notes",), "k", "before the copy")
    backup = sqlite3.connect(copy)
    store._conn.backup(backup)
    backup.close()
    store.put(("notes",), "k", "after the copy")
    os.replace(copy, path)
    with pytest.raises(sqlite3.OperationalError, match="deleted or replaced"):
        store.put(("notes",), "other", 1)
    item = store.get(("notes",), "k")
    assert item is not None and item.value == "before the copy"
    store.put(("notes",), "k", "after the restore")
    store.close()
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    with SQLiteStore(path) as reopened:
        item = reopened.get(("notes",), "k")
        assert item is not None and item.value == "after the restore"
        assert reopened.get(("notes",), "other") is None


# Files (team state, checkpoints, kept tool results): a writer killed midway -----------------


def _write_until_killed(directory: pathlib.Path, ready: int) -> None:
    """The forked writer: rewrites ``state.json`` whole, generation after generation."""
    from memstrata.safe_files import open_dir, write_atomic

    opened = open_dir(directory)
    generation = 0
    while True:
        generation += 1
        body = b'{"generation": %d, "pad": "%s"}' % (generation, b"p" * 400_000)
        write_atomic(opened, "state.json", body, mode=0o644)
        if generation == 1:
            os.write(ready, b"r")


def test_a_file_writer_killed_midway_leaves_the_old_or_new_file_and_its_temp_is_swept(
    tmp_path: pathlib.Path,
) -> None:
    """A process writing a file (as the team state, a checkpoint or a kept tool result is
    written) is killed at random moments, 12 times: the file always holds one whole version.
    A write killed between creating its temp file and renaming it leaves that temp file
    behind (most kills here do); once it is older than any write in progress
    (``STALE_TEMP_S``), the next process writing into the directory removes it. A younger one
    (another writer's, in progress) is left alone."""
    import json
    import random
    import signal

    from memstrata import safe_files

    rng = random.Random(20261129)
    for _ in range(12):
        ready, told = os.pipe()
        pid = os.fork()  # the child has memstrata imported already: no interpreter to start
        if pid == 0:
            try:
                _write_until_killed(tmp_path, told)
            finally:
                os._exit(1)
        os.close(told)
        assert os.read(ready, 1) == b"r"
        os.close(ready)
        time.sleep(rng.uniform(0, 0.01))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        value = json.loads((tmp_path / "state.json").read_bytes())
        assert value["generation"] >= 1 and len(value["pad"]) == 400_000
    left = [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]
    # A temp file as a killed write leaves it, for sure, besides any the kills left.
    (tmp_path / ".state.json.0123456789ab.tmp").write_bytes(b'{"generation": ')
    old = time.time() - safe_files.STALE_TEMP_S - 60
    for name in os.listdir(tmp_path):
        if name.endswith(".tmp"):
            os.utime(tmp_path / name, (old, old))
    (tmp_path / ".state.json.ba9876543210.tmp").write_bytes(b"in progress")
    subprocess.run(
        [sys.executable, "-c",
         "import sys; from memstrata.safe_files import open_dir, write_atomic;"
         "write_atomic(open_dir(sys.argv[1]), 'other.json', b'{}')", str(tmp_path)],
        check=True, timeout=30,
    )  # fmt: skip
    temps = sorted(name for name in os.listdir(tmp_path) if name.endswith(".tmp"))
    assert temps == [".state.json.ba9876543210.tmp"], f"{left} were left by the kills"


@pytest.mark.parametrize("kind", ["directory", "not a database"])
def test_an_sqlite_file_that_cannot_be_opened_is_named(tmp_path: pathlib.Path, kind: str) -> None:
    """SQLite's own message ("unable to open database file", "file is not a database") does not
    say which file: the store's does, and keeps SQLite's error type and codes."""
    path = tmp_path / "m.db"
    if kind == "directory":
        path.mkdir()
    else:
        path.write_bytes(b"not a database, " * 512)
    with pytest.raises(sqlite3.DatabaseError) as info:
        SQLiteStore(path)
    assert str(info.value).startswith(f"cannot open the SQLite database {path}: "), info.value
    assert getattr(info.value, "sqlite_errorname", "SQLITE_")[:7] == "SQLITE_"


def test_a_store_whose_file_cannot_be_opened_again_tries_at_each_write(
    tmp_path: pathlib.Path,
) -> None:
    """The file is deleted and, for a while, its path cannot be opened (here a directory holds
    it): each write fails naming the file; once the path can be opened, the next one writes."""
    path = tmp_path / "m.db"
    store = SQLiteStore(path)
    store.put(("notes",), "k", 1)
    _remove_database(path)
    path.mkdir()
    for _ in range(2):
        with pytest.raises(sqlite3.OperationalError, match=f"database {path}"):
            store.put(("notes",), "k", 2)
    path.rmdir()
    store.put(("notes",), "k", 3)
    store.close()
    with SQLiteStore(path) as reopened:
        item = reopened.get(("notes",), "k")
        assert item is not None and item.value == 3


def test_an_sqlite_lock_held_past_the_busy_timeout_is_named(tmp_path: pathlib.Path) -> None:
    """Another process holds the write lock past the busy timeout: each kind of write fails in
    about that time, naming the file and the timeout (SQLite says only "database is locked"),
    with SQLite's error type and code; once the lock is released, the same store writes."""
    path = tmp_path / "m.db"
    store = SQLiteStore(path, busy_timeout=0.05)
    store.put(("notes",), "k", 1)
    other = _held_write_lock(path)
    writes = {
        "put": lambda: store.put(("notes",), "k", 2),
        "put_if_version": lambda: store.put_if_version(("notes",), "k", 2, expected_version=1),
        "update": lambda: store.update(("notes",), "k", lambda v: v + 1),
        "delete": lambda: store.delete(("notes",), "k"),
    }
    try:
        for name, write in writes.items():
            began = time.monotonic()
            with pytest.raises(sqlite3.OperationalError) as info:
                write()
            assert time.monotonic() - began < 5, name
            assert str(info.value).startswith(
                f"{path} is locked: another connection held its write lock past this store's"
                " busy_timeout of 0.05 s; nothing was written"
            ), (name, info.value)
            assert getattr(info.value, "sqlite_errorname", "SQLITE_BUSY") == "SQLITE_BUSY"
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert store.update(("notes",), "k", lambda v: v + 1).value == 2
    store.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_connections_ended_between_a_runs_steps_cost_no_call(pg_url: str, mode: str) -> None:
    """The server ends every connection of the store between a run's opening read and its tool
    call's write, and again before its close flushes the mind's draft: both go through on
    fresh connections (the server's goodbye reached the idle ones first), nothing twice."""

    def ended() -> None:
        assert end_other_backends(pg_url) >= 1
        time.sleep(0.2)  # the goodbye reaches the idle connections' sockets

    async def arun(stack: MemoryStack) -> None:
        async with stack.arun(thread_id="t", agent="a") as run:
            await asyncio.to_thread(ended)
            assert (await run.acall_tool("working-memory/update", {"content": "one"}))["ok"]
            belief = {"content": "The cache is warm."}
            assert (await run.acall_tool("mind_believe", belief))["status"] == "ok"
            await asyncio.to_thread(ended)

    with PostgresStore(pg_url) as store:
        stack = _wm_stack(store)
        if mode == "async":
            asyncio.run(arun(stack))
        else:
            with stack.run(thread_id="t", agent="a") as run:
                ended()
                assert run.call_tool("working-memory/update", {"content": "one"})["ok"] is True
                belief = {"content": "The cache is warm."}
                assert run.call_tool("mind_believe", belief)["status"] == "ok"
                ended()
        with stack.run(thread_id="t", agent="a") as run:
            assert run.layer("working-memory").snapshot == "one"
            found = run.call_tool("mind_recall", {"query": "cache"})
            assert str(found).count("The cache is warm.") == 1, found


# A statement's CommandComplete, then ReadyForQuery with the session idle: done and committed.
_COMMITTED_ANSWER = re.compile(rb"C\x00\x00\x00.[A-Z]+[^\x00]*\x00.*Z\x00\x00\x00\x05I", re.S)


class _AnswerDroppingProxy:
    """A TCP proxy to a PostgreSQL server that, once armed, drops the server's answer to the
    next statement that completed and committed, and closes that connection: the write is in
    the database, and the client only knows that its connection failed."""

    def __init__(self, url: str) -> None:
        host_port = url.split("@", 1)[1].split("/", 1)[0]
        host, port = host_port.rsplit(":", 1)
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = url.replace(host_port, f"127.0.0.1:{self._listener.getsockname()[1]}")
        self.armed, self.dropped = threading.Event(), threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        with client, server, contextlib.suppress(OSError):
            while True:
                ready, _, _ = select.select([client, server], [], [])
                for source in ready:
                    data = source.recv(1 << 16)
                    if not data:
                        return
                    armed = source is server and self.armed.is_set()
                    if armed and _COMMITTED_ANSWER.search(data):
                        self.armed.clear()
                        self.dropped.set()
                        return
                    (server if source is client else client).sendall(data)

    def close(self) -> None:
        self._listener.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_write_saved_but_answered_by_a_dead_connection_shows_in_the_next_prompt(
    pg_url: str, mode: str
) -> None:
    """A working-memory write reaches the database but its answer does not (the connection
    ends first): the model is told the write's fate is unknown and to look before writing
    again. The next prompt must show what is stored, the write included, so that the model
    does not send it again; it showed the run's state from before the write, and the model's
    second try stored the text twice."""
    user = [{"role": "user", "content": "go on"}]

    async def arun(stack: MemoryStack) -> tuple[dict[str, Any], str, Any]:
        async with stack.arun(thread_id="t", agent="a") as run:
            assert (await run.acall_tool("working-memory/update", {"content": "one"}))["ok"]
            proxy.armed.set()
            ended = await run.acall_tool("working-memory/update", {"content": "two"})
            prompt = str(await run.aprepare(user))
            assert (await run.acall_tool("working-memory/update", {"content": "three"}))["ok"]
            return ended, prompt, run.layer("working-memory").snapshot

    proxy = _AnswerDroppingProxy(pg_url)
    try:
        with PostgresStore(proxy.url) as store:
            stack = _wm_stack(store)
            if mode == "async":
                ended, prompt, snapshot = asyncio.run(arun(stack))
            else:
                with stack.run(thread_id="t", agent="a") as run:
                    assert run.call_tool("working-memory/update", {"content": "one"})["ok"]
                    proxy.armed.set()
                    ended = run.call_tool("working-memory/update", {"content": "two"})
                    prompt = str(run.prepare(user))
                    assert run.call_tool("working-memory/update", {"content": "three"})["ok"]
                    snapshot = run.layer("working-memory").snapshot
        assert proxy.dropped.is_set()
        _ended_midway(ended)
        assert "one\\n\\ntwo" in prompt, prompt
        assert snapshot == "one\n\ntwo\n\nthree"
    finally:
        proxy.close()


def test_a_goal_completion_saved_but_answered_by_a_dead_connection_stays_completed(
    pg_url: str,
) -> None:
    """A goal set in this run is completed (written at once), the write reaches the database
    but its answer does not: the run still holds the goal in its draft, and its close flushed
    that draft's "active" goal over the stored completion, losing it without a trace."""
    proxy = _AnswerDroppingProxy(pg_url)
    try:
        with PostgresStore(proxy.url) as store:
            stack = _wm_stack(store)
            with stack.run(thread_id="t", agent="a") as run:
                goal = run.call_tool("mind_set_goal", {"description": "Ship the report"})
                proxy.armed.set()
                _ended_midway(run.call_tool("mind_complete_goal", {"id": goal["id"]}))
                assert proxy.dropped.is_set()
            with stack.run(thread_id="t", agent="a") as run:
                handle = run.layer("agent-mind")
                stored = handle._goals[goal["id"]]
                assert stored.status == "completed", stored
    finally:
        proxy.close()


_FULL_DISK = r"""
import json, os, resource, signal, sys
from memstrata import MemoryStack, WorkingMemory
from memstrata.stores import SQLiteStore
path = sys.argv[1]
store = SQLiteStore(path)
stack = MemoryStack([WorkingMemory(budget=(0, 50_000))], store=store, total_budget=100_000)
answers = []
with stack.run(thread_id="t") as run:
    answers.append(run.call_tool("working-memory/update", {"content": "one"}))
    # The files may not grow: a write past their size fails (EFBIG, as ENOSPC would).
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    largest = max(os.path.getsize(path + suffix) for suffix in ("", "-wal"))
    resource.setrlimit(resource.RLIMIT_FSIZE, (largest, hard))
    answers.append(run.call_tool("working-memory/update", {"content": "many words " * 3000}))
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    answers.append(run.call_tool("working-memory/update", {"content": "two"}))
print(json.dumps(answers))
"""


def test_a_write_the_file_system_refuses_is_memory_unavailable_then_writes_again(
    tmp_path: pathlib.Path,
) -> None:
    """The file system refuses to grow the database (RLIMIT_FSIZE in a child process, as a full
    disk does): the tool call answers memory_unavailable naming SQLite's I/O error, nothing is
    written, and once the files may grow the same store writes; the file is intact."""
    import json

    path = tmp_path / "m.db"
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(path)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    first, refused, after = json.loads(done.stdout)
    assert first["ok"] is True and after["ok"] is True, (first, after)
    message = _unavailable(refused, retry=True)
    assert "SQLITE_IOERR" in message and "nothing was written" in message, message
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    with (
        SQLiteStore(path) as store,
        MemoryStack([WorkingMemory()], store=store).run(thread_id="t") as run,
    ):
        assert run.layer("working-memory").snapshot == "one\n\ntwo"


def test_a_statement_sqlite_refuses_is_a_bug_not_the_memory_failing(
    tmp_path: pathlib.Path,
) -> None:
    """SQLITE_ERROR (bad SQL, a missing table) is no failure of the memory that calling again
    could get past: it stays internal_error, logged with its traceback."""
    store = SQLiteStore(tmp_path / "m.db")

    def broken(_args: dict[str, Any]) -> Any:
        return store._conn.execute("SELECT * FROM no_such_table").fetchall()

    with MemoryStack([WorkingMemory()], store=store).run(thread_id="t") as run:
        run._tools["wm/broken"] = ("working-memory", Tool("wm/broken", "x", {}, broken))
        result = run.call_tool("wm/broken", {})
    assert result["error"]["code"] == "internal_error", result
    store.close()
