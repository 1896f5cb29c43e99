"""The async twins of :class:`~memstrata.stores.postgres.PostgresStore`'s methods: the same
statements as the sync methods (built by ``pg_statements``), sent over psycopg's async
connections, not threads; the store gives each running event loop its connections
(``pg_connections``).
"""

from __future__ import annotations

import builtins
import contextlib
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any

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
    Store,
    Updater,
    validate_keys,
    validate_namespace,
    validate_reads,
    validate_ttl,
    validate_version,
)
from memstrata.stores.pg_prepared import execute_async
from memstrata.stores.pg_sql import (
    _CHANGES,
    _DELETE,
    _DELETE_IF_VERSION,
    _EVERYTHING,
    _GET,
    _GET_MANY,
    _LIST,
    _LOCK_KEY,
    _LOCK_NAMESPACE,
    _MARK,
    _PRUNE,
    _PURGE,
    _SINCE,
    _STAMP,
    _UPSERT,
)
from memstrata.stores.pg_statements import (
    _BACKEND,
    MAX_STORED_VERSION,
    PostgresStatements,
    _changes,
    _hand_rows,
    _in_parts,
    _item,
)
from memstrata.stores.pg_transactions import (
    _aqueue_locked_read,
    _atransaction,
    _in_lock_order,
    _Rollback,
)


