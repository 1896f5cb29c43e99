"""What only the SQLite store has: its migrations and the indexes its queries use (checked with
EXPLAIN QUERY PLAN). The conformance suite (``test_stores.py``) covers the shared behaviour."""

from __future__ import annotations

import pathlib
import sqlite3
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
from store_checks import changed_keys

from memstrata.exceptions import InvalidJSONError, StoreVersionError
from memstrata.stores import SQLiteStore
from memstrata.stores import sqlite as sq
from memstrata.stores.base import ChangeMark, encode_namespace, prefix_upper_bound

NS = ("agents", "alice")


def schema_versions(path: pathlib.Path) -> list[int]:
    with sqlite3.connect(path) as conn:
        return [v for (v,) in conn.execute("SELECT version FROM memstrata_schema ORDER BY 1")]


def test_migrations_run_once_and_are_recorded(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.db"
    for _ in range(3):
        SQLiteStore(path).close()
    assert schema_versions(path) == [1, 2, 3, 4, 5]
    with sqlite3.connect(path) as conn:
        (items,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'items'").fetchone()
        indexes = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    assert "WITHOUT ROWID" not in items  # see migration 3
    assert {"items_changes", "items_expires_at"} <= indexes


def test_a_version_1_file_is_upgraded_in_place(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "v1.db"
    with sqlite3.connect(path) as conn:
        for statement in sq._MIGRATIONS[1]:
            conn.execute(statement)
        conn.execute("CREATE TABLE memstrata_schema (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO memstrata_schema VALUES (1)")
        conn.execute(
            "INSERT INTO items VALUES (?, 'old', ?, 3, 1.0, 2.0, NULL)",
            (encode_namespace(NS), b'{"kept": true}'),
        )
    with SQLiteStore(path) as store:
        assert schema_versions(path) == [1, 2, 3, 4, 5]
        old = store.get(NS, "old")
        assert old is not None and (old.value, old.version) == ({"kept": True}, 3)
        mark = store.change_mark(NS)
        store.put(NS, "new", 1)
        assert changed_keys(store, NS, mark) == ["new"]  # rows from before it are not changes
        store.delete(NS, "old")
        changes = store.changes(NS, mark)
        assert ([i.key for i in changes.items], changes.removed) == (["new"], ["old"])


def test_a_version_2_file_is_upgraded_in_place(tmp_path: pathlib.Path) -> None:
    # Version 2 kept items in a WITHOUT ROWID table; 3 rebuilds it. Every column survives,
    # sequence numbers too, so a change mark taken before the upgrade still works after it.
    path = tmp_path / "v2.db"
    with sqlite3.connect(path) as conn:
        for version in (1, 2):
            for statement in sq._MIGRATIONS[version]:
                conn.execute(statement)
        conn.execute("CREATE TABLE memstrata_schema (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO memstrata_schema VALUES (1), (2)")
        ns = encode_namespace(NS)
        conn.executemany(
            "INSERT INTO items VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (ns, "kept", b'{"a": [1, 2]}', 4, 1.0, 2.0, None, 7),
                (ns, "expiring", b'"soon"', 1, 3.0, 3.0, time.time() + 3600, 8),
                (ns, "stale", b"0", 2, 1.0, 1.5, 1.0, 5),
            ],
        )
    with SQLiteStore(path) as store:
        assert schema_versions(path) == [1, 2, 3, 4, 5]
        # The old table's pages went back to the file system, and the log is empty again.
        assert store._conn.execute("PRAGMA freelist_count").fetchone() == (0,)
        assert pathlib.Path(f"{path}-wal").stat().st_size == 0
        kept, expiring = store.get(NS, "kept"), store.get(NS, "expiring")
        assert kept is not None and expiring is not None
        assert (kept.value, kept.version, kept.created_at, kept.updated_at) == (
            {"a": [1, 2]},
            4,
            1.0,
            2.0,
        )
        assert expiring.value == "soon" and expiring.expires_at is not None
        assert store.get(NS, "stale") is None  # expired before the upgrade, still expired
        rows = store._conn.execute("SELECT key, seq FROM items ORDER BY key").fetchall()
        assert rows == [("expiring", 8), ("kept", 7), ("stale", 5)]
        # The next write numbers on from the highest sequence number, as before.
        mark = store.change_mark(NS)
        store.put(NS, "kept", {"a": [3]})
        assert changed_keys(store, NS, mark) == ["kept"]
        assert store.get(NS, "kept").version == 5  # type: ignore[union-attr]
        assert store.purge_expired() == 1
        # Tombstones made since keep the deleted row's version (migration 4): written again,
        # the key numbers on from it.
        assert store.delete(NS, "kept")
        assert store.put(NS, "kept", "again").version == 6


def test_rewriting_a_growing_journal_logs_two_pages_a_time(tmp_path: pathlib.Path) -> None:
    # Why migration 3 made items a rowid table: a working memory's journal (up to ~3.5 KB),
    # rewritten a patch longer each time, logs its leaf and one changes-index page to the WAL;
    # in a WITHOUT ROWID table, past ~1 KB it spilled into an overflow page and logged 5.
    with SQLiteStore(tmp_path / "wal.db") as store:
        page = store._conn.execute("PRAGMA page_size").fetchone()[0] + 24  # a WAL frame
        for i in range(50):
            store.put(NS, f"other-{i}", {"n": i})
        patches = [f"patch {i:02d} " + "x" * 90 for i in range(12)]
        store.put(NS, "journal", patches)
        store._conn.execute("PRAGMA wal_autocheckpoint = 0")
        wal = pathlib.Path(f"{store.path}-wal")
        frames = []
        for i in range(12, 34):  # the journal grows a patch at a time, ~1.3 -> ~3.5 KB
            patches.append(f"patch {i:02d} " + "x" * 90)
            before = wal.stat().st_size
            item = store.put_if_version(NS, "journal", patches, expected_version=i - 11)
            assert item is not None
            frames.append((wal.stat().st_size - before) // page)
    assert max(frames) <= 2, frames


def test_a_new_database_takes_8_kib_pages_and_an_existing_one_keeps_its_own(
    tmp_path: pathlib.Path,
) -> None:
    # Three mind entries (~2.3 KB each) to a page, where a 4 KiB page holds one.
    with SQLiteStore(tmp_path / "new.db") as store:
        assert store._conn.execute("PRAGMA page_size").fetchone() == (8192,)
    old = tmp_path / "old.db"
    conn = sqlite3.connect(old)
    conn.execute("PRAGMA page_size = 4096")
    conn.execute("CREATE TABLE unrelated (x)")
    conn.close()
    with SQLiteStore(old) as store:
        assert store._conn.execute("PRAGMA page_size").fetchone() == (4096,)
        store.put(NS, "k", {"v": 1})
        assert store.get(NS, "k").value == {"v": 1}  # type: ignore[union-attr]


def test_a_newer_schema_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "future.db"
    SQLiteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO memstrata_schema VALUES (99)")
    with pytest.raises(StoreVersionError, match=r"schema version 99.*upgrade memstrata"):
        SQLiteStore(path)


def test_indexes_serve_prefix_listing_ttl_purging_and_changes(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "plans.db"
    SQLiteStore(path).close()
    with sqlite3.connect(path) as conn:
        lo = encode_namespace(("mind", "agent"))

        def plan(sql: str, params: Any) -> str:
            return " | ".join(row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))

        listing = plan(sq._LIST, (lo, prefix_upper_bound(lo), time.time(), 100, 0))
        purge = plan(sq._PURGE, (time.time(),))
        changes = plan(sq._CHANGES, (lo, 7))
        deleted = plan(sq._DELETED, {"ns": lo, "mark": 7})
        everything = plan(sq._NAMESPACE, (lo, time.time()))
        last_seq = plan(f"SELECT {sq._LAST_SEQ}", {"ns": lo})  # on every write
        buried = plan(sq._BURY_PURGED, {"now": time.time()})
        floor = plan(sq._RAISE_FLOOR, {"cutoff": time.time()})
        prune = plan(sq._PRUNE, {"cutoff": time.time()})
        position = plan(sq._POSITION, {"ns": lo})  # on every changes()
        high_water = plan(sq._RAISE_HIGH_WATER, {"cutoff": time.time()})
        erased = plan(sq._DROP_ERASED, {"cutoff": time.time()})
    assert "INDEX sqlite_autoindex_items_1 (namespace>? AND namespace<?)" in listing, listing
    assert "INDEX items_expires_at" in purge and "expires_at<?" in purge, purge
    assert "USING INDEX items_changes (namespace=? AND seq>?)" in changes, changes
    assert "USING COVERING INDEX tombstones_changes (namespace=? AND seq>?)" in deleted, deleted
    assert "INDEX sqlite_autoindex_items_1 (namespace=?)" in everything, everything
    assert "TEMP B-TREE" not in listing + everything  # read in key order, no sort
    # The newest number is the last entry of the namespace in each index: a seek, no sort.
    assert "USING COVERING INDEX items_changes (namespace=?)" in last_seq, last_seq
    assert "USING COVERING INDEX tombstones_changes (namespace=?)" in last_seq, last_seq
    assert "TEMP B-TREE" not in last_seq, last_seq
    # Purging finds expired rows and old tombstones through their indexes, never a full scan.
    assert "INDEX items_expires_at" in buried and "SCAN items" not in buried, buried
    assert "INDEX tombstones_deleted_at" in floor, floor
    assert "INDEX tombstones_deleted_at" in prune, prune
    # Where a namespace stands: seeks, no sort.
    assert "USING COVERING INDEX items_changes (namespace=?)" in position, position
    assert "USING COVERING INDEX tombstones_changes (namespace=?)" in position, position
    assert "TEMP B-TREE" not in position, position
    # Whether the namespace was erased since the mark: seeks, under the deletions' own.
    assert "USING COVERING INDEX items_changes (namespace=? AND seq<?)" in deleted, deleted
    assert "USING COVERING INDEX tombstones_changes (namespace=? AND seq<?)" in deleted, deleted
    # An erased namespace is found from the old tombstones, each checked by seeks: no scan of
    # the tombstones, and none of a namespace's tombstones per tombstone.
    for found in (high_water, erased):
        assert "INDEX tombstones_deleted_at (deleted_at<?)" in found, found
        assert "SEARCH items USING COVERING INDEX items_changes (namespace=?)" in found, found
        assert "SEARCH newest USING INDEX tombstones_changes (namespace=?)" in found, found
        assert "SCAN" not in found.replace("SCAN seq_high_water", ""), found


def test_a_write_in_flight_when_changes_reads_is_reported_next_time(
    tmp_path: pathlib.Path,
) -> None:
    """Another process's write transaction, open while changes() reads (WAL lets the read
    through), is not in that answer, and is in the next one."""
    path = tmp_path / "race.db"
    store = SQLiteStore(path)
    store.put(NS, "doomed", 0)
    first = store.changes(NS)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    now = time.time()
    params = {"ns": encode_namespace(NS), "data": b"1", "now": now, "expires_at": None}
    other.execute(sq._UPSERT, {**params, "key": "in-flight"})
    other.execute(sq._BURY_DELETED, {"ns": params["ns"], "key": "doomed", "now": now})
    other.execute("DELETE FROM items WHERE key = 'doomed'")
    during = store.changes(NS, first.mark)
    assert (during.items, during.removed) == ([], [])
    other.execute("COMMIT")
    other.close()
    after = store.changes(NS, during.mark)
    assert ([i.key for i in after.items], after.removed) == (["in-flight"], ["doomed"])
    store.close()


def test_a_mark_made_over_another_file_gets_the_whole_namespace(tmp_path: pathlib.Path) -> None:
    busy, fresh = SQLiteStore(tmp_path / "busy.db"), SQLiteStore(tmp_path / "fresh.db")
    for n in range(5):
        busy.put(NS, "k", n)
    fresh.put(NS, "only", 1)
    changes = fresh.changes(NS, busy.change_mark(NS))  # a number this file never reached
    assert changes.complete and [i.key for i in changes.items] == ["only"]
    busy.close()
    fresh.close()


def test_pruning_keeps_the_newest_tombstone_of_a_namespace_with_rows(
    tmp_path: pathlib.Path,
) -> None:
    """The newest tombstone holds the namespace's top number above its rows."""
    store = SQLiteStore(tmp_path / "prune.db")
    store.put(NS, "live", 1)
    for key in ("a", "b", "c"):
        store.put(NS, key, 1)
        store.delete(NS, key)
    top = int(store.change_mark(NS).position)
    store.tombstone_retention = 0.0
    time.sleep(0.01)
    store.purge_expired()
    with sqlite3.connect(tmp_path / "prune.db") as conn:
        kept = conn.execute("SELECT key, seq FROM tombstones").fetchall()
        (floor,) = conn.execute("SELECT seq FROM tombstone_floor").fetchone()
    assert kept == [("c", top)] and floor == top - 2
    assert int(store.change_mark(NS).position) == top
    store.close()


def table_rows(path: pathlib.Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the file."""
    with sqlite3.connect(path) as conn:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {t: conn.execute(f'SELECT * FROM "{t}"').fetchall() for t in tables}


def naming(rows: dict[str, list[tuple[Any, ...]]], text: str) -> list[tuple[str, Any]]:
    """The rows holding ``text`` in any column, as text or bytes."""
    found = []
    for table, table_rows_ in rows.items():
        for row in table_rows_:
            for value in row:
                if (isinstance(value, str) and text in value) or (
                    isinstance(value, bytes) and text.encode() in value
                ):
                    found.append((table, row))
    return found


def test_an_erased_namespace_leaves_no_row_and_its_numbers_never_go_back(
    tmp_path: pathlib.Path,
) -> None:
    """Erased whole and pruned, a namespace is named by no row (its top number is kept by the
    store-wide high-water mark), a mark made while it held rows is answered in full, and
    writing to it again numbers on past every mark made of it."""
    path = tmp_path / "erase.db"
    store = SQLiteStore(path)
    erased = ("wm", "user-priya", "thread-1")
    other = ("wm", "user-ravi", "thread-1")
    store.put(other, "k", 1)
    for key in ("a", "b", "c"):
        store.put(erased, key, key)
    store.delete(erased, "a")
    reader = store.changes(erased)  # another server holding b and c
    store.delete(erased, "b")
    store.delete(erased, "c")
    top = int(store.change_mark(erased).position)
    store.tombstone_retention = 0.0
    time.sleep(0.01)
    store.purge_expired()
    assert naming(table_rows(path), "priya") == []
    assert naming(table_rows(path), "ravi")  # the scan finds what is there
    # The reader learns that b and c are gone: its namespace is read whole (empty).
    caught_up = store.changes(erased, reader.mark)
    assert caught_up.complete and caught_up.items == []
    assert int(caught_up.mark.position) > top
    unchanged = store.changes(erased, caught_up.mark)
    assert not unchanged.complete and unchanged.items == [] and unchanged.removed == []
    old_top = ChangeMark("sqlite", erased, str(top))
    assert store.changes(erased, old_top).complete  # not taken for "nothing changed"
    # Written again: its numbers go on past every mark made of it, so every reader sees it.
    store.put(erased, "d", "again")
    assert int(store.change_mark(erased).position) > top
    for mark in (reader.mark, old_top):
        # Made while it held what was erased: read whole, so b and c are known gone.
        again = store.changes(erased, mark)
        assert again.complete and [item.key for item in again.items] == ["d"]
    assert changed_keys(store, erased, caught_up.mark) == ["d"]
    assert not store.changes(erased, caught_up.mark).complete
    # A namespace never written stands at the high-water mark, unchanged until written.
    fresh = store.changes(("wm", "nobody"))
    assert store.changes(("wm", "nobody"), fresh.mark).complete is False
    store.close()


def test_a_version_4_file_drops_its_erased_namespaces_at_the_next_purge(
    tmp_path: pathlib.Path,
) -> None:
    """A file of schema version 4 kept each namespace's newest tombstone and its floor for
    good: opened, it is upgraded in place, its marks still answer, and the next purge drops
    the erased namespace's rows."""
    path = tmp_path / "v4.db"
    erased = encode_namespace(("wm", "user-priya", "t"))
    kept = encode_namespace(NS)
    with sqlite3.connect(path) as conn:
        for version in (1, 2, 3, 4):
            for statement in sq._MIGRATIONS[version]:
                conn.execute(statement)
        conn.execute("CREATE TABLE memstrata_schema (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO memstrata_schema VALUES (1), (2), (3), (4)")
        conn.execute("INSERT INTO items VALUES (?, 'x', '1', 1, 1.0, 1.0, NULL, 3)", (kept,))
        conn.executemany(
            "INSERT INTO tombstones VALUES (?, ?, ?, 1.0, 1)",
            [(erased, "c", 9), (kept, "gone", 4)],
        )
        conn.executemany("INSERT INTO tombstone_floor VALUES (?, ?)", [(erased, 7), (kept, 2)])
    with SQLiteStore(path) as store:
        assert schema_versions(path) == [1, 2, 3, 4, 5]
        ns = ("wm", "user-priya", "t")
        assert store.change_mark(ns).position == "9"
        assert store.changes(ns, ChangeMark("sqlite", ns, "9")).complete is False
        assert store.changes(ns, ChangeMark("sqlite", ns, "6")).complete  # below its floor
        store.purge_expired()
        assert naming(table_rows(path), "priya") == []
        assert int(store.change_mark(ns).position) > 9
        assert store.changes(ns, ChangeMark("sqlite", ns, "9")).complete
        # The namespace with rows keeps its newest tombstone and floor, as before.
        assert table_rows(path)["tombstones"] == [(kept, "gone", 4, 1.0, 1)]
        assert table_rows(path)["tombstone_floor"] == [(kept, 2)]
        assert store.change_mark(NS).position == "4"


def test_an_interruption_just_before_the_commit_leaves_no_transaction_open(
    tmp_path: pathlib.Path,
) -> None:
    """A KeyboardInterrupt (or any exception delivered asynchronously, say in a notebook whose
    cell is interrupted) that arrives as a write transaction ends, just before its COMMIT,
    must not leave the connection inside the transaction: the store's later writes would
    never be committed, and its write lock would shut every other process out of the file."""
    path = tmp_path / "i.db"
    store = SQLiteStore(path)
    store.put(NS, "k", 1)
    commit = source_lines(sq.__file__, 'self._conn.execute("COMMIT")')
    interrupted = []

    def in_transaction(frame: Any, event: str, _arg: Any) -> Any:
        if event == "line" and frame.f_lineno in commit and not interrupted:
            interrupted.append(frame.f_lineno)
            raise KeyboardInterrupt
        return in_transaction

    def tracer(frame: Any, _event: str, _arg: Any) -> Any:
        return in_transaction if frame.f_code.co_name == "_transaction" else None

    sys.settrace(tracer)
    try:
        with pytest.raises(KeyboardInterrupt):
            store.update(NS, "k", lambda v: v + 1)
    finally:
        sys.settrace(None)
    assert interrupted and not store._conn.in_transaction
    got = store.get(NS, "k")
    assert got is not None and got.value == 1  # the update is undone whole
    with SQLiteStore(path, busy_timeout=0.2) as other:
        other.put(NS, "k", 10)  # the file's write lock is free
    store.put(NS, "later", 1)
    store.close()
    with SQLiteStore(path) as reopened:
        assert reopened.get(NS, "later") is not None  # committed, not left in a transaction


@pytest.mark.parametrize(
    ("name", "operation"),
    [
        ("write", lambda store, mark: store.update(NS, "k", lambda v: v + 1)),
        ("full read", lambda store, mark: store.changes(NS)),
        ("catch-up read", lambda store, mark: store.changes(NS, mark)),
        ("streamed read", lambda store, mark: store.changes_each(NS, None, lambda item: None)),
        ("encoded read", lambda store, mark: store.encoded_each(NS, lambda batch: None)),
    ],
)
def test_an_interruption_at_any_line_of_a_transaction_leaves_none_open(
    tmp_path: pathlib.Path, name: str, operation: Callable[[SQLiteStore, Any], Any]
) -> None:
    """A KeyboardInterrupt arriving at any line of a transaction, its ending included (the
    COMMIT, the ROLLBACK after an error), leaves no transaction open: a read transaction left
    open pins its WAL snapshot (checkpoints starve, the file grows, the connection never sees
    later writes); a write transaction holds the file's write lock. Each line is interrupted
    in turn, once, until the operation runs through with none left to interrupt."""
    store = SQLiteStore(tmp_path / "t.db")
    store.put(NS, "k", 1)
    mark = store.change_mark(NS)
    store.put(NS, "j", 1)
    traced = {"_transaction", "changes", "_full_read", "changes_each", "encoded_each"}
    for target in range(1, 200):
        seen: list[int] = []

        def in_transaction(
            frame: Any, event: str, _arg: Any, seen: list[int] = seen, target: int = target
        ) -> Any:
            if event == "line":
                seen.append(frame.f_lineno)
                if len(seen) == target:
                    raise KeyboardInterrupt
            return in_transaction

        def tracer(frame: Any, _event: str, _arg: Any) -> Any:
            return in_transaction if frame.f_code.co_name in traced else None

        sys.settrace(tracer)
        try:
            operation(store, mark)
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
        assert not store._conn.in_transaction, f"{name}: interrupted at line {seen[-1]}"
        if len(seen) < target:
            break  # ran through: every line was interrupted once
    assert target > 3
    with SQLiteStore(tmp_path / "t.db", busy_timeout=0.2) as other:
        other.put(NS, "k", 10)  # the file's write lock is free
    assert store.get(NS, "k") is not None and store.get(NS, "k").value == 10  # type: ignore[union-attr]
    store.close()


def source_lines(filename: str, text: str) -> set[int]:
    """The numbers of the lines of ``filename`` that hold ``text``."""
    with open(filename, encoding="utf-8") as source:
        return {number for number, line in enumerate(source, 1) if text in line}


def test_a_value_another_program_made_unreadable_is_named_and_nothing_else_changes(
    tmp_path: pathlib.Path,
) -> None:
    """A file's value column takes any bytes: a row another program rewrote with text that is
    not JSON is reported, by every read and read-modify-write that meets it, as that record's
    problem (its key and namespace), not as a parser's bare "unexpected end of data"; a write
    that met it writes nothing, and the other records read as before."""
    path = tmp_path / "u.db"
    store = SQLiteStore(path)
    store.put(NS, "good", {"n": 1})
    store.put(NS, "bad", {"n": 2})
    with sqlite3.connect(path) as raw:
        raw.execute("UPDATE items SET value = ? WHERE key = 'bad'", (b'{"n": 2',))
    named = r"key 'bad' in namespace \('agents', 'alice'\) is not valid JSON"
    reads: list[Callable[[], Any]] = [
        lambda: store.get(NS, "bad"),
        lambda: store.get_many(NS, ["good", "bad"]),
        lambda: store.list(NS),
        lambda: store.changes(NS),
        lambda: store.changes_each(NS, None, lambda _item: None),
        lambda: store.update(NS, "bad", lambda v: {"n": 3}),
        lambda: store.update_many(NS, {"good": lambda v: 0, "bad": lambda v: 0}),
    ]
    for call in reads:
        with pytest.raises(InvalidJSONError, match=named):
            call()
    got = store.get(NS, "good")
    assert got is not None and (got.value, got.version) == ({"n": 1}, 1)
    with sqlite3.connect(path) as raw:
        assert raw.execute("SELECT value FROM items WHERE key = 'bad'").fetchone() == (b'{"n": 2',)
    store.close()


@pytest.mark.skipif(not pathlib.Path("/proc/self/fd").is_dir(), reason="lists /proc/self/fd")
def test_a_store_dropped_without_close_leaves_no_file_descriptor_open(
    tmp_path: pathlib.Path,
) -> None:
    """The store reads the WAL-index through a descriptor of its own: a store dropped without
    ``close()`` (a stack built per request, say) must not keep it open for the life of the
    process, one more each time, until the process runs out of descriptors."""
    import contextlib
    import gc
    import os

    index = f"{tmp_path / 'dropped.db'}-shm"

    def open_on_index() -> int:
        count = 0
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):  # the listing's own descriptor, closed since
                count += os.readlink(f"/proc/self/fd/{fd}").startswith(index)
        return count

    for _ in range(5):
        store = SQLiteStore(tmp_path / "dropped.db")
        store.put(("ns",), "k", {"v": 1})
        del store
    gc.collect()
    assert open_on_index() == 0


def test_a_namespace_erased_across_a_clock_step_back_answers_a_mark_between_its_deletions(
    tmp_path: pathlib.Path,
) -> None:
    """The system clock stepped back between two deletions of a namespace's last rows: the
    newer deletion is past the retention, the older one (stamped ahead) is not. A reader's
    mark made between the two deletions must still learn of the second one."""
    with SQLiteStore(tmp_path / "skew.db") as store:
        store.put(NS, "a", 1)
        store.put(NS, "b", 2)
        store.delete(NS, "a")
        mark = store.changes(NS, store.change_mark(NS)).mark  # after "a" went, "b" still held
        store.delete(NS, "b")
        now = time.time()
        # "a"'s tombstone stamped by a clock running ahead, "b"'s long after by the clock set
        # right: the newest tombstone is the one past the retention.
        store._conn.execute("UPDATE tombstones SET deleted_at = ? WHERE key = 'a'", (now + 3600,))
        store._conn.execute(
            "UPDATE tombstones SET deleted_at = ? WHERE key = 'b'",
            (now - store.tombstone_retention - 60,),
        )
        store.purge_expired()
        changes = store.changes(NS, mark)
        assert changes.complete or changes.removed == ["b"], changes
        store.put(NS, "c", 3)  # written again: the deletion of "b" still counts
        changes = store.changes(NS, mark)
        assert changes.complete or changes.removed == ["b"], changes
