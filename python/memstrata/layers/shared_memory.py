"""SharedMemory: the namespaced key/value memory the steps of a workflow share (seed 004).

Keys are namespaced strings built with :data:`memory_keys` (``step:<id>``, ``task:<id>``,
``input:<key>``, ``shared:<key>``). Executors write results with :meth:`SharedMemory.set`; the
model discovers and fetches them through three tools — ``memory_list`` (metadata only),
``memory_read`` (values) and ``memory_write`` (only under ``shared:``) — so upstream results are
pulled on demand instead of being pasted into every prompt.

Decisions where the seed is silent or its code disagrees with its text:

* ``memory_list`` is capped at 200 entries and returns the *newest* 200 (by ``createdAt``, then
  insertion), as the document says; the seed's code keeps the oldest.
* ``valueBytes`` is the UTF-8 size of the compact JSON of the value, computed once when the value
  is written, so listing 10k entries never re-serialises them.
* A ``memory_write`` key suffix must be non-empty, at most 256 characters, with no control
  characters; values must be JSON data (checked by the Rust walker, which names the path).
* Beyond the seed, limits: a value is at most ``max_value_bytes`` of JSON (1 MiB) and the
  memory holds at most ``max_entries`` entries (100,000); a write past either is refused with
  :class:`~memstrata.exceptions.LimitExceededError` (overwriting an existing key never counts
  as a new entry).
* Beyond the seed: ``SharedMemory(store=..., namespace=...)`` writes every entry through to a
  store, and a new instance over the same store and namespace resumes with them (a workflow
  that crashed picks up where it was). Without a store the memory lives in the process.
* As a stack layer it injects the "Memory Tools (progressive disclosure)" section and, when a
  run declares upstream keys (``run.layer("shared-memory").require([...])``), the
  "Required upstream memory" hint: keys and titles, never values.
"""

from __future__ import annotations

import bisect
import builtins
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cached_property
from typing import Any, Literal

from memstrata._core import strip_unsafe_keys
from memstrata.exceptions import InvalidInputError, LimitExceededError, ToolError
from memstrata.prompts import (
    MEMORY_LIST_DESCRIPTION,
    MEMORY_READ_DESCRIPTION,
    MEMORY_TOOLS_SECTION,
    MEMORY_WRITE_DESCRIPTION,
    UPSTREAM_HEADER,
)
from memstrata.stack import Budget, Message, RunContext
from memstrata.stores import Item, Namespace, Store, codec
from memstrata.tools import Tool

logger = logging.getLogger("memstrata.shared_memory")

Kind = Literal["task_result", "step_result", "input", "shared"]
KINDS: tuple[str, ...] = ("task_result", "step_result", "input", "shared")
LIST_CAP = 200
MAX_SHARED_KEY_LENGTH = 256
DEFAULT_MAX_VALUE_BYTES = 1 << 20
DEFAULT_MAX_ENTRIES = 100_000


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
    """One value in shared memory. ``created_at`` is wall-clock milliseconds of the first write;
    overwriting the value keeps it."""

    key: str
    kind: Kind
    value: Any
    source: str | None = None
    title: str | None = None
    description: str | None = None
    created_at: int = 0
    value_bytes: int = 0

    def metadata(self) -> dict[str, Any]:
        """The ``memory_list`` view: everything but the value, ``createdAt`` as ISO 8601."""
        return dict(self._metadata)

    @cached_property
    def _metadata(self) -> dict[str, Any]:
        # Entries never change once written, and listing is the hot path: build this once.
        item: dict[str, Any] = {"key": self.key, "kind": self.kind}
        for name in ("title", "description", "source"):
            if getattr(self, name) is not None:
                item[name] = getattr(self, name)
        item["valueBytes"] = self.value_bytes
        item["createdAt"] = iso_ms(self.created_at)
        return item

    def to_json(self) -> dict[str, Any]:
        """The ``memory_read`` view, with the seed's field names and ``createdAt`` in ms."""
        return dict(self._read_view)

    @cached_property
    def _read_view(self) -> dict[str, Any]:
        item: dict[str, Any] = {"key": self.key, "kind": self.kind, "value": self.value}
        for name in ("source", "title", "description"):
            if getattr(self, name) is not None:
                item[name] = getattr(self, name)
        item["createdAt"] = self.created_at
        return item


