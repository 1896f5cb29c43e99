"""What only the PostgreSQL store has: its migrations, its indexes (checked with EXPLAIN), change
marks that follow commit order, the database's clock, and async twins without threads.

The conformance suite (``test_stores.py``) covers the behaviour it shares with every backend.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pg_round_trips import RoundTripCounter
from store_checks import (
    HeldRecord,
    changed_keys,
    end_other_backends,
    end_the_backend_waiting_for_a_lock,
)

from memstrata._bridge import run_sync
from memstrata.exceptions import InvalidInputError, LockTimeoutError, StoreVersionError
from memstrata.stores import PostgresStore, open_store, pg_sql
from memstrata.stores import postgres as pg
from memstrata.stores.base import (
    ChangeMark,
    Changes,
    ChangesSince,
    ConditionalWrite,
    GetMany,
    Store,
    encode_namespace,
    prefix_upper_bound,
)

NS = ("agents", "alice")


@pytest.fixture
def url(empty_postgres_url: str) -> str:
    return empty_postgres_url


def schema_versions(url: str) -> list[int]:
    with psycopg.connect(url) as conn:
        return [v for (v,) in conn.execute("SELECT version FROM memstrata_schema ORDER BY 1")]


_OPEN = "import sys; from memstrata.stores import PostgresStore; PostgresStore(sys.argv[1]).close()"


def test_servers_starting_together_migrate_once(url: str) -> None:
    procs = [subprocess.Popen([sys.executable, "-c", _OPEN, url]) for _ in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    PostgresStore(url).close()  # and once more, later: nothing to do
    assert schema_versions(url) == [1, 2, 3, 4]


def test_a_version_1_database_is_upgraded_in_place(url: str) -> None:
    with psycopg.connect(url) as conn:
        for statement in pg._MIGRATIONS[1]:
            conn.execute(statement)
        conn.execute("CREATE TABLE memstrata_schema (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO memstrata_schema VALUES (1)")
        conn.execute(
            "INSERT INTO memstrata_items (namespace, key, value, version, created_at, updated_at)"
            " VALUES (%s, 'old', '{\"kept\": true}', 3, 1.0, 2.0)",
            (encode_namespace(NS),),
        )
    with PostgresStore(url) as store:
        assert schema_versions(url) == [1, 2, 3, 4]
        old = store.get(NS, "old")
        assert old is not None and (old.value, old.version) == ({"kept": True}, 3)
        mark = store.change_mark(NS)
        store.put(NS, "new", 1)
        assert changed_keys(store, NS, mark) == ["new"]  # rows from before it are not changes
        store.delete(NS, "old")
        changes = store.changes(NS, mark)
        assert ([i.key for i in changes.items], changes.removed) == (["new"], ["old"])
        # Tombstones keep the deleted row's version (migration 3): written again, the key
        # numbers on from it.
        assert store.put(NS, "old", "again").version == 4


def rows_naming(url: str, text: str) -> list[tuple[str, str]]:
    """Every row of every table of the database's public schema holding ``text`` in any
    column, as (table, the row as text)."""
    with psycopg.connect(url) as conn:
        tables = [
            t
            for (t,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
            )
        ]
        found = []
        for table in tables:
            for (row,) in conn.execute(f'SELECT t::text FROM "{table}" AS t'):
                if text in row:
                    found.append((table, row))
    return found


def test_an_erased_namespace_leaves_no_row_and_its_readers_are_answered(url: str) -> None:
    """Erased and its tombstones pruned, a namespace is named by no row of any table (how far
    tombstones were pruned is one transaction id for the store), and a server holding its
    rows from before is answered with the whole namespace: none."""
    store = PostgresStore(url)
    erased = ("wm", "user-priya", "thread-1")
    store.put(("wm", "user-ravi", "thread-1"), "k", 1)
    for key in ("a", "b"):
        store.put(erased, key, key)
    reader = store.changes(erased)
    store.delete(erased, "a")
    store.delete(erased, "b")
    store.tombstone_retention = 0.0
    time.sleep(0.01)
    store.purge_expired()
    assert rows_naming(url, "priya") == []
    assert rows_naming(url, "ravi")  # the scan finds what is there
    caught_up = store.changes(erased, reader.mark)
    assert caught_up.complete and caught_up.items == []
    unchanged = store.changes(erased, caught_up.mark)
    assert not unchanged.complete and unchanged.items == [] and unchanged.removed == []
    store.put(erased, "c", "again")
    for mark in (reader.mark, caught_up.mark):
        assert "c" in [item.key for item in store.changes(erased, mark).items]
    store.close()


def test_a_version_3_database_keeps_its_newest_floor_as_the_stores(url: str) -> None:
    """A database of schema version 3 kept how far tombstones were pruned in a row per
    namespace: upgraded, the newest becomes the store's, so a mark from before it is still
    answered in full, and no row names a namespace."""
    with psycopg.connect(url) as conn:
        for version in (1, 2, 3):
            for statement in pg._MIGRATIONS[version]:
                conn.execute(statement)
        conn.execute("CREATE TABLE memstrata_schema (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO memstrata_schema VALUES (1), (2), (3)")
        conn.execute(
            "INSERT INTO memstrata_items (namespace, key, value, version, created_at,"
            " updated_at) VALUES (%s, 'x', '1', 1, 1.0, 1.0)",
            (encode_namespace(NS),),
        )
        (xid,) = conn.execute("SELECT pg_current_xact_id()").fetchone()
        conn.execute(
            "INSERT INTO memstrata_tombstone_floor VALUES (%s, '3'), (%s, %s)",
            (encode_namespace(("wm", "user-priya")), encode_namespace(NS), str(xid)),
        )
    with psycopg.connect(url) as conn:
        (snapshot,) = conn.execute("SELECT pg_current_snapshot()::text").fetchone()
    with PostgresStore(url) as store:
        assert schema_versions(url) == [1, 2, 3, 4]
        assert rows_naming(url, "priya") == []
        with psycopg.connect(url) as conn:
            assert conn.execute(
                "SELECT pruned_to::text FROM memstrata_tombstones_pruned"
            ).fetchall() == [(str(xid),)]
        other = ("wm", "user-ravi")
        old = ChangeMark("postgres", other, f"{int(xid) - 1}:{int(xid) - 1}:")
        assert store.changes(other, old).complete  # from before the newest pruned id
        after = ChangeMark("postgres", other, snapshot)
        assert not store.changes(other, after).complete


def test_a_newer_schema_is_refused(url: str) -> None:
    PostgresStore(url).close()
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO memstrata_schema VALUES (99)")
    with pytest.raises(StoreVersionError, match=r"schema version 99.*upgrade memstrata"):
        PostgresStore(url)


def test_values_are_json_because_jsonb_would_reorder_their_keys(url: str) -> None:
    PostgresStore(url).close()
    with psycopg.connect(url) as conn:
        (column_type,) = conn.execute(
            "SELECT data_type FROM information_schema.columns"
            " WHERE table_name = 'memstrata_items' AND column_name = 'value'"
        ).fetchone()
        (as_jsonb,) = conn.execute("""SELECT '{"zebra": 1, "a": 2}'::jsonb::text""").fetchone()
    assert column_type == "json"
    # The reason: a working memory rendered from jsonb would change between turns.
    assert as_jsonb == '{"a": 2, "zebra": 1}'


def explain(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any]) -> str:
    # Client-side binding: the planner sees the values, as it does for the real statement.
    with psycopg.ClientCursor(conn) as cursor:
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


def test_indexes_serve_prefix_listing_ttl_purging_and_changes(url: str) -> None:
    store = PostgresStore(url)
    with psycopg.connect(url) as conn:
        # 10,000 entries of one mind among 40,000 rows; 100 of them with a TTL.
        conn.execute(
            """INSERT INTO memstrata_items
                (namespace, key, value, version, created_at, updated_at, expires_at)
            SELECT 'mind' || chr(31) || 'agent-' || (i % 4) || chr(31), 'belief/' || i,
                   '{}', 1, 0, 0, CASE WHEN i % 400 = 0 THEN 1.0 END
            FROM generate_series(1, 40000) AS i"""
        )
        conn.commit()
        mark = store.change_mark(("mind", "agent-1"))
        store.put(("mind", "agent-1"), "belief/new", {})
        conn.execute("ANALYZE memstrata_items")
        listing = explain(
            conn,
            pg._LIST,
            {
                "lo": encode_namespace(("mind", "agent-1")),
                "hi": prefix_upper_bound(encode_namespace(("mind", "agent-1"))),
                "now": None,
                "limit": 100,
                "offset": 0,
            },
        )
        purge = explain(conn, pg._PURGE, {"now": None})
        since = {"ns": encode_namespace(("mind", "agent-1")), "mark": mark.position, "now": None}
        changes = explain(conn, pg._CHANGES, since)
        # The tombstones of 8,000 deletions in four namespaces, 20 of them old enough to prune.
        conn.execute(
            """INSERT INTO memstrata_tombstones (namespace, key, deleted_by, deleted_at)
            SELECT 'mind' || chr(31) || 'agent-' || (i % 4) || chr(31), 'gone/' || i, '100',
                   CASE WHEN i % 400 = 0 THEN 0 ELSE extract(epoch FROM now()) END
            FROM generate_series(1, 8000) AS i"""
        )
        conn.execute("ANALYZE memstrata_tombstones")
        reads = explain(conn, pg._SINCE, since)
        everything = explain(conn, pg._EVERYTHING, since)
        prune = explain(conn, pg._PRUNE, {"now": None, "retention": 86400.0})
        conn.rollback()
    store.close()
    assert "Index Scan using memstrata_items_pkey" in listing, listing
    assert "memstrata_items_expires_at" in purge, purge
    assert "memstrata_items_changes" in changes and "Seq Scan" not in changes, changes
    # changes(): the mark, the floor, the rows and the tombstones since it, all by index.
    assert "memstrata_items_changes" in reads and "memstrata_tombstones_changes" in reads, reads
    assert "Seq Scan on memstrata_items" not in reads, reads
    assert "Seq Scan on memstrata_tombstones " not in reads, reads
    assert "Index Cond: (namespace = " in everything and "Seq Scan" not in everything, everything
    assert "memstrata_tombstones_deleted_at" in prune, prune


def test_a_write_in_flight_when_the_mark_is_made_is_a_change(url: str) -> None:
    # A sequence number would miss this write: drawn before the mark, committed after it.
    store = PostgresStore(url)
    store.put(NS, "before", 0)
    with psycopg.connect(url) as slow:
        slow.execute("SELECT pg_current_xact_id()")  # its transaction id is taken now
        mark = store.change_mark(NS)
        slow.execute(
            "INSERT INTO memstrata_items"
            " (namespace, key, value, version, created_at, updated_at, written_by)"
            " VALUES (%s, 'in-flight', '1', 1, 0, 0, pg_current_xact_id())",
            (encode_namespace(NS),),
        )
        store.put(NS, "after", 2)
    assert changed_keys(store, NS, mark) == ["after", "in-flight"]
    store.close()


def test_writes_and_deletes_in_flight_when_changes_reads_are_reported_next_time(
    url: str,
) -> None:
    # Transactions that took their ids before the answer's snapshot and commit after it.
    store = PostgresStore(url)
    store.put(NS, "doomed", 0)
    first = store.changes(NS)
    with psycopg.connect(url) as slow:
        slow.execute("SELECT pg_current_xact_id()")  # its transaction id is taken now
        during = store.changes(NS, first.mark)
        slow.execute(
            "INSERT INTO memstrata_items"
            " (namespace, key, value, version, created_at, updated_at, written_by)"
            " VALUES (%s, 'in-flight', '1', 1, 0, 0, pg_current_xact_id())",
            (encode_namespace(NS),),
        )
        slow.execute(pg._DELETE, {"ns": encode_namespace(NS), "key": "doomed", "now": None})
        store.put(NS, "after", 2)
        still = store.changes(NS, during.mark)  # the slow transaction has not committed yet
    assert (during.items, during.removed) == ([], [])
    assert ([i.key for i in still.items], still.removed) == (["after"], [])
    after = store.changes(NS, during.mark)
    assert ([i.key for i in after.items], after.removed) == (["after", "in-flight"], ["doomed"])
    # Nothing is reported twice from a mark taken once it committed.
    assert store.changes(NS, after.mark).items == []
    store.close()


def test_a_mark_from_another_database_gets_the_whole_namespace(url: str) -> None:
    store = PostgresStore(url)
    store.put(NS, "a", 1)
    ahead = store.change_mark(NS).position.split(":")
    foreign = f"{int(ahead[0]) + 10**6}:{int(ahead[1]) + 10**6}:"  # ids this one never used
    changes = store.changes(NS, ChangeMark("postgres", NS, foreign))
    assert changes.complete and [i.key for i in changes.items] == ["a"]
    store.close()


def test_expiry_follows_the_database_clock_not_each_clients(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore(url)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 3600)  # a server an hour behind
    store.put(NS, "from-a-slow-clock", 1, ttl=60)
    monkeypatch.setattr(time, "time", lambda: real() + 3600)  # one an hour ahead
    store.put(NS, "from-a-fast-clock", 1, ttl=60)
    monkeypatch.setattr(time, "time", real)
    for key in ("from-a-slow-clock", "from-a-fast-clock"):
        item = store.get(NS, key)
        assert item is not None, f"{key} expired early or lives an hour too long"
        assert item.expires_at is not None and abs(item.expires_at - (real() + 60)) < 5
    monkeypatch.setattr(time, "time", lambda: real() + 3600)
    assert [i.key for i in store.list(NS)] == ["from-a-fast-clock", "from-a-slow-clock"]
    assert store.purge_expired() == 0
    store.close()


def test_every_async_twin_is_postgres_own() -> None:
    # The base class's twins run the sync method in a worker thread; PostgresStore must
    # override every one of them (a twin added to Store later and not here fails this test).
    twins = {
        name
        for name, member in vars(Store).items()
        if name.startswith("a") and asyncio.iscoroutinefunction(member)
    }
    assert len(twins) >= 13, twins

    def owner(name: str) -> type:
        return next(cls for cls in PostgresStore.__mro__ if name in vars(cls))

    # Store's achanges_each awaits achanges (tested without threads below).
    inherited = {name for name in twins if owner(name) is Store} - {"achanges_each"}
    assert not inherited, f"async twins inherited from Store (threads): {sorted(inherited)}"
    for name in twins:
        assert asyncio.iscoroutinefunction(getattr(PostgresStore, name)), name


def test_open_store_opens_postgres_urls(url: str) -> None:
    for scheme in ("postgresql://", "postgres://"):
        store = open_store(scheme + url.split("://", 1)[1])
        assert isinstance(store, PostgresStore)
        store.put(NS, "via-open-store", {"scheme": scheme})
        got = store.get(NS, "via-open-store")
        assert got is not None and got.value == {"scheme": scheme}
        store.close()


def test_async_twins_use_psycopg_async_connections_not_threads(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore(url)

    def no_threads(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("an async twin ran in a worker thread")

    monkeypatch.setattr(asyncio, "to_thread", no_threads)

    async def scenario() -> None:
        mark = await store.achange_mark(NS)
        await store.aput(NS, "a", 1)
        await store.aupdate(NS, "a", lambda v: v + 1)
        assert await store.aput_if_version(NS, "b", 1, expected_version=0) is not None
        assert await store.aput_many_if_versions(NS, {"b": ConditionalWrite(1, 0)}) is None
        await store.aupdate_many(NS, {"c": lambda _v: 3})
        items = await store.aupdate_many_since(
            NS, mark, lambda changed: {"seen": lambda _v: [i.key for i in changed]}
        )
        assert items[0].value == ["a", "b", "c"]
        assert [i.key for i in await store.alist(NS)] == ["a", "b", "c", "seen"]
        got = await store.aget(NS, "a")
        assert got is not None and got.value == 2
        assert await store.adelete(NS, "b") is True
        changes = await store.achanges(NS, mark)
        assert ([i.key for i in changes.items], changes.removed) == (["a", "c", "seen"], ["b"])
        each: list[str] = []
        changes = await store.achanges_each(NS, mark, lambda item: each.append(item.key))
        assert (each, changes.items, changes.removed) == (["a", "c", "seen"], [], ["b"])
        assert await store.astamp(NS, "a") == (got.version, got.created_at)
        assert await store.apurge_expired() == 0
        await store.aclose()

    asyncio.run(scenario())


def _backends(url: str) -> int:
    """Client connections the server has open for this test's user, other than this one."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE usename = current_user AND pid <> pg_backend_pid()"
            " AND backend_type = 'client backend'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def _backends_settle_to(url: str, at_most: int, timeout: float = 10.0) -> int:
    """The count once it is at most ``at_most``, or the last count after ``timeout`` seconds.

    A backend leaves pg_stat_activity a moment after its client closes the connection (the
    server process exits on its own time): a check made at once can still count it, as one CI
    run did (the previous check's own connection, or one just closed). A connection left open
    stays counted however long this waits.
    """
    deadline = time.monotonic() + timeout
    while (count := _backends(url)) > at_most and time.monotonic() < deadline:
        time.sleep(0.05)
    return count


