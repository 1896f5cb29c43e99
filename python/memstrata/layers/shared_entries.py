"""What one shared-memory entry is: its key builders, the caller's :class:`MemoryEntry`, the
record the memory holds for it, and how a stored row becomes that record (or is skipped)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from memstrata._core import strip_unsafe_keys
from memstrata.exceptions import InvalidInputError, MemstrataError
from memstrata.stores import Item, codec

logger = logging.getLogger("memstrata.shared_memory")

Kind = Literal["task_result", "step_result", "input", "shared"]
KINDS: tuple[str, ...] = ("task_result", "step_result", "input", "shared")
LIST_DESCRIPTION_CHARS = 240
MAX_CREATED_AT = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
MAX_TEXT_CHARS = {"source": 256, "title": 256, "description": 4_000}


class _Keys:
    """Key builders; use them instead of string literals so call sites stay greppable."""

    @staticmethod
    def step(step_id: str) -> str:
        return f"step:{step_id}"

    @staticmethod
    def task(task_id: str) -> str:
        return f"task:{task_id}"

    @staticmethod
    def input(name: str) -> str:
        return f"input:{name}"

    @staticmethod
    def shared(name: str) -> str:
        return f"shared:{name}"


memory_keys = _Keys()


@dataclass(frozen=True)
class MemoryEntry:
    """One value in shared memory, as handed to a caller: ``value`` is the caller's own copy.

    ``created_at`` is wall-clock milliseconds of the first write; overwriting the value keeps it.
    """

    key: str
    kind: Kind
    value: Any
    source: str | None = None
    title: str | None = None
    description: str | None = None
    created_at: int = 0
    value_bytes: int = 0

    def metadata(self) -> dict[str, Any]:
        """The ``memory_list`` view: no value, a description cut at 240 characters,
        ``createdAt`` as ISO 8601."""
        item: dict[str, Any] = {"key": self.key, "kind": self.kind}
        if self.title is not None:
            item["title"] = self.title
        if self.description is not None:
            description = self.description
            if len(description) > LIST_DESCRIPTION_CHARS:
                description = description[:LIST_DESCRIPTION_CHARS] + "…"
            item["description"] = description
        if self.source is not None:
            item["source"] = self.source
        item["valueBytes"] = self.value_bytes
        item["createdAt"] = iso_ms(self.created_at)
        return item

    def to_json(self) -> dict[str, Any]:
        """The ``memory_read`` view, with NodeTool's field names and ``createdAt`` in ms."""
        item: dict[str, Any] = {"key": self.key, "kind": self.kind, "value": self.value}
        for name in ("source", "title", "description"):
            if getattr(self, name) is not None:
                item[name] = getattr(self, name)
        item["createdAt"] = self.created_at
        return item


class _Record:
    """What the memory holds for one entry, never changed once made: its metadata
    (``meta.value`` is None) and the value only as JSON text, so nothing a caller holds can
    alias it. ``stamp`` is the store item's ``(version, created_at)``, to recognise an item the
    store reports again. ``version`` is the entry's version as ``memory_read`` shows it (the
    store item's; 0 when not known, for entries read past an unreadable row). ``expires_at``
    is the store item's, for a row other code wrote with a TTL."""

    __slots__ = (
        "encoded",
        "expires_at",
        "listed",
        "meta",
        "order",
        "read",
        "sequence",
        "stamp",
        "version",
    )

    def __init__(
        self,
        meta: MemoryEntry,
        encoded: bytes,
        sequence: int,
        stamp: tuple[int, float] | None = None,
        version: int = 0,
        expires_at: float | None = None,
    ) -> None:
        self.meta, self.encoded, self.sequence, self.stamp = meta, encoded, sequence, stamp
        self.version, self.expires_at = version, expires_at
        self.order = (meta.created_at, sequence, meta.key)
        # The tools' views, built once: a model lists and reads far more often than it writes.
        self.listed, self.read = meta.metadata(), meta.to_json()
        if version:
            self.read["version"] = version

    def entry(self) -> MemoryEntry:
        meta = self.meta
        return MemoryEntry(
            key=meta.key,
            kind=meta.kind,
            value=orjson.loads(self.encoded),
            source=meta.source,
            title=meta.title,
            description=meta.description,
            created_at=meta.created_at,
            value_bytes=meta.value_bytes,
        )

    def read_view(self) -> dict[str, Any]:
        """The ``memory_read`` view with a fresh copy of the value."""
        view = dict(self.read)
        view["value"] = orjson.loads(self.encoded)  # keeps its place: "value" is in self.read
        return view


