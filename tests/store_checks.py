"""Checks shared by the store tests."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from memstrata.stores import InMemoryStore, Item, Namespace, PostgresStore, SQLiteStore, Store
from memstrata.stores import sqlite as sqlite_store
from memstrata.stores.base import IO_METHODS, ChangeMark


def changed_keys(store: Store, namespace: Namespace, since: ChangeMark) -> list[str]:
    """The keys ``update_many_since`` reports as changed since the mark (it writes nothing)."""
    seen: list[str] = []

    def plan(changed: list[Item]) -> dict[str, Any]:
        seen.extend(item.key for item in changed)
        return {}

    assert store.update_many_since(namespace, since, plan) == []
    return seen


# Every table a PostgresStore keeps; the schema table last, so dropping it means "migrate again".
POSTGRES_DATA_TABLES = "memstrata_items, memstrata_tombstones, memstrata_tombstones_pruned"


def fresh_store(kind: str, request: Any, tmp_path: Any) -> Store:
    """An empty store of ``kind``: "memory", "sqlite" (a file in ``tmp_path``) or "postgres"
    (the session's cluster, its tables emptied; ``request`` is the fixture's)."""
    if kind == "memory":
        return InMemoryStore()
    if kind == "sqlite":
        return SQLiteStore(tmp_path / "shared.db")
    url = request.getfixturevalue("postgres_url")
    store = PostgresStore(url)
    empty_postgres_tables(url)
    return store


def drop_postgres_tables(url: str) -> None:
    """Leaves the database with no memstrata tables: the next store migrates from nothing."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {POSTGRES_DATA_TABLES}, memstrata_schema")


def end_other_backends(url: str) -> int:
    """Ends every connection to the database but this one, waiting up to 5 s for each to go
    (what a server restart or a failover does to a pool's connections); returns how many."""
    with psycopg.connect(url, autocommit=True) as admin:
        ended = admin.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000))"
            " FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        ).fetchone()
    assert ended is not None
    return int(ended[0])


def end_the_backend_waiting_for_a_lock(url: str) -> None:
    """Ends the one connection of the database waiting for a lock (a store call in flight), as
    an administrator's ``pg_terminate_backend`` or a failover does; fails if none waits within
    10 s."""
    with psycopg.connect(url, autocommit=True) as admin:
        deadline = time.monotonic() + 10
        while True:
            waiting = admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database()"
            ).fetchall()
            if waiting:
                break
            assert time.monotonic() < deadline, "no store call waited for the lock"
            time.sleep(0.01)
        ((pid,),) = waiting
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))


def empty_postgres_tables(url: str) -> None:
    """Deletes every row a PostgresStore wrote, tombstones too, keeping the schema."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {POSTGRES_DATA_TABLES}")


def _noting(name: str) -> Any:
    def noted(self: Any, /, *args: Any, **kwargs: Any) -> Any:
        if not sqlite_store._slow(name, args, kwargs):
            self.threads.add(threading.get_ident())
        return getattr(super(ThreadNotingSQLiteStore, self), name)(*args, **kwargs)

    noted.__name__ = name
    return noted


def _init(self: Any, path: Any) -> None:
    SQLiteStore.__init__(self, path)
    self.threads = set()


# An SQLite store that notes the thread each of its I/O calls runs on, but those the async path
# sends to a worker thread by design (a whole namespace read, a purge, close): the event loop's
# own thread when the async path makes no thread hop for a call that need not wait. Made with
# type() so that the store's subclass hook wraps the noting methods themselves, as it wraps a
# store's own: a call the async path sends to a worker thread is noted on that thread.
ThreadNotingSQLiteStore: Any = type(
    "ThreadNotingSQLiteStore",
    (SQLiteStore,),
    {
        "__init__": _init,
        "__doc__": "An SQLite store noting the thread each quick I/O call runs on (``threads``).",
        **{name: _noting(name) for name in IO_METHODS if name != "close"},
    },
)


class HeldRecord:
    """Another server in the middle of updating a record: its ``update`` holds the record's
    lock, inside its transaction, until :meth:`release`."""

    def __init__(self, url: str, namespace: Namespace, key: str) -> None:
        self.store = PostgresStore(url)
        self.store.put(namespace, key, {"by": "first"})
        self._locked, self._released = threading.Event(), threading.Event()

        def hold(_value: Any) -> Any:
            self._locked.set()
            self._released.wait(30)
            return {"by": "holder"}

        self._thread = threading.Thread(target=self.store.update, args=(namespace, key, hold))
        self._thread.start()
        assert self._locked.wait(10)

    def release(self) -> None:
        self._released.set()
        self._thread.join(10)
        self.store.close()
