"""PostgresStore's one-statement calls, sent as server-side prepared statements over psycopg's
libpq connection (``pg_prepared``): the same rows and errors as psycopg's ``execute``, and a
connection that lost its prepared statements prepares them again."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from memstrata.stores import PostgresStore, pg_prepared, pg_sql
from memstrata.stores.base import ChangesSince, GetMany, encode_namespace, prefix_upper_bound

NS = ("agents", "alice")


@pytest.fixture
def url(empty_postgres_url: str) -> str:
    return empty_postgres_url


def _list_params() -> dict[str, Any]:
    prefix = encode_namespace(NS)
    return {"lo": prefix, "hi": prefix_upper_bound(prefix), "now": None, "limit": 50, "offset": 0}


def test_rows_are_the_values_psycopgs_execute_gives(url: str) -> None:
    store = PostgresStore(url, max_size=1)
    store.put(NS, "plain", {"a": [1, 2.5, None, True]})
    store.put(NS, "ключ ✓", {"text": 'quote " backslash \\ tab \t nul \u0000 é 漢'}, ttl=60)
    store.put(NS, "big", 2**62)
    with store._connection() as conn:
        ours = pg_prepared.execute(conn, pg_sql._LIST, _list_params())
        theirs = conn.execute(pg_sql._LIST, _list_params()).fetchall()
    assert len(ours) == 3
    assert ours == theirs
    assert [type(v) for v in ours[0]] == [type(v) for v in theirs[0]]
    store.close()


@pytest.mark.parametrize("reset", ["DEALLOCATE ALL", "DISCARD ALL"])
def test_a_connection_that_lost_its_prepared_statements_prepares_them_again(
    url: str, reset: str
) -> None:
    """What a pooler or an administrator may do to a session: the next call answers as before."""
    store = PostgresStore(url, max_size=1)
    written = store.put(NS, "k", 1)
    for _ in range(3):
        assert store.get(NS, "k") == written
        with store._connection() as conn:
            conn.execute(reset)
            assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)
        assert store.get(NS, "k") == written
        again = store.put_if_version(NS, "k", 2, expected_version=written.version)
        assert again is not None and again.value == 2
        assert store.read_many([GetMany(NS, ("k",))])[0]["k"].version == again.version  # type: ignore[index]
        written = store.put(NS, "k", 1)

    async def async_calls() -> None:
        assert await store.aget(NS, "k") == written
        async with store._aconnection() as conn:
            await conn.execute(reset)
        assert await store.aget(NS, "k") == written
        assert list(await store.aget_many(NS, ["k", "absent"])) == ["k"]

    asyncio.run(async_calls())
    store.close()


def test_a_nul_in_a_parameter_is_refused_before_anything_is_sent(url: str) -> None:
    """libpq reads a text parameter as a C string: a NUL would cut it short without an error."""
    store = PostgresStore(url, max_size=1)
    with store._connection() as conn:
        with pytest.raises(psycopg.DataError, match="NUL"):
            pg_prepared.execute(conn, "SELECT %(x)s::text", {"x": "before\x00after"})
        assert pg_prepared.execute(conn, "SELECT %(x)s::text", {"x": "ok"}) == [("ok",)]
    store.close()


def test_errors_are_psycopgs_own_and_leave_the_connection_usable(url: str) -> None:
    store = PostgresStore(url, max_size=1)
    with store._connection() as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            pg_prepared.execute(conn, "SELECT 1 / %(n)s::int", {"n": 0})
        with pytest.raises(psycopg.errors.SyntaxError):
            pg_prepared.execute(conn, "SELEC %(n)s", {"n": 0})
        assert pg_prepared.execute(conn, "SELECT 1 / %(n)s::int", {"n": 1}) == [(1,)]
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    store.close()


def test_parameters_are_each_placeholder_once_in_order() -> None:
    statement = pg_prepared.PreparedStatement(
        "SELECT %(b)s, %(a)s WHERE x = %(b)s AND y = %(c)s::float8"
    )
    assert statement.query == b"SELECT $1, $2 WHERE x = $1 AND y = $3::float8"
    assert statement.order == ("b", "a", "c")
    assert statement.arguments({"a": "é", "b": 7, "c": 0.1, "unused": 1}) == [
        b"7",
        "é".encode(),
        b"0.1",
    ]
    assert pg_prepared.PreparedStatement("SELECT 1").name != statement.name
    with pytest.raises(ValueError, match="named"):
        pg_prepared.PreparedStatement("SELECT %s")


def test_a_mark_read_through_a_prepared_statement_is_exact(url: str) -> None:
    store = PostgresStore(url, max_size=1)
    mark = store.change_mark(NS)
    store.put(NS, "k", 1)
    (answer,) = store.read_many([ChangesSince(NS, mark)])
    assert [item.key for item in answer.items] == ["k"]  # type: ignore[union-attr]
    store.close()


def test_read_many_texts_past_the_limits_go_through_psycopg(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prepared statement's plan stays on its connection until it closes (3.2 MB of the
    server's memory for a read_many of 32 reads), and read_many's text varies with its mix of
    reads: only MAX_VARYING such texts are prepared, each short. The others still answer,
    through psycopg's execute, and the fixed statements are prepared whatever came first."""
    store = PostgresStore(url, max_size=1)
    store.put(NS, "k", 1)
    known = dict(pg_prepared._VARYING)
    monkeypatch.setattr(pg_prepared, "MAX_VARYING", len(known))
    long_mix = [GetMany(NS, ("k",)), ChangesSince(NS)] * 16
    for reads in [[GetMany(NS, ("k",))] * n + [ChangesSince(NS)] for n in range(1, 6)] + [long_mix]:
        answers = store.read_many(reads)
        assert answers[0]["k"].value == 1  # type: ignore[index]
    assert known == pg_prepared._VARYING
    monkeypatch.setattr(pg_prepared, "MAX_VARYING", 10**6)
    store.read_many(long_mix)
    assert known == pg_prepared._VARYING  # too long to prepare, however many places are free
    store.delete_if_version(NS, "k", expected_version=5)  # a fixed statement not used before
    with store._connection() as conn:
        names = {row[0] for row in conn.execute("SELECT name FROM pg_prepared_statements")}
    ours = {name for name in names if name.startswith("memstrata_")}
    prepared_names = {s.name.decode() for s in [*known.values(), *pg_prepared._FIXED.values()]}
    assert ours <= prepared_names
    assert pg_prepared.prepared(pg_sql._DELETE_IF_VERSION).name.decode() in ours  # type: ignore[union-attr]
    store.close()


