"""Connections for :class:`~memstrata.stores.postgres.PostgresStore`'s async twins.

psycopg_pool's ``AsyncConnectionPool`` runs worker tasks in the event loop that opened it. A
store serves whichever loop awaits it: an ASGI server's long-lived loop, or a new loop per
``asyncio.run()``. A pool left open when its loop ends has those tasks cancelled at shutdown,
which psycopg_pool does not always honour (``asyncio.run()`` then hangs: seen intermittently in
this project's tests), and it cannot serve the next loop anyway. So each running loop gets a
:class:`LoopConnections`: idle connections kept for reuse and new ones opened on demand, up to
a limit, with nothing running in the background. :func:`ended_by_server` serves the sync pool
too.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import threading
from collections import deque
from collections.abc import AsyncIterator
from typing import Any


def ended_by_server(conn: Any) -> bool:
    """Whether an idle connection was ended by the server (a restart, a failover,
    ``pg_terminate_backend``): the server's goodbye (or the end of the stream) is waiting on
    its socket, which an idle connection of the store otherwise never has (it listens to no
    channel). A poll that does not wait, not a round trip; a connection taken as ended by
    mistake costs only a new one."""
    try:
        if conn.closed:
            return True
        socket = conn.pgconn.socket
        if hasattr(select, "poll"):  # no limit on the descriptor's number, unlike select()
            poller = select.poll()
            poller.register(socket, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([socket], [], [], 0)[0])
    except Exception:
        return True


class LoopConnections:
    """Connections of one event loop: at most ``max_size`` open, idle ones reused, each new
    one set up by the statement ``setup`` before its first use.

    Connections are in autocommit mode, as the sync pool's: a single statement needs no
    BEGIN/COMMIT round trips, and a method that needs a transaction opens one explicitly.

    A block that ends normally has its open transaction committed, one that raises has it
    rolled back (as a psycopg pool does); a connection that is broken or cannot be brought back
    to idle is closed instead of kept, and so is one whose commit or rollback is interrupted
    (a second cancellation): its place is given back all the same.

    The bookkeeping never waits (no lock to take, only this loop changes it), so no
    cancellation can come between a connection leaving and its place being given back.
    """

    def __init__(self, url: str, max_size: int, setup: str) -> None:
        # psycopg is an optional dependency: imported by whoever builds a PostgresStore.
        import psycopg
        from psycopg.pq import TransactionStatus

        self.url = url
        self.max_size = max_size
        self.setup = setup
        self._connect = psycopg.AsyncConnection.connect
        self._idle_status = TransactionStatus.IDLE
        self._open_status = TransactionStatus.INTRANS
        self._idle: list[Any] = []
        # Handed out and not yet released: a task of a loop closed while it was suspended in a
        # call never releases its connection (see close_abandoned).
        self._in_use: set[Any] = set()
        self._open = 0
        # Tasks waiting for a connection while max_size are open, each woken in turn by a
        # connection given back (or a place freed).
        self._waiters: deque[asyncio.Future[None]] = deque()
        # Set when the store closes or the loop ends: a connection given back is then closed,
        # never kept idle for calls that will not come.
        self._retired = False

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        conn = await self._acquire()
        ok = False
        try:
            yield conn
            ok = True
        finally:
            await self._release(conn, ok)

    async def _acquire(self) -> Any:
        while not self._idle and self._open >= self.max_size:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken, and leaving: the next waiter takes the turn
                else:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                raise
        while self._idle:
            conn = self._idle.pop()
            if ended_by_server(conn):
                # Closed in place of a call failing on it: the server restarted, failed over
                # or ended it, and every call taking one at once would fail.
                self._open -= 1
                with contextlib.suppress(Exception):
                    conn.pgconn.finish()
                continue
            self._in_use.add(conn)
            return conn
        self._open += 1
        conn = None
        try:
            conn = await self._connect(self.url, autocommit=True)
            await conn.execute(self.setup)
        except BaseException:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.pgconn.finish()
            self._open -= 1
            self._wake()
            raise
        self._in_use.add(conn)
        return conn

    def _wake(self) -> None:
        """Wakes the longest waiting task, if any: a connection was given back or a place
        freed."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _release(self, conn: Any, ok: bool) -> None:
        self._in_use.discard(conn)
        keep = False
        try:
            with contextlib.suppress(Exception):
                if not conn.closed and not self._retired:
                    status = conn.info.transaction_status
                    if ok and status == self._open_status:
                        await conn.commit()
                    elif status != self._idle_status:
                        await conn.rollback()
                    keep = conn.info.transaction_status == self._idle_status
        finally:
            # Also when the commit or rollback is interrupted: the connection is closed, which
            # ends its transaction on the server (and the locks it holds), and its place is
            # given back; else it would stay open, in its transaction, and counted for ever.
            if not keep:
                with contextlib.suppress(Exception):
                    conn.pgconn.finish()  # at once: an await here could be interrupted too
                self._open -= 1
            else:
                self._idle.append(conn)
            self._wake()

    async def close(self, *, retire: bool = False) -> None:
        """Closes the idle connections; later calls open new ones, unless ``retire``: then
        those in use are closed too, when they are released."""
        self._retired = self._retired or retire
        idle, self._idle = self._idle, []
        self._open -= len(idle)
        for _ in idle:
            self._wake()  # a place freed: a waiter may open a connection of its own
        for conn in idle:
            with contextlib.suppress(Exception):
                await conn.close()

    def close_now(self) -> None:
        """Closes the idle connections without awaiting, from outside their loop, and those
        in use when they are released."""
        self._retired = True
        idle, self._idle = self._idle, []
        self._open -= len(idle)
        for conn in idle:
            with contextlib.suppress(Exception):
                conn.pgconn.finish()

    def close_abandoned(self) -> None:
        """Closes every connection of a loop that has closed, those still in use too: a task
        suspended in a call when its loop closed never ends its transaction, whose locks
        (a record's, for an update) would stop every other writer of those records for as
        long as the connection stayed open. Closing it makes the server roll it back."""
        self.close_now()
        in_use, self._in_use = self._in_use, set()
        self._open -= len(in_use)
        for conn in in_use:
            with contextlib.suppress(Exception):
                conn.pgconn.finish()


