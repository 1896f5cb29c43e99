"""Copying a memory from one store to another: ``memstrata copy``, and :func:`copy_store`.

A user who outgrows one SQLite file moves to PostgreSQL, so several agent servers share one
memory; the copy carries every live record over exactly (value, version, created, updated and
expiry times), so that each layer reads the target as it read the source: a working memory's
journal rows name the state version they apply to, and conditional writes compare versions.

The copy goes in three passes over the source, each a page at a time (never the whole memory in
the process):

1. **Check.** Every source record's key is looked up in the target. A record the target holds
   already is skipped if it is the very same (same version and value: a copy stopped part way
   can be run again to finish); any other refuses the whole copy before anything is written,
   naming the first few such records.
2. **Write.** Each page is written with :meth:`Store.restore_items`, one transaction per page:
   a failure leaves whole pages written and the rest not, and running the copy again finishes.
3. **Verify.** The source's and the target's records under the copied namespaces are read side
   by side: every source record must be in the target, the same. A record the source changed
   meanwhile (a server still writing) is reported as an error, not passed over.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from memstrata.exceptions import CopyConflictError, InvalidInputError
from memstrata.stores.base import GetMany, Item, Namespace, Store, validate_namespace
from memstrata.stores.memory import InMemoryStore
from memstrata.stores.sqlite import SQLiteStore

# Records read from the source, and written to the target in one transaction, at a time.
PAGE = 500
# A page's write holds a lock per record on PostgreSQL, in a lock table all sessions share
# (max_locks_per_transaction x max_connections: 6,400 by default).
MAX_PAGE = 2_000
# Records a refusal or a verification failure names (and counts the rest).
NAMED = 5
# A record expiring this close to the verification may be gone from one store and not yet
# from the other (each reads its own clock): it is not a difference.
_EXPIRY_SLACK = 5.0

# ``progress(stage, done, total)``: stage "copying" or "verifying", records so far of total.
Progress = Callable[[str, int, int], None]


@dataclass
class CopyResult:
    """What :func:`copy_store` did, per top-level namespace label (``"mind"``,
    ``"working-memory"``...).

    Attributes:
        copied: Records written to the target.
        already: Records the target held already, the very same (a copy run again).
        target_only: Records under the copied namespaces that the target holds and the source
            does not (the target's own, from before the copy; left as they are).
        seconds: How long the copy took, verification included.
    """

    copied: dict[str, int] = field(default_factory=dict)
    already: dict[str, int] = field(default_factory=dict)
    target_only: int = 0
    seconds: float = 0.0

    @property
    def records(self) -> int:
        """Records of the source now in the target: those copied and those already there."""
        return sum(self.copied.values()) + sum(self.already.values())

    def as_json(self) -> dict[str, Any]:
        return {
            "copied": dict(sorted(self.copied.items())),
            "already": dict(sorted(self.already.items())),
            "records": self.records,
            "target_only": self.target_only,
            "seconds": round(self.seconds, 3),
        }


def copy_store(
    source: Store,
    target: Store,
    prefixes: Sequence[Namespace] = (),
    *,
    progress: Progress | None = None,
    page: int = PAGE,
) -> CopyResult:
    """Copies every live record under ``prefixes`` (every record when there are none) from
    ``source`` into ``target``, exactly, overwriting nothing; see the module docstring.

    Stop the servers writing to the source first (or point them at the target): a record
    written to the source after the copy read it is reported as a difference.

    Args:
        source: The store to copy from; only read.
        target: The store to copy into; any backend, empty or not.
        prefixes: Namespace prefixes to copy, a whole label at a time (``("mind",)`` copies
            every agent's mind, ``("mind", "a")`` agent ``a``'s).
        progress: Called as pages are written and verified (see :data:`Progress`).
        page: Records per page, and per write transaction.

    Returns:
        What was copied, per top-level namespace label.

    Raises:
        InvalidInputError: A bad prefix or page size, or ``target`` is ``source``.
        CopyConflictError: The target holds other records under keys the copy would write
            (nothing was written); or, after writing, the target's records differ from the
            source's.
    """
    started = time.perf_counter()
    if isinstance(page, bool) or not isinstance(page, int) or not 0 < page <= MAX_PAGE:
        raise InvalidInputError(f"page must be an int from 1 to {MAX_PAGE}, got {page!r}")
    wanted = _prefixes(prefixes)
    if _same_store(source, target):
        raise InvalidInputError("the target is the source store itself: copy into another store")
    result = CopyResult()
    total, there = _check(source, target, wanted, page)
    _write(source, target, wanted, page, total, there, result, progress)
    _verify(source, target, wanted, page, total, result, progress)
    result.seconds = time.perf_counter() - started
    return result


def _prefixes(prefixes: Sequence[Namespace]) -> list[Namespace]:
    """The prefixes checked, in order, without one another covers (``("mind",)`` covers
    ``("mind", "a")``); ``[()]`` (everything) for none."""
    if isinstance(prefixes, (str, bytes)) or not isinstance(prefixes, (list, tuple)):
        raise InvalidInputError(
            f"prefixes must be a list of namespace tuples, got {type(prefixes).__name__}"
        )
    checked = sorted({validate_namespace(prefix) for prefix in prefixes})
    if not checked:
        return [()]
    kept: list[Namespace] = []
    for prefix in checked:  # sorted: a covering prefix comes before what it covers
        if not any(prefix[: len(other)] == other for other in kept):
            kept.append(prefix)
    return kept


def _same_store(source: Store, target: Store) -> bool:
    """Whether both are the same data: the same object, the same SQLite file, or the same
    PostgreSQL database (by its server's start time and the database's id)."""
    if source is target:
        return True
    if isinstance(source, SQLiteStore) and isinstance(target, SQLiteStore):
        if ":memory:" in (source.path, target.path) or "" in (source.path, target.path):
            return False  # each connection's own private database
        try:
            return os.path.samefile(source.path, target.path)
        except OSError:
            return False
    if isinstance(source, InMemoryStore) or isinstance(target, InMemoryStore):
        return False
    from memstrata.stores.postgres import PostgresStore

    if isinstance(source, PostgresStore) and isinstance(target, PostgresStore):
        return _postgres_identity(source) == _postgres_identity(target)
    return False


def _postgres_identity(store: Any) -> tuple[Any, ...]:
    with store._connection() as conn:
        row = conn.execute(
            "SELECT pg_postmaster_start_time()::text, oid FROM pg_database"
            " WHERE datname = current_database()"
        ).fetchone()
    return tuple(row)


def _pages(store: Store, prefixes: list[Namespace], page: int) -> Iterator[list[Item]]:
    """The live records under the prefixes, a page at a time, ordered by namespace and key."""
    for prefix in prefixes:
        after = None
        while True:
            items = store.list_after(prefix, after, limit=page)
            if items:
                yield items
            if len(items) < page:
                break
            after = (items[-1].namespace, items[-1].key)


def _by_namespace(items: list[Item]) -> dict[Namespace, list[Item]]:
    grouped: dict[Namespace, list[Item]] = {}
    for item in items:
        grouped.setdefault(item.namespace, []).append(item)
    return grouped


def _held(target: Store, items: list[Item]) -> dict[tuple[Namespace, str], Item]:
    """The target's live records at the keys of ``items``."""
    # One read per namespace, sent together: a page of working memories spans a namespace per
    # user, which would be a round trip each on PostgreSQL.
    reads = [
        GetMany(namespace, tuple(item.key for item in group))
        for namespace, group in _by_namespace(items).items()
    ]
    held: dict[tuple[Namespace, str], Item] = {}
    for read, found in zip(reads, target.read_many(reads)):
        assert isinstance(found, dict)  # a GetMany's answer
        held.update(((read.namespace, key), item) for key, item in found.items())
    return held


def _same(a: Item, b: Item) -> bool:
    """The very same record: same version and value (the value compared as JSON text, so that
    ``1`` and ``1.0``, or ``true`` and ``1``, differ as they do stored)."""
    return a.version == b.version and orjson.dumps(a.value) == orjson.dumps(b.value)


def _equal(a: Item, b: Item) -> bool:
    """A copied record equal to its source in everything a layer reads."""
    return (
        _same(a, b)
        and a.created_at == b.created_at
        and a.updated_at == b.updated_at
        and a.expires_at == b.expires_at
    )


def _named(records: list[tuple[Namespace, str]], count: int) -> str:
    shown = ", ".join(f"{'/'.join(ns)} key {key!r}" for ns, key in records)
    more = count - len(records)
    return shown + (f" and {more} more" if more > 0 else "")


def _check(source: Store, target: Store, prefixes: list[Namespace], page: int) -> tuple[int, int]:
    """How many records the source holds under the prefixes, and how many of them the target
    holds already; CopyConflictError, before anything is written, if the target holds another
    record at any of their keys."""
    total, conflicts, there_already = 0, 0, 0
    named: list[tuple[Namespace, str]] = []
    for items in _pages(source, prefixes, page):
        total += len(items)
        held = _held(target, items)
        for item in items:
            there = held.get((item.namespace, item.key))
            if there is not None and not _same(item, there):
                conflicts += 1
                if len(named) < NAMED:
                    named.append((item.namespace, item.key))
            elif there is not None:
                there_already += 1
    if conflicts:
        raise CopyConflictError(
            f"the target already holds other records under {conflicts} of the {total} keys "
            f"to copy ({_named(named, conflicts)}); nothing was written. A copy never "
            "overwrites: copy into an empty store, or copy only other namespaces",
            records=named,
            count=conflicts,
        )
    return total, there_already


def _write(
    source: Store,
    target: Store,
    prefixes: list[Namespace],
    page: int,
    total: int,
    there_already: int,
    result: CopyResult,
    progress: Progress | None,
) -> None:
    """Writes each page in one transaction; a record the target held already must be the
    same one (another writer may have written it since the check). When the check found
    records there already (a copy run again), each page's are looked up first and only the
    others sent: a copy that had all but the last page done sends only that one."""
    done, conflicts = 0, 0
    named: list[tuple[Namespace, str]] = []

    def held_already(items: list[Item]) -> list[Item]:
        """Counts the items the target holds, the same or not; returns the others."""
        nonlocal conflicts
        held = _held(target, items)
        absent = []
        for item in items:
            there = held.get((item.namespace, item.key))
            if there is None:
                absent.append(item)
            elif _same(item, there):
                label = item.namespace[0]
                result.already[label] = result.already.get(label, 0) + 1
            else:
                conflicts += 1
                if len(named) < NAMED:
                    named.append((item.namespace, item.key))
        return absent

    for items in _pages(source, prefixes, page):
        to_write = held_already(items) if there_already else items
        written = target.restore_items(to_write) if to_write else []
        for item in written:
            label = item.namespace[0]
            result.copied[label] = result.copied.get(label, 0) + 1
        if len(written) < len(to_write):
            kept = {(item.namespace, item.key) for item in written}
            # Not written: written by someone else meanwhile, or expired on its way (neither
            # held nor counted).
            held_already([item for item in to_write if (item.namespace, item.key) not in kept])
        done += len(items)
        if progress is not None:
            progress("copying", min(done, total), total)
    if conflicts:
        raise CopyConflictError(
            f"{conflicts} records were written to the target by someone else while the copy "
            f"ran ({_named(named, conflicts)}); they were left as they are. Stop the servers "
            "using the target, then copy again",
            records=named,
            count=conflicts,
            copied=sum(result.copied.values()),
        )


def _verify(
    source: Store,
    target: Store,
    prefixes: list[Namespace],
    page: int,
    total: int,
    result: CopyResult,
    progress: Progress | None,
) -> None:
    """Every source record must be in the target, equal; counts the target's records under
    the prefixes that the source does not hold. The target is read by key, page by page, not
    side by side with the source: stores of different backends order namespaces differently
    (the SQL stores by their encoded text)."""
    differing, done, matched = 0, 0, 0
    named: list[tuple[Namespace, str]] = []
    now = time.time()
    for items in _pages(source, prefixes, page):
        held = _held(target, items)
        for item in items:
            there = held.get((item.namespace, item.key))
            if there is not None and _equal(item, there):
                matched += 1
            elif there is None and _expiring(item, now):
                pass  # gone from the target's clock's point of view, not yet from the source's
            else:
                differing += 1
                if len(named) < NAMED:
                    named.append((item.namespace, item.key))
        done += len(items)
        if progress is not None:
            progress("verifying", min(done, total), total)
    in_target = sum(
        1 for items in _pages(target, prefixes, page) for item in items if not _expiring(item, now)
    )
    result.target_only = max(0, in_target - matched)
    if differing:
        raise CopyConflictError(
            f"the copy wrote {sum(result.copied.values())} records, but {differing} records "
            f"of the source differ from the target's now ({_named(named, differing)}), most "
            "likely written by a server while the copy ran. Stop the servers using the "
            "source and copy into an empty store again",
            records=named,
            count=differing,
            copied=sum(result.copied.values()),
        )


def _expiring(item: Item, now: float) -> bool:
    return item.expires_at is not None and item.expires_at <= now + _EXPIRY_SLACK