@pytest.fixture
def latin1_url(url: str) -> Iterator[str]:
    """A database whose encoding is LATIN1, on the session's cluster."""
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS memstrata_latin1")
        admin.execute(
            "CREATE DATABASE memstrata_latin1 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'"
            " TEMPLATE template0"
        )
    yield url.rsplit("/", 1)[0] + "/memstrata_latin1"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("DROP DATABASE memstrata_latin1 WITH (FORCE)")


def test_text_is_stored_as_itself_in_a_database_of_another_encoding(latin1_url: str) -> None:
    """Parameters go out as UTF-8 bytes; the store's sessions say so, and the server converts.
    A session whose encoding was changed since goes through psycopg, which encodes for it."""
    store = PostgresStore(latin1_url, max_size=1)
    written = store.put(NS, "clé", {"v": "é ü ß"})
    assert store.get(NS, "clé") == written
    with psycopg.connect(latin1_url) as reader:
        assert reader.info.encoding == "iso8859-1"
        raw = reader.execute("SELECT key, value::text FROM memstrata_items").fetchall()
    assert raw == [("clé", '{"v":"é ü ß"}')]
    with pytest.raises(psycopg.errors.UntranslatableCharacter):
        store.put(NS, "k", "漢")  # no LATIN1 form: refused, nothing stored
    assert [item.key for item in store.list(NS)] == ["clé"]
    with store._connection() as conn:
        conn.execute("SET client_encoding TO 'LATIN1'")
    again = store.put_if_version(NS, "clé", {"v": "è"}, expected_version=written.version)
    assert again is not None and store.get(NS, "clé") == again
    with psycopg.connect(latin1_url) as reader:
        assert reader.execute("SELECT value::text FROM memstrata_items").fetchone() == (
            '{"v":"è"}',
        )
    store.close()


def test_the_store_modules_import_without_psycopg_and_the_store_names_the_extra() -> None:
    # psycopg is an optional extra: the PostgreSQL modules (which import it once, at the top,
    # not in each statement's path) still import without it, and PostgresStore then says what
    # to install rather than failing on a missing name.
    code = """
import sys

class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("psycopg", "psycopg_pool", "psycopg_binary", "psycopg_c"):
            raise ImportError(f"no module named {name!r}")
        return None

sys.meta_path.insert(0, Blocked())
from memstrata.exceptions import InvalidInputError
from memstrata.stores import pg_prepared, postgres
try:
    postgres.PostgresStore("postgresql://nobody@127.0.0.1:1/none")
except InvalidInputError as exc:
    print(exc)
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "memstrata[postgres]" in done.stdout
