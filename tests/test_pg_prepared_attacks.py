"""What a caller or an operator may do to PostgresStore's prepared-statement path
(``pg_prepared``), against a real server: each call answers as psycopg's ``execute`` would have,
and the connection it used is left fit for the next call."""

from __future__ import annotations

import enum

import pytest

from memstrata.exceptions import InvalidInputError
from memstrata.stores import ChangeMark, PostgresStore
from memstrata.stores.base import ChangesSince

NS = ("agents", "alice")


@pytest.fixture
def url(empty_postgres_url: str) -> str:
    return empty_postgres_url


class Page(enum.IntEnum):
    TWO = 2


class Shown(int):
    """An int that shows itself otherwise than as its digits."""

    def __repr__(self) -> str:
        return f"Shown({int(self)})"


def test_int_subclasses_are_sent_as_their_number(url: str) -> None:
    """An IntEnum or another int subclass is an int to every check and to psycopg; its repr
    is not its number (``<Page.TWO: 2>``), so it is not what is sent."""
    store = PostgresStore(url, max_size=1)
    for n in range(4):
        store.put(NS, f"k{n}", n)
    assert [item.key for item in store.list(NS, limit=Page.TWO)] == ["k0", "k1"]
    assert [item.key for item in store.list(NS, limit=Shown(1), offset=Shown(3))] == ["k3"]
    written = store.put(NS, "v", "one")
    assert written.version == 1
    again = store.put_if_version(NS, "v", "two", expected_version=Shown(1))
    assert again is not None and again.version == Page.TWO
    assert store.delete_if_version(NS, "v", expected_version=Page.TWO)
    assert store.get(NS, "v") is None
    store.close()


def test_int_subclasses_are_sent_as_their_number_by_the_async_twins(url: str) -> None:
    import asyncio

    store = PostgresStore(url, max_size=1)

    async def calls() -> None:
        for n in range(3):
            await store.aput(NS, f"k{n}", n)
        listed = await store.alist(NS, limit=Page.TWO, offset=Shown(1))
        assert [item.key for item in listed] == ["k1", "k2"]
        assert await store.aput_if_version(NS, "k0", 9, expected_version=Shown(1)) is not None
        assert await store.adelete_if_version(NS, "k0", expected_version=Page.TWO)

    asyncio.run(calls())
    store.close()


@pytest.mark.parametrize(
    "position",
    [
        "\u0661:\u0662:",
        "\uff15:\uff16:",
        "3:5:\u0664",
        "1:9223372036854775808:",
        "9223372036854775808:9223372036854775809:",
        "3:9223372036854775809:9223372036854775808",
        "1:" + "9" * 5000 + ":",
    ],
)
def test_a_mark_pg_snapshot_would_refuse_is_refused_by_name(url: str, position: str) -> None:
    """Python reads Arabic-Indic or full-width digits as numbers; PostgreSQL's pg_snapshot
    reads only ASCII ones, and refuses ids from 2**63 (no database of ours gets near: a
    transaction id counts up from 3 and never wraps): either would be a database error."""
    store = PostgresStore(url, max_size=1)
    mark = ChangeMark("postgres", NS, position)
    with pytest.raises(InvalidInputError, match="not a PostgreSQL snapshot"):
        store.changes(NS, mark)
    with pytest.raises(InvalidInputError, match="not a PostgreSQL snapshot"):
        store.read_many([ChangesSince(NS, mark)])
    store.close()


def test_a_statement_whose_result_type_changed_is_prepared_again(url: str) -> None:
    """A migration (another server's, or an operator's) that changes the type of a column a
    statement returns makes the server refuse the statement prepared before it ("cached plan
    must not change result type", before running anything). psycopg's execute forgets a
    statement that failed and prepares it afresh; so does this path, on the same connection,
    for the sync calls and the async twins alike."""
    import asyncio

    import psycopg

    store = PostgresStore(url, max_size=1)
    written = store.put(NS, "k", {"v": 1})

    async def aget() -> object:
        item = await store.aget(NS, "k")
        return None if item is None else item.value

    assert store.get(NS, "k") == written
    assert asyncio.run(aget()) == {"v": 1}
    for column_type in ("numeric", "double precision"):
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"ALTER TABLE memstrata_items ALTER COLUMN created_at TYPE {column_type}")
        for _ in range(2):
            item = store.get(NS, "k")
            assert item is not None and item.value == {"v": 1}
            assert float(item.created_at) == pytest.approx(written.created_at, abs=0.01)
            assert asyncio.run(aget()) == {"v": 1}
        assert [entry.key for entry in store.list(NS)] == ["k"]
    with store._connection() as conn:
        names = [row[0] for row in conn.execute("SELECT name FROM pg_prepared_statements")]
    assert any(name.startswith("memstrata_") for name in names)
    store.close()


def test_a_call_cancelled_while_its_statement_is_being_prepared_writes_nothing(
    url: str,
) -> None:
    """A connection without the statement answers "does not exist", then the statement is
    prepared and sent again. A task cancelled while that first answer is on its way gets
    psycopg's cancel request to a server with nothing running: the call must stop there, not
    go on to prepare and send the write (which would wait on the record's lock, psycopg would
    give up on it after 5 s and close the connection, and the server would still run the write
    once the lock was free: a write the caller saw cancelled, applied later)."""
    import asyncio
    import time

    import psycopg

    store = PostgresStore(url, max_size=1)
    written = store.put(NS, "k", "before")
    holder = psycopg.connect(url)
    holder.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("agents\x1falice\x1fk",)
    )

    async def cancelled_write() -> float:
        assert await store.aget(NS, "k") == written
        async with store._aconnection() as conn:
            await conn.execute("DEALLOCATE ALL", prepare=False)
            (in_use,) = [conn]
        task = asyncio.create_task(
            store.aput_if_version(NS, "k", "after", expected_version=written.version)
        )
        while in_use.pgconn.transaction_status != psycopg.pq.TransactionStatus.ACTIVE:
            await asyncio.sleep(0)
        task.cancel()
        started = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic() - started

    try:
        waited = asyncio.run(cancelled_write())
    finally:
        holder.rollback()
        holder.close()
    assert waited < 2
    time.sleep(0.2)  # a write left running on the server would take the freed lock by now
    assert store.get(NS, "k") == written
    store.close()


@pytest.mark.parametrize("prepared", [True, False])
def test_ctrl_c_during_a_write_waiting_for_a_lock_cancels_it(url: str, prepared: bool) -> None:
    """Ctrl-C while a put_if_version waits for a record another connection locked: psycopg
    cancels the statement on the server, so nothing is written once the lock is free, and
    the pooled connection is idle again, kept for the next call (the same server process)."""
    import _thread
    import threading
    import time

    import psycopg

    store = PostgresStore(url, max_size=1)
    written = store.put(NS, "k", "before")
    with store._connection() as conn:
        (pid,) = conn.execute("SELECT pg_backend_pid()").fetchone()
        if not prepared:
            conn.execute("DEALLOCATE ALL", prepare=False)
    holder = psycopg.connect(url)
    holder.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("agents\x1falice\x1fk",)
    )
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            store.put_if_version(NS, "k", "after", expected_version=written.version)
        waited = time.monotonic() - started
    finally:
        timer.cancel()
        holder.rollback()
        holder.close()
    assert waited < 2
    time.sleep(0.2)  # a write left running on the server would take the freed lock by now
    assert store.get(NS, "k") == written
    with store._connection() as conn:
        assert conn.execute("SELECT pg_backend_pid()").fetchone() == (pid,)
    store.close()
