"""Failure injection: the store's infrastructure fails under a running stack (a database locked
past its timeout, a PostgreSQL backend ended, a full disk, the database file deleted under an
open store, a process killed mid-write), with real SQLite files and a real throwaway PostgreSQL
cluster. What must hold: the model reads an error payload saying the memory is unavailable and
whether to call again, never ``ok: true`` for a write that did not happen and never an exception
past ``call_tool``; nothing stored is lost or half-written; once the failure passes, the same
store works again.
"""

from __future__ import annotations

import pathlib
import sqlite3
from typing import Any

import psycopg
import pytest

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


def _end_backends(url: str) -> int:
    """Ends every other connection to the database (as a failover or an administrator does)."""
    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000))"
            " FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        ).fetchone()
    assert row is not None
    return int(row[0])