class ConnectionsByLoop:
    """One :class:`LoopConnections` per running event loop.

    The connections of a loop that has closed are closed at the store's next call, sync or on
    any loop, or at :meth:`close_all_now`: a loop has no close hook to do it sooner, and a weak
    reference would not do (the futures of an entry's waiting tasks refer to its loop). Those a
    closed loop's task still had in use are closed too (see
    :meth:`LoopConnections.close_abandoned`).
    """

    def __init__(self, url: str, max_size: int, setup: str) -> None:
        self.url = url
        self.max_size = max_size
        self.setup = setup
        self._by_loop: dict[asyncio.AbstractEventLoop, LoopConnections] = {}
        # Loops in several threads may share a store: each changes the table under this.
        self._guard = threading.Lock()
        self._closed = False

    def current(self) -> LoopConnections:
        """The running loop's connections (call from inside a coroutine); once the store is
        closed, the error a sync call gets from the closed pool."""
        if self._closed:
            from psycopg_pool import PoolClosed

            raise PoolClosed("the PostgresStore is closed")
        loop = asyncio.get_running_loop()
        connections = self._by_loop.get(loop)
        if connections is not None:
            if len(self._by_loop) > 1:  # another loop may have closed since this one began
                self.close_ended()
            return connections
        with self._guard:
            connections = self._by_loop.setdefault(
                loop, LoopConnections(self.url, self.max_size, self.setup)
            )
        self.close_ended()
        return connections

    def close_ended(self) -> None:
        """Closes the connections of every loop that has closed (see the class docstring);
        the sync methods call it too, since a closed loop's task may hold a record's lock
        that they wait for."""
        if not self._by_loop or not any(loop.is_closed() for loop in list(self._by_loop)):
            return
        with self._guard:
            ended = [old for old in self._by_loop if old.is_closed()]
            gone = [self._by_loop.pop(old) for old in ended]
        for old_connections in gone:
            old_connections.close_abandoned()

    async def close_current(self) -> None:
        with self._guard:
            connections = self._by_loop.pop(asyncio.get_running_loop(), None)
        if connections is not None:
            await connections.close(retire=True)

    def close_all_now(self) -> None:
        """Closes every loop's connections, those in use as they are released; the store is
        closed: later calls are refused."""
        with self._guard:
            self._closed = True
            every, self._by_loop = list(self._by_loop.items()), {}
        for loop, connections in every:
            if loop.is_closed():
                connections.close_abandoned()
            else:
                connections.close_now()
