"""PostgresStore: the store for several agent servers sharing one memory.

psycopg 3 with a connection pool (``psycopg_pool``), opened by
``open_store("postgresql://...")``; install with ``pip install memstrata[postgres]``.

* Tables are created by an idempotent migration guarded by an advisory lock (several servers may
  start at once) and recorded in ``memstrata_schema``.
* Values are stored in a ``json`` column, not ``jsonb``: PostgreSQL validates ``json`` and keeps
  it verbatim, while ``jsonb`` reorders object keys, so a working memory reloaded from it would
  render a different prompt (and miss the provider's prompt cache) than the one it saved. We
  never query inside values; the issue asked for JSONB and this is the deliberate exception.
* Namespaces use the "C" collation, so prefix listing is a range scan on the primary key, as on
  SQLite; a partial index on ``expires_at`` keeps TTL filtering and purging cheap.
* Connections are in autocommit mode: a read, a ``put`` or a ``put_if_version`` is one statement
  and one round trip, and ``read_many`` sends its reads as one statement (their queries joined
  by UNION ALL, each row tagged with its read: one parse, one execution, one snapshot for them
  all), or, past ``READS_PER_STATEMENT`` reads (``pg_statements``), as several pipelined. A
  transaction is pipelined too (``pg_transactions``), BEGIN going out with the first statements
  and COMMIT with the last: ``update``, ``update_many`` and ``put_many_if_versions`` are two
  round trips however many keys (BEGIN, the locks and one read or the conditional writes; the
  writes and COMMIT, or COMMIT alone), ``update_many_since`` three. The SQL is in ``pg_sql``;
  the argument checks and answers the sync and async methods share, in ``pg_statements``.
* A call that is one statement on an autocommit connection (the reads, ``put``,
  ``put_if_version``, ``delete``) sends it as a server-side prepared statement straight over
  psycopg's libpq connection (``pg_prepared``), at about half the client's CPU that
  ``Connection.execute`` takes for it; transactions and pipelines go through psycopg.
* Each connection, as it opens, runs ``SESSION_SETUP``: prepared statements are planned once
  (``plan_cache_mode``), not again at every execution, and large values are compressed with
  lz4 where the server has it.
* ``update`` and ``put_if_version`` serialise on a transaction-scoped advisory lock per
  (namespace, key), which also covers the case row-level locks cannot: two writers racing to
  create the same absent record. ``put_if_version`` takes it inside its one statement, whose
  write then rechecks the version against the newest committed row.
* The async twins (``pg_async``) use psycopg's async connections, not threads: per running
  event loop, idle connections are kept and new ones opened on demand, with no background
  tasks, so a loop that ends (``asyncio.run``) neither hangs nor leaves a pool behind
  (``pg_connections``).
* Times come from the database's clock, not the client's: servers sharing one database may
  disagree about the time, and an expiry must mean the same on all of them. A single statement
  uses its own start time; ``update`` and ``update_many`` read the clock in the statement that
  reads the locked records (so a wait for a lock is not counted against a TTL) and write with
  that time; a statement that follows a lock in a pipeline (the changes ``update_many_since``
  reads, each conditional write of ``put_many_if_versions``) starts once the lock is held and
  uses its own start time.
* Change tracking (``change_mark``/``update_many_since``) uses transaction ids, not clocks:
  every write stamps its row with its transaction's id (``written_by``, ``xid8``), a mark is a
  snapshot (``pg_current_snapshot()``), and a row changed since the mark when its writer was not
  yet committed in that snapshot. A sequence number would not do: sequence values are handed
  out in call order, not commit order, so a transaction that drew an earlier number could commit
  after the mark and be missed; and clients' clocks differ between servers. The
  ``(namespace, written_by)`` index bounds the scan to transactions at or after the snapshot's
  oldest running one. ``update_many_since`` serialises on a transaction-scoped advisory lock per
  namespace (in the two-key space, apart from the per-record locks), taken before the record
  locks, so it cannot deadlock with ``update``. Needs PostgreSQL 13 or newer.
* ``delete`` and ``purge_expired`` leave tombstones (``memstrata_tombstones``: namespace, key,
  the deleting transaction's id, when, the deleted row's version) in the statement that deletes,
  so ``changes`` reports a deletion by the same snapshot test as a write, through its own
  ``(namespace, deleted_by)`` index. ``changes`` reads the new mark (``pg_current_snapshot()``)
  in the statement that reads the changes: under READ COMMITTED that is the statement's own
  snapshot, so the mark is exactly what was read. Pruning old tombstones records the newest
  pruned transaction id, one for the store (``memstrata_tombstones_pruned``, in no row naming
  a namespace: an erased namespace leaves nothing behind); a mark whose oldest running
  transaction is not past it is answered in full. Tombstones are pruned by age and
  transaction ids are store-wide, so that is a mark made about the retention ago or earlier
  (or while a transaction that old was still running).
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import math
import os
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from typing import Any

from memstrata.exceptions import InvalidInputError, LockTimeoutError, StoreVersionError
from memstrata.stores.base import (
    Answer,
    ChangeMark,
    Changes,
    ConditionalWrite,
    EncodedItem,
    Item,
    JSONValue,
    Namespace,
    Planner,
    Read,
    Updater,
    encode_namespace,
    validate_after,
    validate_keys,
    validate_namespace,
    validate_reads,
    validate_restored,
    validate_ttl,
    validate_version,
)
from memstrata.stores.pg_async import PostgresAsyncTwins
from memstrata.stores.pg_connections import ConnectionsByLoop, ended_by_server
from memstrata.stores.pg_prepared import execute
from memstrata.stores.pg_sql import (
    _CHANGES,
    _DELETE,
    _DELETE_IF_VERSION,
    _EVERYTHING,
    _GET,
    _GET_MANY,
    _LIST,
    _LIST_AFTER,
    _LOCK_GIVEN,
    _LOCK_KEY,
    _LOCK_NAMESPACE,
    _MARK,
    _MIGRATION_LOCK,
    _MIGRATIONS,
    _PRUNE,
    _PURGE,
    _RESTORE,
    _SINCE,
    _STAMP,
    _UPSERT,
    SCHEMA_VERSION,
    SESSION_SETUP,
    text_array,
)
from memstrata.stores.pg_statements import (
    _BACKEND,
    MAX_STORED_VERSION,
    _changes,
    _hand_rows,
    _in_parts,
    _item,
)
from memstrata.stores.pg_transactions import (
    _in_lock_order,
    _queue_locked_read,
    _Rollback,
    _transaction,
)
from memstrata.stores.urls import redacted_url, without_secrets

logger = logging.getLogger(__name__)

# libpq's PQTRANS_IDLE: a connection outside any transaction (psycopg's
# pq.TransactionStatus.IDLE, psycopg being imported only by a store that opens).
_IDLE = 0


def _require_psycopg() -> Any:
    try:
        import psycopg_pool
    except ImportError:
        raise InvalidInputError(
            "PostgresStore needs psycopg 3 and psycopg_pool: pip install 'memstrata[postgres]'"
        ) from None
    return psycopg_pool


# How long a statement waits for a lock by default: as long as SQLiteStore's busy_timeout lets
# a writer wait, so a turn behind a lock held elsewhere fails clearly on either store instead
# of waiting for as long as the lock is held.
DEFAULT_LOCK_TIMEOUT = 30.0

# PostgreSQL's lock_timeout is an int of milliseconds: a session asking for more fails to start.
_MAX_LOCK_TIMEOUT_MS = 2**31 - 1


def _checked_lock_timeout(seconds: Any) -> float | None:
    if seconds is None:
        return None
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not math.isfinite(seconds)
        or seconds <= 0
        or _milliseconds(seconds) > _MAX_LOCK_TIMEOUT_MS
    ):
        raise InvalidInputError(
            "lock_timeout must be a positive number of seconds up to "
            f"{_MAX_LOCK_TIMEOUT_MS / 1000:.3f} (PostgreSQL's limit, about 24.8 days) or None, "
            f"got {seconds!r}"
        )
    return float(seconds)


def _milliseconds(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


def _with_lock_timeout(url: str, seconds: float | None) -> str:
    """``url`` with ``lock_timeout`` set for every session (``-c`` in libpq's ``options``,
    after any the URL has, else PGOPTIONS), so no statement costs a round trip to set it."""
    if seconds is None:
        return url
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    milliseconds = _milliseconds(seconds)
    # libpq reads PGOPTIONS only for a connection string without options: kept here.
    options = conninfo_to_dict(url).get("options")
    if options is None:
        options = os.environ.get("PGOPTIONS", "")
    return make_conninfo(url, options=f"{options} -c lock_timeout={milliseconds}".strip())


def _one(conn: Any, sql: str, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The first row of a one-statement call, or None (see pg_prepared)."""
    rows = execute(conn, sql, params)
    return rows[0] if rows else None


