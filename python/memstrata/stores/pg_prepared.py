"""One statement of :class:`~memstrata.stores.postgres.PostgresStore`, sent as a server-side
prepared statement straight over psycopg's libpq connection.

The calls a turn makes (the opening ``read_many``, ``get``, ``put_if_version``) are one
statement each on an autocommit connection. Through ``Connection.execute`` each costs psycopg
about 0.1 ms of the client's CPU (a cursor, the query's conversion, the parameters' adaptation
and its prepared-statement bookkeeping), several times what sending it and reading the answer
costs. Here a statement's text is converted once (``%(name)s`` to ``$n``), prepared on a
connection the first time that connection is asked for it, and then sent by name with its
parameters as text: PostgreSQL types each parameter from where it is used, as it does for
psycopg's strings. The rows come back through psycopg's own loaders (``Transformer``), so they
are the same Python values ``execute`` gives, and errors are psycopg's own exceptions.

Nothing is kept per connection: the statement's name is derived from its text, and a
connection that does not have it yet (new, or reset by the server) answers "prepared statement
does not exist" without running anything, so it is prepared and sent again. One prepared
before a migration changed the type of a column it returns is refused the same way ("cached
plan must not change result type"), and is deallocated, prepared and sent again.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

try:
    # Imported once here, not in each function: a function-level ``from psycopg import pq``
    # costs a microsecond or more at every call (importlib's fromlist handling), and a turn
    # sends several statements. psycopg is optional: PostgresStore refuses to open without it
    # (``_require_psycopg``), so nothing here runs when the import failed.
    import psycopg
    from psycopg import errors, generators, pq
    from psycopg.adapt import Transformer

    # A result's status as plain ints: an enum member's lookup costs more than the comparison.
    _COMMAND_OK = int(pq.ExecStatus.COMMAND_OK)
    _TUPLES_OK = int(pq.ExecStatus.TUPLES_OK)
    _FATAL_ERROR = int(pq.ExecStatus.FATAL_ERROR)
except ImportError:  # pragma: no cover - exercised only without the postgres extra
    pass

_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
_UNDEFINED_PREPARED_STATEMENT = b"26000"
_FEATURE_NOT_SUPPORTED = b"0A000"


class PreparedStatement:
    """A statement's text with ``$n`` placeholders, its server-side name and the order of its
    named parameters."""

    __slots__ = ("name", "order", "query")

    def __init__(self, sql: str) -> None:
        if "%%" in sql or "%s" in sql:
            raise ValueError("a prepared statement takes only named %(name)s parameters")
        order: list[str] = []

        def number(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in order:
                order.append(name)
            return f"${order.index(name) + 1}"

        self.query = _PLACEHOLDER.sub(number, sql).encode()
        self.order = tuple(order)
        digest = hashlib.blake2b(self.query, digest_size=12).hexdigest()
        self.name = f"memstrata_{digest}".encode()

    def arguments(self, params: Mapping[str, Any]) -> list[bytes | None]:
        return [_as_text(params[name]) for name in self.order]


# A statement prepared on a connection stays there until the connection closes, its plan held
# by the server process: about 75 bytes per character of its text (3.2 MB for a read_many of 32
# reads). The store's fixed statements, a dozen or so, are all prepared. Texts built per call
# (read_many's, one per mix of reads) are prepared only if short (about four reads) and only
# MAX_VARYING of them in a process; others go through psycopg's execute, which prepares a text
# only once it has been sent several times, and at most 100 per connection.
MAX_VARYING = 16
MAX_VARYING_CHARS = 6_000
_FIXED: dict[str, PreparedStatement] = {}
_VARYING: dict[str, PreparedStatement] = {}


def prepared(sql: str, *, varying: bool = False) -> PreparedStatement | None:
    """The prepared form of ``sql``, keyed by its text; for a text built per call
    (``varying``), None when it is too long or ``MAX_VARYING`` others have one."""
    if not varying:
        statement = _FIXED.get(sql)
        return (
            statement if statement is not None else _FIXED.setdefault(sql, PreparedStatement(sql))
        )
    statement = _VARYING.get(sql)
    if statement is None and len(sql) <= MAX_VARYING_CHARS and len(_VARYING) < MAX_VARYING:
        statement = _VARYING.setdefault(sql, PreparedStatement(sql))
    return statement


def _as_text(value: Any) -> bytes | None:
    """A parameter in PostgreSQL's text format. libpq reads text parameters as C strings, so
    a NUL would cut the value short without an error: it is refused, as psycopg refuses it.

    A subclass is sent as the value of its base type, as psycopg sends it: its own repr or
    encode may say anything (an IntEnum's repr is ``<Page.TWO: 2>``)."""
    if value is None:
        return None
    if isinstance(value, str):
        if "\x00" in value:
            raise _data_error("PostgreSQL text fields cannot contain NUL (0x00) bytes")
        return str.encode(value)
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, int):
        return int.__repr__(value).encode()
    if isinstance(value, float):
        return float.__repr__(value).encode()
    raise TypeError(f"no text form for a {type(value).__name__} parameter")


def _data_error(message: str) -> Exception:
    return psycopg.DataError(message)


