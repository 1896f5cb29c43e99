"""SQLiteStore: the embedded default. One file, WAL journal, nothing to start.

Several processes may open the same file: ``update`` takes SQLite's write lock up front
(``BEGIN IMMEDIATE``) before reading, so concurrent read-modify-writes serialise instead of
overwriting each other, and ``busy_timeout`` makes a waiting writer wait rather than fail.
With WAL and ``synchronous=NORMAL`` a killed process never leaves a half-written record: a
transaction is in the file whole or not at all.

Every row carries a sequence number (``seq``) that is one more than the namespace's highest
when it is written. Write transactions are serialised by the database lock, so the numbers follow
commit order exactly: a ``ChangeMark`` is the namespace's highest number, and the changes since
it are a range scan of the ``(namespace, seq)`` index. The highest number is read from that same
index, which the write updates anyway, so change tracking adds one index entry per write and no
other page.

``delete`` and ``purge_expired`` take the next number too and leave a tombstone (``tombstones``:
namespace, key, seq, when, the deleted row's version), found by ``changes`` through its own
``(namespace, seq)`` index; the highest number is the greater of the two indexes' last entries,
so a namespace's numbers never go back. Only deletions write tombstones, and a write does not
touch them (a key written again after its deletion is reported by that write). Pruning keeps
the newest tombstone of each namespace that still holds rows, so the numbering never loses its
top, and records the newest number it dropped in ``tombstone_floor``: a mark below it is
answered in full.

A namespace left with no rows and only tombstones past the retention (a user erased) is
dropped whole, its floor too, so no row names it any more: its top number goes into the
store-wide ``seq_high_water`` (one past the highest number so dropped), where a namespace with
no history of its own numbers on from. Such a namespace's mark is the high-water mark, and any
other mark is answered in full (its whole contents: none, or rows from before change tracking),
so a mark made while the erased namespace held rows is never taken for "nothing changed". Written
again, the namespace's whole history is past such a mark, which is below the high-water mark:
``changes`` looks for that with the deletions since the mark, and answers in full.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import os
import sqlite3
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from memstrata._bridge import await_, in_thread, pinned
from memstrata.exceptions import StoreVersionError
from memstrata.stores import codec
from memstrata.stores.base import (
    ENCODED_BATCH,
    ChangeMark,
    Changes,
    ChangesSince,
    ConditionalWrite,
    EncodedItem,
    Item,
    JSONValue,
    Namespace,
    Planner,
    Store,
    Updater,
    decode_namespace,
    encode_namespace,
    item_of,
    prefix_upper_bound,
    sequence_position,
    validate_after,
    validate_key,
    validate_keys,
    validate_namespace,
    validate_page,
    validate_restored,
    validate_ttl,
    validate_updates,
    validate_version,
    validate_writes,
)

SCHEMA_VERSION = 5
# The migration that rebuilds the items table: a file upgraded through it is compacted after.
_REBUILDS_ITEMS = 3
_BACKEND = "sqlite"
_T = TypeVar("_T")
_SQLITE_BUSY = 5  # the primary result code; sqlite3 names it from Python 3.11
# SQLite's auto-checkpoint threshold (frames of the log), which the async path's own
# checkpoints keep too (see SQLiteStore._checkpoint).
_CHECKPOINT_FRAMES = 1000
_AUTO_CHECKPOINT = f"PRAGMA wal_autocheckpoint = {_CHECKPOINT_FRAMES}"
# The WAL-index header at the start of ``<path>-shm`` (https://www.sqlite.org/walformat.html),
# in native byte order: the log's last valid frame (mxFrame) at byte 16, the last frame copied
# into the database (nBackfill) at byte 96.
_FRAME_NUMBER = struct.Struct("=I")
_MX_FRAME, _BACKFILLED, _LOG_INDEX_BYTES = 16, 96, 100
# The methods that write (purge_expired always runs in a worker thread: see _slow).
_WRITES = frozenset(
    {
        "put",
        "put_if_version",
        "put_many_if_versions",
        "update",
        "update_many",
        "update_many_since",
        "delete",
        "delete_if_version",
    }
)
logger = logging.getLogger(__name__)

_COLUMNS = "namespace, key, value, version, created_at, updated_at, expires_at"
_KEYS_PER_READ = 500
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
    # Change tracking (changes, update_many_since): rows written before it count as never
    # changed.
    2: (
        "ALTER TABLE items ADD COLUMN seq INTEGER NOT NULL DEFAULT 0",
        "CREATE INDEX IF NOT EXISTS items_changes ON items (namespace, seq)",
        """CREATE TABLE IF NOT EXISTS tombstones (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            seq INTEGER NOT NULL,
            deleted_at REAL NOT NULL,
            PRIMARY KEY (namespace, key)
        ) WITHOUT ROWID""",
        "CREATE INDEX IF NOT EXISTS tombstones_changes ON tombstones (namespace, seq)",
        "CREATE INDEX IF NOT EXISTS tombstones_deleted_at ON tombstones (deleted_at)",
        """CREATE TABLE IF NOT EXISTS tombstone_floor (
            namespace TEXT PRIMARY KEY,
            seq INTEGER NOT NULL
        ) WITHOUT ROWID""",
    ),
    # items becomes a rowid table. A WITHOUT ROWID table keeps each row in its primary-key
    # b-tree, whose pages hold at most ~1 KB of a row (4 KB pages): a working memory's journal
    # (up to ~3.5 KB, rewritten on every update) spilled into an overflow page, so each rewrite
    # freed and allocated one and logged ~4.9 pages to the WAL. A rowid table keeps it in its
    # leaf, and the primary-key index does not change when only the value does: 2 pages. In
    # the whole-turn benchmark, WAL pages per turn 7.0 -> 4.2 (so a checkpoint every ~240
    # turns, not ~140), and the turn's SQL time -11 us (median).
    3: (
        """CREATE TABLE items_rowid (
            namespace TEXT NOT NULL,
            key TEXT NOT NULL,
            value BLOB NOT NULL,
            version INTEGER NOT NULL,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            expires_at REAL,
            seq INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (namespace, key)
        )""",
        f"INSERT INTO items_rowid ({_COLUMNS}, seq) SELECT {_COLUMNS}, seq FROM items",
        "DROP TABLE items",  # and its indexes
        "ALTER TABLE items_rowid RENAME TO items",
        "CREATE INDEX items_expires_at ON items (expires_at) WHERE expires_at IS NOT NULL",
        "CREATE INDEX items_changes ON items (namespace, seq)",
    ),
    # A deletion's tombstone keeps the deleted row's version: the key written again numbers on
    # from it, so a version held from before never matches the new value.
    4: ("ALTER TABLE tombstones ADD COLUMN version INTEGER NOT NULL DEFAULT 0",),
    # Where a namespace with no history of its own numbers on from: pruning an erased
    # namespace whole keeps its top number here, in no row that names it.
    5: (
        "CREATE TABLE seq_high_water (seq INTEGER NOT NULL)",
        "INSERT INTO seq_high_water (seq) VALUES (0)",
    ),
}

_LIVE = "(expires_at IS NULL OR expires_at > ?)"
_LIST = f"""SELECT {_COLUMNS} FROM items WHERE namespace >= ? AND namespace < ? AND {_LIVE}
    ORDER BY namespace, key LIMIT ? OFFSET ?"""
# list_after: a range of the primary key from a (namespace, key) on.
_LIST_AFTER = f"""SELECT {_COLUMNS} FROM items
    WHERE namespace >= ? AND namespace < ? AND (namespace, key) > (?, ?) AND {_LIVE}
    ORDER BY namespace, key LIMIT ?"""
_NAMESPACE = f"SELECT {_COLUMNS} FROM items WHERE namespace = ? AND {_LIVE} ORDER BY key"
_NAMESPACE_ENCODED = (
    f"SELECT key, value, expires_at FROM items WHERE namespace = ? AND {_LIVE} ORDER BY key"
)
# Pinned to the changes indexes: unanalysed, SQLite prefers the primary key (already in key
# order), which would read the whole namespace to find the few rows written since the mark.
# Expired rows are read too: for changes() they are removals.
# Rows per fetch when changes_each streams a namespace.
_STREAM_BATCH = 256
_CHANGES = f"""SELECT {_COLUMNS} FROM items INDEXED BY items_changes
    WHERE namespace = ? AND seq > ? ORDER BY key"""
# The keys deleted since the mark; and a NULL key if the namespace may have been erased whole
# since and written again: its history, rows and tombstones, then starts past the mark, under
# the high-water mark the erasure raised past it (so a mark at or past that mark is never
# asked about: it costs a one-row read). A namespace whose every row and tombstone is since
# the mark answers so as well: read whole, it reads the rows it would read as changes.
_DELETED = """SELECT key FROM tombstones INDEXED BY tombstones_changes
    WHERE namespace = :ns AND seq > :mark
    UNION ALL
    SELECT NULL WHERE :mark < (SELECT seq FROM seq_high_water)
        AND NOT EXISTS (SELECT 1 FROM items INDEXED BY items_changes
                        WHERE namespace = :ns AND seq <= :mark)
        AND NOT EXISTS (SELECT 1 FROM tombstones INDEXED BY tombstones_changes
                        WHERE namespace = :ns AND seq <= :mark)"""
_STAMP = f"SELECT version, created_at FROM items WHERE namespace = ? AND key = ? AND {_LIVE}"
_PURGE = "DELETE FROM items WHERE expires_at IS NOT NULL AND expires_at <= ?"


def _own_seq(ns: str) -> str:
    """The highest sequence number namespace ``ns`` (an SQL expression) has used of its own:
    its newest row's or its newest tombstone's, each the last entry of an index; 0 if it has
    neither (or only rows from before change tracking)."""
    return f"""max(
    coalesce((SELECT seq FROM items INDEXED BY items_changes
              WHERE namespace = {ns} ORDER BY seq DESC LIMIT 1), 0),
    coalesce((SELECT seq FROM tombstones INDEXED BY tombstones_changes
              WHERE namespace = {ns} ORDER BY seq DESC LIMIT 1), 0))"""


_HIGH_WATER = "(SELECT seq FROM seq_high_water)"


def _last_seq(ns: str) -> str:
    """The highest sequence number namespace ``ns`` stands at: its own, or the store's
    high-water mark if it has none (read only then: coalesce stops at its first non-NULL)."""
    return f"coalesce(nullif({_own_seq(ns)}, 0), {_HIGH_WATER}, 0)"


_LAST_SEQ = _last_seq(":ns")
# Where a namespace's history stands, in one statement: its own last sequence number (0: it
# has none) and how far its tombstones were pruned (see SQLiteStore._position).
_POSITION = f"""SELECT {_own_seq(":ns")},
    (SELECT seq FROM tombstone_floor WHERE namespace = :ns)"""
_HIGH_WATER_MARK = f"SELECT coalesce({_HIGH_WATER}, 0)"
_LIVE_OLD = "(items.expires_at IS NULL OR items.expires_at > :now)"
# A new row's version: one past its key's deleted row's, if a tombstone remembers one. An
# expired row written over numbers on too (a new record all the same: a new created_at).
# SQLite's largest integer: versions live in a 64-bit column.
_MAX_INTEGER = 2**63 - 1
_FIRST_VERSION = """coalesce((SELECT version FROM tombstones
    WHERE namespace = :ns AND key = :key), 0) + 1"""
_UPSERT = f"""INSERT INTO items ({_COLUMNS}, seq)
    VALUES (:ns, :key, :data, {_FIRST_VERSION}, :now, :now, :expires_at, {_LAST_SEQ} + 1)
    ON CONFLICT (namespace, key) DO UPDATE SET
        value = excluded.value,
        seq = excluded.seq,
        version = items.version + 1,
        created_at = CASE WHEN {_LIVE_OLD} THEN items.created_at
                          ELSE excluded.created_at END,
        updated_at = excluded.updated_at,
        expires_at = excluded.expires_at
    RETURNING version, created_at, updated_at"""
# _TRANSACTION_END: every transaction runs inside ``with self._conn:``, its COMMIT the block's
# last statement. A block left by an exception (an error, a COMMIT that failed, an interruption
# such as KeyboardInterrupt arriving at any line, the BEGIN's and COMMIT's included) is rolled
# back by the connection's own exit, which runs in C: no line of Python stands between the
# exception and the ROLLBACK for another interruption to land on, as one does in a ``finally:``
# holding it. An interruption after the COMMIT finds nothing left to end; a read transaction
# left open would pin its WAL snapshot and starve checkpoints. A transaction SQLite already
# rolled back (a full disk) is not rolled back again.
# A conditional write is one statement, run outside any BEGIN: SQLite takes the write lock at
# the start of a writing statement and commits at its end, so the version check and the write
# are one transaction. Against BEGIN IMMEDIATE, SELECT, upsert, COMMIT: 66 -> 45 us (p50) for
# a working-memory journal append in the whole-turn scenario. No row back: someone else wrote.
# The row is at the version expected and live:
_UPDATE_IF_VERSION = f"""UPDATE items SET value = :data, seq = {_LAST_SEQ} + 1,
        version = version + 1, updated_at = :now, expires_at = :expires_at
    WHERE namespace = :ns AND key = :key AND version = :expected AND {_LIVE_OLD}
    RETURNING version, created_at, updated_at"""
# Expected absent: there is no row, or only an expired one, which a new row replaces.
_INSERT_IF_ABSENT = f"""INSERT INTO items ({_COLUMNS}, seq)
    VALUES (:ns, :key, :data, {_FIRST_VERSION}, :now, :now, :expires_at, {_LAST_SEQ} + 1)
    ON CONFLICT (namespace, key) DO UPDATE SET
        value = excluded.value, seq = excluded.seq, version = items.version + 1,
        created_at = excluded.created_at, updated_at = excluded.updated_at,
        expires_at = excluded.expires_at
    WHERE NOT {_LIVE_OLD}
    RETURNING version, created_at, updated_at"""
# restore_items: an item as it is, where its key holds no live row (an expired one is
# replaced), taking the namespace's next number as any write does.
_RESTORE = f"""INSERT INTO items ({_COLUMNS}, seq)
    VALUES (:ns, :key, :data, :version, :created_at, :updated_at, :expires_at, {_LAST_SEQ} + 1)
    ON CONFLICT (namespace, key) DO UPDATE SET
        value = excluded.value, seq = excluded.seq, version = excluded.version,
        created_at = excluded.created_at, updated_at = excluded.updated_at,
        expires_at = excluded.expires_at
    WHERE NOT {_LIVE_OLD}
    RETURNING 1"""
_REBURY = """ON CONFLICT (namespace, key) DO UPDATE
    SET seq = excluded.seq, deleted_at = :now, version = excluded.version"""
_BURY_DELETED = f"""INSERT INTO tombstones (namespace, key, seq, deleted_at, version)
    VALUES (:ns, :key, {_LAST_SEQ} + 1, :now,
            (SELECT version FROM items WHERE namespace = :ns AND key = :key)) {_REBURY}"""
# Every purged row of a namespace takes that namespace's next number (SQLite reads the whole
# SELECT before inserting, as it reads the table it inserts into).
_BURY_PURGED = f"""INSERT INTO tombstones (namespace, key, seq, deleted_at, version)
    SELECT namespace, key, {_last_seq("dead.namespace")} + 1, :now, version FROM items AS dead
    WHERE expires_at IS NOT NULL AND expires_at <= :now {_REBURY}"""
# Tombstones made before :cutoff, except each namespace's newest (it holds the namespace's top
# number once its rows are gone): the newest number dropped becomes the namespace's floor.
_RAISE_FLOOR = """INSERT INTO tombstone_floor (namespace, seq)
    SELECT namespace, max(seq) FROM tombstones AS old INDEXED BY tombstones_deleted_at
        WHERE deleted_at < :cutoff
        AND seq < (SELECT max(seq) FROM tombstones INDEXED BY tombstones_changes
                   WHERE namespace = old.namespace)
    GROUP BY namespace
    ON CONFLICT (namespace) DO UPDATE SET seq = max(tombstone_floor.seq, excluded.seq)"""
_PRUNE = """DELETE FROM tombstones WHERE deleted_at < :cutoff
    AND seq <= (SELECT seq FROM tombstone_floor WHERE namespace = tombstones.namespace)"""
# A namespace with no rows left whose tombstones are all past the retention (an erased one):
# its tombstones and floor go whole, no row naming it stays, and its top number (its newest
# tombstone's; a floor is below it) raises the high-water mark to one past it.
_NO_ROWS = "NOT EXISTS (SELECT 1 FROM items WHERE items.namespace = {t}.namespace)"
# Its newest tombstone stands for all (the last entry of an index, where scanning the
# namespace's tombstones for a young one would make the purge quadratic in them): within a
# namespace, deletion times follow sequence numbers, but for processes' clocks disagreeing,
# which at worst drops the namespace that much early, its marks then answered in full.
_ERASED = f"""{_NO_ROWS.format(t="old")} AND (
    SELECT deleted_at FROM tombstones AS newest INDEXED BY tombstones_changes
    WHERE newest.namespace = old.namespace ORDER BY seq DESC LIMIT 1) < :cutoff"""
_RAISE_HIGH_WATER = f"""UPDATE seq_high_water SET seq = max(seq, coalesce(1 + (
    SELECT max(seq) FROM tombstones AS old INDEXED BY tombstones_deleted_at
    WHERE deleted_at < :cutoff AND {_ERASED}), 0))"""
# Every tombstone of an erased namespace, whatever its own age: one stamped by a clock that ran
# ahead is younger than the newest, and left alone it would stand as the namespace's last
# number, under the deletions dropped after it (the high-water mark above covers them all).
_DROP_ERASED = f"""DELETE FROM tombstones WHERE namespace IN (
    SELECT old.namespace FROM tombstones AS old INDEXED BY tombstones_deleted_at
    WHERE deleted_at < :cutoff AND {_ERASED})"""
# A floor left with neither rows nor tombstones in its namespace (the erased ones above).
_DROP_FLOORS = f"""DELETE FROM tombstone_floor WHERE {_NO_ROWS.format(t="tombstone_floor")}
    AND NOT EXISTS (SELECT 1 FROM tombstones WHERE namespace = tombstone_floor.namespace)"""


_Row = tuple[str, str, bytes, int, float, float, "float | None"]


class _StaleWrite(Exception):
    """A conditional write found its key at another version: the transaction rolls back."""


class _OpenAgainOffLoop(Exception):
    """A write run inline on an event loop found the file replaced: nothing written, the call
    goes to a worker thread, which opens the file again (see SQLiteStore._check_file)."""


def _split_live(
    rows: builtins.list[_Row], now: float
) -> tuple[builtins.list[_Row], builtins.list[str]]:
    """The live rows, and the keys of the expired ones (whose values are never decoded)."""
    live, expired = [], []
    for row in rows:
        expires_at = row[6]
        if expires_at is None or expires_at > now:
            live.append(row)
        else:
            expired.append(row[1])
    return live, expired


class SQLiteStore(Store):
    """A store in one SQLite file.

    Args:
        path: The database file; created with its directory if missing. ``":memory:"`` works
            for a private throwaway database.
        busy_timeout: Seconds a writer waits for another process's lock before failing.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 30.0) -> None:
        self.path = os.fspath(path)
        self._timeout = busy_timeout
        self._lock = threading.RLock()
        self._busy_timeout = f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}"
        self._inlined = False  # whether the call under the lock runs inline on an event loop
        self._connect()

    def _connect(self) -> None:
        """Opens (or opens again) the file at ``path``, migrated, and notes which file it is."""
        on_disk = self.path not in (":memory:", "")
        if on_disk:
            parent = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(parent, exist_ok=True)
        # One connection per store, used under a lock: sqlite3 objects are not thread-safe, and
        # the async twins call in from worker threads.
        try:
            self._conn = sqlite3.connect(
                self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise _naming(exc, f"cannot open the SQLite database {self.path}") from exc
        self._file: tuple[int, int] | None = None  # unchecked while migrating
        try:
            self._conn.execute(self._busy_timeout)
            # Set before the first table, so only a new database takes it: 8 KiB pages hold
            # three mind entries (~2.3 KB each, most of it the vector) where 4 KiB pages hold
            # one, so a mind's file is a third smaller and a full read of it a quarter faster.
            self._conn.execute("PRAGMA page_size = 8192")
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
        except BaseException as exc:
            self._conn.close()
            if isinstance(exc, sqlite3.Error):
                raise _naming(exc, f"cannot open the SQLite database {self.path}") from exc
            raise
        # Which file the connection has open (the statements above created it): _check_file.
        self._file = _identity(self.path) if on_disk else None
        self._open_log_index(on_disk)

    def _open_log_index(self, on_disk: bool) -> None:
        """Opens the log's WAL-index, which tells how many frames wait for a checkpoint (see
        _checkpoint); None for a private database, or one whose index cannot be read: its
        checkpoints are then SQLite's own, after the commit, wherever that runs."""
        self._close_log_index()
        self._checkpoint_due = False
        self._log_index: int | None = None
        if on_disk and hasattr(os, "pread"):
            with contextlib.suppress(OSError):
                self._log_index = os.open(f"{self.path}-shm", os.O_RDONLY)

    def __del__(self) -> None:
        # The WAL-index descriptor is the store's own, not SQLite's (the connection closes
        # itself when collected): a store dropped without close() would keep it open for the
        # life of the process. Not contextlib.suppress: at interpreter exit, globals may be
        # gone.
        try:  # noqa: SIM105
            self._close_log_index()
        except Exception:
            pass

    def _close_log_index(self) -> None:
        index: int | None = getattr(self, "_log_index", None)
        self._log_index = None
        if index is not None:
            with contextlib.suppress(OSError):
                os.close(index)

    def _frames_waiting(self) -> int:
        """Frames of the log not yet copied into the database; 0 if the index cannot be read
        (it is then let go: SQLite checkpoints on its own from the next call on)."""
        assert self._log_index is not None
        try:
            header = os.pread(self._log_index, _LOG_INDEX_BYTES, 0)
        except OSError:
            header = b""
        if len(header) < _LOG_INDEX_BYTES:
            self._close_log_index()
            return 0
        last = _FRAME_NUMBER.unpack_from(header, _MX_FRAME)[0]
        return int(last - _FRAME_NUMBER.unpack_from(header, _BACKFILLED)[0])

    def _checkpoint(self) -> None:
        """Copies the log into the database, as SQLite does after a commit that leaves
        ``_CHECKPOINT_FRAMES`` frames or more in it: for a write made inline on an event loop,
        run afterwards in a worker thread. A checkpoint syncs the database file to disk, tens
        of milliseconds that would block the loop. PASSIVE, as SQLite's own: it waits for no
        other connection, and copies what their readers let it."""
        with self._lock:
            if not self._checkpoint_due:
                return  # another call ran it
            self._checkpoint_due = False
            try:
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            except sqlite3.Error as exc:
                # The write it follows is committed; the next write past the threshold tries
                # again.
                logger.debug("%s: checkpoint failed: %s", self.path, exc)

    def _check_file(self) -> None:
        """Refuses a write when the path no longer names the file the connection has open (it
        was deleted, or another file renamed onto it, such as a restored copy): SQLite would
        write on into the unlinked file, which no other process, nor this one started again,
        ever reads, and report success. The path is opened again, so the next call goes to
        the file now there (a new empty database, if none is). One ``stat``, about a
        microsecond, per write; reads meanwhile come from the file still open."""
        if self._file is None or _identity(self.path) == self._file:
            return
        if self._inlined:
            # Opening it again empties the old log into its file (a checkpoint, synced to
            # disk) and opens and migrates the new one: milliseconds the event loop would be
            # held for. The async path runs the call again in a worker thread.
            raise _OpenAgainOffLoop
        logger.warning(
            "%s was deleted or replaced while this store had it open; opening it again", self.path
        )
        # The log at ``<path>-wal`` is still this file's: emptied into it first, so that the
        # file now at the path is not read through another database's pages.
        with contextlib.suppress(sqlite3.Error):
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        with contextlib.suppress(sqlite3.Error):
            self._conn.close()
        told = self._file == _REOPEN_FAILED
        try:
            self._connect()
        except BaseException:
            self._file = _REOPEN_FAILED  # no file's: the next write tries again
            raise
        if told:
            return  # the writes that failed to open it again told the caller already
        raise sqlite3.OperationalError(
            f"{self.path} was deleted or replaced while this store had it open: nothing was "
            "written; the store has opened the file now at that path, for the next call"
        )

    def _migrate(self) -> None:
        with self._transaction():
            self._conn.execute(
                "CREATE TABLE IF NOT EXISTS memstrata_schema (version INTEGER NOT NULL)"
            )
            row = self._conn.execute("SELECT max(version) FROM memstrata_schema").fetchone()
            current = row[0] or 0
            if current > SCHEMA_VERSION:
                raise StoreVersionError(
                    f"{self.path} has schema version {current}; this memstrata knows up to "
                    f"{SCHEMA_VERSION}: upgrade memstrata to open it"
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[version]:
                    self._conn.execute(statement)
                self._conn.execute("INSERT INTO memstrata_schema (version) VALUES (?)", (version,))
        if 0 < current < _REBUILDS_ITEMS:
            self._compact_after_rebuild()

    def _compact_after_rebuild(self) -> None:
        """Gives the file system back the pages of the table migration 3 replaced. Without it
        the file keeps them on top of the new table's (a 47.7 MB file grew to 89.7 MB; with
        it, 42.3 MB, for another ~250 ms, once). Not needed to open the store: a failure (say
        another process holds the database) is logged and the pages are reused as it grows."""
        try:
            with self._lock:
                self._conn.execute("VACUUM")
                # VACUUM goes through the WAL: a log the size of the file, emptied here.
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.OperationalError as exc:
            logger.warning("%s: could not compact after the schema upgrade: %s", self.path, exc)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction holding the database lock from its first statement."""
        # However the block ends (an error, a COMMIT that fails, an interruption at any line),
        # no transaction stays open: the writes made in it later would never be committed, and
        # its lock would shut other processes out (see _TRANSACTION_END).
        with self._lock:
            self._check_file()
            with self._conn:
                with self._busy_named():
                    self._conn.execute("BEGIN IMMEDIATE")
                yield self._conn
                self._conn.execute("COMMIT")

    @contextmanager
    def _busy_named(self) -> Iterator[None]:
        """SQLITE_BUSY raised inside (a write waited for the lock past the busy timeout) as the
        same error naming the file and the timeout: SQLite's says only "database is locked"."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc):
                raise
            raise _naming(
                exc,
                f"{self.path} is locked: another connection held its write lock past this "
                f"store's busy_timeout of {self._timeout:g} s; nothing was written",
            ) from None

    @staticmethod
    def _item(row: _Row) -> Item:
        ns, key, data, version, created_at, updated_at, expires_at = row
        return Item(
            decode_namespace(ns),
            key,
            codec.loads(data, ns, key),
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
        params = {
            "ns": encode_namespace(namespace),
            "key": key,
            "data": data,
            "now": now,
            "expires_at": expires_at,
        }
        row = conn.execute(_UPSERT, params).fetchone()
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

    def get_many(self, namespace: Namespace, keys: Sequence[str]) -> dict[str, Item]:
        ns = encode_namespace(validate_namespace(namespace))
        wanted = validate_keys(keys)
        found: dict[str, Item] = {}
        with self._lock:
            # SQLite caps the parameters of a statement: a long list is read in slices.
            for start in range(0, len(wanted), _KEYS_PER_READ):
                some = wanted[start : start + _KEYS_PER_READ]
                marks = ", ".join("?" * len(some))
                rows = self._conn.execute(
                    f"SELECT {_COLUMNS} FROM items"
                    f" WHERE namespace = ? AND key IN ({marks}) AND {_LIVE}",
                    (ns, *some, time.time()),
                ).fetchall()
                found.update((row[1], self._item(row)) for row in rows)
        return {key: found[key] for key in wanted if key in found}

    def stamp(self, namespace: Namespace, key: str) -> tuple[int, float] | None:
        ns = encode_namespace(validate_namespace(namespace))
        validate_key(key)
        with self._lock:
            row = self._conn.execute(_STAMP, (ns, key, time.time())).fetchone()
        return None if row is None else (row[0], row[1])

    def put(
        self, namespace: Namespace, key: str, value: JSONValue, *, ttl: float | None = None
    ) -> Item:
        namespace = validate_namespace(namespace)
        validate_key(key)
        ttl = validate_ttl(ttl)
        data = codec.dumps(value)  # bad data is refused before the write lock is taken
        # One statement, its own transaction (see _UPDATE_IF_VERSION).
        with self._lock, self._busy_named():
            self._check_file()
            return self._write(self._conn, namespace, key, value, data, ttl, time.time())

    def delete(self, namespace: Namespace, key: str) -> bool:
        ns = encode_namespace(validate_namespace(namespace))
        validate_key(key)
        # Read, then delete, in one transaction: SQLite 3.40's DELETE ... RETURNING evaluates
        # expressions over a WITHOUT ROWID table's deleted row as NULL.
        with self._transaction() as conn:
            now = time.time()
            live = conn.execute(
                f"SELECT {_LIVE} FROM items WHERE namespace = ? AND key = ?", (now, ns, key)
            ).fetchone()
            if live is None:
                return False  # nothing there: no change, no tombstone
            self._bury(conn, ns, key, now)
        return bool(live[0])

    @staticmethod
    def _bury(conn: sqlite3.Connection, ns: str, key: str, now: float) -> None:
        """Deletes a live row, its tombstone keeping its version (inside a transaction)."""
        conn.execute(_BURY_DELETED, {"ns": ns, "key": key, "now": now})
        conn.execute("DELETE FROM items WHERE namespace = ? AND key = ?", (ns, key))

    def delete_if_version(self, namespace: Namespace, key: str, *, expected_version: int) -> bool:
        ns = encode_namespace(validate_namespace(namespace))
        validate_key(key)
        expected_version = validate_version(expected_version)
        with self._transaction() as conn:
            now = time.time()
            found = conn.execute(
                f"SELECT {_LIVE}, version FROM items WHERE namespace = ? AND key = ?",
                (now, ns, key),
            ).fetchone()
            if found is None or not found[0] or found[1] != expected_version:
                return False
            self._bury(conn, ns, key, now)
        return True

    def list(
        self, namespace_prefix: Namespace = (), *, limit: int = 100, offset: int = 0
    ) -> builtins.list[Item]:
        prefix = encode_namespace(validate_namespace(namespace_prefix, allow_empty=True))
        validate_page(limit, offset)
        with self._lock:
            rows = self._conn.execute(
                _LIST, (prefix, prefix_upper_bound(prefix), time.time(), limit, offset)
            ).fetchall()
        return [self._item(row) for row in rows]

    def list_after(
        self,
        namespace_prefix: Namespace,
        after: tuple[Namespace, str] | None,
        *,
        limit: int = 100,
    ) -> builtins.list[Item]:
        prefix = encode_namespace(validate_namespace(namespace_prefix, allow_empty=True))
        validate_page(limit, 0)
        checked = validate_after(after)
        # Every stored namespace is longer than "": ("", "") comes before every item.
        ns, key = ("", "") if checked is None else (encode_namespace(checked[0]), checked[1])
        params = (prefix, prefix_upper_bound(prefix), ns, key, time.time(), limit)
        with self._lock:
            rows = self._conn.execute(_LIST_AFTER, params).fetchall()
        return [self._item(row) for row in rows]

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
            current = codec.loads(row[0], ns, key) if row is not None else None
            value = fn(current)
            data = codec.dumps(value)
            return self._write(conn, namespace, key, value, data, ttl, now)

    def put_if_version(
        self,
        namespace: Namespace,
        key: str,
        value: JSONValue,
        *,
        expected_version: int,
        ttl: float | None = None,
        validated: bool = False,
        encoded: bytes | None = None,
    ) -> Item | None:
        namespace = validate_namespace(namespace)
        ns = encode_namespace(namespace)
        validate_key(key)
        ttl = validate_ttl(ttl)
        expected_version = validate_version(expected_version)
        # Bad data is refused before the write lock is taken.
        data = codec.dumps(value, validated=validated, encoded=encoded)
        with self._lock, self._busy_named():
            self._check_file()
            return self._write_if_version(
                self._conn, namespace, ns, key, value, data, ttl, expected_version, time.time()
            )

    @staticmethod
    def _write_if_version(
        conn: sqlite3.Connection,
        namespace: Namespace,
        ns: str,
        key: str,
        value: JSONValue,
        data: bytes,
        ttl: float | None,
        expected_version: int,
        now: float,
    ) -> Item | None:
        """Writes ``data`` (``value`` encoded) if the live row is at ``expected_version`` (0:
        absent), in one statement (see _UPDATE_IF_VERSION); None, writing nothing, if not."""
        if expected_version > _MAX_INTEGER:
            return None  # no row reaches it, and SQLite cannot bind it: refused as stale
        expires_at = now + ttl if ttl is not None else None
        params = {
            "ns": ns,
            "key": key,
            "data": data,
            "now": now,
            "expires_at": expires_at,
            "expected": expected_version,
        }
        statement = _UPDATE_IF_VERSION if expected_version else _INSERT_IF_ABSENT
        # fetchall: the statement runs to its end (outside a transaction, that commits it).
        rows = conn.execute(statement, params).fetchall()
        if not rows:
            return None
        version, created_at, updated_at = rows[0]
        return Item(namespace, key, value, version, created_at, updated_at, expires_at)

    def put_many_if_versions(
        self,
        namespace: Namespace,
        writes: Mapping[str, ConditionalWrite],
        *,
        validated: bool = False,
    ) -> builtins.list[Item] | None:
        namespace, keys = validate_namespace(namespace), validate_writes(writes)
        ns = encode_namespace(namespace)
        # Bad data is refused before the write lock is taken.
        data = [
            codec.dumps(writes[key].value, validated=validated, encoded=writes[key].encoded)
            for key in keys
        ]
        try:
            with self._transaction() as conn:
                now = time.time()
                written = []
                for key, encoded in zip(keys, data):
                    write = writes[key]
                    item = self._write_if_version(
                        conn,
                        namespace,
                        ns,
                        key,
                        write.value,
                        encoded,
                        None,
                        write.expected_version,
                        now,
                    )
                    if item is None:
                        # Someone else wrote this key first: the keys written before it go too.
                        raise _StaleWrite
                    written.append(item)
        except _StaleWrite:
            return None
        return written

    def update_many(
        self, namespace: Namespace, updates: Mapping[str, Updater], *, ttl: float | None = None
    ) -> builtins.list[Item]:
        namespace = validate_namespace(namespace)
        keys = [validate_key(key) for key in updates]
        ttl = validate_ttl(ttl)
        with self._transaction() as conn:
            return self._update_many(conn, namespace, keys, updates, ttl, time.time())

    def _update_many(
        self,
        conn: sqlite3.Connection,
        namespace: Namespace,
        keys: builtins.list[str],
        updates: Mapping[str, Updater],
        ttl: float | None,
        now: float,
    ) -> builtins.list[Item]:
        """``update_many`` in the caller's write transaction."""
        ns = encode_namespace(namespace)
        items = []
        for key in keys:
            row = conn.execute(
                f"SELECT value FROM items WHERE namespace = ? AND key = ? AND {_LIVE}",
                (ns, key, now),
            ).fetchone()
            value = updates[key](codec.loads(row[0], ns, key) if row is not None else None)
            data = codec.dumps(value)
            items.append(self._write(conn, namespace, key, value, data, ttl, now))
        return items

    def change_mark(self, namespace: Namespace) -> ChangeMark:
        namespace = validate_namespace(namespace)
        with self._lock:
            (last,) = self._conn.execute(
                f"SELECT {_LAST_SEQ}", {"ns": encode_namespace(namespace)}
            ).fetchone()
        return ChangeMark(_BACKEND, namespace, str(last))

    def changes(self, namespace: Namespace, since: ChangeMark | None = None) -> Changes:
        namespace = validate_namespace(namespace)
        mark = None if since is None else sequence_position(since, _BACKEND, namespace)
        ns = encode_namespace(namespace)
        if mark is not None:
            # The usual answer for a namespace a long-lived layer keeps is "nothing since the
            # mark": one statement tells, with no transaction around it.
            with self._lock:
                last, floor = self._position(ns)
            if floor <= mark == last:
                return Changes(ChangeMark(_BACKEND, namespace, str(last)), [], [], False)
        # One read transaction: the new mark and what is read come from one snapshot.
        with self._lock, self._conn:  # see _TRANSACTION_END
            self._conn.execute("BEGIN")
            now = time.time()
            last, floor = self._position(ns)
            rows: builtins.list[_Row] = []
            deleted: builtins.list[tuple[str]] | None = None  # None: read whole
            # A mark ahead of this namespace's history was made over other data.
            if mark is None or mark < floor or mark > last:
                pass
            elif mark == last:
                # Numbers never go back, tombstones included: nothing since the mark (the
                # usual answer for a namespace a long-lived layer keeps).
                deleted = []
            else:
                found = self._conn.execute(_DELETED, {"ns": ns, "mark": mark}).fetchall()
                if (None,) not in found:  # else erased since the mark, maybe: read whole
                    deleted = found
                    rows = self._conn.execute(_CHANGES, (ns, mark)).fetchall()
            if deleted is None:
                rows = self._conn.execute(_NAMESPACE, (ns, now)).fetchall()
            self._conn.execute("COMMIT")
        new_mark = ChangeMark(_BACKEND, namespace, str(last))
        if deleted is None:
            return Changes(new_mark, [self._item(row) for row in rows], [], True)
        items, removed = _split_live(rows, now)
        written = {row[1] for row in rows}
        # A key written again after its deletion was reported with that write.
        removed.extend(key for (key,) in deleted if key not in written)
        removed.sort()
        return Changes(new_mark, [self._item(row) for row in items], removed, False)

    def _position(self, ns: str) -> tuple[int, int]:
        """A namespace's last sequence number and the lowest mark answered with its changes
        (one below is answered in full). A namespace with no history of its own stands at the
        high-water mark, and only that mark is answered with its changes (none): one made
        before, while the namespace held rows since erased, is answered in full."""
        own, floor = self._conn.execute(_POSITION, {"ns": ns}).fetchone()
        if own == 0:
            (high,) = self._conn.execute(_HIGH_WATER_MARK).fetchone()
            return high, high
        return own, floor or 0

    def changes_each(
        self, namespace: Namespace, since: ChangeMark | None, each: Callable[[Item], None]
    ) -> Changes:
        namespace = validate_namespace(namespace)
        if since is not None:
            # Catching up reads what changed since the mark: few rows, collected as usual.
            return super().changes_each(namespace, since, each)
        ns = encode_namespace(namespace)
        # A full read streams the rows through ``each``, a batch at a time: no more than a
        # batch of encoded values is held at once.
        with self._full_read(ns) as last:
            cursor = self._conn.execute(_NAMESPACE, (ns, time.time()))
            # Every row is of ``namespace``: one tuple for all, no decoding per row.
            loads = codec.loads
            while rows := cursor.fetchmany(_STREAM_BATCH):
                for _ns, key, data, version, created_at, updated_at, expires_at in rows:
                    value = loads(data, ns, key)
                    each(
                        item_of(namespace, key, value, version, created_at, updated_at, expires_at)
                    )
        return Changes(ChangeMark(_BACKEND, namespace, last), [], [], True)

    def encoded_each(
        self, namespace: Namespace, each: Callable[[builtins.list[EncodedItem]], None]
    ) -> Changes:
        namespace = validate_namespace(namespace)
        ns = encode_namespace(namespace)
        # A batch held at a time; the rows go out as SQLite returns them, no work per row.
        with self._full_read(ns) as last:
            cursor = self._conn.execute(_NAMESPACE_ENCODED, (ns, time.time()))
            while rows := cursor.fetchmany(ENCODED_BATCH):
                each(rows)
        return Changes(ChangeMark(_BACKEND, namespace, last), [], [], True)

    @contextmanager
    def _full_read(self, ns: str) -> Iterator[str]:
        """The namespace's mark, with the store's lock and a read transaction held until the
        block ends: rows read inside come from the snapshot the mark stands at."""
        with self._lock, self._conn:  # see _TRANSACTION_END
            self._conn.execute("BEGIN")
            last, _floor = self._position(ns)
            yield str(last)
            self._conn.execute("COMMIT")

    def update_many_since(
        self,
        namespace: Namespace,
        since: ChangeMark,
        plan: Planner,
        *,
        ttl: float | None = None,
    ) -> builtins.list[Item]:
        namespace = validate_namespace(namespace)
        mark = sequence_position(since, _BACKEND, namespace)
        ttl = validate_ttl(ttl)
        # BEGIN IMMEDIATE holds the database's write lock: no other writer, in any process,
        # runs between reading the changes and writing.
        with self._transaction() as conn:
            now = time.time()
            rows = conn.execute(_CHANGES, (encode_namespace(namespace), mark)).fetchall()
            live, _expired = _split_live(rows, now)
            updates = plan([self._item(row) for row in live])
            keys = validate_updates(updates)
            return self._update_many(conn, namespace, keys, updates, ttl, now)

    def restore_items(self, items: Sequence[Item]) -> builtins.list[Item]:
        checked = validate_restored(items)  # bad data is refused before the write lock
        written = []
        with self._transaction() as conn:
            now = time.time()
            for item, data in checked:
                expires_at = item.expires_at
                if expires_at is not None and expires_at <= now:
                    continue
                params = {
                    "ns": encode_namespace(item.namespace),
                    "key": item.key,
                    "data": data,
                    "version": item.version,
                    "created_at": float(item.created_at),
                    "updated_at": float(item.updated_at),
                    "expires_at": None if expires_at is None else float(expires_at),
                    "now": now,
                }
                if conn.execute(_RESTORE, params).fetchall():
                    written.append(item)
        return written

    def purge_expired(self) -> int:
        with self._transaction() as conn:
            now = time.time()
            conn.execute(_BURY_PURGED, {"now": now})
            purged = conn.execute(_PURGE, (now,)).rowcount
            cutoff = {"cutoff": now - self.tombstone_retention}
            conn.execute(_RAISE_HIGH_WATER, cutoff)
            conn.execute(_DROP_ERASED, cutoff)
            conn.execute(_DROP_FLOORS)
            conn.execute(_RAISE_FLOOR, cutoff)
            conn.execute(_PRUNE, cutoff)
            return purged

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            self._close_log_index()

    # Async twins: a statement that need not wait runs inline, on the event loop; one that would
    # wait for another connection's lock, reads of a whole namespace, the checkpoint a write made
    # due and the writes that sync to disk (see _inline), run in a worker thread, so none blocks
    # the loop.

    def _inline(
        self, method: Callable[..., _T], args: tuple[Any, ...], kwargs: Any
    ) -> tuple[bool, _T | None]:
        """``(True, method(...))`` run with the busy timeout at 0, so that it fails at once
        rather than wait, if the connection is free; ``(False, None)`` if the connection is in
        use or the database locked (SQLITE_BUSY), and for a write that would sync to disk
        (one that starts the log again, or finds the file replaced: see _check_file), before
        it writes anything. A method that failed so wrote nothing: SQLite takes its write
        lock at the first writing statement, and each method is one transaction."""
        if not self._lock.acquire(blocking=False):
            return False, None
        try:
            deferred = self._log_index is not None and method.__name__ in _WRITES
            if deferred and self._frames_waiting() == 0:
                # The log is empty or wholly copied into the database (a checkpoint, this
                # connection's or another's): this write starts it again from its first frame,
                # and SQLite syncs the log's new header to disk first (synchronous=NORMAL does
                # at a restart), milliseconds the loop would be held for. Once a checkpoint:
                # in a worker thread. The read of the index costs ~1 us.
                return False, None
            self._conn.execute("PRAGMA busy_timeout = 0")
            # A commit past the threshold would checkpoint here, on the event loop: the caller
            # runs the checkpoint in a worker thread instead (see _checkpoint). Only around a
            # write (a read commits nothing): the two statements cost ~5 us.
            if deferred:
                self._conn.execute("PRAGMA wal_autocheckpoint = 0")
                changes = self._conn.total_changes
            self._inlined = True
            try:
                with pinned():  # a callback (an update's fn) may not let another task in
                    return True, method(*args, **kwargs)
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                return False, None
            except _OpenAgainOffLoop:
                return False, None
            finally:
                self._inlined = False
                self._conn.execute(self._busy_timeout)
                if deferred:
                    self._conn.execute(_AUTO_CHECKPOINT)
                    # After a commit only, as SQLite's own (a read adds no frame).
                    if self._conn.total_changes != changes and self._log_index is not None:
                        due = self._frames_waiting() >= _CHECKPOINT_FRAMES
                        self._checkpoint_due = self._checkpoint_due or due
        finally:
            self._lock.release()

    async def _call(self, method: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """Inline if it need not wait, else in a worker thread, waiting as the sync method
        does."""
        if not _slow(method.__name__, args, kwargs):
            done, result = self._inline(method, args, kwargs)
            if done:
                if self._checkpoint_due:
                    await in_thread(self._checkpoint)
                return result  # type: ignore[return-value]
        return await in_thread(method, *args, **kwargs)

    def _serve_bridged(
        self, name: str, method: Callable[..., _T], args: tuple[Any, ...], kwargs: Any
    ) -> _T:
        # Inline here, in the layer code, with no switch to its coroutine unless it must wait.
        if not _slow(name, args, kwargs):
            done, result = self._inline(method, args, kwargs)
            if done:
                if self._checkpoint_due:
                    await_(in_thread(self._checkpoint), finish=True)
                return result  # type: ignore[return-value]
        return await_(in_thread(method, *args, **kwargs), finish=True)

    async def achanges_each(
        self, namespace: Namespace, since: ChangeMark | None, each: Callable[[Item], None]
    ) -> Changes:
        return await self._call(self.changes_each, namespace, since, each)

    async def aencoded_each(
        self, namespace: Namespace, each: Callable[[builtins.list[EncodedItem]], None]
    ) -> Changes:
        return await self._call(self.encoded_each, namespace, each)


def _slow(name: str, args: tuple[Any, ...], kwargs: Any) -> bool:
    """Whether the async path runs this call in a worker thread even when it need not wait:
    it may take milliseconds (reading a whole namespace, purging), or it closes."""
    if name in ("purge_expired", "close", "encoded_each"):
        return True
    if name in ("changes", "changes_each"):
        return (args[1] if len(args) > 1 else kwargs.get("since")) is None
    if name == "read_many":
        reads = args[0] if args else kwargs.get("reads", ())
        return any(isinstance(read, ChangesSince) and read.since is None for read in reads)
    return False


# What _check_file notes when the path could not be opened again: no file's identity.
_REOPEN_FAILED = (-1, -1)


def _naming(exc: sqlite3.Error, what: str) -> sqlite3.Error:
    """``exc`` again, its message led by ``what``: SQLite's messages name no file. Of the same
    type, with SQLite's codes kept."""
    named = type(exc)(f"{what}: {exc}")
    for code in ("sqlite_errorcode", "sqlite_errorname"):
        if hasattr(exc, code):
            setattr(named, code, getattr(exc, code))
    return named


def _identity(path: str) -> tuple[int, int] | None:
    """The file at ``path`` (device and inode), or None if there is none."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    return info.st_dev, info.st_ino


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY (any of its extended codes): another connection holds the lock."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return bool(code & 0xFF == _SQLITE_BUSY)
    return "database is locked" in str(exc)