def _number_array(numbers: list[Any]) -> str:
    """``numbers`` (ints, finite floats or None) as the text of a PostgreSQL array; a float's
    ``repr`` reads back as the same double."""
    return "{" + ",".join("NULL" if n is None else repr(n) for n in numbers) + "}"


# How long the first connection may take when the URL sets no connect_timeout: as long as the
# pool would wait for one.
_CONNECT_TIMEOUT = 30


def _check_connection(psycopg: Any, conninfo: str, url: str) -> None:
    """Connects once, directly: a server that is down, a wrong port, password or database name
    is reported at once, by libpq's reason and the URL (its password hidden). Through the pool
    the constructor would try again for 30 s, logging each try, and then raise a PoolTimeout
    that names neither.

    Raises:
        psycopg.OperationalError: The connection failed.
    """
    given = psycopg.conninfo.conninfo_to_dict(conninfo).get("connect_timeout")
    timeout = _CONNECT_TIMEOUT if given is None else given
    try:
        psycopg.connect(psycopg.conninfo.make_conninfo(conninfo, connect_timeout=timeout)).close()
    except psycopg.OperationalError as exc:
        reason = " ".join(without_secrets(str(exc), url).split())
        raise psycopg.OperationalError(
            f"cannot connect to the PostgreSQL store {redacted_url(url)}: {reason}"
        ) from None


