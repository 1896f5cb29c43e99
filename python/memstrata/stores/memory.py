"""InMemoryStore: the store protocol in a process's memory, for tests and throwaway agents.

Values are kept encoded (JSON bytes), exactly as the SQLite backend keeps them, so a caller
mutating a value it put or got can never change what is stored, and both backends behave alike.
"""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from memstrata.stores import codec
from memstrata.stores.base import (
    Changes,
    Item,
    JSONValue,
    Namespace,
    Store,
    Updater,
    validate_cursor,
    validate_key,
    validate_namespace,
    validate_page,
    validate_ttl,
    validate_version,
)


@dataclass
class _Row:
    data: bytes
    version: int
    created_at: float
    updated_at: float
    expires_at: float | None

    def live(self, now: float) -> bool:
        return self.expires_at is None or self.expires_at > now


class InMemoryStore(Store):
    """A thread-safe in-process store; nothing survives the process."""

    def __init__(self) -> None:
        self._rows: dict[tuple[Namespace, str], _Row] = {}
        self._lock = threading.Lock()
        # The change log behind changes(): per namespace, key -> (seq of its last write or
        # delete, deleted), kept in seq order (a key moves to the end when written again).
        self._seq = 0
        self._log: dict[Namespace, dict[str, tuple[int, bool]]] = {}

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

    def _write(
        self, namespace: Namespace, key: str, data: bytes, ttl: float | None, now: float
    ) -> _Row:
        old = self._rows.get((namespace, key))
        live_old = old if old is not None and old.live(now) else None
        row = _Row(
            data,
            (live_old.version + 1) if live_old else 1,
            live_old.created_at if live_old else now,
            now,
            now + ttl if ttl is not None else None,
        )
        self._rows[(namespace, key)] = row
        self._logged(namespace, key, deleted=False)
        return row

    def _logged(self, namespace: Namespace, key: str, *, deleted: bool) -> None:
        self._seq += 1
        log = self._log.setdefault(namespace, {})
        log.pop(key, None)
        log[key] = (self._seq, deleted)

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
            row = self._write(namespace, key, data, ttl, time.time())
            return self._item(namespace, key, row, value, fresh=True)

    def delete(self, namespace: Namespace, key: str) -> bool:
        namespace, key = validate_namespace(namespace), validate_key(key)
        with self._lock:
            row = self._rows.pop((namespace, key), None)
            if row is not None:
                self._logged(namespace, key, deleted=True)
            return row is not None and row.live(time.time())

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

    def changes(self, namespace: Namespace, *, since: int | None = None) -> Changes:
        namespace, since = validate_namespace(namespace), validate_cursor(since)
        now = time.time()
        with self._lock:
            log = self._log.get(namespace, {})
            if since is None:
                keys = sorted(k for k, (_seq, deleted) in log.items() if not deleted)
            else:
                # Newest first, stopping at the cursor: the cost is what changed, not the size.
                keys = []
                for key in reversed(log):
                    if log[key][0] <= since:
                        break
                    keys.append(key)
                keys.reverse()
            items: builtins.list[Item] = []
            removed: builtins.list[str] = []
            for key in keys:
                row = self._rows.get((namespace, key))
                if row is None or not row.live(now):
                    removed.append(key)
                else:
                    items.append(self._item(namespace, key, row))
            return Changes(self._seq, items, [] if since is None else removed, since is None)

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
            row = self._write(namespace, key, data, ttl, now)
            return self._item(namespace, key, row, value, fresh=True)

    def put_if_version(
        self,
        namespace: Namespace,
        key: str,
        value: JSONValue,
        *,
        expected_version: int,
        ttl: float | None = None,
    ) -> Item | None:
        namespace, key, ttl = validate_namespace(namespace), validate_key(key), validate_ttl(ttl)
        expected_version = validate_version(expected_version)
        data = codec.dumps(value)
        with self._lock:
            now = time.time()
            row = self._rows.get((namespace, key))
            current = row.version if row is not None and row.live(now) else 0
            if current != expected_version:
                return None
            row = self._write(namespace, key, data, ttl, now)
            return self._item(namespace, key, row, value, fresh=True)

    def update_many(
        self, namespace: Namespace, updates: Mapping[str, Updater], *, ttl: float | None = None
    ) -> builtins.list[Item]:
        namespace, ttl = validate_namespace(namespace), validate_ttl(ttl)
        keys = [validate_key(key) for key in updates]
        with self._lock:
            now = time.time()
            # Compute and encode everything first, then write: a failure leaves nothing behind.
            staged = []
            for key in keys:
                row = self._rows.get((namespace, key))
                current = codec.loads(row.data) if row is not None and row.live(now) else None
                value = updates[key](current)
                staged.append((key, value, codec.dumps(value)))
            return [
                self._item(
                    namespace, key, self._write(namespace, key, data, ttl, now), value, fresh=True
                )
                for key, value, data in staged
            ]

    def purge_expired(self) -> int:
        with self._lock:
            now = time.time()
            dead = [k for k, row in self._rows.items() if not row.live(now)]
            for k in dead:
                del self._rows[k]
                self._logged(*k, deleted=True)
            return len(dead)