def test_async_twins_serve_one_event_loop_after_another(url: str) -> None:
    # asyncio.run() makes a new loop each time and cancels whatever tasks are left when it
    # ends: a connection pool left open in one loop hung that shutdown (intermittently) and
    # could not serve the next loop. Each run must end promptly, and none may leave its
    # connections open on the server.
    baseline = _backends(url)
    store = PostgresStore(url, max_size=3)

    async def burst(i: int) -> list[int]:
        await asyncio.gather(*(store.aput(NS, f"k{j}", i) for j in range(6)))
        items = await asyncio.gather(*(store.aget(NS, f"k{j}") for j in range(6)))
        return [item.value for item in items if item is not None]

    started = time.monotonic()
    for i in range(30):
        assert asyncio.run(burst(i)) == [i] * 6
        # At most the sync pool's and the last loop's (closed when the next loop asks, or at
        # close()): 30 loops' connections would be 90.
        limit = baseline + 2 * 3
        assert _backends_settle_to(url, limit) <= limit, f"run {i} left connections open"
    assert time.monotonic() - started < 30
    store.close()
    assert _backends_settle_to(url, baseline) <= baseline


def test_a_store_closed_with_async_calls_in_flight_leaves_no_connection_open(url: str) -> None:
    # A server shutting down closes its store while requests are still being answered: the
    # connections those calls hold must be closed when they are given back, not kept idle
    # for a store no one will close again, and a later call fails as a sync one does.
    baseline = _backends(url)
    store = PostgresStore(url, max_size=4)
    written = 0

    async def scenario() -> list[Any]:
        async def writes(i: int) -> None:
            nonlocal written
            for j in range(50):
                await store.aput(NS, f"k{i}-{j}", j)
                written += 1

        tasks = [asyncio.create_task(writes(i)) for i in range(8)]
        while written < 8:
            await asyncio.sleep(0.001)
        store.close()  # the other tasks are waiting for PostgreSQL meanwhile
        return await asyncio.gather(*tasks, return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert written < 8 * 50 and all(isinstance(o, Exception) for o in outcomes), outcomes
    assert _backends_settle_to(url, baseline) <= baseline
    with pytest.raises(Exception) as sync_call:
        store.put(NS, "late", 1)
    with pytest.raises(type(sync_call.value)):
        asyncio.run(store.aput(NS, "late", 1))
    assert _backends_settle_to(url, baseline) <= baseline


def test_async_twins_bound_their_connections_per_loop(url: str) -> None:
    store = PostgresStore(url, max_size=2)
    seen: set[int] = set()

    async def scenario() -> None:
        async def one(j: int) -> None:
            async with store._aconnection() as conn:
                seen.add(id(conn))
                await conn.execute("SELECT pg_sleep(0.01)")

        await asyncio.gather(*(one(j) for j in range(12)))
        await store.aclose()

    asyncio.run(scenario())
    assert 1 <= len(seen) <= 2


def test_one_statement_conditional_writes_and_updates_lose_nothing(url: str) -> None:
    # put_if_version is one autocommit statement; update() is a locked read-modify-write. Both
    # increment one counter from several threads: every increment must be there at the end.
    import threading

    stores = [PostgresStore(url, max_size=2) for _ in range(4)]
    per_thread = 25

    def by_version(store: PostgresStore) -> None:
        done = 0
        while done < per_thread:
            item = store.get(NS, "counter")
            current, version = (item.value, item.version) if item else (0, 0)
            if store.put_if_version(NS, "counter", current + 1, expected_version=version):
                done += 1

    def by_update(store: PostgresStore) -> None:
        for _ in range(per_thread):
            store.update(NS, "counter", lambda v: (v or 0) + 1)

    threads = [
        threading.Thread(target=by_version if i % 2 else by_update, args=(store,))
        for i, store in enumerate(stores)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    item = stores[0].get(NS, "counter")
    assert item is not None and item.value == per_thread * len(stores)
    assert item.version == per_thread * len(stores)
    # Over version 0 only an absent record is written; over version n only a live n.
    assert stores[0].put_if_version(NS, "counter", 0, expected_version=0) is None
    assert stores[0].put_if_version(NS, "fresh", 1, expected_version=3) is None
    assert stores[0].get(NS, "fresh") is None
    for store in stores:
        store.close()


@pytest.fixture
def counted(url: str) -> Iterator[tuple[PostgresStore, RoundTripCounter]]:
    """A store whose connections go through a proxy that counts round trips."""
    counter = RoundTripCounter(url)
    store = PostgresStore(counter.url)
    yield store, counter
    store.close()
    counter.close()


def round_trips(
    counter: RoundTripCounter, call: Any, times: int = 11, pick: Any = statistics.median
) -> float:
    """The median (or ``pick``) of ``times`` calls' round trips: the proxy also sees the pool's
    own traffic (a connection it opens or checks in the background), which can land in any
    one call."""
    for _ in range(20):
        call()  # past psycopg's prepare threshold on every pooled connection
    counts = []
    for _ in range(times):
        start = counter.round_trips
        call()
        counts.append(counter.round_trips - start)
    return float(pick(counts))


def test_round_trips_per_call(counted: tuple[PostgresStore, RoundTripCounter]) -> None:
    store, counter = counted
    store.put(NS, "k", 0)
    mark = store.change_mark(NS)
    reads = [ChangesSince(NS, mark), GetMany(NS, ("k", "absent")), ChangesSince(NS)]
    version = {"k": store.get(NS, "k").version}  # type: ignore[union-attr]

    def put_if_version() -> None:
        written = store.put_if_version(NS, "k", 1, expected_version=version["k"])
        assert written is not None
        version["k"] = written.version

    def put_many_if_versions() -> None:
        both = {"k": ConditionalWrite(2, version["k"]), "j": ConditionalWrite(2, 0)}
        written = store.put_many_if_versions(NS, both)
        assert written is not None
        version["k"] = written[0].version
        store.delete(NS, "j")  # one more round trip, taken off below

    def update_many_since() -> None:
        store.update_many_since(NS, mark, lambda changed: {c.key: lambda v: v for c in changed})

    expected = {
        "get": (lambda: store.get(NS, "k"), 1),
        "get_many": (lambda: store.get_many(NS, ["k", "j"]), 1),
        "read_many of 3 reads": (lambda: store.read_many(reads), 1),
        "put_if_version": (put_if_version, 1),
        # BEGIN, the locks and the writes; then COMMIT (ROLLBACK when a version was wrong).
        "put_many_if_versions": (put_many_if_versions, 2 + 1),
        # BEGIN, the locks and the read; then the writes and COMMIT.
        "update": (lambda: store.update(NS, "k", lambda v: v), 2),
        "update_many of 3 keys": (
            lambda: store.update_many(NS, {k: lambda v: v for k in ("k", "a", "b")}),
            2,
        ),
        # The namespace lock and the changes; the keys' locks and values; the writes, COMMIT.
        "update_many_since": (update_many_since, 3),
    }
    counted_trips = {name: round_trips(counter, call) for name, (call, _) in expected.items()}
    assert counted_trips == {name: float(trips) for name, (_, trips) in expected.items()}
    # 102 reads are 4 statements, pipelined: the client never waits between them, but a
    # statement sent after the server answered an earlier one counts as a trip here, as it
    # does whenever a busy machine holds the client back between sends; sent one after the
    # other they would be 4 trips in every call, so the fewest of the calls tells.
    assert round_trips(counter, lambda: store.read_many(reads * 34), pick=min) < 4
    version_before = store.get(NS, "k").version  # type: ignore[union-attr]
    stale = {"k": ConditionalWrite(9, version_before - 1), "new": ConditionalWrite(9, 0)}
    assert round_trips(counter, lambda: store.put_many_if_versions(NS, stale)) == 2
    assert store.get(NS, "new") is None

    # The async twins send the same statements the same way, on one event loop's connections.
    async def async_trips() -> dict[str, float]:
        calls = {
            "aread_many": (lambda: store.aread_many(reads)),
            "aread_many of 102 reads": (lambda: store.aread_many(reads * 34)),
            "aupdate": (lambda: store.aupdate(NS, "k", lambda v: v)),
            "aupdate_many_since": (
                lambda: store.aupdate_many_since(
                    NS, mark, lambda changed: {c.key: lambda v: v for c in changed}
                )
            ),
        }
        trips = {}
        for name, call in calls.items():
            for _ in range(20):
                await call()
            # The median, as round_trips() takes (the proxy also sees the pool's traffic).
            counts = []
            for _ in range(11):
                start = counter.round_trips
                await call()
                counts.append(counter.round_trips - start)
            pick = min if name == "aread_many of 102 reads" else statistics.median
            trips[name] = float(pick(counts))
        return trips

    trips = asyncio.run(async_trips())
    assert trips.pop("aread_many of 102 reads") < 4  # pipelined, as read_many's (the fewest)
    assert trips == {"aread_many": 1, "aupdate": 2, "aupdate_many_since": 3}


def _plans(conn_rows: list[tuple[Any, ...]]) -> dict[str, tuple[int, int]]:
    """(generic plans, custom plans) of the prepared statements that read items, by kind."""
    plans = {}
    for statement, generic, custom in conn_rows:
        kind = "read_many" if "UNION ALL" in statement and "ANY(" in statement else "get_many"
        if "key = ANY(" in statement:
            plans[kind] = (generic, custom)
    return plans


_PREPARED = "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"


def test_prepared_statements_are_planned_once(url: str) -> None:
    """psycopg prepares a statement the store sends often; the server then plans it once (a
    generic plan), where its default would plan statements such as get_many's again at every
    execution, which takes longer than running them. Sync and async connections alike."""
    store = PostgresStore(url, max_size=1)
    store.put(NS, "a", 1)
    reads = [GetMany(NS, ("a", "b")), ChangesSince(NS, store.change_mark(NS))]
    for _ in range(20):
        assert list(store.get_many(NS, ["a", "b"])) == ["a"]
        assert list(store.read_many(reads)[0]) == ["a"]  # type: ignore[arg-type]
    with store._connection() as conn:
        plans = _plans(conn.execute(_PREPARED).fetchall())
    assert set(plans) == {"get_many", "read_many"}
    assert all(generic >= 10 and custom == 0 for generic, custom in plans.values()), plans

    async def async_plans() -> dict[str, tuple[int, int]]:
        for _ in range(20):
            await store.aget_many(NS, ["a", "b"])
            await store.aread_many(reads)
        async with store._aconnection() as conn:
            return _plans(await (await conn.execute(_PREPARED)).fetchall())

    plans = asyncio.run(async_plans())
    assert set(plans) == {"get_many", "read_many"}
    assert all(generic >= 10 and custom == 0 for generic, custom in plans.values()), plans
    store.close()


def test_large_values_are_written_with_lz4_where_the_server_has_it(url: str) -> None:
    """A value past the server's compression threshold (a working memory's few KB) is
    compressed with lz4, cheaper to write than the default pglz, and reads back unchanged."""
    store = PostgresStore(url)
    value = {"notes": [f"note {i}: the deploy of service {i % 7} went fine" for i in range(200)]}
    store.put(NS, "big", value)

    async def awrite() -> None:
        await store.aput(NS, "abig", value)

    asyncio.run(awrite())
    with psycopg.connect(url) as conn:
        has_lz4 = conn.execute(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        ).fetchone()
        methods = conn.execute(
            "SELECT key, pg_column_compression(value) FROM memstrata_items ORDER BY key"
        ).fetchall()
    if not (has_lz4 and has_lz4[0]):
        pytest.skip("this PostgreSQL has no lz4")
    assert methods == [("abig", "lz4"), ("big", "lz4")]
    assert store.get(NS, "big").value == value  # type: ignore[union-attr]
    assert asyncio.run(store.aget(NS, "abig")).value == value  # type: ignore[union-attr]
    store.close()


def test_put_many_if_versions_checks_versions_in_its_writes(url: str) -> None:
    """A plain put that lands while put_many_if_versions waits for its locks wins: the batch
    then finds another version and writes nothing."""
    import threading

    store = PostgresStore(url)
    store.put(NS, "a", 1)
    store.put(NS, "b", 1)
    batch = {"a": ConditionalWrite("batch", 1), "b": ConditionalWrite("batch", 1)}
    answer: list[Any] = []
    with psycopg.connect(url, autocommit=True) as holder:
        holder.execute("BEGIN")
        holder.execute(pg_sql._KEY_LOCK_ROW, {"ns": encode_namespace(NS), "key": "b"})
        writer = threading.Thread(
            target=lambda: answer.append(store.put_many_if_versions(NS, batch))
        )
        writer.start()
        time.sleep(0.2)  # the batch holds "a" and waits for "b"
        assert writer.is_alive()
        store.put(NS, "b", "plain")  # no lock needed: lands while the batch waits
        holder.execute("COMMIT")
        writer.join(timeout=10)
    assert answer == [None]
    assert store.get(NS, "a").value == 1  # type: ignore[union-attr]
    assert store.get(NS, "b").value == "plain"  # type: ignore[union-attr]
    store.close()


def test_batched_writes_over_expired_rows(url: str) -> None:
    store = PostgresStore(url)
    store.put(NS, "old", 1, ttl=0.05)
    store.put(NS, "kept", 1)
    time.sleep(0.08)
    # An expired record counts as absent: version 0 writes it anew (its versions numbered on),
    # its old version does not.
    assert store.put_many_if_versions(NS, {"old": ConditionalWrite(2, 1)}) is None
    written = store.put_many_if_versions(
        NS, {"old": ConditionalWrite(2, 0), "kept": ConditionalWrite(2, 1)}
    )
    assert written is not None and [(i.key, i.version) for i in written] == [
        ("old", 2),
        ("kept", 2),
    ]
    store.put(NS, "old", 3, ttl=0.05)
    time.sleep(0.08)
    updated = store.update_many(NS, {"old": lambda v: {"was": v}, "kept": lambda v: v + 1})
    assert [(i.value, i.version) for i in updated] == [({"was": None}, 4), (3, 3)]
    store.close()


def test_a_failed_transaction_leaves_its_connection_idle(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = PostgresStore(url, max_size=1)  # one connection: every call reuses it
    store.put(NS, "k", 1)

    def boom(_: Any) -> Any:
        raise ValueError("updater failed")

    with pytest.raises(ValueError, match="updater failed"):
        store.update(NS, "k", boom)
    with pytest.raises(ValueError, match="updater failed"):
        store.update_many_since(NS, ChangeMark("postgres", NS, "1:1:"), lambda _: {"k": boom})

    def failing_plan(_: Any) -> Any:
        raise ValueError("planner failed")

    with pytest.raises(ValueError, match="planner failed"):
        store.update_many_since(NS, store.change_mark(NS), failing_plan)
    # No lock is left held: another connection updates the record at once.
    other = PostgresStore(url)
    assert other.update(NS, "k", lambda v: v + 1).version == 2
    assert store.update(NS, "k", lambda v: v + 1).value == 3
    assert not [r for r in caplog.records if "rolling back" in r.getMessage()]
    other.close()
    store.close()


def test_a_call_block_commits_or_rolls_back_what_it_left_open(url: str) -> None:
    """A call's connection is idle when its block ends (autocommit). One left in a transaction
    is committed when the block ends normally and rolled back when it raises, as psycopg's own
    ``with connection`` does, and goes back to the pool idle."""
    assert pg._IDLE == psycopg.pq.TransactionStatus.IDLE
    store = PostgresStore(url, max_size=1)  # one connection: every block reuses it
    with store._connection() as conn:
        conn.execute("BEGIN")
        conn.execute("CREATE TEMP TABLE block_check (n int)")
        conn.execute("INSERT INTO block_check VALUES (1)")
    with pytest.raises(ValueError, match="block failed"), store._connection() as conn:
        conn.execute("BEGIN")
        conn.execute("INSERT INTO block_check VALUES (2)")
        raise ValueError("block failed")
    with store._connection() as conn:
        assert conn.pgconn.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert conn.execute("SELECT n FROM block_check").fetchall() == [(1,)]
    store.close()


def test_read_many_answers_as_the_single_calls_do(url: str) -> None:
    store = PostgresStore(url)
    store.put(NS, "a", 1)
    mark = store.change_mark(NS)
    store.put(NS, "b", 2)
    foreign = ChangeMark("postgres", NS, "999999999:999999999:")  # ahead of this database
    reads = [GetMany(NS, ("b", "a", "x")), ChangesSince(NS, mark), ChangesSince(NS, foreign)]
    got = store.read_many(reads)
    assert got[0] == store.get_many(NS, ["b", "a", "x"])
    assert isinstance(got[1], Changes) and [i.key for i in got[1].items] == ["b"]
    assert not got[1].complete
    assert isinstance(got[2], Changes) and got[2].complete  # answered in full
    assert [i.key for i in got[2].items] == ["a", "b"]
    twin = asyncio.run(store.aread_many(reads))
    assert twin[0] == got[0] and isinstance(twin[1], Changes) and isinstance(twin[2], Changes)
    assert [i.key for i in twin[1].items] == ["b"] and twin[2].complete
    # Marks of the right shape that PostgreSQL still refuses: named, not a database error.
    for text in (
        "x",
        "5:3:",
        "0:0:",
        "3:5:9",
        "3:9:7,5",
        "3:5:",
        "3:5:4,",
        "1:99999999999999999999:",
    ):
        bad = ChangeMark("postgres", NS, text)
        if text == "3:5:":
            assert store.changes(NS, bad).mark.position  # a valid (old) mark is answered
            continue
        with pytest.raises(InvalidInputError, match="not a PostgreSQL snapshot"):
            store.read_many([GetMany(NS, ("a",)), ChangesSince(NS, bad)])
        with pytest.raises(InvalidInputError, match="not a PostgreSQL snapshot"):
            store.changes(NS, bad)
    with pytest.raises(InvalidInputError, match="GetMany or ChangesSince"):
        store.read_many([("get", NS, "a")])  # type: ignore[list-item]
    store.close()


def test_read_many_of_ten_thousand_reads_answers_each_as_if_made_alone(url: str) -> None:
    """Thousands of reads (of two namespaces, repeated, changes since a mark and everything)
    are answered, each as the read made alone, synchronously and asynchronously: PostgreSQL
    refuses one UNION ALL of that many branches (stack depth) and plans a long one in time
    growing with the square of its length."""
    store = PostgresStore(url)
    other = ("agents", "bob")
    store.put(NS, "a", 1)
    mark = store.change_mark(NS)
    store.put(NS, "b", 2)
    store.put(other, "c", 3)
    kinds = [
        GetMany(NS, ("b", "x")),
        ChangesSince(NS, mark),
        GetMany(other, ("c", "a")),
        ChangesSince(other),
    ]
    reads = [kinds[n % 4] for n in range(10_000)]

    def seen(answer: Any) -> Any:
        if isinstance(answer, Changes):
            return ([(i.key, i.value) for i in answer.items], answer.removed, answer.complete)
        return {key: item.value for key, item in answer.items()}

    alone = [seen(store.read_many([read])[0]) for read in kinds]
    assert alone[0] == {"b": 2} and alone[1] == ([("b", 2)], [], False)
    assert [seen(answer) for answer in store.read_many(reads)] == alone * 2_500
    twin = asyncio.run(store.aread_many(reads))
    assert [seen(answer) for answer in twin] == alone * 2_500
    store.close()


def test_keys_that_array_syntax_gives_meaning_to_are_read_and_updated_as_themselves(
    url: str,
) -> None:
    """Several keys go to PostgreSQL as the text of one array: quotes, backslashes, commas,
    braces, spaces and the word NULL stay the keys they are."""
    keys = ['a"b', "c\\d", "{e,f}", " g ", "NULL", 'h\\"i', "ü,", "}"]
    store = PostgresStore(url)
    for n, key in enumerate(keys):
        store.put(NS, key, n)
    expected = {key: n for n, key in enumerate(keys)}
    assert {k: i.value for k, i in store.get_many(NS, [*keys, "absent"]).items()} == expected
    (answer,) = store.read_many([GetMany(NS, tuple(keys))])
    assert isinstance(answer, dict)
    assert {k: i.value for k, i in answer.items()} == expected
    written = store.update_many(NS, {key: lambda v: v + 100 for key in keys})
    assert {i.key: i.value for i in written} == {key: n + 100 for n, key in enumerate(keys)}

    async def aread() -> dict[str, Any]:
        found = await store.aget_many(NS, keys)
        return {k: i.value for k, i in found.items()}

    assert asyncio.run(aread()) == {key: n + 100 for n, key in enumerate(keys)}
    store.close()


def test_a_lock_wait_past_lock_timeout_fails_clearly_and_writes_nothing(url: str) -> None:
    store = PostgresStore(url, lock_timeout=0.2)
    held = HeldRecord(url, NS, "k")
    try:
        start = time.perf_counter()
        with pytest.raises(LockTimeoutError, match=r"lock_timeout of 0\.2 s") as raised:
            store.update(NS, "k", lambda _v: {"by": "timed out"})
        took = time.perf_counter() - start
        assert raised.value.timeout == 0.2 and isinstance(raised.value, TimeoutError)
        with pytest.raises(LockTimeoutError):
            store.update_many(NS, {"k": lambda _v: {"by": "timed out"}, "other": lambda _v: 1})
        with pytest.raises(LockTimeoutError, match=r"lock_timeout of 0\.2 s"):
            store.put_if_version(NS, "k", {"by": "timed out"}, expected_version=1)
        with pytest.raises(LockTimeoutError, match=r"lock_timeout of 0\.2 s"):
            asyncio.run(store.aupdate(NS, "k", lambda _v: {"by": "timed out"}))
    finally:
        held.release()
    assert 0.15 < took < 3.0
    got = store.get(NS, "k")
    assert got is not None and (got.value, got.version) == ({"by": "holder"}, 2)
    assert store.get(NS, "other") is None  # the batch's other write was rolled back with it
    assert store.update(NS, "k", lambda _v: {"by": "after"}).version == 3  # a free lock is taken
    store.close()


def test_lock_timeout_keeps_the_urls_own_options(url: str) -> None:
    with_options = url + ("&" if "?" in url else "?") + "options=-c%20application_name%3Dmine"
    store = PostgresStore(with_options, lock_timeout=1.5)
    with store._connection() as conn:
        settings = conn.execute(
            "SELECT current_setting('lock_timeout'), current_setting('application_name')"
        ).fetchone()
    assert settings == ("1500ms", "mine")
    store.close()


def test_lock_timeout_keeps_the_options_of_the_environment(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libpq reads PGOPTIONS only when the connection string names no options: the lock
    timeout's own must not silently drop the deployment's."""
    monkeypatch.setenv("PGOPTIONS", "-c application_name=from-env")
    found = []
    for store in (PostgresStore(url, lock_timeout=1.5), PostgresStore(url, lock_timeout=None)):
        with store._connection() as conn:
            found += conn.execute(
                "SELECT current_setting('lock_timeout'), current_setting('application_name')"
            ).fetchall()
        store.close()
    assert found == [("1500ms", "from-env"), ("0", "from-env")]


def test_a_store_waits_for_a_lock_no_longer_than_sqlite_does_by_default(url: str) -> None:
    """A latency-sensitive server's turn must not wait for ever behind a lock another server
    or an administrator holds: by default the wait is bounded as SQLite's busy timeout bounds
    it; ``lock_timeout=None`` leaves it to the server's setting."""
    for store, expected in (
        (PostgresStore(url), "30s"),
        (PostgresStore(url, lock_timeout=None), "0"),
    ):
        assert store.lock_timeout == (30.0 if expected == "30s" else None)
        with store._connection() as conn:
            assert conn.execute("SELECT current_setting('lock_timeout')").fetchone() == (expected,)
        store.close()
    with open_store(url) as opened:
        assert isinstance(opened, PostgresStore) and opened.lock_timeout == 30.0


@pytest.mark.parametrize("seconds", [0, -1, float("nan"), float("inf"), "2", True])
def test_a_bad_lock_timeout_is_refused(url: str, seconds: Any) -> None:
    with pytest.raises(InvalidInputError, match="lock_timeout must be a positive number"):
        PostgresStore(url, lock_timeout=seconds)


def test_a_server_that_cannot_be_reached_is_named_at_once() -> None:
    """A URL naming no running server: the constructor says so by libpq's reason and the URL,
    its password hidden, instead of the pool retrying for 30 s, logging each try, and then
    raising a PoolTimeout that names neither."""
    start = time.perf_counter()
    with pytest.raises(psycopg.OperationalError) as raised:
        PostgresStore("postgresql://agent:S3CRET@127.0.0.1:1/memory")
    assert time.perf_counter() - start < 10
    message = str(raised.value)
    assert "postgresql://agent:***@127.0.0.1:1/memory" in message
    assert "Connection refused" in message and "S3CRET" not in message


def test_a_url_whose_scheme_is_capitalised_opens_the_store(url: str) -> None:
    """URL schemes are case-insensitive; libpq reads only a lower-case one, and would refuse
    ``PostgreSQL://...`` as a connection string missing an "="."""
    with open_store("PostgreSQL" + url[len("postgresql") :]) as store:
        store.put(("ns",), "k", 1)
        assert store.get(("ns",), "k") is not None


def test_a_database_that_does_not_exist_is_named_at_once(url: str) -> None:
    start = time.perf_counter()
    missing = url.rsplit("/", 1)[0] + "/no_such_database"
    with pytest.raises(psycopg.OperationalError, match='database "no_such_database" does not'):
        PostgresStore(missing)
    assert time.perf_counter() - start < 10


@pytest.mark.parametrize("seconds", [2147483.648, 3e6, 1e300])
def test_a_lock_timeout_past_postgresqls_range_is_refused_at_once(url: str, seconds: Any) -> None:
    """The server takes at most 2147483647 ms: a longer timeout would make every connection
    fail, and the store's constructor wait for the pool's 30 s before a PoolTimeout."""
    start = time.perf_counter()
    with pytest.raises(InvalidInputError, match=r"lock_timeout must be .* up to 2147483\.647"):
        PostgresStore(url, lock_timeout=seconds)
    assert time.perf_counter() - start < 5


def test_the_longest_lock_timeout_postgresql_takes_is_accepted(url: str) -> None:
    store = PostgresStore(url, lock_timeout=2147483.647)
    with store._connection() as conn:
        (setting,) = conn.execute("SELECT current_setting('lock_timeout')").fetchone()
    assert setting == "2147483647ms"
    store.close()


def test_a_cancelled_async_call_waits_for_a_held_lock_no_longer_than_lock_timeout(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A cancellation waits for the store call in flight to end (a transaction is never cut
    off halfway); with lock_timeout, a call waiting for another connection's lock ends by then.
    The caller gets the cancellation; the store call's own error is not logged as lost."""
    store = PostgresStore(url, lock_timeout=0.3)
    held = HeldRecord(url, NS, "k")

    def layer_code() -> Any:
        return store.update(NS, "k", lambda _v: {"by": "cancelled"})

    async def main() -> float:
        start = time.perf_counter()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(run_sync(layer_code), timeout=0.05)
        return time.perf_counter() - start

    try:
        took = asyncio.run(main())
    finally:
        held.release()
    assert 0.25 < took < 3.0  # the lock is held for 30 s unless released
    gc.collect()
    assert "never retrieved" not in caplog.text
    got = store.get(NS, "k")
    assert got is not None and got.value == {"by": "holder"}
    store.close()


def test_connections_ended_by_the_server_fail_one_call_not_one_each(url: str) -> None:
    """After the server ends the pool's connections (a restart, a failover), the one call that
    meets a dead connection fails and the pool drops the other dead ones, instead of handing
    each to a later call to fail on."""
    with PostgresStore(url, min_size=4, max_size=4) as store:
        store.put(NS, "k", {"v": 1})
        deadline = time.monotonic() + 10
        while store._pool.get_stats().get("pool_available", 0) < 4:  # the pool fills itself
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert end_other_backends(url) >= 4
        failures = 0
        for n in range(8):
            try:
                store.put(NS, "k", {"v": n})
            except psycopg.OperationalError:
                failures += 1
        assert failures <= 1
        item = store.get(NS, "k")
        assert item is not None and item.value == {"v": 7}
        assert end_other_backends(url) >= 1
        found, failures = [], 0
        for _ in range(8):
            try:
                item = store.get(NS, "k")
            except psycopg.OperationalError:
                failures += 1
            else:
                found.append(item.value if item is not None else None)
        assert failures <= 1 and found and set(map(str, found)) == {str({"v": 7})}


async def _async_calls_after_termination(url: str) -> int:
    failures = 0
    store = PostgresStore(url, max_size=4)
    try:
        await asyncio.gather(*(store.aput(NS, f"k{n}", n) for n in range(8)))  # 4 opened
        assert end_other_backends(url) >= 4
        for n in range(8):
            try:
                await store.aput(NS, "k", n)
            except psycopg.OperationalError:
                failures += 1
        item = await store.aget(NS, "k")
        assert item is not None and item.value == 7
    finally:
        await store.aclose()
    return failures


def test_async_connections_ended_by_the_server_fail_one_call_not_one_each(url: str) -> None:
    assert asyncio.run(_async_calls_after_termination(url)) <= 1


async def _concurrent_async_calls_after_termination(url: str) -> list[BaseException]:
    store = PostgresStore(url, max_size=4)
    try:
        await asyncio.gather(*(store.aput(NS, f"k{n}", n) for n in range(8)))  # 4 opened
        assert end_other_backends(url) >= 4
        await asyncio.sleep(0.2)  # the server's goodbye reaches each idle connection
        done = await asyncio.gather(
            *(store.aput(NS, f"k{n}", n + 10) for n in range(8)), return_exceptions=True
        )
        failed = [result for result in done if isinstance(result, BaseException)]
        if not failed:
            items = await asyncio.gather(*(store.aget(NS, f"k{n}") for n in range(8)))
            assert [None if item is None else item.value for item in items] == [
                n + 10 for n in range(8)
            ]
    finally:
        await store.aclose()
    return failed


def test_concurrent_async_calls_after_the_server_ended_the_connections_all_succeed(
    url: str,
) -> None:
    """Idle connections the server ended before the calls began are known dead without a
    round trip (the server's goodbye is waiting on their sockets): calls made at once after a
    restart each get a live connection, instead of every one taking a dead one and failing."""
    assert asyncio.run(_concurrent_async_calls_after_termination(url)) == []


def _wait_for_idle_connections(store: PostgresStore, count: int) -> None:
    deadline = time.monotonic() + 10
    while store._pool.get_stats().get("pool_available", 0) < count:  # the pool fills itself
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_concurrent_sync_calls_after_the_server_ended_the_connections_all_succeed(
    url: str,
) -> None:
    """As the async forms: 8 threads calling at once after a restart each get a live
    connection (4 pooled ones were ended), instead of those taking a dead one failing."""
    with PostgresStore(url, min_size=4, max_size=4) as store:
        _wait_for_idle_connections(store, 4)
        assert end_other_backends(url) >= 4
        time.sleep(0.2)  # the server's goodbye reaches each idle connection
        start = threading.Barrier(8)
        failed: list[BaseException] = []

        def put(n: int) -> None:
            start.wait()
            try:
                store.put(NS, f"k{n}", n)
            except psycopg.OperationalError as exc:
                failed.append(exc)

        threads = [threading.Thread(target=put, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failed == []
        assert {
            key: item.value for key, item in store.get_many(NS, [f"k{n}" for n in range(8)]).items()
        } == {f"k{n}": n for n in range(8)}


def test_a_sync_call_passes_over_every_ended_connection_without_waiting(url: str) -> None:
    """One call meeting the pool's 8 idle connections all ended takes a fresh one at once: the
    pool's own ``check`` callback would wait between dead connections (1 s, 2 s, 4 s...)."""
    with PostgresStore(url, min_size=8, max_size=8) as store:
        _wait_for_idle_connections(store, 8)
        assert end_other_backends(url) >= 8
        time.sleep(0.2)  # the server's goodbye reaches each idle connection
        began = time.monotonic()
        store.put(NS, "k", 1)
        assert time.monotonic() - began < 5  # generous: a new connection, not seconds of waits
        item = store.get(NS, "k")
        assert item is not None and item.value == 1


def test_a_write_whose_connection_the_server_ends_midway_fails_and_is_not_tried_again(
    url: str,
) -> None:
    """Only connections known dead before use are passed over: an update waiting for a
    record's lock when the server ends its connection raises, and nothing runs it again on a
    fresh one (its fate is the caller's to judge, as docs/stores.md says)."""
    held = HeldRecord(url, NS, "k")
    failed: list[BaseException] = []
    try:
        with PostgresStore(url, min_size=1, max_size=2) as store:

            def put() -> None:
                try:
                    store.update(NS, "k", lambda _v: {"by": "mine"})
                except psycopg.OperationalError as exc:
                    failed.append(exc)

            writer = threading.Thread(target=put)
            writer.start()
            end_the_backend_waiting_for_a_lock(url)
            writer.join(10)
            held.release()
            assert len(failed) == 1
            item = store.get(NS, "k")
            assert item is not None and item.value == {"by": "holder"}
    finally:
        held.release()
