"""What only the SQLite store has: its migrations and the indexes its queries use (checked with
EXPLAIN QUERY PLAN). The conformance suite (``test_stores.py``) covers the shared behaviour."""

from __future__ import annotations

import pathlib
import sqlite3
import time
from typing import Any

import pytest
from store_checks import changed_keys

from memstrata.stores import SQLiteStore
from memstrata.stores import sqlite as sq
from memstrata.stores.base import encode_namespace, prefix_upper_bound

NS = ("agents", "alice")


def schema_versions(path: pathlib.Path) -> list[int]:
    with sqlite3.connect(path) as conn:
        return [v for (v,) in conn.execute("SELECT version FROM memstrata_schema ORDER BY 1")]


def test_migrations_run_once_and_are_recorded(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.db"
    for _ in range(3):
        SQLiteStore(path).close()
    assert schema_versions(path) == [1, 2]


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
        assert schema_versions(path) == [1, 2]
        old = store.get(NS, "old")
        assert old is not None and (old.value, old.version) == ({"kept": True}, 3)
        mark = store.change_mark(NS)
        store.put(NS, "new", 1)
        assert changed_keys(store, NS, mark) == ["new"]  # rows from before it are not changes


def test_a_newer_schema_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "future.db"
    SQLiteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO memstrata_schema VALUES (99)")
    with pytest.raises(RuntimeError, match=r"schema version 99.*upgrade memstrata"):
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
        changes = plan(sq._CHANGES, (lo, 7, time.time()))
        last_seq = plan(f"SELECT {sq._LAST_SEQ}", {"ns": lo})  # on every write
    assert "USING PRIMARY KEY (namespace>? AND namespace<?)" in listing, listing
    assert "INDEX items_expires_at" in purge and "expires_at<?" in purge, purge
    assert "USING INDEX items_changes (namespace=? AND seq>?)" in changes, changes
    # The newest number is the last entry of the namespace in that index: a seek, no sort.
    assert "USING COVERING INDEX items_changes (namespace=?)" in last_seq, last_seq
    assert "TEMP B-TREE" not in last_seq, last_seq
