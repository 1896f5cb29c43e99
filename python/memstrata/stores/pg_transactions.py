"""How :class:`~memstrata.stores.postgres.PostgresStore` sends a transaction: pipelined on an
autocommit connection, so BEGIN and COMMIT ride with other statements instead of costing round
trips of their own, and the record locks of a batch are taken in one order (two batches over the
same keys cannot deadlock). Sync and async forms.
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

from memstrata.stores.pg_sql import _LOCK_KEY, _READ_LOCKED, text_array


class _Rollback(Exception):
    """Raised inside :func:`_transaction` to roll it back: a conditional write missed."""


def _in_lock_order(all_params: dict[str, dict[str, Any]]) -> builtins.list[dict[str, Any]]:
    """The keys' parameters in the one order every batch locks keys in, so two batches over the
    same keys cannot deadlock."""
    return [all_params[key] for key in sorted(all_params)]


def _locked_read(all_params: dict[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """``_READ_LOCKED`` over the keys (after their ``_LOCK_KEY`` statements, in lock order)."""
    keys = sorted(all_params)
    return _READ_LOCKED, {"ns": all_params[keys[0]]["ns"], "keys": text_array(keys)}


def _queue_locked_read(conn: Any, all_params: dict[str, dict[str, Any]]) -> Any:
    """Queues every key's lock, then the read of their values; returns the read's cursor."""
    for params in _in_lock_order(all_params):
        conn.execute(_LOCK_KEY, params)
    return conn.execute(*_locked_read(all_params))


@contextlib.contextmanager
def _transaction(conn: Any) -> Iterator[Any]:
    """A transaction on an autocommit connection in pipeline mode, yielding the pipeline:
    BEGIN goes out with the first statements and COMMIT with the last, so neither costs a round
    trip of its own (psycopg's ``transaction()`` waits for each). ``pipeline.sync()`` sends what
    is queued and waits for its answers; results of statements queued after the last sync are
    in their cursors once the block ends. An exception rolls everything back: a ROLLBACK
    goes out with the pipeline's last sync (or, after a statement failed, on its own)."""
    try:
        with conn.pipeline() as pipeline:
            conn.execute("BEGIN", prepare=False)
            try:
                yield pipeline
            except BaseException:
                with contextlib.suppress(Exception):
                    conn.execute("ROLLBACK", prepare=False)
                raise
            conn.execute("COMMIT", prepare=False)
    except BaseException:
        _roll_back(conn)
        raise


@contextlib.asynccontextmanager
async def _atransaction(conn: Any) -> AsyncIterator[Any]:
    """:func:`_transaction` on an async connection."""
    try:
        async with conn.pipeline() as pipeline:
            await conn.execute("BEGIN", prepare=False)
            try:
                yield pipeline
            except BaseException:
                with contextlib.suppress(Exception):
                    await conn.execute("ROLLBACK", prepare=False)
                raise
            await conn.execute("COMMIT", prepare=False)
    except BaseException:
        from psycopg.pq import TransactionStatus

        if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
            with contextlib.suppress(Exception):
                await conn.rollback()
        raise


async def _aqueue_locked_read(conn: Any, all_params: dict[str, dict[str, Any]]) -> Any:
    """:func:`_queue_locked_read` on an async connection."""
    for params in _in_lock_order(all_params):
        await conn.execute(_LOCK_KEY, params)
    return await conn.execute(*_locked_read(all_params))


def _roll_back(conn: Any) -> None:
    """Ends a transaction that failed (the pool would, but it warns)."""
    from psycopg.pq import TransactionStatus

    if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
        with contextlib.suppress(Exception):
            conn.rollback()