async def _one_async(conn: Any, sql: str, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
    """The first row of a one-statement call, or None (see pg_prepared)."""
    rows = await execute_async(conn, sql, params)
    return rows[0] if rows else None


class PostgresAsyncTwins(PostgresStatements, Store):
    """The async methods of :class:`~memstrata.stores.postgres.PostgresStore`, which opens the
    connections they run on."""

    @abstractmethod
    def _aconnection(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """The running loop's connection (``PostgresStore._aconnection``)."""

    async def aget(self, namespace: Namespace, key: str) -> Item | None:
        params = self._params(namespace, key)
        async with self._aconnection() as conn:
            row = await _one_async(conn, _GET, params)
        return None if row is None else _item(row)

    async def aget_many(self, namespace: Namespace, keys: Sequence[str]) -> dict[str, Item]:
        keys = validate_keys(keys)
        params = self._many_params(namespace, keys)
        async with self._aconnection() as conn:
            rows = await execute_async(conn, _GET_MANY, params)
        return self._found(keys, rows)

    async def astamp(self, namespace: Namespace, key: str) -> tuple[int, float] | None:
        params = self._params(namespace, key)
        async with self._aconnection() as conn:
            row = await _one_async(conn, _STAMP, params)
        return None if row is None else (row[0], row[1])

    async def aput(
        self, namespace: Namespace, key: str, value: JSONValue, *, ttl: float | None = None
    ) -> Item:
        params = self._write_params(namespace, key, value, ttl)
        async with self._aconnection() as conn:
            row = await _one_async(conn, _UPSERT, params)
        return self._written(namespace, key, value, row)

    async def adelete(self, namespace: Namespace, key: str) -> bool:
        params = self._params(namespace, key)
        async with self._aconnection() as conn:
            row = await _one_async(conn, _DELETE, params)
        return bool(row and row[0])

    async def adelete_if_version(
        self, namespace: Namespace, key: str, *, expected_version: int
    ) -> bool:
        params = {**self._params(namespace, key), "version": validate_version(expected_version)}
        if params["version"] > MAX_STORED_VERSION:
            return False
        async with self._aconnection() as conn:
            row = await _one_async(conn, _DELETE_IF_VERSION, params)
        return bool(row and row[0])

    async def alist(
        self, namespace_prefix: Namespace = (), *, limit: int = 100, offset: int = 0
    ) -> builtins.list[Item]:
        params = self._list_params(namespace_prefix, limit, offset)
        async with self._aconnection() as conn:
            rows = await execute_async(conn, _LIST, params)
        return [_item(row) for row in rows]

    async def aupdate(
        self, namespace: Namespace, key: str, fn: Updater, *, ttl: float | None = None
    ) -> Item:
        params = self._params(namespace, key)
        ttl = validate_ttl(ttl)
        async with self._aconnection() as conn:
            return (await self._aupdate_many(conn, namespace, {key: fn}, {key: params}, ttl))[0]

    async def aupdate_many(
        self, namespace: Namespace, updates: Mapping[str, Updater], *, ttl: float | None = None
    ) -> builtins.list[Item]:
        all_params = {key: self._params(namespace, key) for key in updates}
        ttl = validate_ttl(ttl)
        if not all_params:
            return []
        async with self._aconnection() as conn:
            return await self._aupdate_many(conn, namespace, updates, all_params, ttl)

    async def _aupdate_many(
        self,
        conn: Any,
        namespace: Namespace,
        updates: Mapping[str, Updater],
        all_params: dict[str, dict[str, Any]],
        ttl: float | None,
    ) -> builtins.list[Item]:
        async with _atransaction(conn) as pipeline:
            read = await _aqueue_locked_read(conn, all_params)
            await pipeline.sync()
            written = await self._aqueue_writes(
                conn, updates, all_params, await read.fetchall(), ttl
            )
        return [
            self._written(namespace, key, value, await cur.fetchone())
            for key, value, cur in written
        ]

    async def achange_mark(self, namespace: Namespace) -> ChangeMark:
        namespace = validate_namespace(namespace)
        async with self._aconnection() as conn:
            (snapshot,) = (await execute_async(conn, _MARK, {}))[0]
        return ChangeMark(_BACKEND, namespace, snapshot)

    async def achanges(self, namespace: Namespace, since: ChangeMark | None = None) -> Changes:
        params = self._changes_params(namespace, since)
        async with self._aconnection() as conn:
            sql = _EVERYTHING if since is None else _SINCE
            rows = await execute_async(conn, sql, params)
            return await self._achanges_answer(conn, tuple(namespace), since, params, rows)

    async def aencoded_each(
        self, namespace: Namespace, each: Callable[[builtins.list[EncodedItem]], None]
    ) -> Changes:
        params = self._changes_params(namespace, None)
        async with self._aconnection() as conn:
            rows = await execute_async(conn, _EVERYTHING, params)
        return _hand_rows(tuple(namespace), rows, each)

    @staticmethod
    async def _achanges_answer(
        conn: Any,
        namespace: Namespace,
        since: ChangeMark | None,
        params: dict[str, Any],
        rows: builtins.list[tuple[Any, ...]],
    ) -> Changes:
        answer = _changes(namespace, rows, complete=since is None)
        if answer is None:
            rows = await execute_async(conn, _EVERYTHING, params)
            answer = _changes(namespace, rows, complete=True)
        assert answer is not None  # _EVERYTHING has no 'stale' row
        return answer

    async def aread_many(self, reads: Sequence[Read]) -> builtins.list[Answer]:
        reads = validate_reads(reads)
        if not reads:
            return []
        parts = _in_parts(reads)
        statements = [self._read_many_statement(part) for part in parts]
        async with self._aconnection() as conn:
            if len(parts) == 1:
                results = [await execute_async(conn, *statements[0], varying=True)]
            else:
                async with conn.pipeline():
                    cursors = [await conn.execute(*statement) for statement in statements]
                results = [await cursor.fetchall() for cursor in cursors]
            found: builtins.list[Answer | None] = []
            for part, rows in zip(parts, results):
                found += self._read_answers(part, rows)
            answers: builtins.list[Answer] = []
            for read, answer in zip(reads, found):
                if answer is None:
                    params = self._changes_params(read.namespace, None)
                    rows = await execute_async(conn, _EVERYTHING, params)
                    answer = self._complete(read.namespace, rows)
                answers.append(answer)
        return answers

    async def _aqueue_writes(
        self,
        conn: Any,
        updates: Mapping[str, Updater],
        all_params: dict[str, dict[str, Any]],
        rows: builtins.list[tuple[Any, ...]],
        ttl: float | None,
    ) -> builtins.list[tuple[str, JSONValue, Any]]:
        return [
            (key, value, await conn.execute(_UPSERT, params))
            for key, value, params in self._planned_writes(updates, all_params, rows, ttl)
        ]

    async def aupdate_many_since(
        self,
        namespace: Namespace,
        since: ChangeMark,
        plan: Planner,
        *,
        ttl: float | None = None,
    ) -> builtins.list[Item]:
        params = self._since_params(namespace, since)
        ttl = validate_ttl(ttl)
        async with self._aconnection() as conn, _atransaction(conn) as pipeline:
            await conn.execute(_LOCK_NAMESPACE, params)
            changed = await conn.execute(_CHANGES, params)
            await pipeline.sync()
            updates = plan([_item(row) for row in await changed.fetchall()])
            all_params = self._planned_params(namespace, updates)
            if not all_params:
                return []
            read = await _aqueue_locked_read(conn, all_params)
            await pipeline.sync()
            written = await self._aqueue_writes(
                conn, updates, all_params, await read.fetchall(), ttl
            )
        return [
            self._written(namespace, key, value, await cur.fetchone())
            for key, value, cur in written
        ]

    async def aput_if_version(
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
        async with self._aconnection() as conn:
            written = await _one_async(conn, sql, params)
        return None if written is None else self._written(namespace, key, value, written)

    async def aput_many_if_versions(
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
        try:
            async with (
                self._aconnection() as conn,
                _atransaction(conn) as pipeline,
            ):
                for params in _in_lock_order(all_params):
                    await conn.execute(_LOCK_KEY, params)
                cursors = [await conn.execute(sql, params) for sql, params in statements]
                await pipeline.sync()
                rows = [await cursor.fetchone() for cursor in cursors]
                if any(row is None for row in rows):
                    raise _Rollback
        except _Rollback:
            return None
        return [
            self._written(namespace, key, writes[key].value, row)
            for key, row in zip(all_params, rows)
        ]

    async def apurge_expired(self) -> int:
        async with self._aconnection() as conn, conn.transaction():
            (purged,) = await (await conn.execute(_PURGE, {"now": None})).fetchone()
            await conn.execute(_PRUNE, {"now": None, "retention": self.tombstone_retention})
        return int(purged)
