"""The SQL of :class:`~memstrata.stores.postgres.PostgresStore`: its schema migrations and
every statement it sends, as module-level constants (the design behind them is in that module's
docstring). Statements take named parameters; ``%(now)s`` is a transaction's time, or NULL for
the statement's own; ``%(keys)s``, a list of keys, is sent as the text of an array
(``text_array``).
"""

from __future__ import annotations

import functools

SCHEMA_VERSION = 4
_MIGRATION_LOCK = 0x6D656D73  # "mems": one advisory lock id for every memstrata migration
_NAMESPACE_LOCK_CLASS = 0x6D656D6E  # "memn": first key of the two-key namespace locks

_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE IF NOT EXISTS memstrata_items (
            namespace TEXT COLLATE "C" NOT NULL,
            key TEXT COLLATE "C" NOT NULL,
            value JSON NOT NULL,
            version BIGINT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION,
            PRIMARY KEY (namespace, key)
        )""",
        "CREATE INDEX IF NOT EXISTS memstrata_items_expires_at ON memstrata_items (expires_at)"
        " WHERE expires_at IS NOT NULL",
    ),
    # Change tracking for update_many_since: rows written before it count as never changed.
    2: (
        "ALTER TABLE memstrata_items ADD COLUMN IF NOT EXISTS written_by xid8 NOT NULL DEFAULT '0'",
        "ALTER TABLE memstrata_items ALTER COLUMN written_by SET DEFAULT pg_current_xact_id()",
        "CREATE INDEX IF NOT EXISTS memstrata_items_changes ON memstrata_items"
        " (namespace, written_by)",
        """CREATE TABLE IF NOT EXISTS memstrata_tombstones (
            namespace TEXT COLLATE "C" NOT NULL,
            key TEXT COLLATE "C" NOT NULL,
            deleted_by xid8 NOT NULL,
            deleted_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (namespace, key)
        )""",
        "CREATE INDEX IF NOT EXISTS memstrata_tombstones_changes ON memstrata_tombstones"
        " (namespace, deleted_by)",
        "CREATE INDEX IF NOT EXISTS memstrata_tombstones_deleted_at ON memstrata_tombstones"
        " (deleted_at)",
        """CREATE TABLE IF NOT EXISTS memstrata_tombstone_floor (
            namespace TEXT COLLATE "C" PRIMARY KEY,
            pruned_to xid8 NOT NULL
        )""",
    ),
    # A deletion's tombstone keeps the deleted row's version: the key written again numbers on
    # from it, so a version held from before never matches the new value.
    3: (
        "ALTER TABLE memstrata_tombstones ADD COLUMN IF NOT EXISTS version BIGINT NOT NULL"
        " DEFAULT 0",
    ),
    # How far tombstones were pruned, one transaction id for the whole store instead of one
    # per namespace: a row naming a namespace stayed for good, so an erased user's id did.
    # Transaction ids are store-wide and the prune goes by age, so the one id answers in full
    # only marks about as old as the retention, as the per-namespace ones did.
    4: (
        """CREATE TABLE IF NOT EXISTS memstrata_tombstones_pruned (
            one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
            pruned_to xid8 NOT NULL
        )""",
        """INSERT INTO memstrata_tombstones_pruned (pruned_to)
            SELECT pruned_to FROM memstrata_tombstone_floor ORDER BY pruned_to DESC LIMIT 1
        ON CONFLICT (one) DO NOTHING""",
        "DROP TABLE memstrata_tombstone_floor",
    ),
}

# Run once on each connection the store opens, in one statement:
# * psycopg prepares a statement sent more than a few times, and under the server's default
#   plan_cache_mode a prepared statement whose generic plan looks costlier than its custom ones
#   (a ``key = ANY(keys)``, read_many's UNION ALL) is planned again at every execution, which
#   takes longer than running it. Every statement here is an index lookup whose generic plan is
#   the one a custom plan would pick.
# * Values over about 2 KB (a working memory) are compressed as they are written: lz4, where
#   the server has it (PostgreSQL 14 or newer built with it), costs less time than the default
#   pglz in each such write. Values written with either are read back alike.
SESSION_SETUP = """SELECT set_config('plan_cache_mode', 'force_generic_plan', false),
    (SELECT set_config('default_toast_compression', 'lz4', false) FROM pg_settings
        WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals))"""

# The time of a transaction (read with its locks) or, when %(now)s is NULL, of the statement.
_NOW = "COALESCE(%(now)s::float8, extract(epoch FROM statement_timestamp())::float8)"
_CLOCK = "extract(epoch FROM clock_timestamp())::float8"
_LIVE = f"(expires_at IS NULL OR expires_at > {_NOW})"
_SELECT = (
    "SELECT namespace, key, value::text, version, created_at, updated_at, expires_at"
    " FROM memstrata_items"
)
_GET = f"{_SELECT} WHERE namespace = %(ns)s AND key = %(key)s AND {_LIVE}"
_GET_MANY = f"{_SELECT} WHERE namespace = %(ns)s AND key = ANY(%(keys)s::text[]) AND {_LIVE}"
_LIST = (
    f"{_SELECT} WHERE namespace >= %(lo)s AND namespace < %(hi)s AND {_LIVE}"
    " ORDER BY namespace, key LIMIT %(limit)s OFFSET %(offset)s"
)
# list_after: a range of the primary key from a (namespace, key) on.
_LIST_AFTER = (
    f"{_SELECT} WHERE namespace >= %(lo)s AND namespace < %(hi)s"
    f" AND (namespace, key) > (%(after_ns)s, %(after_key)s) AND {_LIVE}"
    " ORDER BY namespace, key LIMIT %(limit)s"
)
# A new row's version: one past its key's deleted row's, if a tombstone remembers one. An
# expired row written over numbers on too (a new record all the same: a new created_at).
_FIRST_VERSION = """COALESCE((SELECT version FROM memstrata_tombstones
        WHERE namespace = %(ns)s AND key = %(key)s), 0) + 1"""
# excluded.updated_at is this write's time: an old row that expired by then is replaced anew.
_UPSERT = f"""INSERT INTO memstrata_items AS items
        (namespace, key, value, version, created_at, updated_at, expires_at, written_by)
    VALUES (%(ns)s, %(key)s, %(data)s::json, {_FIRST_VERSION}, {_NOW}, {_NOW},
            {_NOW} + %(ttl)s::float8, pg_current_xact_id())
    ON CONFLICT (namespace, key) DO UPDATE SET
        value = excluded.value,
        written_by = excluded.written_by,
        version = items.version + 1,
        created_at = CASE WHEN items.expires_at IS NULL OR items.expires_at > excluded.updated_at
                          THEN items.created_at ELSE excluded.created_at END,
        updated_at = excluded.updated_at,
        expires_at = excluded.expires_at
    RETURNING version, created_at, updated_at, expires_at"""


def _locked(lock: str) -> str:
    """A lock statement that returns the database's clock read once the lock is held (the
    subquery with OFFSET 0 is not flattened, so it runs, and waits, before the outer row)."""
    return f"SELECT {_CLOCK} FROM ({lock} OFFSET 0) AS locked"


_LOCK_KEY = _locked("SELECT pg_advisory_xact_lock(hashtextextended(%(ns)s || %(key)s, 0))")
_THIS_LIVE_ROW = f"FROM memstrata_items WHERE namespace = %(ns)s AND key = %(key)s AND {_LIVE}"
# update()/update_many(): the values of the keys, read in the statement after their locks (so
# its READ COMMITTED snapshot holds what the previous holders committed), with the clock read
# as it runs: the time of the whole transaction. One row per live key, or one with NULL key.
_READ_LOCKED = f"""SELECT clock.now, items.key, items.value::text
    FROM (SELECT {_CLOCK} AS now OFFSET 0) AS clock
    LEFT JOIN memstrata_items AS items
        ON items.namespace = %(ns)s AND items.key = ANY(%(keys)s::text[])
        AND (items.expires_at IS NULL OR items.expires_at > clock.now)"""
# A tombstone for every row the CTE ``gone`` deleted, in the deleting statement.
_BURY = f"""buried AS (
        INSERT INTO memstrata_tombstones (namespace, key, deleted_by, deleted_at, version)
            SELECT namespace, key, pg_current_xact_id(), {_NOW}, version FROM gone
        ON CONFLICT (namespace, key) DO UPDATE
            SET deleted_by = excluded.deleted_by, deleted_at = excluded.deleted_at,
                version = excluded.version)"""
_DELETE = f"""WITH gone AS (
        DELETE FROM memstrata_items WHERE namespace = %(ns)s AND key = %(key)s
        RETURNING namespace, key, expires_at, version), {_BURY}
    SELECT {_LIVE} FROM gone"""
_DELETE_IF_VERSION = f"""WITH gone AS (
        DELETE FROM memstrata_items WHERE namespace = %(ns)s AND key = %(key)s
            AND version = %(version)s AND (expires_at IS NULL OR expires_at > {_NOW})
        RETURNING namespace, key, expires_at, version), {_BURY}
    SELECT count(*) FROM gone"""
_PURGE = f"""WITH gone AS (
        DELETE FROM memstrata_items WHERE expires_at IS NOT NULL AND expires_at <= {_NOW}
        RETURNING namespace, key, version), {_BURY}
    SELECT count(*) FROM gone"""
# Tombstones older than the retention go; the store's one floor keeps the newest id pruned
# (in no row naming a namespace, so an erased namespace leaves none behind).
_PRUNE = f"""WITH pruned AS (
        DELETE FROM memstrata_tombstones WHERE deleted_at < {_NOW} - %(retention)s::float8
        RETURNING deleted_by)
    INSERT INTO memstrata_tombstones_pruned AS kept (pruned_to)
        SELECT deleted_by FROM pruned ORDER BY deleted_by DESC LIMIT 1
    ON CONFLICT (one) DO UPDATE SET pruned_to = greatest(kept.pruned_to, excluded.pruned_to)"""
# put_if_version in one autocommit statement. The record's advisory lock is taken first (the
# CTE feeds the write its only row), so a put_if_version waits for an update() holding that
# lock and then writes over the latest committed row only: an UPDATE rechecks its WHERE against
# the newest row version, ON CONFLICT DO UPDATE its WHERE against the conflicting row, both
# under READ COMMITTED. Over version 0 the record must be absent or expired (replaced anew);
# over version n it must be live at version n.
_KEY_LOCK_ROW = "SELECT pg_advisory_xact_lock(hashtextextended(%(ns)s || %(key)s, 0))"
_PUT_IF_ABSENT = f"""WITH locked AS MATERIALIZED ({_KEY_LOCK_ROW})
    INSERT INTO memstrata_items AS items
        (namespace, key, value, version, created_at, updated_at, expires_at, written_by)
    SELECT %(ns)s, %(key)s, %(data)s::json, {_FIRST_VERSION}, {_NOW}, {_NOW},
           {_NOW} + %(ttl)s::float8, pg_current_xact_id()
        FROM locked
    ON CONFLICT (namespace, key) DO UPDATE SET
        value = excluded.value,
        written_by = excluded.written_by,
        version = items.version + 1,
        created_at = excluded.created_at,
        updated_at = excluded.updated_at,
        expires_at = excluded.expires_at
    WHERE items.expires_at IS NOT NULL AND items.expires_at <= excluded.updated_at
    RETURNING version, created_at, updated_at, expires_at"""
_PUT_OVER_VERSION = f"""WITH locked AS MATERIALIZED ({_KEY_LOCK_ROW})
    UPDATE memstrata_items AS items SET
        value = %(data)s::json,
        written_by = pg_current_xact_id(),
        version = items.version + 1,
        updated_at = {_NOW},
        expires_at = {_NOW} + %(ttl)s::float8
    FROM locked
    WHERE items.namespace = %(ns)s AND items.key = %(key)s AND items.version = %(expected)s
        AND (items.expires_at IS NULL OR items.expires_at > {_NOW})
    RETURNING items.version, items.created_at, items.updated_at, items.expires_at"""
# restore_items: the given records' locks, in the order given (sorted by namespace and key,
# as update_many sorts its keys), then each record as it is, where its key holds no live row
# (an expired one is replaced): a write like any other for changes (written_by).
_GIVEN = """unnest(%(ns)s::text[], %(key)s::text[], %(data)s::text[], %(version)s::bigint[],
        %(created_at)s::float8[], %(updated_at)s::float8[], %(expires_at)s::float8[])
    WITH ORDINALITY AS given(ns, key, data, version, created_at, updated_at, expires_at, n)"""
_LOCK_GIVEN = f"""SELECT count(*) FROM (
    SELECT pg_advisory_xact_lock(hashtextextended(ns || key, 0)) FROM {_GIVEN}
    ORDER BY n OFFSET 0) AS locked"""
_RESTORE = f"""INSERT INTO memstrata_items AS items
        (namespace, key, value, version, created_at, updated_at, expires_at, written_by)
    SELECT ns, key, data::json, version, created_at, updated_at, expires_at,
            pg_current_xact_id()
        FROM {_GIVEN}
        WHERE expires_at IS NULL OR expires_at > {_NOW}
    ON CONFLICT (namespace, key) DO UPDATE SET
        value = excluded.value,
        written_by = excluded.written_by,
        version = excluded.version,
        created_at = excluded.created_at,
        updated_at = excluded.updated_at,
        expires_at = excluded.expires_at
    WHERE items.expires_at IS NOT NULL AND items.expires_at <= {_NOW}
    RETURNING namespace, key"""
_MARK = "SELECT pg_current_snapshot()::text"
_LOCK_NAMESPACE = _locked(
    f"SELECT pg_advisory_xact_lock({_NAMESPACE_LOCK_CLASS}, hashtext(%(ns)s))"
)


def _not_seen_by_mark(column: str) -> str:
    """Written by a transaction at or after the mark's oldest running one, and not committed in
    it (the first test is what lets the ``(namespace, <column>)`` index bound the scan)."""
    return (
        f"{column} >= pg_snapshot_xmin(%(mark)s::pg_snapshot)"
        f" AND NOT pg_visible_in_snapshot({column}, %(mark)s::pg_snapshot)"
    )


_CHANGES = f"""{_SELECT} WHERE namespace = %(ns)s AND {_not_seen_by_mark("written_by")}
        AND {_LIVE}
    ORDER BY key"""
# changes(): one statement, so the mark it reads is the snapshot its rows were read with. Rows
# are (kind, key, value, version, created_at, updated_at, expires_at).
_MARK_ROW = (
    "SELECT 'mark', pg_current_snapshot()::text, NULL::text, NULL::bigint,"
    " NULL::float8, NULL::float8, NULL::float8"
)
_EVERYTHING = f"""{_MARK_ROW}
    UNION ALL
    SELECT 'item', key, value::text, version, created_at, updated_at, expires_at
        FROM memstrata_items WHERE namespace = %(ns)s AND {_LIVE}"""
# 'stale': tombstones this mark would need were pruned, or the mark is ahead of this database
# (made over other data); the caller then reads _EVERYTHING instead.
_SINCE = f"""{_MARK_ROW}
    UNION ALL
    SELECT 'stale', NULL, NULL, NULL, NULL, NULL, NULL
        WHERE pg_snapshot_xmax(%(mark)s::pg_snapshot)
                > pg_snapshot_xmax(pg_current_snapshot())
            OR EXISTS (SELECT FROM memstrata_tombstones_pruned
                       WHERE pruned_to >= pg_snapshot_xmin(%(mark)s::pg_snapshot))
    UNION ALL
    SELECT CASE WHEN {_LIVE} THEN 'item' ELSE 'expired' END, key,
            CASE WHEN {_LIVE} THEN value::text END, version, created_at, updated_at, expires_at
        FROM memstrata_items WHERE namespace = %(ns)s AND {_not_seen_by_mark("written_by")}
    UNION ALL
    SELECT 'deleted', key, NULL, NULL, NULL, NULL, NULL
        FROM memstrata_tombstones
        WHERE namespace = %(ns)s AND {_not_seen_by_mark("deleted_by")}"""
_STAMP = f"SELECT version, created_at {_THIS_LIVE_ROW}"
# get_many()'s rows in the shape of changes()' (kind, key, value, version, created_at,
# updated_at, expires_at), so that read_many can send it in one statement with them.
_GET_MANY_ROWS = f"""SELECT 'item', key, value::text, version, created_at, updated_at, expires_at
    FROM memstrata_items WHERE namespace = %(ns)s AND key = ANY(%(keys)s::text[]) AND {_LIVE}"""
_READ_KINDS = {"get": _GET_MANY_ROWS, "since": _SINCE, "everything": _EVERYTHING}
# The parameters a read's statement names; read n of a read_many names them with suffix n.
_READ_PARAMS = ("ns", "keys", "mark")


@functools.lru_cache(maxsize=64)
def read_many_sql(kinds: tuple[str, ...]) -> str:
    """One statement answering every read of a ``read_many`` (each ``kinds`` entry: "get",
    "since" or "everything"): its rows are the reads' rows, each led by its read's number.

    One statement is one parse, bind and execute on the server, one answer for psycopg to
    take in, and one snapshot for every read. The text depends only on the kinds, so a stack
    whose runs open with the same reads sends the same statement every time, prepared once."""
    parts = []
    for n, kind in enumerate(kinds):
        sql = _READ_KINDS[kind]
        for name in _READ_PARAMS:
            sql = sql.replace(f"%({name})s", f"%({name}{n})s")
        parts.append(f"SELECT {n}, * FROM ({sql}) AS read{n}")
    return "\nUNION ALL\n".join(parts)


def text_array(values: list[str]) -> str:
    """``values`` as the text of a PostgreSQL array (each element quoted, backslash and double
    quote escaped), for a ``%(keys)s::text[]`` parameter: one string is much less work for
    psycopg to send than a list, which it adapts element by element."""
    quoted = (value.replace("\\", "\\\\").replace('"', '\\"') for value in values)
    return "{" + ",".join(f'"{value}"' for value in quoted) + "}"