def _roll_back(conn: Any) -> None:
    """Rolls back what a block that raised left open, as psycopg's ``with connection`` does:
    a failure to (the connection is broken) is logged, not raised over the block's error."""
    if conn.closed:
        return
    try:
        conn.rollback()
    except Exception as exc:
        logger.warning("error ignored in rollback on %s: %s", conn, exc)


def _set_up(conn: Any) -> None:
    """Sets up a connection the pool opened (``SESSION_SETUP``)."""
    conn.execute(SESSION_SETUP)


class PostgresStore(PostgresAsyncTwins):
    """A store in PostgreSQL, shared safely by many processes.

    Args:
        url: A libpq connection string, e.g. ``postgresql://user@host:5432/db``.
        min_size: Connections the pool keeps open.
        max_size: Most connections the pool opens (per process; the async twins open up to as
            many per event loop).
        lock_timeout: Seconds a statement may wait for a lock another connection holds (a
            record another server is updating, a table an administrator locked) before the
            call fails with :class:`~memstrata.exceptions.LockTimeoutError`, its transaction
            rolled back; by default 30 s, as SQLiteStore's ``busy_timeout``. None waits as
            the server's ``lock_timeout`` setting says (PostgreSQL's default: as long as the
            lock is held). It also bounds how long a cancelled async call waits
            for its store call to finish.

    Raises:
        InvalidInputError: ``lock_timeout`` is not a positive number of seconds up to
            2147483.647 (PostgreSQL takes at most 2**31 - 1 ms); or ``url`` is no connection
            string libpq can read (the message quotes it with its password hidden).
        psycopg.OperationalError: No connection could be made (a server that is down, a
            wrong port, user, password or database name): the message names the URL, its
            password hidden, and libpq's reason. The URL's ``connect_timeout`` bounds the
            attempt, else 30 s.
    """

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
    ) -> None:
        pool_module = _require_psycopg()
        import psycopg

        self._lock_not_available: type[BaseException] = psycopg.errors.LockNotAvailable
        self._operational_error: type[BaseException] = psycopg.OperationalError
        self.url = url
        self.lock_timeout = _checked_lock_timeout(lock_timeout)
        # Text goes out and comes back as UTF-8 whatever the database's encoding (the server
        # converts): pg_prepared sends parameters as UTF-8 bytes.
        try:
            conninfo = psycopg.conninfo.make_conninfo(
                _with_lock_timeout(url, self.lock_timeout), client_encoding="UTF8"
            )
        except psycopg.ProgrammingError as exc:
            # libpq quotes the token it could not read, which may be (part of) the password.
            raise InvalidInputError(
                f"the PostgreSQL URL {redacted_url(url)!r} cannot be read: "
                f"{without_secrets(str(exc).strip(), url)}"
            ) from None
        self._max_size = max_size
        _check_connection(psycopg, conninfo, url)
        # Autocommit: a read or a one-statement write is one round trip, with no BEGIN/COMMIT
        # around it; the methods that need a transaction open one explicitly.
        self._pool = pool_module.ConnectionPool(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            open=True,
            name="memstrata",
            kwargs={"autocommit": True},
            configure=_set_up,
        )
        # The async twins' connections: per event loop, no background tasks (see pg_connections).
        self._async = ConnectionsByLoop(conninfo, max_size, SESSION_SETUP)
        try:
            self._migrate()
        except BaseException:
            self._pool.close()  # the caller never gets a store to close
            raise

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        """A pooled connection; a lock wait past the lock timeout raises LockTimeoutError.

        One context manager around the pool's, not two: every store call opens one."""
        self._async.close_ended()
        conn = None
        try:
            conn = self._live_pooled_connection()
            try:
                yield conn
            except BaseException:
                _roll_back(conn)
                raise
            else:
                # Commits what a block left open, as the pool's own block does; a call's
                # connection is idle by then (autocommit), so this costs no call a lock
                # and a command generator.
                if not conn.closed and conn.pgconn.transaction_status != _IDLE:
                    conn.commit()
            finally:
                self._pool.putconn(conn)
        except self._lock_not_available as exc:
            raise self._lock_timeout_error(exc) from exc
        except self._operational_error:
            if conn is not None and conn.broken:
                # The server ended the connection (a restart, a failover, an administrator):
                # the pool's idle ones are most likely gone too. Testing them now costs this
                # failed call a round trip each, instead of failing one later call each.
                with contextlib.suppress(Exception):
                    self._pool.check()
            raise

    def _live_pooled_connection(self) -> Any:
        """An idle connection of the pool, passing over those the server ended before this
        call (see pg_connections.ended_by_server): each is closed, so that the pool replaces
        it, and no statement ever ran on it, so nothing is tried twice.

        Done here rather than as the pool's ``check`` callback: the pool puts a connection
        that failed its check back, keeping it unless it is closed, and waits before taking
        another (1 s, then 2 s, 4 s...), so a call meeting several dead ones in a row would
        wait many seconds, or run out of the pool's timeout."""
        while True:
            conn = self._pool.getconn()
            if not ended_by_server(conn):
                return conn
            with contextlib.suppress(Exception):
                conn.close()
            self._pool.putconn(conn)

    @contextlib.asynccontextmanager
    async def _aconnection(self) -> AsyncIterator[Any]:
        """The running loop's connection (see pg_connections), as :meth:`_connection`."""
        connections = self._async.current()
        conn = None
        try:
            with self._lock_timeout_named():
                async with connections.connection() as conn:
                    yield conn
        except self._operational_error:
            if conn is not None and conn.broken:
                await connections.close()  # the idle ones: see _connection
            raise

    @contextlib.contextmanager
    def _lock_timeout_named(self) -> Iterator[None]:
        try:
            yield
        except self._lock_not_available as exc:
            raise self._lock_timeout_error(exc) from exc

    def _lock_timeout_error(self, exc: BaseException) -> LockTimeoutError:
        setting = (
            f"its lock_timeout of {self.lock_timeout:g} s"
            if self.lock_timeout is not None
            else "the server's lock_timeout setting"
        )
        return LockTimeoutError(
            f"PostgresStore gave up waiting for a lock another connection holds, after "
            f"{setting}; the call was rolled back and wrote nothing ({exc})",
            timeout=self.lock_timeout,
        )

    def _migrate(self) -> None:
        with self._connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute("CREATE TABLE IF NOT EXISTS memstrata_schema (version INTEGER NOT NULL)")
            current = conn.execute("SELECT max(version) FROM memstrata_schema").fetchone()[0] or 0
            if current > SCHEMA_VERSION:
                raise StoreVersionError(
                    f"the database has memstrata schema version {current}; this memstrata knows "
                    f"up to {SCHEMA_VERSION}: upgrade memstrata to use it"
                )
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[version]:
                    conn.execute(statement)
                conn.execute("INSERT INTO memstrata_schema (version) VALUES (%s)", (version,))

    # Sync -----------------------------------------------------------------------------------

    def get(self, namespace: Namespace, key: str) -> Item | None:
        params = self._params(namespace, key)
        with self._connection() as conn:
            row = _one(conn, _GET, params)
        return None if row is None else _item(row)

    def get_many(self, namespace: Namespace, keys: Sequence[str]) -> dict[str, Item]:
        keys = validate_keys(keys)
        params = self._many_params(namespace, keys)
        with self._connection() as conn:
            rows = execute(conn, _GET_MANY, params)
        return self._found(keys, rows)

    def stamp(self, namespace: Namespace, key: str) -> tuple[int, float] | None:
        params = self._params(namespace, key)
        with self._connection() as conn:
            row = _one(conn, _STAMP, params)
        return None if row is None else (row[0], row[1])

    def put(
        self, namespace: Namespace, key: str, value: JSONValue, *, ttl: float | None = None
    ) -> Item:
        params = self._write_params(namespace, key, value, ttl)
        with self._connection() as conn:
            row = _one(conn, _UPSERT, params)
        return self._written(namespace, key, value, row)

    def delete(self, namespace: Namespace, key: str) -> bool:
        params = self._params(namespace, key)
        with self._connection() as conn:
            row = _one(conn, _DELETE, params)
        return bool(row and row[0])

    def delete_if_version(self, namespace: Namespace, key: str, *, expected_version: int) -> bool:
        params = {**self._params(namespace, key), "version": validate_version(expected_version)}
        if params["version"] > MAX_STORED_VERSION:
            return False
        with self._connection() as conn:
            row = _one(conn, _DELETE_IF_VERSION, params)
        return bool(row and row[0])

    def list(
        self, namespace_prefix: Namespace = (), *, limit: int = 100, offset: int = 0
    ) -> builtins.list[Item]:
        params = self._list_params(namespace_prefix, limit, offset)
        with self._connection() as conn:
            rows = execute(conn, _LIST, params)
        return [_item(row) for row in rows]

    def list_after(
        self,
        namespace_prefix: Namespace,
        after: tuple[Namespace, str] | None,
        *,
        limit: int = 100,
    ) -> builtins.list[Item]:
        params = self._list_params(namespace_prefix, limit, 0)
        checked = validate_after(after)
        # Every stored namespace is longer than "": ("", "") comes before every item.
        params["after_ns"] = "" if checked is None else encode_namespace(checked[0])
        params["after_key"] = "" if checked is None else checked[1]
        with self._connection() as conn:
            rows = conn.execute(_LIST_AFTER, params).fetchall()
        return [_item(row) for row in rows]

    def update(
        self, namespace: Namespace, key: str, fn: Updater, *, ttl: float | None = None
    ) -> Item:
        params = self._params(namespace, key)
        ttl = validate_ttl(ttl)
        with self._connection() as conn:
            return self._update_many(conn, namespace, {key: fn}, {key: params}, ttl)[0]

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
        params = self._write_params(
            namespace, key, value, ttl, validated=validated, encoded=encoded
        )
        sql = self._put_if_version_sql(params, expected_version)
        if sql is None:
            return None
        with self._connection() as conn:
            written = _one(conn, sql, params)
        return None if written is None else self._written(namespace, key, value, written)

    def put_many_if_versions(
        self,
        namespace: Namespace,
        writes: Mapping[str, ConditionalWrite],
        *,
        validated: bool = False,
    ) -> builtins.list[Item] | None:
        all_params = self._conditional_params(namespace, writes, validated)
        statements = self._conditional_writes(writes, all_params)
        if statements is None:
            return None
        # Two round trips: the locks and every write; then COMMIT, or ROLLBACK if a write
        # found another version.
        try:
            with self._connection() as conn, _transaction(conn) as pipeline:
                for params in _in_lock_order(all_params):
                    conn.execute(_LOCK_KEY, params)
                cursors = [conn.execute(sql, params) for sql, params in statements]
                pipeline.sync()
                rows = [cursor.fetchone() for cursor in cursors]
                if any(row is None for row in rows):
                    raise _Rollback
        except _Rollback:
            return None
        return [
            self._written(namespace, key, writes[key].value, row)
            for key, row in zip(all_params, rows)
        ]

    def update_many(
        self, namespace: Namespace, updates: Mapping[str, Updater], *, ttl: float | None = None
    ) -> builtins.list[Item]:
        all_params = {key: self._params(namespace, key) for key in updates}
        ttl = validate_ttl(ttl)
        if not all_params:
            return []
        with self._connection() as conn:
            return self._update_many(conn, namespace, updates, all_params, ttl)

    def _update_many(
        self,
        conn: Any,
        namespace: Namespace,
        updates: Mapping[str, Updater],
        all_params: dict[str, dict[str, Any]],
        ttl: float | None,
    ) -> builtins.list[Item]:
        """``update_many`` in two round trips however many keys: BEGIN, the locks and the read;
        then the writes and COMMIT."""
        with _transaction(conn) as pipeline:
            read = _queue_locked_read(conn, all_params)
            pipeline.sync()
            written = self._queue_writes(conn, updates, all_params, read.fetchall(), ttl)
        return [self._written(namespace, key, value, cur.fetchone()) for key, value, cur in written]

    def _queue_writes(
        self,
        conn: Any,
        updates: Mapping[str, Updater],
        all_params: dict[str, dict[str, Any]],
        rows: builtins.list[tuple[Any, ...]],
        ttl: float | None,
    ) -> builtins.list[tuple[str, JSONValue, Any]]:
        """The writes of ``updates`` over the rows of ``_READ_LOCKED``, queued on the pipeline:
        ``(key, value, cursor)``, the cursor's row there once the pipeline syncs."""
        return [
            (key, value, conn.execute(_UPSERT, params))
            for key, value, params in self._planned_writes(updates, all_params, rows, ttl)
        ]

    def change_mark(self, namespace: Namespace) -> ChangeMark:
        namespace = validate_namespace(namespace)
        with self._connection() as conn:
            (snapshot,) = execute(conn, _MARK, {})[0]
        return ChangeMark(_BACKEND, namespace, snapshot)

    def changes(self, namespace: Namespace, since: ChangeMark | None = None) -> Changes:
        params = self._changes_params(namespace, since)
        with self._connection() as conn:
            rows = execute(conn, _EVERYTHING if since is None else _SINCE, params)
            return self._changes_answer(conn, tuple(namespace), since, params, rows)

    def encoded_each(
        self, namespace: Namespace, each: Callable[[builtins.list[EncodedItem]], None]
    ) -> Changes:
        params = self._changes_params(namespace, None)
        with self._connection() as conn:
            rows = execute(conn, _EVERYTHING, params)
        return _hand_rows(tuple(namespace), rows, each)

    @staticmethod
    def _changes_answer(
        conn: Any,
        namespace: Namespace,
        since: ChangeMark | None,
        params: dict[str, Any],
        rows: builtins.list[tuple[Any, ...]],
    ) -> Changes:
        """``changes``' answer from the rows of ``_SINCE`` (``_EVERYTHING`` without a mark),
        reading everything when they say the mark is stale."""
        answer = _changes(namespace, rows, complete=since is None)
        if answer is None:
            answer = _changes(namespace, execute(conn, _EVERYTHING, params), complete=True)
        assert answer is not None  # _EVERYTHING has no 'stale' row
        return answer

    def read_many(self, reads: Sequence[Read]) -> builtins.list[Answer]:
        reads = validate_reads(reads)
        if not reads:
            return []
        # One round trip; one more for each mark the rows say is stale.
        parts = _in_parts(reads)
        statements = [self._read_many_statement(part) for part in parts]
        with self._connection() as conn:
            if len(parts) == 1:
                results = [execute(conn, *statements[0], varying=True)]
            else:
                # Every statement is sent, then one Sync as the pipeline ends, which brings
                # every answer back (a fetch inside the block would cost a round trip).
                with conn.pipeline():
                    cursors = [conn.execute(*statement) for statement in statements]
                results = [cursor.fetchall() for cursor in cursors]
            answers = [
                answer
                for part, rows in zip(parts, results)
                for answer in self._read_answers(part, rows)
            ]
            return [
                self._everything(conn, read) if answer is None else answer
                for read, answer in zip(reads, answers)
            ]

    def _everything(self, conn: Any, read: Read) -> Changes:
        """A stale mark's answer: the whole namespace (``changes(namespace)``)."""
        params = self._changes_params(read.namespace, None)
        rows = execute(conn, _EVERYTHING, params)
        return self._complete(read.namespace, rows)

    def update_many_since(
        self,
        namespace: Namespace,
        since: ChangeMark,
        plan: Planner,
        *,
        ttl: float | None = None,
    ) -> builtins.list[Item]:
        params = self._since_params(namespace, since)
        ttl = validate_ttl(ttl)
        # Three round trips: the namespace's lock and the changes; the keys' locks and their
        # values; the writes and COMMIT (two when the plan writes nothing).
        with self._connection() as conn, _transaction(conn) as pipeline:
            # The lock first, in its own statement: under READ COMMITTED the next statement's
            # snapshot then includes whatever the previous holder committed (and its clock, as
            # it starts, the time once the lock is held).
            conn.execute(_LOCK_NAMESPACE, params)
            changed = conn.execute(_CHANGES, params)
            pipeline.sync()
            updates = plan([_item(row) for row in changed.fetchall()])
            all_params = self._planned_params(namespace, updates)
            if not all_params:
                return []
            read = _queue_locked_read(conn, all_params)
            pipeline.sync()
            written = self._queue_writes(conn, updates, all_params, read.fetchall(), ttl)
        return [self._written(namespace, key, value, cur.fetchone()) for key, value, cur in written]

    def restore_items(self, items: Sequence[Item]) -> builtins.list[Item]:
        checked = validate_restored(items)
        if not checked:
            return []
        ordered = sorted(checked, key=lambda pair: (pair[0].namespace, pair[0].key))
        # Each column as the text of one array: psycopg adapts a list element by element,
        # which took more time than the database did to write the page.
        params: dict[str, Any] = {
            "ns": text_array([encode_namespace(item.namespace) for item, _ in ordered]),
            "key": text_array([item.key for item, _ in ordered]),
            "data": text_array([data.decode() for _, data in ordered]),
            "version": _number_array([item.version for item, _ in ordered]),
            "created_at": _number_array([float(item.created_at) for item, _ in ordered]),
            "updated_at": _number_array([float(item.updated_at) for item, _ in ordered]),
            "expires_at": _number_array(
                [None if item.expires_at is None else float(item.expires_at) for item, _ in ordered]
            ),
            "now": None,
        }
        # Two statements in one round trip: the records' locks (an update() of one of them
        # elsewhere finishes first), then the write, whose snapshot holds what it committed.
        with self._connection() as conn, _transaction(conn):
            conn.execute(_LOCK_GIVEN, params)
            cursor = conn.execute(_RESTORE, params)
        written = {(ns, key) for ns, key in cursor.fetchall()}
        return [
            item for item, _ in checked if (encode_namespace(item.namespace), item.key) in written
        ]

    def purge_expired(self) -> int:
        with self._connection() as conn, conn.transaction():
            (purged,) = conn.execute(_PURGE, {"now": None}).fetchone()
            conn.execute(_PRUNE, {"now": None, "retention": self.tombstone_retention})
        return int(purged)

    def close(self) -> None:
        self._pool.close()
        self._async.close_all_now()

    async def aclose(self) -> None:
        await self._async.close_current()
        self._async.close_all_now()
        self._pool.close()
