"""What :class:`~memstrata.stores.postgres.PostgresStore`'s sync methods and their async twins
(``pg_async``) share: a call's arguments checked and turned into the parameters of its statement
(the SQL is in ``pg_sql``), and the rows a statement returns turned into the call's answer. No
I/O: each flavour sends the statements over its own connections.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Callable, Mapping
from typing import Any

from memstrata.exceptions import InvalidInputError
from memstrata.stores import codec
from memstrata.stores.base import (
    ENCODED_BATCH,
    Answer,
    ChangeMark,
    Changes,
    ConditionalWrite,
    EncodedItem,
    GetMany,
    Item,
    JSONValue,
    Namespace,
    Read,
    Updater,
    decode_namespace,
    encode_namespace,
    mark_position,
    prefix_upper_bound,
    validate_key,
    validate_namespace,
    validate_page,
    validate_ttl,
    validate_updates,
    validate_version,
    validate_writes,
)
from memstrata.stores.pg_sql import _PUT_IF_ABSENT, _PUT_OVER_VERSION, read_many_sql, text_array

_BACKEND = "postgres"
# Versions are BIGINT. A larger expected version matches no row; it is answered without asking,
# since as a statement's parameter PostgreSQL would refuse it as out of range for its column.
MAX_STORED_VERSION = 2**63 - 1
# A snapshot as pg_current_snapshot() prints it: xmin:xmax:xip,xip,... in ASCII digits, the
# only ones pg_snapshot reads (re's \d and int() take any script's digits too).
_SNAPSHOT = re.compile(r"[0-9]+:[0-9]+:([0-9]+(,[0-9]+)*)?")
# A database's own transaction ids never get near 2**63 (they count up from 3 and never wrap),
# and pg_snapshot refuses most from there (reading one past 64 bits as 2**64 - 1): every one
# from there is refused here, unread when longer than any id's 19 digits (int() refuses a
# number of more than 4,300 digits with a ValueError).
_PAST_ANY_XID = 2**63
_XID_DIGITS = len(str(_PAST_ANY_XID))
# The reads ``read_many`` joins into one statement. PostgreSQL plans a UNION ALL in time that
# grows with the square of its branches (about 0.4 ms a read up to 32 reads, 1.7 ms at 512, 3
# ms at 1,000) and refuses one of thousands (stack depth): more reads go as several statements,
# pipelined in one round trip.
READS_PER_STATEMENT = 32


def _is_snapshot(text: str) -> bool:
    """Whether ``text`` is a ``pg_snapshot`` a database could have made: ``xmin:xmax:xip,...``
    with ``0 < xmin <= xmax < 2**63`` and every in-progress id in ``[xmin, xmax)``, in
    ascending order (a mark PostgreSQL would refuse is refused here, by name, rather than as a
    database error)."""
    if not _SNAPSHOT.fullmatch(text) or len(max(re.split("[:,]", text), key=len)) > _XID_DIGITS:
        return False
    head, _, listed = text.rpartition(":")
    xmin, xmax = (int(part) for part in head.split(":"))
    in_progress = [int(part) for part in listed.split(",")] if listed else []
    if not 0 < xmin <= xmax or max([xmax, *in_progress]) >= _PAST_ANY_XID:
        return False
    return all(xmin <= x < xmax for x in in_progress) and in_progress == sorted(in_progress)


def _item(row: tuple[Any, ...]) -> Item:
    ns, key, text, version, created_at, updated_at, expires_at = row
    return Item(
        decode_namespace(ns), key, codec.loads(text), version, created_at, updated_at, expires_at
    )


def _changes(
    namespace: Namespace, rows: list[tuple[Any, ...]], *, complete: bool
) -> Changes | None:
    """The answer the rows of ``_SINCE`` or ``_EVERYTHING`` make; None when they say 'stale'."""
    mark = ""
    items: list[Item] = []
    removed: list[str] = []
    written: set[str] = set()
    deleted: list[str] = []
    for kind, key, text, version, created_at, updated_at, expires_at in rows:
        if kind == "item":
            items.append(
                Item(namespace, key, codec.loads(text), version, created_at, updated_at, expires_at)
            )
            written.add(key)
        elif kind == "expired":
            removed.append(key)
            written.add(key)
        elif kind == "deleted":
            deleted.append(key)
        elif kind == "mark":
            mark = key
        else:
            return None
    # A key written again after its deletion was reported with that write.
    removed.extend(key for key in deleted if key not in written)
    items.sort(key=lambda item: item.key)
    removed.sort()
    return Changes(ChangeMark(_BACKEND, namespace, mark), items, removed, complete)


def _in_parts(reads: list[Read]) -> list[list[Read]]:
    """``reads`` in the parts ``read_many`` sends as one statement each."""
    return [
        reads[start : start + READS_PER_STATEMENT]
        for start in range(0, len(reads), READS_PER_STATEMENT)
    ]


def _hand_rows(
    namespace: Namespace,
    rows: list[tuple[Any, ...]],
    each: Callable[[list[EncodedItem]], None],
) -> Changes:
    """``encoded_each``'s answer from the rows of ``_EVERYTHING``: the items' text handed to
    ``each`` in key order, a batch at a time."""
    mark = ""
    found: list[EncodedItem] = []
    for kind, key, text, _version, _created_at, _updated_at, expires_at in rows:
        if kind == "item":
            found.append((key, text, expires_at))
        elif kind == "mark":
            mark = key
    found.sort(key=lambda item: item[0])
    for start in range(0, len(found), ENCODED_BATCH):
        each(found[start : start + ENCODED_BATCH])
    return Changes(ChangeMark(_BACKEND, namespace, mark), [], [], True)


class PostgresStatements:
    """The argument checks, statement parameters and answers shared by the sync and async
    paths of :class:`~memstrata.stores.postgres.PostgresStore`."""

    @staticmethod
    def _params(namespace: Namespace, key: str) -> dict[str, Any]:
        ns = encode_namespace(validate_namespace(namespace))
        return {"ns": ns, "key": validate_key(key), "now": None}

    @staticmethod
    def _many_params(namespace: Namespace, keys: builtins.list[str]) -> dict[str, Any]:
        """The parameters of ``_GET_MANY`` for ``keys``, already checked."""
        ns = encode_namespace(validate_namespace(namespace))
        return {"ns": ns, "keys": text_array(keys), "now": None}

    @staticmethod
    def _found(keys: builtins.list[str], rows: builtins.list[tuple[Any, ...]]) -> dict[str, Item]:
        """``get_many``'s answer: the rows read, by key in the order asked."""
        found = {row[1]: _item(row) for row in rows}
        return {key: found[key] for key in keys if key in found}

    @staticmethod
    def _write_params(
        namespace: Namespace,
        key: str,
        value: JSONValue,
        ttl: float | None,
        *,
        validated: bool = False,
        encoded: bytes | None = None,
    ) -> dict[str, Any]:
        params = PostgresStatements._params(namespace, key)
        ttl = validate_ttl(ttl)
        params["data"] = codec.dumps(value, validated=validated, encoded=encoded).decode()
        params["ttl"] = ttl
        return params

    @staticmethod
    def _written(namespace: Namespace, key: str, value: JSONValue, row: Any) -> Item:
        version, created_at, updated_at, expires_at = row
        return Item(tuple(namespace), key, value, version, created_at, updated_at, expires_at)

    @staticmethod
    def _list_params(namespace_prefix: Namespace, limit: int, offset: int) -> dict[str, Any]:
        prefix = encode_namespace(validate_namespace(namespace_prefix, allow_empty=True))
        validate_page(limit, offset)
        return {
            "lo": prefix,
            "hi": prefix_upper_bound(prefix),
            "now": None,
            "limit": limit,
            "offset": offset,
        }

    @staticmethod
    def _since_params(namespace: Namespace, since: ChangeMark) -> dict[str, Any]:
        namespace = validate_namespace(namespace)
        mark = PostgresStatements._mark(namespace, since)
        return {"ns": encode_namespace(namespace), "mark": mark, "now": None}

    @staticmethod
    def _mark(namespace: Namespace, since: ChangeMark) -> str:
        """The snapshot ``since`` holds, if it is this store's mark of ``namespace`` (a
        checked one, as a tuple)."""
        mark = mark_position(since, _BACKEND, namespace)
        if not _is_snapshot(mark):
            raise InvalidInputError(f"since holds {mark!r}, not a PostgreSQL snapshot")
        return mark

    @staticmethod
    def _changes_params(namespace: Namespace, since: ChangeMark | None) -> dict[str, Any]:
        if since is not None:
            return PostgresStatements._since_params(namespace, since)
        return {"ns": encode_namespace(validate_namespace(namespace)), "now": None}

    @staticmethod
    def _planned_params(
        namespace: Namespace, updates: Mapping[str, Updater]
    ) -> dict[str, dict[str, Any]]:
        """Per-key parameters of the updates a plan returned, each key checked."""
        return {
            key: PostgresStatements._params(namespace, key) for key in validate_updates(updates)
        }

    @staticmethod
    def _put_if_version_sql(params: dict[str, Any], expected_version: int) -> str | None:
        """The one statement of a put_if_version (autocommit: its own transaction), or None
        when no stored version can be ``expected_version`` (the write is refused unasked)."""
        expected_version = validate_version(expected_version)
        if expected_version == 0:
            return _PUT_IF_ABSENT
        if expected_version > MAX_STORED_VERSION:
            return None
        params["expected"] = expected_version
        return _PUT_OVER_VERSION

    def _conditional_params(
        self, namespace: Namespace, writes: Mapping[str, ConditionalWrite], validated: bool
    ) -> dict[str, dict[str, Any]]:
        validate_namespace(namespace)
        return {
            key: self._write_params(
                namespace,
                key,
                writes[key].value,
                None,
                validated=validated,
                encoded=writes[key].encoded,
            )
            for key in validate_writes(writes)
        }

    def _conditional_writes(
        self, writes: Mapping[str, ConditionalWrite], all_params: dict[str, dict[str, Any]]
    ) -> builtins.list[tuple[str, dict[str, Any]]] | None:
        """Each key's ``put_if_version`` statement: in a transaction that holds the keys' locks
        already, it takes its own again (harmlessly) and writes only over its expected version.
        None when some key's expected version is one no stored version can be."""
        statements = []
        for key, params in all_params.items():
            sql = self._put_if_version_sql(params, writes[key].expected_version)
            if sql is None:
                return None
            statements.append((sql, params))
        return statements

    @staticmethod
    def _planned_writes(
        updates: Mapping[str, Updater],
        all_params: dict[str, dict[str, Any]],
        rows: builtins.list[tuple[Any, ...]],
        ttl: float | None,
    ) -> builtins.list[tuple[str, JSONValue, dict[str, Any]]]:
        """Every update applied to what ``_READ_LOCKED`` read, before anything is written (an
        updater that raises leaves nothing queued)."""
        now = rows[0][0]  # the clock once every lock is held
        current = {key: text for _, key, text in rows if key is not None}
        writes = []
        for key, params in all_params.items():
            value = updates[key](codec.loads(current[key]) if key in current else None)
            params.update(now=now, data=codec.dumps(value).decode(), ttl=ttl)
            writes.append((key, value, params))
        return writes

    @staticmethod
    def _complete(namespace: Namespace, rows: builtins.list[tuple[Any, ...]]) -> Changes:
        answer = _changes(tuple(namespace), rows, complete=True)
        assert answer is not None  # _EVERYTHING has no 'stale' row
        return answer

    @staticmethod
    def _read_many_statement(reads: builtins.list[Read]) -> tuple[str, dict[str, Any]]:
        """``read_many``'s one statement (see ``read_many_sql``) and its parameters, for reads
        ``validate_reads`` checked: their namespaces and keys are not checked again (a mark
        is, which only its store can read)."""
        kinds: builtins.list[str] = []
        params: dict[str, Any] = {"now": None}
        for n, read in enumerate(reads):
            params[f"ns{n}"] = encode_namespace(read.namespace)
            if isinstance(read, GetMany):
                kinds.append("get")
                # Repeated keys are harmless in ``= ANY``; the answer takes each key once.
                params[f"keys{n}"] = text_array(builtins.list(read.keys))
            elif read.since is None:
                kinds.append("everything")
            else:
                kinds.append("since")
                params[f"mark{n}"] = PostgresStatements._mark(read.namespace, read.since)
        return read_many_sql(tuple(kinds)), params

    @staticmethod
    def _read_answers(
        reads: builtins.list[Read], rows: builtins.list[tuple[Any, ...]]
    ) -> builtins.list[Answer | None]:
        """Each read's answer from the rows of ``read_many``'s statement; None for a mark the
        rows say is stale."""
        by_read: builtins.list[builtins.list[tuple[Any, ...]]] = [[] for _ in reads]
        for row in rows:
            by_read[row[0]].append(row[1:])
        answers: builtins.list[Answer | None] = []
        for read, read_rows in zip(reads, by_read):
            namespace = tuple(read.namespace)
            if isinstance(read, GetMany):
                found = {
                    key: Item(namespace, key, codec.loads(text), *stamps)
                    for _, key, text, *stamps in read_rows
                }
                answers.append({key: found[key] for key in read.keys if key in found})
            else:
                answers.append(_changes(namespace, read_rows, complete=read.since is None))
        return answers
