"""SQLiteStore: the embedded default. One file, WAL journal, nothing to start.

Several processes may open the same file: ``update`` takes SQLite's write lock up front
(``BEGIN IMMEDIATE``) before reading, so concurrent read-modify-writes serialise instead of
overwriting each other, and ``busy_timeout`` makes a waiting writer wait rather than fail.
With WAL and ``synchronous=NORMAL`` a killed process never leaves a half-written record: a
transaction is in the file whole or not at all.
"""

from __future__ import annotations

import builtins
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from memstrata.stores import codec
from memstrata.stores.base import (
    Changes,
    Item,
    JSONValue,
    Namespace,
    Store,
    Updater,
    decode_namespace,
    encode_namespace,
    prefix_upper_bound,
    validate_cursor,
    validate_key,
    validate_namespace,
    validate_page,
    validate_ttl,
    validate_version,
)

SCHEMA_VERSION = 2


def _change_trigger(event: str, row: str, removed: int) -> str:
    """Logs every write to ``items`` in ``item_changes``: a trigger, so that no write path can
    forget to."""
    return f"""CREATE TRIGGER IF NOT EXISTS items_log_{event.lower()} AFTER {event} ON items
        BEGIN
            UPDATE change_counter SET seq = seq + 1 WHERE id = 1;
            INSERT INTO item_changes (namespace, key, seq, removed)
                SELECT {row}.namespace, {row}.key, seq, {removed} FROM change_counter WHERE id = 1
                ON CONFLICT (namespace, key) DO UPDATE
                SET seq = excluded.seq, removed = excluded.removed;
        END"""