def _utf8(conn: Any) -> bool:
    """Whether the session's client encoding is UTF-8, as the store's connections open: a
    session set otherwise since goes through psycopg, which encodes for it."""
    return bool(conn.pgconn.parameter_status(b"client_encoding") == b"UTF8")


def _undefined(result: Any) -> bool:
    """Whether ``result`` says the connection has no prepared statement by that name."""
    if result.status != _FATAL_ERROR:
        return False
    return bool(result.error_field(pq.DiagnosticField.SQLSTATE) == _UNDEFINED_PREPARED_STATEMENT)


def _outdated(result: Any) -> bool:
    """Whether ``result`` says the statement prepared on the connection returns columns of
    other types than its tables now have ("cached plan must not change result type": a
    migration changed a column's type). The server refuses it before running anything; named
    by the error's code and the server function raising it, since its message is translated."""
    if result.status != _FATAL_ERROR:
        return False
    code = result.error_field(pq.DiagnosticField.SQLSTATE) or b""
    source = result.error_field(pq.DiagnosticField.SOURCE_FUNCTION) or b""
    return code == _FEATURE_NOT_SUPPORTED and source == b"RevalidateCachedQuery"


def _answer(pgconn: Any, send: Any, *args: Any) -> Any:
    """psycopg's kind of generator (for ``Connection.wait``): the last result of one command,
    sent by ``send`` (a method of ``pgconn``) inside it, so that an interruption while it is
    on its way is one psycopg's ``wait`` handles (it cancels the command and reads its end)."""
    send(*args)
    return (yield from generators.execute(pgconn))[-1]


def _again(
    pgconn: Any, statement: PreparedStatement, arguments: list[bytes | None], result: Any
) -> Any:
    """The commands that follow a first send the connection refused, each yielded as a
    generator for ``Connection.wait`` and sent that command's result; returns the statement's
    result. The statement is prepared on a connection that does not have it, or has it in a
    form its tables' columns no longer match (deallocated first), and sent again; any other
    result is the answer as it is.

    Each command is waited for on its own: a call interrupted (Ctrl-C, a task's cancellation)
    during one ends with that command, psycopg having cancelled it; it does not go on to
    prepare and send the statement, which would then run with nobody waiting for it."""
    outdated = _outdated(result)
    if outdated:
        deallocated = yield _answer(pgconn, pgconn.send_query, b"DEALLOCATE " + statement.name)
        if deallocated.status != _COMMAND_OK:
            return deallocated
    if outdated or _undefined(result):
        result = yield _answer(pgconn, pgconn.send_prepare, statement.name, statement.query)
        if result.status != _COMMAND_OK:
            return result
        result = yield _answer(pgconn, pgconn.send_query_prepared, statement.name, arguments)
    return result


def _rows(conn: Any, result: Any) -> list[tuple[Any, ...]]:
    if result.status != _TUPLES_OK and result.status != _COMMAND_OK:
        raise errors.error_from_result(result, encoding=conn.info.encoding)
    loader = Transformer(conn)
    loader.set_pgresult(result)
    rows: list[tuple[Any, ...]] = loader.load_rows(0, result.ntuples, tuple)
    return rows


def execute(
    conn: Any, sql: str, params: Mapping[str, Any], *, varying: bool = False
) -> list[tuple[Any, ...]]:
    """The rows of ``sql`` run with ``params`` on ``conn``, an autocommit psycopg connection
    outside any transaction or pipeline: what ``conn.execute(sql, params).fetchall()`` gives.
    ``varying``: the text is built per call, not one of the store's fixed statements.

    The statement is sent and waited for directly; only a refusal (a connection that lacks
    it or holds an outdated form) goes through ``_again``'s commands, each waited for on its
    own: a generator driving every call cost the client several microseconds per statement."""
    statement = prepared(sql, varying=varying)
    if statement is None or not _utf8(conn):
        return list(conn.execute(sql, params).fetchall())
    arguments = statement.arguments(params)
    pgconn = conn.pgconn
    with conn.lock:
        result = conn.wait(_answer(pgconn, pgconn.send_query_prepared, statement.name, arguments))
        if result.status == _FATAL_ERROR:
            steps = _again(pgconn, statement, arguments, result)
            try:
                command = next(steps)
                while True:
                    command = steps.send(conn.wait(command))
            except StopIteration as done:
                result = done.value
    return _rows(conn, result)


async def execute_async(
    conn: Any, sql: str, params: Mapping[str, Any], *, varying: bool = False
) -> list[tuple[Any, ...]]:
    """:func:`execute` on a psycopg ``AsyncConnection``."""
    statement = prepared(sql, varying=varying)
    if statement is None or not _utf8(conn):
        return list(await (await conn.execute(sql, params)).fetchall())
    arguments = statement.arguments(params)
    pgconn = conn.pgconn
    async with conn.lock:
        result = await conn.wait(
            _answer(pgconn, pgconn.send_query_prepared, statement.name, arguments)
        )
        if result.status == _FATAL_ERROR:
            steps = _again(pgconn, statement, arguments, result)
            try:
                command = next(steps)
                while True:
                    command = steps.send(await conn.wait(command))
            except StopIteration as done:
                result = done.value
    return _rows(conn, result)