@dataclass(frozen=True)
class _Replaced:
    """The entry a write replaced, as it recorded itself: its writer and its version."""

    source: str | None
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "version": self.version}


class _Conflict(MemstrataError):
    """A write naming a version the entry is no longer at (another writer got there first)."""

    def __init__(self, key: str, expected: int, current: _Record | None) -> None:
        self.key, self.expected = key, expected
        self.current = None if current is None else _Replaced(current.meta.source, current.version)
        saw = f"version {expected}" if expected else "it missing"
        if current is None:
            now = "it has been deleted since"
        else:
            writer = f" (written by {current.meta.source})" if current.meta.source else ""
            now = f"it is at version {current.version}{writer} now"
        super().__init__(
            f"{key} changed since you read it: you saw {saw}, {now}. Call memory_read on it, "
            "then write again with expected_version set to the version it shows (or "
            "overwrite: true to replace it unread)"
        )


def iso_ms(ms: int) -> str:
    """Milliseconds since the epoch as ISO 8601 UTC with milliseconds (``...T14:00:01.234Z``)."""
    seconds, millis = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def _record(item: Item, held: _Record | None) -> _Record | None:
    """The record of a stored item (``held`` itself when it is that item already), or None
    when the item is not a valid entry: skipped and logged, never deleted."""
    stamp = (item.version, item.created_at)
    if held is not None and held.stamp == stamp:
        return held  # our own write, or one already read: nothing to decode
    stored = item.value
    try:
        if stored["kind"] not in KINDS:
            raise ValueError(f"unknown kind {stored['kind']!r}")
        position = _position(stored)
        if position is None:
            raise ValueError("createdAt and sequence must be integers")
        texts = {name: stored.get(name) for name in ("source", "title", "description")}
        if any(text is not None and not isinstance(text, str) for text in texts.values()):
            raise ValueError("source, title and description must be strings")
        # The store may have been written by other code: its values are stripped like a write.
        encoded = codec.dumps(strip_unsafe_keys(stored["value"]), validated=True)
    except (KeyError, TypeError, ValueError, MemstrataError) as exc:
        logger.warning("skipping malformed shared-memory entry %r: %s", item.key, exc)
        return None
    meta = MemoryEntry(
        key=item.key,
        kind=stored["kind"],
        value=None,
        created_at=position[0],
        value_bytes=len(encoded),
        **texts,
    )
    return _Record(meta, encoded, position[1], stamp, item.version, item.expires_at)


def _kinds(kind: str | Sequence[str] | None) -> set[str] | None:
    if kind is None:
        return None
    if not isinstance(kind, (str, list, tuple, set, frozenset)):
        raise InvalidInputError(
            f"kind must be a kind, a list of kinds or None, got {type(kind).__name__}"
        )
    wanted = [kind] if isinstance(kind, str) else list(kind)
    unknown = [k for k in wanted if k not in KINDS]
    if unknown:
        raise InvalidInputError(f"unknown kind {unknown[0]!r}; kinds are {', '.join(KINDS)}")
    return set(wanted)


def _position(stored: Any) -> tuple[int, int] | None:
    """``(createdAt, sequence)`` of a stored entry, or None when it has no usable createdAt.
    An entry stored without a sequence number gets 0: it sorts before every numbered one."""
    if not isinstance(stored, dict):
        return None
    created_at, sequence = stored.get("createdAt"), stored.get("sequence", 0)
    if type(created_at) is not int or type(sequence) is not int:  # bool is not a number here
        return None
    # Beyond year 9999 a date cannot be formatted: such an entry would break every listing.
    return (created_at, sequence) if 0 <= created_at <= MAX_CREATED_AT else None