_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE IF NOT EXISTS items (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value BLOB NOT NULL,
            version INTEGER NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            expires_at REAL,
            PRIMARY KEY (namespace, key)
        ) WITHOUT ROWID""",
        "CREATE INDEX IF NOT EXISTS items_expires_at ON items (expires_at)"
        " WHERE expires_at IS NOT NULL",
    ),
    # The change log behind changes(): the last write (or delete) of each key, numbered by one
    # database-wide counter that only a writer, under the write lock, moves.
    2: (
        """CREATE TABLE IF NOT EXISTS item_changes (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            seq INTEGER NOT NULL,
            removed INTEGER NOT NULL,
            PRIMARY KEY (namespace, key)
        ) WITHOUT ROWID""",
        "CREATE INDEX IF NOT EXISTS item_changes_seq ON item_changes (namespace, seq)",
        """CREATE TABLE IF NOT EXISTS change_counter (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            seq INTEGER NOT NULL
        )""",
        "INSERT OR IGNORE INTO change_counter (id, seq) VALUES (1, 0)",
        # Rows written before the log existed count as written at 0: a caller's first call
        # lists everything anyway.
        "INSERT OR IGNORE INTO item_changes (namespace, key, seq, removed)"
        " SELECT namespace, key, 0, 0 FROM items",
        _change_trigger("INSERT", "NEW", 0),
        _change_trigger("UPDATE", "NEW", 0),
        _change_trigger("DELETE", "OLD", 1),
    ),
}

_COLUMNS = "namespace, key, value, version, created_at, updated_at, expires_at"
_LIVE = "(expires_at IS NULL OR expires_at > ?)"
_LIVE_OLD = "(items.expires_at IS NULL OR items.expires_at > ?)"


class SQLiteStore(Store):
    """A store in one SQLite file.

    Args:
        path: The database file; created with its directory if missing. ``":memory:"`` works
            for a private throwaway database.
        busy_timeout: Seconds a writer waits for another process's lock before failing.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 30.0) -> None:
        self.path = os.fspath(path)
        if self.path != ":memory:":
            parent = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(parent, exist_ok=True)
        # One connection per store, used under a lock: sqlite3 objects are not thread-safe, and
        # the async twins call in from worker threads.
        self._conn = sqlite3.connect(
            self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False
        )
        self._lock = threading.RLock()
        self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = NORMAL")
        self._migrate()

    def _migrate(self) -> None:
        with self._transaction():
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS memstrata_schema (version INTEGER NOT NULL)"
            )
            row = self._conn.execute("SELECT max(version) FROM memstrata_schema").fetchone()
            current = row[0] or 0
            if current > SCHEMA_VERSION:
                raise RuntimeError(
                    f"{self.path} has schema version {current}; this memstrata knows up to "
                    f"{SCHEMA_VERSION}: upgrade memstrata to open it"
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[version]:
                    self._conn.execute(statement)
                self._conn.execute("INSERT INTO memstrata_schema (version) VALUES (?)", (version,))

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction holding the database lock from its first statement."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    @staticmethod
    def _item(row: tuple[str, str, bytes, int, float, float, float | None]) -> Item:
        ns, key, data, version, created_at, updated_at, expires_at = row
        return Item(
            decode_namespace(ns),
            key,
            codec.loads(data),
            version,
            created_at,
            updated_at,
            expires_at,
        )

    def _write(
        self,
        conn: sqlite3.Connection,
        namespace: Namespace,
        key: str,
        value: JSONValue,
        data: bytes,
        ttl: float | None,
        now: float,
    ) -> Item:
        """Upserts ``data`` (``value`` encoded) in the caller's transaction; an expired row is
        treated as absent.

        The returned item holds ``value`` itself: decoding what was just encoded would cost as
        much as the write, and the stored copy is already independent of it.
        """
        expires_at = now + ttl if ttl is not None else None
        row = conn.execute(
            f"""INSERT INTO items ({_COLUMNS}) VALUES (?, ?, ?, 1, ?, ?, ?)
            ON CONFLICT (namespace, key) DO UPDATE SET
                value = excluded.value,
                version = CASE WHEN {_LIVE_OLD} THEN items.version + 1 ELSE 1 END,
                created_at = CASE WHEN {_LIVE_OLD} THEN items.created_at
                                  ELSE excluded.created_at END,
                updated_at = excluded.updated_at,
                expires_at = excluded.expires_at
            RETURNING version, created_at, updated_at""",
            (encode_namespace(namespace), key, data, now, now, expires_at, now, now),
        ).fetchone()
        version, created_at, updated_at = row
        return Item(namespace, key, value, version, created_at, updated_at, expires_at)

    def get(self, namespace: Namespace, key: str) -> Item | None:
        ns = encode_namespace(validate_namespace(namespace))
        validate_key(key)
        with self._lock:
            row = self._conn.execute(
                f"SELECT {_COLUMNS} FROM items WHERE namespace = ? AND key = ? AND {_LIVE}",
                (ns, key, time.time()),
            ).fetchone()
        return None if row is None else self._item(row)

    def stamp(self, namespace: Namespace, key: str) -> tuple[int, float] | None:
        ns = encode_namespace(validate_namespace(namespace))
        validate_key(key)
        with self._lock:
            row = self._conn.execute(
                "SELECT version, created_at FROM items"
                f" WHERE namespace = ? AND key = ? AND {_LIVE}",
                (ns, key, time.time()),
            ).fetchone()
        return None if row is None else (row[0], row[1])

    def put(
        self, namespace: Namespace, key: str, value: JSONValue, *, ttl: float | None = None
    ) -> Item:
        namespace = validate_namespace(namespace)
        validate_key(key)
        ttl = validate_ttl(ttl)
        data = codec.dumps(value)  # bad data is refused before the write lock is taken
        with self._transaction() as conn:
            return self._write(conn, namespace, key, value, data, ttl, time.time())

    def delete(self, namespace: Namespace, key: str) -> bool:
        ns = encode_namespace(validate_namespace(namespace))
        validate_key(key)
        # Read, then delete, in one transaction: SQLite 3.40's DELETE ... RETURNING evaluates
        # expressions over a WITHOUT ROWID table's deleted row as NULL.
        with self._transaction() as conn:
            live = conn.execute(
                f"SELECT {_LIVE} FROM items WHERE namespace = ? AND key = ?",
                (time.time(), ns, key),
            ).fetchone()
            conn.execute("DELETE FROM items WHERE namespace = ? AND key = ?", (ns, key))
        return bool(live and live[0])

    def list(
        self, namespace_prefix: Namespace = (), *, limit: int = 100, offset: int = 0
    ) -> builtins.list[Item]:
        prefix = encode_namespace(validate_namespace(namespace_prefix, allow_empty=True))
        validate_page(limit, offset)
        with self._lock:
            rows = self._conn.execute(
                f"""SELECT {_COLUMNS} FROM items
                WHERE namespace >= ? AND namespace < ? AND {_LIVE}
                ORDER BY namespace, key LIMIT ? OFFSET ?""",
                (prefix, prefix_upper_bound(prefix), time.time(), limit, offset),
            ).fetchall()
        return [self._item(row) for row in rows]

    def changes(self, namespace: Namespace, *, since: int | None = None) -> Changes:
        namespace = validate_namespace(namespace)
        ns = encode_namespace(namespace)
        since = validate_cursor(since)
        with self._lock:
            # The cursor is read first: a change numbered at or below it is already committed,
            # so it is in what follows; one numbered above it comes again next time (harmless).
            (cursor,) = self._conn.execute("SELECT seq FROM change_counter").fetchone()
            now = time.time()
            if since is None:
                rows = self._conn.execute(
                    f"SELECT {_COLUMNS} FROM items WHERE namespace = ? AND {_LIVE} ORDER BY key",
                    (ns, now),
                ).fetchall()
                return Changes(cursor, [self._item(row) for row in rows], [], True)
            changed = self._conn.execute(
                """SELECT c.key, i.value, i.version, i.created_at, i.updated_at, i.expires_at
                FROM item_changes c LEFT JOIN items i ON i.namespace = c.namespace AND i.key = c.key
                WHERE c.namespace = ? AND c.seq > ? ORDER BY c.seq""",
                (ns, since),
            ).fetchall()
        items: builtins.list[Item] = []
        removed: builtins.list[str] = []
        for key, data, version, created_at, updated_at, expires_at in changed:
            if data is None or (expires_at is not None and expires_at <= now):
                removed.append(key)
            else:
                row = (ns, key, data, version, created_at, updated_at, expires_at)
                items.append(self._item(row))
        return Changes(cursor, items, removed, False)

    def update(
        self, namespace: Namespace, key: str, fn: Updater, *, ttl: float | None = None
    ) -> Item:
        namespace = validate_namespace(namespace)
        ns = encode_namespace(namespace)
        validate_key(key)
        ttl = validate_ttl(ttl)
        with self._transaction() as conn:
            now = time.time()
            row = conn.execute(
                f"SELECT value FROM items WHERE namespace = ? AND key = ? AND {_LIVE}",
                (ns, key, now),
            ).fetchone()
            current = codec.loads(row[0]) if row is not None else None
            value = fn(current)
            return self._write(conn, namespace, key, value, codec.dumps(value), ttl, now)

    def put_if_version(
        self,
        namespace: Namespace,
        key: str,
        value: JSONValue,
        *,
        expected_version: int,
        ttl: float | None = None,
    ) -> Item | None:
        namespace = validate_namespace(namespace)
        ns = encode_namespace(namespace)
        validate_key(key)
        ttl = validate_ttl(ttl)
        expected_version = validate_version(expected_version)
        data = codec.dumps(value)  # bad data is refused before the write lock is taken
        with self._transaction() as conn:
            now = time.time()
            row = conn.execute(
                f"SELECT version FROM items WHERE namespace = ? AND key = ? AND {_LIVE}",
                (ns, key, now),
            ).fetchone()
            if (row[0] if row else 0) != expected_version:
                return None
            return self._write(conn, namespace, key, value, data, ttl, now)

    def update_many(
        self, namespace: Namespace, updates: Mapping[str, Updater], *, ttl: float | None = None
    ) -> builtins.list[Item]:
        namespace = validate_namespace(namespace)
        ns = encode_namespace(namespace)
        keys = [validate_key(key) for key in updates]
        ttl = validate_ttl(ttl)
        items = []
        with self._transaction() as conn:
            now = time.time()
            for key in keys:
                row = conn.execute(
                    f"SELECT value FROM items WHERE namespace = ? AND key = ? AND {_LIVE}",
                    (ns, key, now),
                ).fetchone()
                value = updates[key](codec.loads(row[0]) if row is not None else None)
                items.append(self._write(conn, namespace, key, value, codec.dumps(value), ttl, now))
        return items

    def purge_expired(self) -> int:
        with self._transaction() as conn:
            cursor = conn.execute(
                "DELETE FROM items WHERE expires_at IS NOT NULL AND expires_at <= ?",
                (time.time(),),
            )
            return cursor.rowcount

    def close(self) -> None:
        with self._lock:
            self._conn.close()
