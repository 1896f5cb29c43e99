"""SharedMemory: the namespaced key/value memory the steps of a workflow share (NodeTool).

Keys are namespaced strings built with :data:`memory_keys` (``step:<id>``, ``task:<id>``,
``input:<key>``, ``shared:<key>``). Executors write results with :meth:`SharedMemory.set`; the
model discovers and fetches them through three tools — ``memory_list`` (metadata only),
``memory_read`` (values) and ``memory_write`` (only under ``shared:``) — so upstream results are
pulled on demand instead of being pasted into every prompt. What an entry is lives in
:mod:`~memstrata.layers.shared_entries`, the three tools in :mod:`~memstrata.layers.shared_tools`.

Decisions where NodeTool is silent or its code disagrees with its text:

* Entries are ordered by first write: by ``createdAt`` (kept on overwrite), then by a sequence
  number each new key takes, stored with the entry, so entries written in the same millisecond
  keep their order after a restart; then by key (entries stored by earlier versions have no
  number, and two servers may draw the same one), the same in every instance.
* ``memory_list`` is capped at 200 entries and returns the *newest* 200 in that order, as the
  document says (NodeTool's code keeps the oldest). Descriptions longer than 240 characters are
  cut there, with "…" appended, as NodeTool's tool does; ``memory_read`` returns them whole.
* ``valueBytes`` is the UTF-8 size of the compact JSON of the value, as written.
* ``memory_write`` stores ``source: "memory_write"``, as NodeTool's tool does. Its key suffix must
  be non-empty, at most 256 characters, with no control characters; values must be JSON data
  (checked by the Rust walker, which names the path).
* Values are copied at the boundary: each entry keeps the JSON text of its value and every
  reader (``get``, ``get_value``, ``list``, ``snapshot``, ``memory_read``, listeners, the entry
  ``set`` returns) gets a freshly decoded copy, so mutating one never changes what is stored.
* Beyond NodeTool, limits: a value is at most ``max_value_bytes`` of JSON (1 MiB) and the
  memory holds at most ``max_entries`` entries (100,000); a write past either is refused with
  :class:`~memstrata.exceptions.LimitExceededError` (overwriting an existing key never counts
  as a new entry). The entry count is checked against what the instance has read from the
  store, so servers writing new keys between their reads can pass it by those writes, never
  without bound. A ``title`` or ``source`` holds at most 256 characters and a
  ``description`` 4,000. One run's model writes at most ``max_run_writes`` entries (1,000) and
  ``max_run_bytes`` of values (16 MiB) through ``memory_write``; past either the tool answers
  ``limit_exceeded``.
* Beyond NodeTool, ``memory_write`` leaves a trace: its result names the entry it replaced
  (``replaced``: the ``source`` and ``version`` that entry recorded) and the new ``version``.
  Over a key the caller (a run's model) read with ``memory_read``, whose entries carry their
  ``version``, it writes only while the entry is at the version read, else answers
  ``conflict`` telling the model to read first; ``expected_version`` names the version to
  replace instead, ``overwrite: true`` replaces it unread (never both: refused as
  ``invalid_arguments``). ``clear`` deletes each entry at the version it read, so an entry
  rewritten meanwhile stays.
* A stored row that is not an entry (written by other code) is skipped when reading; a write
  over its key first copies it to the ``quarantine`` sub-namespace, so nothing is lost. A row
  that is not JSON at all is skipped too; a write over its key fails, naming it. An entry
  other code rewrote with a TTL reads as missing once the TTL runs out, as the store counts it.
* The "Required upstream memory" hint shows each title on one line, cut to 120 characters, and
  stays within the layer's token budget (keys past it are counted, not listed). The "Memory
  Tools" section before it is fixed template: a budget too small for it shows nothing.
* Beyond NodeTool: ``SharedMemory(store=..., namespace=...)`` writes every entry through to a
  store, and every public read first catches up with the store's change
  tracking. A new instance resumes a crashed workflow, and several instances on one store (two
  agent servers) see each other's writes and deletions. Without a store the memory lives in the
  process.
* Beyond NodeTool, where one server's stack serves many conversations: ``scope="thread"``
  gives each conversation (a run's ``thread_id``, and its user when the run names one, as a
  thread-scoped working memory keys it) a memory of its own in the store, under
  ``(*namespace, "thread", thread)`` or ``(*namespace, "user-thread", user, thread)``;
  :meth:`SharedMemory.for_thread` is that memory for executors, and ``stack.forget`` erases
  it. The default, ``"workflow"``, is one memory for every run of the stack: NodeTool's, where
  each workflow run builds its own.
* As a stack layer it injects the "Memory Tools (progressive disclosure)" section and, when a
  run declares upstream keys (``run.layer("shared-memory").require([...])``), the
  "Required upstream memory" hint: keys and titles, never values. NodeTool puts the hint in
  the step's user message; here it follows the section in the layer's own prompt item, since
  a layer adds prompt items and never edits the caller's messages.
"""

