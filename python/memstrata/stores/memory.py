"""InMemoryStore: the store protocol in a process's memory, for tests and throwaway agents.

Values are kept encoded (JSON bytes), exactly as the SQLite backend keeps them, so a caller
mutating a value it put or got can never change what is stored, and both backends behave alike.

Rows are kept in write order (a write moves its row to the end) and stamped with a sequence
number, one per write operation, so the changes since a mark are found by walking back from the
newest write until the mark. A deletion takes a number too and leaves a tombstone in its
namespace's own write-ordered log, walked back the same way.
"""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from memstrata.stores import codec
from memstrata.stores.base import (
    ChangeMark,
    Changes,
    ConditionalWrite,
    Item,
    JSONValue,
    Namespace,
    Planner,
    Store,
    Updater,
    sequence_position,
    validate_after,
    validate_key,
    validate_namespace,
    validate_page,
    validate_restored,
    validate_ttl,
    validate_updates,
    validate_version,
    validate_writes,
)

_BACKEND = "memory"


@dataclass
class _Row:
    data: bytes
    version: int
    created_at: float
    updated_at: float
    expires_at: float | None
    seq: int  # the sequence number of the operation that wrote it

    def live(self, now: float) -> bool:
        return self.expires_at is None or self.expires_at > now


class InMemoryStore(Store):
    """A thread-safe in-process store; nothing survives the process.

    Its methods only compute (the lock is held for microseconds), so the async twins call
    them directly, on the event loop, with no thread hop.
    """

    waits = False

    def __init__(self) -> None:
        self._rows: dict[tuple[Namespace, str], _Row] = {}  # in write order
        self._lock = threading.Lock()
        self._sequence = 0  # write operations so far: what a ChangeMark holds
        # Per namespace: key -> (sequence number, time, the deleted row's version) of its
        # deletion, in deletion order.
        self._tombstones: dict[Namespace, dict[str, tuple[int, float, int]]] = {}
        # The newest sequence number among the pruned tombstones, one for the store (numbers
        # are store-wide, tombstones pruned by age), so an erased namespace stays in no map.
        self._pruned_to = 0

    def _item(
        self,
        namespace: Namespace,
        key: str,
        row: _Row,
        value: JSONValue = None,
        *,
        fresh: bool = False,
    ) -> Item:
        """``fresh``: the item of a write, holding the written value rather than a decoded copy."""
        return Item(
            namespace,
            key,
            value if fresh else codec.loads(row.data),
            row.version,
            row.created_at,
            row.updated_at,
            row.expires_at,
        )

    def _tick(self) -> int:
        """The sequence number of a new write operation (every key it writes shares it)."""
        self._sequence += 1
        return self._sequence

    def _write(
        self, namespace: Namespace, key: str, data: bytes, ttl: float | None, now: float, seq: int
    ) -> _Row:
        # Popped, then inserted: the row moves to the end, keeping the dict in write order.
        old = self._rows.pop((namespace, key), None)
        live_old = old if old is not None and old.live(now) else None
        if old is not None:
            last = old.version
        else:
            # A key written again after its deletion numbers on from the deleted row.
            buried = self._tombstones.get(namespace, {}).get(key)
            last = buried[2] if buried is not None else 0
        row = _Row(
            data,
            last + 1,
            live_old.created_at if live_old else now,
            now,
            now + ttl if ttl is not None else None,
            seq,
        )
        self._rows[(namespace, key)] = row
        return row

    def _bury(self, namespace: Namespace, key: str, row: _Row, seq: int, now: float) -> None:
        """Leaves the tombstone of a deletion (moved to the end: the log stays in order)."""
        log = self._tombstones.setdefault(namespace, {})
        log.pop(key, None)
        log[key] = (seq, now, row.version)

    def get(self, namespace: Namespace, key: str) -> Item | None:
        namespace, key = validate_namespace(namespace), validate_key(key)
        with self._lock:
            row = self._rows.get((namespace, key))
            if row is None or not row.live(time.time()):
                return None
            return self._item(namespace, key, row)

    def stamp(self, namespace: Namespace, key: str) -> tuple[int, float] | None:
        namespace, key = validate_namespace(namespace), validate_key(key)
        with self._lock:
            row = self._rows.get((namespace, key))
            if row is None or not row.live(time.time()):
                return None
            return row.version, row.created_at

    def put(
        self, namespace: Namespace, key: str, value: JSONValue, *, ttl: float | None = None
    ) -> Item:
        namespace, key, ttl = validate_namespace(namespace), validate_key(key), validate_ttl(ttl)
        data = codec.dumps(value)
        with self._lock:
            row = self._write(namespace, key, data, ttl, time.time(), self._tick())
            return self._item(namespace, key, row, value, fresh=True)

    def delete(self, namespace: Namespace, key: str) -> bool:
        namespace, key = validate_namespace(namespace), validate_key(key)
        with self._lock:
            row = self._rows.pop((namespace, key), None)
            if row is None:
                return False
            now = time.time()
            self._bury(namespace, key, row, self._tick(), now)
            return row.live(now)

    def delete_if_version(self, namespace: Namespace, key: str, *, expected_version: int) -> bool:
        namespace, key = validate_namespace(namespace), validate_key(key)
        expected_version = validate_version(expected_version)
        with self._lock:
            row = self._rows.get((namespace, key))
            now = time.time()
            if row is None or not row.live(now) or row.version != expected_version:
                return False
            del self._rows[(namespace, key)]
            self._bury(namespace, key, row, self._tick(), now)
            return True

    def list(
        self, namespace_prefix: Namespace = (), *, limit: int = 100, offset: int = 0
    ) -> builtins.list[Item]:
        prefix = validate_namespace(namespace_prefix, allow_empty=True)
        validate_page(limit, offset)
        now = time.time()
        with self._lock:
            matches = sorted(
                (ns, key)
                for (ns, key), row in self._rows.items()
                if ns[: len(prefix)] == prefix and row.live(now)
            )
            page = matches[offset : offset + limit]
            return [self._item(ns, key, self._rows[(ns, key)]) for ns, key in page]

    def list_after(
        self,
        namespace_prefix: Namespace,
        after: tuple[Namespace, str] | None,
        *,
        limit: int = 100,
    ) -> builtins.list[Item]:
        prefix = validate_namespace(namespace_prefix, allow_empty=True)
        validate_page(limit, 0)
        after = validate_after(after)
        now = time.time()
        with self._lock:
            matches = sorted(
                (ns, key)
                for (ns, key), row in self._rows.items()
                if ns[: len(prefix)] == prefix
                and row.live(now)
                and (after is None or (ns, key) > after)
            )
            page = matches[:limit]
            return [self._item(ns, key, self._rows[(ns, key)]) for ns, key in page]

    def update(
        self, namespace: Namespace, key: str, fn: Updater, *, ttl: float | None = None
    ) -> Item:
        namespace, key, ttl = validate_namespace(namespace), validate_key(key), validate_ttl(ttl)
        with self._lock:
            now = time.time()
            row = self._rows.get((namespace, key))
            current = codec.loads(row.data) if row is not None and row.live(now) else None
            value = fn(current)
            data = codec.dumps(value)
            row = self._write(namespace, key, data, ttl, now, self._tick())
            return self._item(namespace, key, row, value, fresh=True)

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
        namespace, key, ttl = validate_namespace(namespace), validate_key(key), validate_ttl(ttl)
        expected_version = validate_version(expected_version)
        data = codec.dumps(value, validated=validated, encoded=encoded)
        with self._lock:
            now = time.time()
            row = self._rows.get((namespace, key))
            current = row.version if row is not None and row.live(now) else 0
            if current != expected_version:
                return None
            row = self._write(namespace, key, data, ttl, now, self._tick())
            return self._item(namespace, key, row, value, fresh=True)

    def put_many_if_versions(
        self,
        namespace: Namespace,
        writes: Mapping[str, ConditionalWrite],
        *,
        validated: bool = False,
    ) -> builtins.list[Item] | None:
        namespace, keys = validate_namespace(namespace), validate_writes(writes)
        data = [
            codec.dumps(writes[key].value, validated=validated, encoded=writes[key].encoded)
            for key in keys
        ]
        with self._lock:
            now = time.time()
            for key in keys:
                row = self._rows.get((namespace, key))
                current = row.version if row is not None and row.live(now) else 0
                if current != writes[key].expected_version:
                    return None
            items = []
            for key, encoded in zip(keys, data):
                row = self._write(namespace, key, encoded, None, now, self._tick())
                items.append(self._item(namespace, key, row, writes[key].value, fresh=True))
            return items

    def update_many(
        self, namespace: Namespace, updates: Mapping[str, Updater], *, ttl: float | None = None
    ) -> builtins.list[Item]:
        namespace, ttl = validate_namespace(namespace), validate_ttl(ttl)
        keys = [validate_key(key) for key in updates]
        with self._lock:
            return self._update_many(namespace, keys, updates, ttl, time.time())

    def _update_many(
        self,
        namespace: Namespace,
        keys: builtins.list[str],
        updates: Mapping[str, Updater],
        ttl: float | None,
        now: float,
    ) -> builtins.list[Item]:
        """``update_many`` under the caller's lock."""
        # Compute and encode everything first, then write: a failure leaves nothing behind.
        staged = []
        for key in keys:
            row = self._rows.get((namespace, key))
            current = codec.loads(row.data) if row is not None and row.live(now) else None
            value = updates[key](current)
            staged.append((key, value, codec.dumps(value)))
        seq = self._tick()
        return [
            self._item(
                namespace, key, self._write(namespace, key, data, ttl, now, seq), value, fresh=True
            )
            for key, value, data in staged
        ]

    def change_mark(self, namespace: Namespace) -> ChangeMark:
        namespace = validate_namespace(namespace)
        with self._lock:
            return ChangeMark(_BACKEND, namespace, str(self._sequence))

    def _written_since(self, namespace: Namespace, mark: int) -> builtins.list[tuple[str, _Row]]:
        """The rows of ``namespace`` written after ``mark``, live or not, ordered by key."""
        written = []
        for (ns, key), row in reversed(self._rows.items()):
            if row.seq <= mark:
                break  # rows are in write order: everything further back is older
            if ns == namespace:
                written.append((key, row))
        written.sort(key=lambda pair: pair[0])
        return written

    def changes(self, namespace: Namespace, since: ChangeMark | None = None) -> Changes:
        namespace = validate_namespace(namespace)
        mark = None if since is None else sequence_position(since, _BACKEND, namespace)
        with self._lock:
            now = time.time()
            new_mark = ChangeMark(_BACKEND, namespace, str(self._sequence))
            # A mark ahead of this store's history was made by another store: answer in full.
            if mark is None or mark < self._pruned_to or mark > self._sequence:
                live = sorted(
                    (key, row)
                    for (ns, key), row in self._rows.items()
                    if ns == namespace and row.live(now)
                )
                return Changes(new_mark, [self._item(namespace, k, r) for k, r in live], [], True)
            items, removed = [], []
            for key, row in self._written_since(namespace, mark):
                if row.live(now):
                    items.append(self._item(namespace, key, row))
                else:
                    removed.append(key)
            for key, (seq, _at, _version) in reversed(self._tombstones.get(namespace, {}).items()):
                if seq <= mark:
                    break
                # A key written again after its deletion was reported with that write.
                if (namespace, key) not in self._rows:
                    removed.append(key)
            removed.sort()
            return Changes(new_mark, items, removed, False)

    def update_many_since(
        self,
        namespace: Namespace,
        since: ChangeMark,
        plan: Planner,
        *,
        ttl: float | None = None,
    ) -> builtins.list[Item]:
        namespace, ttl = validate_namespace(namespace), validate_ttl(ttl)
        mark = sequence_position(since, _BACKEND, namespace)
        with self._lock:  # one lock for the whole store: every write is serialised
            now = time.time()
            changed = [
                self._item(namespace, key, row)
                for key, row in self._written_since(namespace, mark)
                if row.live(now)
            ]
            updates = plan(changed)
            keys = validate_updates(updates)
            return self._update_many(namespace, keys, updates, ttl, now)

    def restore_items(self, items: Sequence[Item]) -> builtins.list[Item]:
        checked = validate_restored(items)
        with self._lock:
            now = time.time()
            seq = self._tick()
            written = []
            for item, data in checked:
                if item.expires_at is not None and item.expires_at <= now:
                    continue
                record = (tuple(item.namespace), item.key)
                old = self._rows.get(record)
                if old is not None and old.live(now):
                    continue
                # Popped, then inserted: the row goes to the end, as a write's does.
                self._rows.pop(record, None)
                expires_at = None if item.expires_at is None else float(item.expires_at)
                self._rows[record] = _Row(
                    data,
                    item.version,
                    float(item.created_at),
                    float(item.updated_at),
                    expires_at,
                    seq,
                )
                written.append(item)
            return written

    def purge_expired(self) -> int:
        with self._lock:
            now = time.time()
            dead = [k for k, row in self._rows.items() if not row.live(now)]
            seq = self._tick() if dead else 0
            for namespace, key in dead:
                self._bury(namespace, key, self._rows.pop((namespace, key)), seq, now)
            self._prune_tombstones(now - self.tombstone_retention)
            return len(dead)

    def _prune_tombstones(self, cutoff: float) -> None:
        """Drops tombstones made before ``cutoff``, remembering the newest number dropped."""
        for log in self._tombstones.values():
            old = [key for key, (_seq, at, _version) in log.items() if at < cutoff]
            for key in old:
                seq, _at, _version = log.pop(key)
                self._pruned_to = max(self._pruned_to, seq)
        for namespace in [ns for ns, log in self._tombstones.items() if not log]:
            del self._tombstones[namespace]