def iso_ms(ms: int) -> str:
    stamp = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


Listener = Callable[[MemoryEntry], None]


class SharedMemory:
    """The seed's ``AgentMemory``, usable on its own and as a :class:`~memstrata.stack.Layer`.

    Args:
        store: Optional store to write entries through to; entries already stored under
            ``namespace`` are loaded, so a workflow resumes after a crash.
        namespace: Store namespace for the entries (default ``("shared-memory", "default")``).
        name: Layer name (``run.layer(name)``).
        slot: Order of the prompt section among layers.
        budget: Token budget of the prompt section.
        max_value_bytes: Largest value, in bytes of its compact JSON.
        max_entries: Most entries the memory holds.
    """

    def __init__(
        self,
        *,
        store: Store | None = None,
        namespace: Namespace = ("shared-memory", "default"),
        name: str = "shared-memory",
        slot: int = 300,
        budget: tuple[int, int] | Budget = (50, 400),
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
        max_entries: int = DEFAULT_MAX_ENTRIES,
    ) -> None:
        for option, limit in (("max_value_bytes", max_value_bytes), ("max_entries", max_entries)):
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise InvalidInputError(f"{option} must be a positive int, got {limit!r}")
        self.max_value_bytes = max_value_bytes
        self.max_entries = max_entries
        self.name = name
        self.slot = slot
        self.budget = budget if isinstance(budget, Budget) else Budget(*budget)
        self._store = store
        self._namespace = tuple(namespace)
        self._lock = threading.RLock()
        self._entries: dict[str, MemoryEntry] = {}
        self._order: dict[str, int] = {}  # key -> insertion sequence, for "newest" ordering
        self._sequence = 0
        self._sorted_keys: list[str] = []  # for key_prefix listing by bisection
        # Insertion-ordered, like _entries, so one kind's entries list oldest first unsorted.
        self._by_kind: dict[str, dict[str, None]] = {kind: {} for kind in KINDS}
        # An overwrite that changes an entry's kind appends it to its new kind out of order.
        self._kinds_reordered = False
        self._listeners: list[Listener] = []
        if store is not None:
            self._load()

    # Writing --------------------------------------------------------------------------------

    def set(
        self,
        *,
        key: str,
        kind: Kind,
        value: Any,
        source: str | None = None,
        title: str | None = None,
        description: str | None = None,
    ) -> MemoryEntry:
        """Writes an entry and returns it; an existing key keeps its ``created_at``.

        Raises:
            InvalidInputError: Bad key or kind, or metadata that is not a string.
            UnsupportedTypeError / NonFiniteNumberError: ``value`` is not JSON data.
            LimitExceededError: The value is over ``max_value_bytes``, or the key is new and
                the memory already holds ``max_entries`` entries.
        """
        if not isinstance(key, str) or not key:
            raise InvalidInputError(f"key must be a non-empty str, got {key!r}")
        if kind not in KINDS:
            raise InvalidInputError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        for field_name, field_value in (
            ("source", source),
            ("title", title),
            ("description", description),
        ):
            if field_value is not None and not isinstance(field_value, str):
                raise InvalidInputError(
                    f"{field_name} must be a str, got {type(field_value).__name__}"
                )
        clean = strip_unsafe_keys(value)
        encoded = codec.dumps(clean, validated=True)
        if len(encoded) > self.max_value_bytes:
            raise LimitExceededError(
                f"value for {key!r} is {len(encoded):,} bytes of JSON; the limit is "
                f"{self.max_value_bytes:,} (max_value_bytes)",
                setting="max_value_bytes",
                size=len(encoded),
                limit=self.max_value_bytes,
            )
        with self._lock:
            old = self._entries.get(key)
            if old is None and len(self._entries) >= self.max_entries:
                raise LimitExceededError(
                    f"shared memory already holds {len(self._entries):,} entries, its limit "
                    "(max_entries); overwrite an existing key or clear old entries",
                    setting="max_entries",
                    size=len(self._entries) + 1,
                    limit=self.max_entries,
                )
            entry = MemoryEntry(
                key=key,
                kind=kind,
                value=clean,
                source=source,
                title=title,
                description=description,
                created_at=old.created_at if old else int(time.time() * 1000),
                value_bytes=len(encoded),
            )
            if self._store is not None:
                self._store.put(self._namespace, key, _stored(entry))
            self._index(entry, old)
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(entry)
            except Exception:
                # A UI panel or mirror failing must never break the write that fed it.
                logger.exception("shared-memory listener failed on %s", key)
        return entry

    def _index(self, entry: MemoryEntry, old: MemoryEntry | None) -> None:
        if old is None:
            bisect.insort(self._sorted_keys, entry.key)
            self._order[entry.key] = self._sequence
            self._sequence += 1
        elif old.kind != entry.kind:
            self._by_kind[old.kind].pop(entry.key, None)
            self._kinds_reordered = True
        self._entries[entry.key] = entry
        self._by_kind[entry.kind].setdefault(entry.key)

    def clear(self, *, kind: Kind | None = None, key_prefix: str | None = None) -> int:
        """Removes every entry, or those of a kind and/or under a key prefix; returns how many."""
        with self._lock:
            doomed = [e.key for e in self.list(kind=kind, key_prefix=key_prefix)]
            for key in doomed:
                entry = self._entries.pop(key)
                self._by_kind[entry.kind].pop(key, None)
                del self._order[key]
                index = bisect.bisect_left(self._sorted_keys, key)
                del self._sorted_keys[index]
                if self._store is not None:
                    self._store.delete(self._namespace, key)
            return len(doomed)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Calls ``listener(entry)`` after every write; returns the function that unsubscribes."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    # Reading --------------------------------------------------------------------------------

    def get(self, key: str) -> MemoryEntry | None:
        return self._entries.get(key)

    def get_value(self, key: str) -> Any:
        entry = self._entries.get(key)
        return None if entry is None else entry.value

    def has(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def snapshot(self) -> builtins.list[MemoryEntry]:
        """Every entry, oldest first (insertion order: ``created_at`` is kept on overwrite)."""
        with self._lock:
            return list(self._entries.values())

    def list(
        self,
        *,
        kind: str | Sequence[str] | None = None,
        keys: Iterable[str] | None = None,
        key_prefix: str | None = None,
        sources: Iterable[str] | None = None,
    ) -> builtins.list[MemoryEntry]:
        """Entries matching every given filter, oldest first.

        Candidates come from the narrowest index (explicit keys, the kind sets, or the sorted
        keys under the prefix), so a filtered listing does not scan the whole memory.
        """
        kinds = _kinds(kind)
        source_set = None if sources is None else {*sources}
        with self._lock:
            candidates: Iterable[str]
            # Candidates already in insertion order (all entries, one kind) need no sort.
            in_order = False
            if keys is not None:
                candidates = [k for k in dict.fromkeys(keys) if k in self._entries]
            elif key_prefix is not None:
                start = bisect.bisect_left(self._sorted_keys, key_prefix)
                end = bisect.bisect_left(self._sorted_keys, key_prefix + "\U0010ffff")
                candidates = self._sorted_keys[start:end]
            elif kinds is not None and len(kinds) == 1:
                candidates = self._by_kind[next(iter(kinds))]
                in_order = not self._kinds_reordered
            elif kinds is not None:
                candidates = [k for kind_name in kinds for k in self._by_kind[kind_name]]
            else:
                candidates, in_order = self._entries, True
            matches = []
            for key in candidates:
                entry = self._entries[key]
                if kinds is not None and entry.kind not in kinds:
                    continue
                if key_prefix is not None and not key.startswith(key_prefix):
                    continue
                if source_set is not None and entry.source not in source_set:
                    continue
                matches.append(entry)
            if not in_order:
                order = self._order
                matches.sort(key=lambda e: order[e.key])
            return matches

    def copy(self, *, entries: bool = False) -> SharedMemory:
        """An isolated memory for a sub-run: empty unless ``entries=True`` copies them on
        purpose. Never shares a store: the copy lives in memory."""
        clone = SharedMemory(
            name=self.name,
            slot=self.slot,
            budget=self.budget,
            max_value_bytes=self.max_value_bytes,
            max_entries=self.max_entries,
        )
        if entries:
            with self._lock:
                for entry in self.snapshot():
                    clone._index(entry, None)
        return clone

    def _load(self) -> None:
        assert self._store is not None
        offset = 0
        loaded: builtins.list[Item] = []
        while True:
            page = self._store.list(self._namespace, limit=1000, offset=offset)
            loaded.extend(item for item in page if item.namespace == self._namespace)
            if len(page) < 1000:
                break
            offset += 1000
        entries = []
        for item in loaded:
            try:
                entries.append(_entry(item.key, item.value))
            except (KeyError, TypeError, ValueError) as exc:
                logger.warning("skipping malformed shared-memory entry %r: %s", item.key, exc)
        for entry in sorted(entries, key=lambda e: (e.created_at, e.key)):
            self._index(entry, None)

    # The model's tools ------------------------------------------------------------------------

    def tool_list(self, args: dict[str, Any]) -> dict[str, Any]:
        matches = self.list(
            kind=args.get("kind"), key_prefix=args.get("key_prefix"), sources=args.get("sources")
        )
        newest = matches[-LIST_CAP:]
        return {
            "total": len(matches),
            "returned": len(newest),
            "truncated": len(matches) > LIST_CAP,
            "entries": [entry.metadata() for entry in newest],
        }

    def tool_read(self, args: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        missing: builtins.list[str] = []
        for key in dict.fromkeys(args["keys"]):
            entry = self._entries.get(key)
            if entry is None:
                missing.append(key)
            else:
                found[key] = entry.to_json()
        return {"entries": found, "missing": missing}

    def tool_write(self, args: dict[str, Any]) -> dict[str, Any]:
        suffix = args["key"]
        if suffix.startswith("shared:"):
            suffix = suffix[len("shared:") :]
        if not suffix:
            raise ToolError("key is empty; pass the part after 'shared:'", code="invalid_arguments")
        if len(suffix) > MAX_SHARED_KEY_LENGTH:
            raise ToolError(
                f"key is {len(suffix)} characters; the limit is {MAX_SHARED_KEY_LENGTH}",
                code="invalid_arguments",
            )
        if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in suffix):
            raise ToolError("key contains control characters", code="invalid_arguments")
        entry = self.set(
            key=memory_keys.shared(suffix),
            kind="shared",
            value=args["value"],
            source=args.get("source"),
            title=args.get("title"),
            description=args.get("description"),
        )
        return {
            "ok": True,
            "key": entry.key,
            "kind": "shared",
            "createdAt": iso_ms(entry.created_at),
        }

    def tools_for_model(self) -> builtins.list[Tool]:
        kind_filter = {
            "anyOf": [
                {"type": "string", "enum": list(KINDS)},
                {"type": "array", "items": {"type": "string", "enum": list(KINDS)}},
            ]
        }
        return [
            Tool(
                "memory_list",
                MEMORY_LIST_DESCRIPTION,
                {
                    "type": "object",
                    "properties": {
                        "kind": {**kind_filter, "type": ["string", "array"]},
                        "key_prefix": {"type": "string"},
                        "sources": {"type": "array", "items": {"type": "string"}},
                    },
                    "additionalProperties": False,
                },
                self.tool_list,
            ),
            Tool(
                "memory_read",
                MEMORY_READ_DESCRIPTION,
                {
                    "type": "object",
                    "properties": {
                        "keys": {"type": "array", "items": {"type": "string"}, "maxItems": 200}
                    },
                    "required": ["keys"],
                    "additionalProperties": False,
                },
                self.tool_read,
            ),
            Tool(
                "memory_write",
                MEMORY_WRITE_DESCRIPTION,
                {
                    "type": "object",
                    "properties": {
                        "key": {"type": "string", "description": "Suffix; stored as shared:<key>."},
                        "value": {},
                        "title": {"type": "string"},
                        "description": {"type": "string"},
                    },
                    "required": ["key", "value"],
                    "additionalProperties": False,
                },
                self.tool_write,
            ),
        ]

    # Layer protocol -------------------------------------------------------------------------

    def init(self, ctx: RunContext) -> SharedMemoryHandle:
        return SharedMemoryHandle(self)

    def recall(self, handle: SharedMemoryHandle, budget: int) -> builtins.list[Message]:
        text = MEMORY_TOOLS_SECTION
        hint = handle.upstream_hint()
        if hint:
            text = f"{text}\n\n{hint}"
        return [{"content": text}]

    def observe(self, handle: SharedMemoryHandle, message: Message) -> None:
        """Nothing to do: the model writes through ``memory_write``."""

    def tools(self, handle: SharedMemoryHandle) -> builtins.list[Tool]:
        return handle.memory.tools_for_model()

    def on_spawn(self, handle: SharedMemoryHandle, child: RunContext) -> SharedMemoryHandle:
        """A spawned sub-run shares the workflow's memory (it is a step of the same workflow);
        use :meth:`copy` for an isolated one."""
        return SharedMemoryHandle(handle.memory)

    def close(self, handle: SharedMemoryHandle, error: BaseException | None) -> None:
        """Nothing to flush: every write is already stored."""


class SharedMemoryHandle:
    """A run's view of the shared memory: the memory itself plus the upstream keys this run's
    step declared (shown to the model as a hint, values not included)."""

    def __init__(self, memory: SharedMemory) -> None:
        self.memory = memory
        self.upstream: list[str] = []

    def require(self, keys: Iterable[str]) -> None:
        """Declares upstream keys (``step.dependsOn``, parent ``task.dependsOn``)."""
        self.upstream = list(dict.fromkeys([*self.upstream, *keys]))

    def upstream_hint(self) -> str:
        if not self.upstream:
            return ""
        lines = [UPSTREAM_HEADER]
        for key in self.upstream:
            entry = self.memory.get(key)
            title = entry.title if entry is not None and entry.title else None
            lines.append(f"- {key} — {title}" if title else f"- {key}")
        return "\n".join(lines)


def _kinds(kind: str | Sequence[str] | None) -> set[str] | None:
    if kind is None:
        return None
    wanted = [kind] if isinstance(kind, str) else list(kind)
    unknown = [k for k in wanted if k not in KINDS]
    if unknown:
        raise InvalidInputError(f"unknown kind {unknown[0]!r}; kinds are {', '.join(KINDS)}")
    return set(wanted)


def _stored(entry: MemoryEntry) -> dict[str, Any]:
    return {
        "kind": entry.kind,
        "value": entry.value,
        "source": entry.source,
        "title": entry.title,
        "description": entry.description,
        "createdAt": entry.created_at,
        "valueBytes": entry.value_bytes,
    }


def _entry(key: str, stored: dict[str, Any]) -> MemoryEntry:
    if stored["kind"] not in KINDS:
        raise ValueError(f"unknown kind {stored['kind']!r}")
    return MemoryEntry(
        key=key,
        kind=stored["kind"],
        # The store may have been written by other code: its values are stripped like a write.
        value=strip_unsafe_keys(stored["value"]),
        source=stored.get("source"),
        title=stored.get("title"),
        description=stored.get("description"),
        created_at=int(stored["createdAt"]),
        value_bytes=int(stored["valueBytes"]),
    )


__all__ = ["MemoryEntry", "SharedMemory", "SharedMemoryHandle", "memory_keys"]