from __future__ import annotations

import builtins
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Literal

import orjson

from memstrata._bridge import TaskLock
from memstrata._checks import checked_budget, checked_store
from memstrata._core import strip_unsafe_keys
from memstrata.exceptions import InvalidInputError, InvalidJSONError, LimitExceededError
from memstrata.layers import shared_tools
from memstrata.layers.shared_entries import (
    KINDS,
    MAX_TEXT_CHARS,
    Kind,
    MemoryEntry,
    _Conflict,
    _kinds,
    _position,
    _Record,
    _record,
    _Replaced,
    memory_keys,
)

# Importable from this module too, where callers import them from.
from memstrata.layers.shared_entries import LIST_DESCRIPTION_CHARS as LIST_DESCRIPTION_CHARS
from memstrata.layers.shared_entries import MAX_CREATED_AT as MAX_CREATED_AT
from memstrata.layers.shared_entries import iso_ms as iso_ms
from memstrata.layers.shared_tools import LIST_CAP as LIST_CAP
from memstrata.layers.shared_tools import MAX_SHARED_KEY_LENGTH as MAX_SHARED_KEY_LENGTH
from memstrata.layers.shared_tools import MEMORY_WRITE_SOURCE as MEMORY_WRITE_SOURCE
from memstrata.prompts import MEMORY_TOOLS_SECTION, UPSTREAM_HEADER, one_line
from memstrata.stack import Budget, Message, RunContext, checked_scope_id
from memstrata.stores import Item, Namespace, Store, codec
from memstrata.stores.base import (
    MAX_NAMESPACE_DEPTH,
    ChangeMark,
    Changes,
    EncodedItem,
    check_encodable,
    erase,
    item_of,
    validate_namespace,
)
from memstrata.tokens import EstimatingCounter, TokenCounter, exact_count, exact_count_over
from memstrata.tools import Tool

logger = logging.getLogger("memstrata.shared_memory")

# What one run's model may write through memory_write: calls, and bytes of JSON values.
DEFAULT_MAX_RUN_WRITES = 1_000
DEFAULT_MAX_RUN_BYTES = 16 << 20
DEFAULT_MAX_VALUE_BYTES = 1 << 20
DEFAULT_MAX_ENTRIES = 100_000
HINT_TITLE_CHARS = 120
SCOPES = ("workflow", "thread")
_USER_THREAD = "user-thread"
# Conversations' memories (scope "thread") held in a process; more are read again from the store.
CONVERSATIONS_KEPT = 256
_NOT_A_CONVERSATION = (
    "a SharedMemory(scope='thread') keeps no entries of its own, which no run would read: "
    "write into a conversation's with memory.for_thread(thread_id, resource_id).set(...)"
)

Listener = Callable[[MemoryEntry], None]


class SharedMemory:
    """NodeTool's ``AgentMemory``, usable on its own and as a :class:`~memstrata.stack.Layer`.

    Args:
        store: Optional store to write entries through to. Entries already stored under
            ``namespace`` are loaded, so a workflow resumes after a crash, and writes by other
            instances on the same store show in every read.
        namespace: Store namespace for the entries (default ``("shared-memory", "default")``).
        name: Layer name (``run.layer(name)``).
        slot: Order of the prompt section among layers.
        budget: Token budget of the prompt section.
        max_value_bytes: Largest value, in bytes of its compact JSON.
        max_entries: Most entries the memory holds.
        max_run_writes: Most ``memory_write`` calls one run's model makes that store something.
        max_run_bytes: Most bytes of JSON values one run's model writes through ``memory_write``.
        scope: ``"workflow"``: every run of a stack shares this memory (build one per workflow
            run). ``"thread"``: each run's conversation gets its own, kept in ``store``
            (required) under ``namespace``; see :meth:`for_thread`.
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
        max_run_writes: int = DEFAULT_MAX_RUN_WRITES,
        max_run_bytes: int = DEFAULT_MAX_RUN_BYTES,
        scope: Literal["workflow", "thread"] = "workflow",
    ) -> None:
        for option, limit in (
            ("max_value_bytes", max_value_bytes),
            ("max_entries", max_entries),
            ("max_run_writes", max_run_writes),
            ("max_run_bytes", max_run_bytes),
        ):
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise InvalidInputError(f"{option} must be a positive int, got {limit!r}")
        self.max_value_bytes = max_value_bytes
        self.max_entries = max_entries
        self.max_run_writes = max_run_writes
        self.max_run_bytes = max_run_bytes
        self.name = name
        self.slot = slot
        self.budget = checked_budget(budget)
        self._store = checked_store(store) if store is not None else None
        self._namespace = validate_namespace(namespace)
        if scope not in SCOPES:
            raise InvalidInputError(f"scope must be 'workflow' or 'thread', got {scope!r}")
        if scope == "thread" and self._store is None:
            raise InvalidInputError(
                "SharedMemory(scope='thread') keeps each conversation's memory in a store: "
                "give store=..., the stack's own (store = open_store(url), then "
                "SharedMemory(store=store, ...) and MemoryStack(..., store=store))"
            )
        if scope == "thread" and len(self._namespace) > MAX_NAMESPACE_DEPTH - 4:
            raise InvalidInputError(
                f"namespace {self._namespace!r} is too deep for scope 'thread', which adds up"
                f" to 4 labels: at most {MAX_NAMESPACE_DEPTH - 4}"
            )
        self.scope = scope
        # The conversations' memories this process used last (scope "thread"): rebuilt from
        # the store when needed again, so the bound costs a read, never an entry.
        self._conversations: OrderedDict[Namespace, SharedMemory] = OrderedDict()
        self._conversations_lock = threading.Lock()
        # Held across store calls, which in an async run suspend the task holding it: a lock
        # that tells tasks on one event loop apart, as a threading.RLock does not.
        self._lock = TaskLock()
        # Kept in (createdAt, sequence, key) order: iteration order is listing order.
        self._entries: dict[str, _Record] = {}
        self._mark: ChangeMark | None = None  # how far into the store's history we have read
        self._clock = 0  # the last version written, without a store
        self._expiring = False  # whether an entry held has a TTL (see _drop_expired)
        self._listeners: list[Listener] = []
        self._refresh()

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
        """Writes an entry and returns it; an existing key keeps its ``created_at`` and place.

        Raises:
            InvalidInputError: Bad key or kind, or metadata that is not a string; or this is a
                ``scope="thread"`` memory, which keeps no entries of its own (write into a
                conversation's: :meth:`for_thread`).
            UnsupportedTypeError / NonFiniteNumberError: ``value`` is not JSON data.
            LimitExceededError: The value is over ``max_value_bytes``, or the key is new and
                the memory already holds ``max_entries`` entries.
        """
        if self.scope == "thread":
            raise InvalidInputError(_NOT_A_CONVERSATION)
        return self._put(key, kind, value, source, title, description)[0].entry()

    def _put(
        self,
        key: str,
        kind: Kind,
        value: Any,
        source: str | None,
        title: str | None,
        description: str | None,
        expected: int | None = None,
    ) -> tuple[_Record, _Replaced | None]:
        """:meth:`set`, returning the record held (``memory_write`` answers from it without
        decoding the value again) and what it replaced. Given ``expected``, writes only over
        that version of the entry (0: none stored), else raises :class:`_Conflict`."""
        if not isinstance(key, str) or not key:
            raise InvalidInputError(f"key must be a non-empty str, got {key!r}")
        check_encodable(key, "key")
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
            limit = MAX_TEXT_CHARS[field_name]
            if field_value is not None and len(field_value) > limit:
                raise LimitExceededError(
                    f"{field_name} is {len(field_value):,} characters; the limit is {limit:,}",
                    setting=field_name,
                    size=len(field_value),
                    limit=limit,
                )
        # Encoding now takes the value out of the caller's hands: later changes to it are theirs.
        encoded = codec.dumps(strip_unsafe_keys(value), validated=True)
        if len(encoded) > self.max_value_bytes:
            raise LimitExceededError(
                f"value for {key!r} is {len(encoded):,} bytes of JSON; the limit is "
                f"{self.max_value_bytes:,} (max_value_bytes)",
                setting="max_value_bytes",
                size=len(encoded),
                limit=self.max_value_bytes,
            )
        with self._lock:
            # No catch-up first: a key another server wrote since keeps its createdAt and place
            # all the same (the conditional write fails over to one that reads the stored row).
            old = self._entries.get(key)
            if expected is not None and (old.version if old else 0) != expected:
                self._refresh()  # the caller may name a version this instance has not read
                old = self._entries.get(key)
                # With a store, its conditional write decides (a row that is no entry is
                # held by none, and is set aside).
                if self._store is None and (old.version if old else 0) != expected:
                    raise _Conflict(key, expected, old)
            if old is None and self._store is not None:
                # Counted with what other servers wrote or deleted since this instance last
                # looked: its own view alone let each server add max_entries of its own.
                self._refresh()
                old = self._entries.get(key)
            if old is None and len(self._entries) >= self.max_entries:
                raise LimitExceededError(
                    f"shared memory already holds {len(self._entries):,} entries, its limit "
                    "(max_entries); overwrite an existing key or clear old entries",
                    setting="max_entries",
                    size=len(self._entries) + 1,
                    limit=self.max_entries,
                )
            last = next(reversed(self._entries.values()), None)
            meta = MemoryEntry(
                key=key,
                kind=kind,
                value=None,
                source=source,
                title=title,
                description=description,
                created_at=old.meta.created_at if old else int(time.time() * 1000),
                value_bytes=len(encoded),
            )
            sequence = old.sequence if old else (last.sequence + 1 if last else 1)
            stamp = None
            if self._store is not None:
                meta, sequence, stamp, replaced = self._write_through(
                    meta, encoded, sequence, old, expected
                )
                version = stamp[0]
            else:
                # In process: one counter for the memory, so a key's versions never repeat.
                self._clock += 1
                version = self._clock
                replaced = _Replaced(old.meta.source, old.version) if old else None
            record = _Record(meta, encoded, sequence, stamp, version)
            if not self._hold(record, old):
                self._sort()
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(record.entry())
            except Exception:
                # A UI panel or mirror failing must never break the write that fed it.
                logger.exception("shared-memory listener failed on %s", key)
        return record, replaced

    def _write_through(
        self,
        meta: MemoryEntry,
        encoded: bytes,
        sequence: int,
        old: _Record | None,
        expected: int | None,
    ) -> tuple[MemoryEntry, int, tuple[int, float], _Replaced | None]:
        """Stores the entry; returns its metadata and sequence number as stored (those of the
        entry another process stored under the key since the refresh, if one did), the
        store's stamp and what the write replaced. Given ``expected``, writes only over that
        version (a row that is no entry counts as none), else raises :class:`_Conflict`."""
        assert self._store is not None
        # valueBytes and the empty fields keep the row readable by versions that expect them.
        ours = {
            "kind": meta.kind,
            "value": orjson.loads(encoded),  # JSON data already: validated=True below
            "source": meta.source,
            "title": meta.title,
            "description": meta.description,
            "createdAt": meta.created_at,
            "sequence": sequence,
            "valueBytes": meta.value_bytes,
        }
        held = old.stamp[0] if old is not None and old.stamp is not None else 0
        item = self._store.put_if_version(
            self._namespace,
            meta.key,
            ours,
            expected_version=held if expected is None else expected,
            validated=True,
        )
        if item is not None:
            done = _Replaced(old.meta.source, held) if old is not None and held else None
            return meta, sequence, (item.version, item.created_at), done
        # Written by someone else since the refresh (or held there malformed): read it, keep
        # its position, and write, in one transaction. A row that is no entry is copied aside
        # first, so the write replaces nothing without a trace.
        current = self._store.get(self._namespace, meta.key)
        # Not an entry by the same test reads apply (an unknown kind, a title that is no
        # string...): every row reads skip is one a write copies aside.
        if current is not None and _record(current, None) is None:
            if expected:  # the entry read at that version is gone: none is there now
                self._refresh()
                raise _Conflict(meta.key, expected, self._entries.get(meta.key))
            aside = (*self._namespace, "quarantine")
            self._store.put(aside, f"{meta.key}@{time.time():.6f}", current.value)
        elif expected is not None:
            self._refresh()  # the caller is told what is stored now
            raise _Conflict(meta.key, expected, self._entries.get(meta.key))
        prior: tuple[int, int] | None = None
        replaced: _Replaced | None = None

        def write(current: Any) -> dict[str, Any]:
            nonlocal prior, replaced
            prior = _position(current)
            if prior is None:
                replaced = None
                return ours
            source = current.get("source")
            replaced = _Replaced(source if isinstance(source, str) else None, 0)
            return {**ours, "createdAt": prior[0], "sequence": prior[1]}

        item = self._store.update(self._namespace, meta.key, write)
        if prior is not None:
            meta, sequence = replace(meta, created_at=prior[0]), prior[1]
        if replaced is not None:
            # The update replaced the entry in its transaction: the version before it.
            replaced = _Replaced(replaced.source, item.version - 1)
        return meta, sequence, (item.version, item.created_at), replaced

    def clear(self, *, kind: Kind | None = None, key_prefix: str | None = None) -> int:
        """Removes every entry, or those of a kind and/or under a key prefix; returns how many."""
        with self._lock:
            doomed = self._matching(kind=kind, key_prefix=key_prefix)
            cleared = 0
            for record in doomed:
                key = record.meta.key
                if self._store is not None:
                    version = record.stamp[0] if record.stamp is not None else 0
                    # Only the version read: an entry rewritten since is newer than the clear.
                    if not version:
                        version = self._version_holding(record)  # read past an unreadable row
                    if not version or not self._store.delete_if_version(
                        self._namespace, key, expected_version=version
                    ):
                        continue
                del self._entries[key]
                cleared += 1
            if cleared < len(doomed):
                self._refresh()  # the entries rewritten meanwhile, as stored now
            return cleared

    def _version_holding(self, record: _Record) -> int:
        """The stored version of ``record``'s key if it still holds that entry as read (its
        value and metadata), else 0: for an entry read without its version."""
        assert self._store is not None
        current = self._store.get(self._namespace, record.meta.key)
        stored = None if current is None else _record(current, None)
        if stored is None or (stored.meta, stored.encoded) != (record.meta, record.encoded):
            return 0
        return current.version if current is not None else 0

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Calls ``listener(entry)`` after every write through this instance; returns the
        function that unsubscribes."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    # Reading --------------------------------------------------------------------------------

    def get(self, key: str) -> MemoryEntry | None:
        """The entry under ``key`` (the full key, e.g. ``"task:research"``), with its kind,
        title, source and version, or None; what other writers stored is caught up with first.
        """
        record = self._find(key)
        return None if record is None else record.entry()

    def get_value(self, key: str) -> Any:
        """The value under ``key``, the caller's own copy; None when the key holds nothing
        (or holds a JSON null: :meth:`has` tells the two apart)."""
        record = self._find(key)
        return None if record is None else orjson.loads(record.encoded)

    def has(self, key: str) -> bool:
        """Whether ``key`` holds an entry."""
        return self._find(key) is not None

    def __len__(self) -> int:
        with self._lock:
            self._refresh()
            return len(self._entries)

    def snapshot(self) -> builtins.list[MemoryEntry]:
        """Every entry, oldest first (first-write order: an overwrite keeps its place)."""
        return [record.entry() for record in self._matching()]

    def list(
        self,
        *,
        kind: str | Sequence[str] | None = None,
        keys: Iterable[str] | None = None,
        key_prefix: str | None = None,
        sources: Iterable[str] | None = None,
    ) -> builtins.list[MemoryEntry]:
        """Entries matching every given filter, oldest first."""
        matches = self._matching(kind=kind, keys=keys, key_prefix=key_prefix, sources=sources)
        return [record.entry() for record in matches]

    def _find(self, key: str) -> _Record | None:
        if not isinstance(key, str):
            raise InvalidInputError(f"key must be a str, got {type(key).__name__}")
        with self._lock:
            self._refresh()
            return self._entries.get(key)

    def _matching(
        self,
        *,
        kind: str | Sequence[str] | None = None,
        keys: Iterable[str] | None = None,
        key_prefix: str | None = None,
        sources: Iterable[str] | None = None,
    ) -> builtins.list[_Record]:
        # A workflow holds tens of entries: one pass over them beats keeping indexes in step.
        kinds = _kinds(kind)
        key_set = _texts(keys, "keys")
        source_set = _texts(sources, "sources")
        if key_prefix is not None and not isinstance(key_prefix, str):
            raise InvalidInputError(f"key_prefix must be a str, got {type(key_prefix).__name__}")
        with self._lock:
            self._refresh()
            return [
                record
                for record in self._entries.values()
                if (kinds is None or record.meta.kind in kinds)
                and (key_set is None or record.meta.key in key_set)
                and (key_prefix is None or record.meta.key.startswith(key_prefix))
                and (source_set is None or record.meta.source in source_set)
            ]

    def copy(self, *, entries: bool = False) -> SharedMemory:
        """An isolated memory for a sub-run: empty unless ``entries=True`` copies them on
        purpose. Never shares a store: the copy lives in memory."""
        clone = self._alike(None, self._namespace)
        if entries:
            with self._lock:
                self._refresh()
                # Records are immutable and hold values only as JSON text: safe to share.
                clone._entries = dict(self._entries)
                clone._clock = max((r.version for r in clone._entries.values()), default=0)
                clone._expiring = self._expiring
        return clone

    def _alike(self, store: Store | None, namespace: Namespace) -> SharedMemory:
        """A memory of this one's name, slot, budget and limits, in ``store`` (None: in the
        process) under ``namespace``."""
        return SharedMemory(
            store=store,
            namespace=namespace,
            name=self.name,
            slot=self.slot,
            budget=self.budget,
            max_value_bytes=self.max_value_bytes,
            max_entries=self.max_entries,
            max_run_writes=self.max_run_writes,
            max_run_bytes=self.max_run_bytes,
        )

    # One memory per conversation (scope "thread") ---------------------------------------------

    def for_thread(self, thread_id: str, resource_id: str | None = None) -> SharedMemory:
        """The memory of one conversation of a ``scope="thread"`` memory: what runs with this
        ``thread_id`` (and this ``resource_id``, the user, if their runs name one) read and
        write, for executors to write results into. A plain ``"workflow"`` memory with the
        same limits, kept in the same store."""
        if self.scope != "thread":
            raise InvalidInputError("for_thread is for SharedMemory(scope='thread')")
        thread = checked_scope_id("thread_id", thread_id)
        if thread is None:
            raise InvalidInputError("for_thread needs a thread_id")
        namespace = self._conversation(thread, checked_scope_id("resource_id", resource_id))
        with self._conversations_lock:
            memory = self._conversations.get(namespace)
            if memory is not None:
                self._conversations.move_to_end(namespace)
                return memory
        memory = self._alike(self._store, namespace)
        with self._conversations_lock:
            memory = self._conversations.setdefault(namespace, memory)
            self._conversations.move_to_end(namespace)
            while len(self._conversations) > CONVERSATIONS_KEPT:
                self._conversations.popitem(last=False)
        return memory

    def _conversation(self, thread: str, user: str | None) -> Namespace:
        # Thread ids are the caller's and often short ("1"): two users' conversations that
        # share one keep their own memory.
        if user is not None:
            return (*self._namespace, _USER_THREAD, user, thread)
        return (*self._namespace, "thread", thread)

    def forget(self, store: Store, *, resource_id: str | None, thread_id: str | None) -> int:
        """Erases what runs with these ids keep (``stack.forget``): with ``scope="thread"``,
        that conversation's memory, or with ``resource_id`` alone every conversation of that
        user, from this memory's store. A ``"workflow"`` memory belongs to the workflow, not
        to a user: nothing is erased. Returns how many entries went."""
        if self.scope != "thread":
            return 0
        assert self._store is not None
        if resource_id is not None:
            prefix = (*self._namespace, _USER_THREAD, resource_id)
            if thread_id is not None:
                prefix = (*prefix, thread_id)
        elif thread_id is not None:
            prefix = (*self._namespace, "thread", thread_id)
        else:
            return 0
        with self._conversations_lock:
            for namespace in [n for n in self._conversations if n[: len(prefix)] == prefix]:
                del self._conversations[namespace]
        return erase(self._store, prefix)

    # Following the store ----------------------------------------------------------------------

    def _refresh(self) -> None:
        """Catches up with what was written to or deleted from the store since the last look,
        by this instance or any other, and drops the entries whose TTL ran out. Callers hold
        the lock."""
        if self._store is not None:
            self._catch_up()
        if self._expiring:
            self._drop_expired()

    def _drop_expired(self) -> None:
        """Drops the entries whose TTL (a row other code wrote with one) has run out: the
        store counts them absent, and a TTL running out is no change it reports."""
        now = time.time()
        held = self._entries.values()
        expired = [r.meta.key for r in held if r.expires_at is not None and r.expires_at <= now]
        for key in expired:
            del self._entries[key]
        self._expiring = any(r.expires_at is not None for r in self._entries.values())

    def _catch_up(self) -> None:
        assert self._store is not None
        try:
            changes = self._store.changes(self._namespace, self._mark)
        except InvalidJSONError:
            changes = self._read_whole()
        self._mark = changes.mark
        if changes.complete:
            held = self._entries
            records = [_record(item, held.get(item.key)) for item in changes.items]
            ordered = sorted((r for r in records if r is not None), key=lambda r: r.order)
            self._entries = {record.meta.key: record for record in ordered}
            self._expiring = any(r.expires_at is not None for r in ordered)
            return
        for key in changes.removed:
            self._entries.pop(key, None)
        in_order = True
        for item in changes.items:
            old = self._entries.get(item.key)
            record = _record(item, old)
            if record is None:
                self._entries.pop(item.key, None)
            elif record is not old:
                in_order = self._hold(record, old) and in_order
                self._expiring = self._expiring or record.expires_at is not None
        if not in_order:
            self._sort()

    def _read_whole(self) -> Changes:
        """Every entry, for a namespace holding a row another program made unreadable (not
        JSON), which the store cannot hand over as an item: read as text, and that row skipped
        with a warning, never deleted. The entries come without their store stamps, so each is
        decoded afresh and a write over one reads the stored row first."""
        assert self._store is not None
        items: builtins.list[Item] = []

        def take(batch: builtins.list[EncodedItem]) -> None:
            for key, text, expires_at in batch:
                try:
                    value = orjson.loads(text)
                except orjson.JSONDecodeError as exc:
                    logger.warning(
                        "skipping shared-memory entry %r stored as malformed JSON: %s", key, exc
                    )
                    continue
                items.append(item_of(self._namespace, key, value, 0, 0.0, 0.0, expires_at))

        read = self._store.encoded_each(self._namespace, take)
        return Changes(read.mark, items, [], True)

    def _hold(self, record: _Record, old: _Record | None) -> bool:
        """Holds ``record`` in place of ``old``; returns whether the entries are still in
        order (a new key lands last, an overwrite where the old record was)."""
        last = next(reversed(self._entries.values()), None)
        self._entries[record.meta.key] = record
        if old is None:
            return last is None or last.order < record.order
        return old.order == record.order

    def _sort(self) -> None:
        # Only when another instance's entry lands among ours: rare, over tens of entries.
        self._entries = dict(sorted(self._entries.items(), key=lambda pair: pair[1].order))

    # The model's tools ------------------------------------------------------------------------

    def tool_list(self, args: dict[str, Any]) -> dict[str, Any]:
        """``memory_list``: metadata of the newest 200 matching entries, oldest of them first."""
        return shared_tools.tool_list(self, args)

    def tool_read(self, args: dict[str, Any], seen: dict[str, int] | None = None) -> dict[str, Any]:
        """``memory_read``: the entries of the given keys, values included (with their
        ``version``), and the keys missing. ``seen`` (the caller's) takes the version read of
        each key, 0 for a missing one: a later ``memory_write`` of the caller writes only over
        that version."""
        return shared_tools.tool_read(self, args, seen)

    def tool_write(
        self, args: dict[str, Any], seen: dict[str, int] | None = None
    ) -> dict[str, Any]:
        """``memory_write``: stores the value under ``shared:<key>``, whatever key is given.

        Over a key the caller read (``seen``), it writes only if the entry is still at the
        version read; ``expected_version`` names the version to replace instead, and
        ``overwrite: true`` replaces whatever is there (the two together are refused as
        ``invalid_arguments``). Refused, the tool answers ``conflict`` and nothing is written.
        The result names the entry it replaced (``replaced``: its ``source`` and ``version``)
        and the new ``version``."""
        return shared_tools.tool_write(self, args, seen)

    def tools_for_model(self) -> builtins.list[Tool]:
        """The three tools, with their argument schemas (read-only: built once, shared). The
        tools of one call are one caller: its ``memory_write`` writes only over the versions
        its ``memory_read`` read."""
        return shared_tools.tools_for(self, {})

    # Layer protocol -------------------------------------------------------------------------

    def init(self, ctx: RunContext) -> SharedMemoryHandle:
        if self.scope == "workflow":
            return SharedMemoryHandle(self, ctx.tokens)
        if not ctx.thread_id:
            raise InvalidInputError(
                "shared memory with scope 'thread' needs stack.run(thread_id=...)"
            )
        return SharedMemoryHandle(self.for_thread(ctx.thread_id, ctx.resource_id), ctx.tokens)

    def recall(self, handle: SharedMemoryHandle, budget: int) -> builtins.list[Message]:
        """The "Memory Tools" section, and the upstream hint within what is left of
        ``budget``. The section is fixed template, shown whole or, in a budget too small
        for it, not at all."""
        section = exact_count(handle.tokens, MEMORY_TOOLS_SECTION)
        if section > budget:
            return []
        room = budget - section - 2  # the blank line between them: at most 2 tokens
        while handle.upstream and room > 0:
            hint = handle.upstream_hint(room)
            if not hint:
                break
            item = f"{MEMORY_TOOLS_SECTION}\n\n{hint}"
            # Counted in parts; the item as a whole is counted exactly before it is shown.
            over = exact_count_over(handle.tokens, item, budget)
            if over is None:
                return [{"content": item}]
            room -= over - budget
        return [{"content": MEMORY_TOOLS_SECTION}]

    def observe(self, handle: SharedMemoryHandle, message: Message) -> None:
        """Nothing to do: the model writes through ``memory_write``."""

    def tools(self, handle: SharedMemoryHandle) -> builtins.list[Tool]:
        """:meth:`SharedMemory.tools_for_model`, ``memory_write`` within the run's quotas, the
        run one caller."""
        return shared_tools.tools_for(handle.memory, handle.seen, handle.metered)

    def on_spawn(self, handle: SharedMemoryHandle, child: RunContext) -> SharedMemoryHandle:
        """A spawned sub-run shares the workflow's memory (it is a step of the same workflow);
        use :meth:`copy` for an isolated one."""
        return SharedMemoryHandle(handle.memory, handle.tokens)

    def close(self, handle: SharedMemoryHandle, error: BaseException | None) -> None:
        """Nothing to flush: every write is already stored."""


class SharedMemoryHandle:
    """A run's view of the shared memory: the memory itself plus the upstream keys this run's
    step declared (shown to the model as a hint, values not included)."""

    def __init__(self, memory: SharedMemory, tokens: TokenCounter | None = None) -> None:
        self.memory = memory
        self.tokens = tokens if tokens is not None else EstimatingCounter()
        self.upstream: list[str] = []
        # The version of each key this run's model last read or wrote (0: read as missing).
        self.seen: dict[str, int] = {}
        self.writes = 0  # memory_write calls this run's model made that stored something
        self.written_bytes = 0
        # Parallel tool calls of one run: each reserves its share of the quotas before it
        # writes, so calls that each fit cannot pass them together.
        self._quota_lock = threading.Lock()

    def metered(self, write: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
        """``memory_write`` within the run's quotas (``max_run_writes`` calls and
        ``max_run_bytes`` of values per run): a model cannot grow the memory without bound in
        one run."""
        memory = self.memory

        def handler(args: dict[str, Any]) -> Any:
            try:
                size = len(codec.dumps(args.get("value")))
            except (InvalidInputError, TypeError, ValueError):
                size = 0  # the write itself names what is wrong with the value
            with self._quota_lock:
                for setting, used, adding, limit in (
                    ("max_run_writes", self.writes, 1, memory.max_run_writes),
                    ("max_run_bytes", self.written_bytes, size, memory.max_run_bytes),
                ):
                    if used + adding > limit:
                        raise LimitExceededError(
                            f"this run already wrote {used:,} of its {limit:,} ({setting}); "
                            "write fewer, larger entries, or finish the step",
                            setting=setting,
                            size=used + adding,
                            limit=limit,
                        )
                self.writes += 1
                self.written_bytes += size
            try:
                return write(args)
            except BaseException:
                with self._quota_lock:  # nothing was stored: give the share back
                    self.writes -= 1
                    self.written_bytes -= size
                raise

        return handler

    def require(self, keys: Iterable[str]) -> None:
        """Declares upstream keys (``step.dependsOn``, parent ``task.dependsOn``)."""
        declared = _texts(keys, "keys")
        if declared is None:
            raise InvalidInputError("keys must be a list of str, got NoneType")
        self.upstream = list(dict.fromkeys([*self.upstream, *declared]))

    def upstream_hint(self, budget: int | None = None) -> str:
        """The "Required upstream memory" lines: each declared key and its title, if any, on
        one line; within ``budget`` tokens (the whole hint counted exactly), the keys past it
        counted, not listed. Empty when not even the heading fits."""
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
            raise InvalidInputError(f"budget must be an int or None, got {budget!r}")
        if not self.upstream:
            return ""
        lines = []
        for key in self.upstream:
            record = self.memory._find(key)  # the title only: no value decoded
            title = one_line(record.meta.title or "").strip() if record is not None else ""
            lines.append(f"- {key} — {title[:HINT_TITLE_CHARS]}" if title else f"- {key}")
        if budget is None:
            return "\n".join([UPSTREAM_HEADER, *lines])
        # Lines counted one by one pick how many are shown; the hint as a whole is then
        # counted exactly, and shows one key fewer until it fits.
        used = exact_count(self.tokens, UPSTREAM_HEADER)
        shown = 0
        for line in lines:
            used += exact_count(self.tokens, line) + 1
            if used > budget:
                break
            shown += 1
        while shown >= 0:
            more = len(lines) - shown
            tail = [f"- ... {more} more; call `memory_list`"] if more else []
            hint = "\n".join([UPSTREAM_HEADER, *lines[:shown], *tail])
            if exact_count(self.tokens, hint) <= budget:
                return hint
            shown -= 1
        return ""


def _texts(values: Any, option: str) -> dict[str, None] | None:
    """A filter's or a declaration's strings, in order and once each (None for None): a string
    would be taken one key per character."""
    if values is None:
        return None
    if isinstance(values, (str, bytes, bytearray)) or not isinstance(values, Iterable):
        raise InvalidInputError(f"{option} must be a list of str, got {type(values).__name__}")
    items = list(values)
    for value in items:
        if not isinstance(value, str):
            raise InvalidInputError(f"{option} must be a list of str, got an item {value!r}")
    return dict.fromkeys(items)


__all__ = ["MemoryEntry", "SharedMemory", "SharedMemoryHandle", "memory_keys"]
