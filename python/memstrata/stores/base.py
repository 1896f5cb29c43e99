"""The store protocol: a namespaced JSON document store with an atomic read-modify-write.

Namespaces are tuples of labels (``("mind", "research-agent")``); values are JSON data. Every
backend (``InMemoryStore``, ``SQLiteStore`` and ``PostgresStore``) implements
:class:`Store` and passes the same conformance suite (``tests/test_stores.py``).

Semantics every backend guarantees:

* Values are copied in and out: mutating a value after ``put`` or after ``get`` never changes
  what is stored. The item a write returns holds the value that was written (the caller's
  object, not a decoded copy: decoding it again would cost as much as the write).
* ``update(namespace, key, fn)`` runs ``fn(current_value_or_None)`` and stores its result in one
  transaction: two processes updating the same record never lose each other's edits. If ``fn``
  raises, nothing is written and the exception propagates.
* An item whose TTL has passed is never returned (``get``, ``list``, ``update`` and ``update_many``
  treat it as absent); ``purge_expired`` deletes such rows.
* Timestamps are Unix seconds (float); ``version`` starts at 1 and grows by 1 on every write.
  A key written again after it expired or was deleted is a new item (a new ``created_at``) but
  numbers on from the versions it had, so a version a writer held from before never matches
  the new value and ``put_if_version`` over it fails. A deleted key's last version is kept
  with its tombstone: past ``tombstone_retention`` the key starts at 1 again.
* Change tracking has one concept, the :class:`ChangeMark`: a point in a namespace's write
  history. ``change_mark(namespace)`` makes one; ``changes(namespace, since)`` returns what was
  written or deleted after it, with a new mark to pass next time, so a caller that keeps a
  namespace's items between calls never re-reads what it holds; ``update_many_since`` reads the
  items written after a mark and writes in the same transaction, serialised with every other
  ``update_many_since`` of that namespace in any process. Marks order writes by the database's
  own commit order (a write sequence, or PostgreSQL's transaction ids), never by a client's
  clock, and finding what changed reads an index, not the namespace.
* Deletions (``delete``, ``purge_expired``) leave a tombstone (namespace, key, position) so that
  ``changes`` can report them. ``purge_expired`` prunes tombstones older than the store's
  ``tombstone_retention``; a mark from before a pruned tombstone is answered with the whole
  namespace (``complete=True``) rather than with changes that might miss a deletion.
* ``stamp(namespace, key)`` is a live item's ``(version, created_at)``, read without its value.
* A copy between stores (``memstrata.stores.copy``) reads with ``list_after`` (``list``'s order,
  a page from a position) and writes with ``restore_items`` (items as another store held them,
  versions and times kept, only where a key holds no live item).
"""

from __future__ import annotations

import builtins
import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, Union

import orjson

from memstrata._bridge import await_, bridged, in_thread, pinned
from memstrata.exceptions import InvalidInputError
from memstrata.stores import codec

Namespace = tuple[str, ...]
JSONValue = Any
Updater = Callable[[JSONValue], JSONValue]
_StoreT = TypeVar("_StoreT", bound="Store")
_T = TypeVar("_T")

# Labels are joined with the unit separator into one indexable text column, so it (and NUL,
# which some drivers truncate at) cannot appear inside a label.
NAMESPACE_SEPARATOR = "\x1f"
MAX_NAMESPACE_DEPTH = 16
MAX_LABEL_LENGTH = 256
MAX_KEY_LENGTH = 1024
# Seconds a deletion's tombstone is kept by default (see Store.purge_expired and changes): a
# caller whose mark is older gets the whole namespace again instead of the changes.
TOMBSTONE_RETENTION = 86_400.0


@dataclass(frozen=True)
class Item:
    """One stored value and its bookkeeping."""

    namespace: Namespace
    key: str
    value: JSONValue
    version: int
    created_at: float
    updated_at: float
    expires_at: float | None = None


_new_object = object.__new__


def item_of(
    namespace: Namespace,
    key: str,
    value: JSONValue,
    version: int,
    created_at: float,
    updated_at: float,
    expires_at: float | None,
) -> Item:
    """``Item(namespace, key, value, version, created_at, updated_at, expires_at)``, for a
    store's bulk reads: the same object, built without the frozen dataclass's seven
    ``object.__setattr__`` calls (a third of the cost, which a 100,000-entry read feels)."""
    item: Item = _new_object(Item)
    fields = item.__dict__
    fields["namespace"] = namespace
    fields["key"] = key
    fields["value"] = value
    fields["version"] = version
    fields["created_at"] = created_at
    fields["updated_at"] = updated_at
    fields["expires_at"] = expires_at
    return item


@dataclass(frozen=True)
class ChangeMark:
    """A point in a namespace's write history, made by :meth:`Store.change_mark`.

    Opaque: only a store of the same backend over the same data understands it. ``position``
    is a write sequence number (``memory``, ``sqlite``) or a PostgreSQL snapshot (``postgres``).
    """

    backend: str
    namespace: Namespace
    position: str


@dataclass(frozen=True)
class Changes:
    """What a namespace holds, or what changed in it, as :meth:`Store.changes` reports it.

    Attributes:
        mark: Where this answer stands in the namespace's history: pass it back as ``since``
            to get only what changes after it (a change racing with this call may come again;
            none is left out).
        items: Live items of exactly the namespace written after ``since``, ordered by key;
            every live item when ``complete``.
        removed: Keys deleted, or written after ``since`` and expired already, ordered by key;
            never a key that is also in ``items``. Empty when ``complete``.
        complete: ``items`` is the namespace's whole content (``since`` was None, or too old
            for the tombstones kept): replace what you hold with it.
    """

    mark: ChangeMark
    items: list[Item]
    removed: list[str]
    complete: bool


@dataclass(frozen=True)
class GetMany:
    """A read for :meth:`Store.read_many`: what ``get_many(namespace, keys)`` answers."""

    namespace: Namespace
    keys: tuple[str, ...]

    def __post_init__(self) -> None:
        # Reads are looked up by value (a run hands each layer {read: answer}): hashable.
        for name in ("namespace", "keys"):
            if isinstance(getattr(self, name), builtins.list):
                object.__setattr__(self, name, tuple(getattr(self, name)))


@dataclass(frozen=True)
class ChangesSince:
    """A read for :meth:`Store.read_many`: what ``changes(namespace, since)`` answers."""

    namespace: Namespace
    since: ChangeMark | None = None

    def __post_init__(self) -> None:
        if isinstance(self.namespace, builtins.list):
            object.__setattr__(self, "namespace", tuple(self.namespace))


# ``(key, value as UTF-8 JSON text, expires_at)``: an item as :meth:`Store.encoded_each` hands
# it over (a store may give the text as ``str``).
EncodedItem = tuple[str, Union[bytes, str], Union[float, None]]
# Items per batch when a store hands encoded items over.
ENCODED_BATCH = 256


def _hand_encoded(
    items: Sequence[Item], each: Callable[[builtins.list[EncodedItem]], None]
) -> None:
    """``items`` encoded and handed to ``each`` in batches of ``ENCODED_BATCH``."""
    for start in range(0, len(items), ENCODED_BATCH):
        each(
            [
                (item.key, orjson.dumps(item.value), item.expires_at)
                for item in items[start : start + ENCODED_BATCH]
            ]
        )


Read = Union[GetMany, ChangesSince]
# What read_many answers a GetMany (the live items by key) or a ChangesSince.
Answer = Union[dict[str, Item], Changes]


# What update_many_since asks of its caller: the items changed since the mark -> the updates.
Planner = Callable[[list[Item]], Mapping[str, Updater]]


@dataclass(frozen=True)
class ConditionalWrite:
    """One write of :meth:`Store.put_many_if_versions`: ``value`` for a key, only if the key's
    live item is at ``expected_version`` (0: absent). ``encoded`` is ``value``'s JSON text as
    the caller already holds it, as for :meth:`Store.put_if_version`."""

    value: JSONValue
    expected_version: int
    encoded: bytes | None = None


def validate_namespace(namespace: Sequence[str], *, allow_empty: bool = False) -> Namespace:
    """Returns the namespace as a tuple, or raises InvalidInputError naming the bad label."""
    if not isinstance(namespace, (tuple, list)):
        raise InvalidInputError(f"namespace must be a tuple of str, got {type(namespace).__name__}")
    if not namespace and not allow_empty:
        raise InvalidInputError("namespace must have at least one label")
    if len(namespace) > MAX_NAMESPACE_DEPTH:
        raise InvalidInputError(
            f"namespace has {len(namespace)} labels; the limit is {MAX_NAMESPACE_DEPTH}"
        )
    for i, label in enumerate(namespace):
        # The common label (a short ASCII str) passes here, without a message built for a
        # refusal that does not come; any other is checked in full.
        if not (
            type(label) is str
            and 0 < len(label) <= MAX_LABEL_LENGTH
            and label.isascii()
            and NAMESPACE_SEPARATOR not in label
            and "\x00" not in label
        ):
            validate_label(label, f"namespace label {i}")
    return tuple(namespace)


def validate_label(label: object, what: str) -> str:
    """Returns ``label`` if a store can keep it as one namespace label, else raises
    InvalidInputError naming it as ``what``."""
    if not isinstance(label, str):
        raise InvalidInputError(f"{what} must be str, got {type(label).__name__}")
    if not label:
        raise InvalidInputError(f"{what} is empty")
    if len(label) > MAX_LABEL_LENGTH:
        raise InvalidInputError(
            f"{what} is {len(label)} characters; the limit is {MAX_LABEL_LENGTH}"
        )
    if NAMESPACE_SEPARATOR in label or "\x00" in label:
        raise InvalidInputError(f"{what} contains a NUL or unit-separator (\\x1f) character")
    check_encodable(label, what)
    return label


def check_encodable(text: str, what: str) -> None:
    """Refuses (InvalidInputError naming ``what``) a text holding a lone surrogate, which a
    JSON ``"\\ud800"`` escape decodes to: the SQL stores keep text as UTF-8, which cannot hold
    one, and every backend refuses the same ids (the in-memory store would keep one, and the
    vector index refuses it)."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInputError(
                f"{what} is not valid Unicode: a lone surrogate {text[exc.start]!r} at "
                f"character {exc.start}"
            ) from None


def validate_key(key: str) -> str:
    """Returns the key, or raises InvalidInputError saying what is wrong with it."""
    if not isinstance(key, str):
        raise InvalidInputError(f"key must be str, got {type(key).__name__}")
    if not key:
        raise InvalidInputError("key is empty")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidInputError(f"key is {len(key)} characters; the limit is {MAX_KEY_LENGTH}")
    if "\x00" in key:
        raise InvalidInputError("key contains a NUL character")
    check_encodable(key, "key")
    return key


def validate_ttl(ttl: float | None) -> float | None:
    """TTL in seconds: a positive finite number, or None for no expiry."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise InvalidInputError(f"ttl must be a number of seconds, got {type(ttl).__name__}")
    if not math.isfinite(ttl) or ttl <= 0:
        raise InvalidInputError(f"ttl must be a positive finite number of seconds, got {ttl!r}")
    return float(ttl)


def validate_version(expected_version: int) -> int:
    if (
        isinstance(expected_version, bool)
        or not isinstance(expected_version, int)
        or expected_version < 0
    ):
        raise InvalidInputError(
            f"expected_version must be a non-negative int, got {expected_version!r}"
        )
    return expected_version


def validate_page(limit: int, offset: int) -> None:
    """Both non-negative ints that a database counts in: SQLite's and PostgreSQL's integers
    stop at 2**63 - 1."""
    for name, value in (("limit", limit), ("offset", offset)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
            raise InvalidInputError(
                f"{name} must be a non-negative int up to 2**63 - 1, got {value!r}"
            )


def mark_position(since: ChangeMark, backend: str, namespace: Namespace) -> str:
    """The position of a mark this backend made for ``namespace``, or InvalidInputError saying
    what it got."""
    if not isinstance(since, ChangeMark) or since.backend != backend:
        raise InvalidInputError(
            f"since must be a ChangeMark from this {backend} store's change_mark(), got {since!r}"
        )
    if since.namespace != namespace:
        raise InvalidInputError(
            f"since marks namespace {since.namespace!r}, not {namespace!r}: take the mark with "
            "change_mark() of the namespace it is used for"
        )
    return since.position


def sequence_position(since: ChangeMark, backend: str, namespace: Namespace) -> int:
    """The write sequence number a ``memory`` or ``sqlite`` mark holds."""
    position = mark_position(since, backend, namespace)
    if not position.isdigit():
        raise InvalidInputError(f"since holds {position!r}, not a {backend} sequence number")
    return int(position)


def validate_writes(writes: Any) -> builtins.list[str]:
    """The keys of a ``put_many_if_versions`` mapping, each checked, with its write's version."""
    if not isinstance(writes, Mapping):
        raise InvalidInputError(
            f"writes must be a mapping of key to ConditionalWrite, got {type(writes).__name__}"
        )
    keys = []
    for key, write in writes.items():
        if not isinstance(write, ConditionalWrite):
            raise InvalidInputError(
                f"writes[{key!r}] must be a ConditionalWrite, got {type(write).__name__}"
            )
        validate_version(write.expected_version)
        keys.append(validate_key(key))
    return keys


def validate_after(after: Any) -> tuple[Namespace, str] | None:
    """A ``list_after`` position: None, or a ``(namespace, key)`` pair, each checked."""
    if after is None:
        return None
    if not isinstance(after, (tuple, builtins.list)) or len(after) != 2:
        raise InvalidInputError(f"after must be None or a (namespace, key) pair, got {after!r}")
    return validate_namespace(after[0]), validate_key(after[1])


def validate_restored(items: Any) -> builtins.list[tuple[Item, bytes]]:
    """The items of a ``restore_items``, each checked, with its value encoded; or
    InvalidInputError naming the first bad one."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise InvalidInputError(f"items must be a list of Item, got {type(items).__name__}")
    seen: set[tuple[Namespace, str]] = set()
    checked = []
    for i, item in enumerate(items):
        if not isinstance(item, Item):
            raise InvalidInputError(f"items[{i}] must be an Item, got {type(item).__name__}")
        record = (validate_namespace(item.namespace), validate_key(item.key))
        if record in seen:
            raise InvalidInputError(
                f"items[{i}] names namespace {item.namespace!r} key {item.key!r} again"
            )
        seen.add(record)
        version = item.version
        if isinstance(version, bool) or not isinstance(version, int) or not 0 < version < 2**63:
            raise InvalidInputError(
                f"items[{i}] has version {version!r}; a version is an int from 1 to 2**63 - 1"
            )
        for name in ("created_at", "updated_at", "expires_at"):
            when = getattr(item, name)
            if when is None and name == "expires_at":
                continue
            if isinstance(when, bool) or not isinstance(when, (int, float)):
                raise InvalidInputError(
                    f"items[{i}].{name} must be Unix seconds, got {type(when).__name__}"
                )
            if not math.isfinite(when):
                raise InvalidInputError(f"items[{i}].{name} is {when!r}, not a finite time")
        checked.append((item, codec.dumps(item.value)))
    return checked


def validate_keys(keys: Any) -> builtins.list[str]:
    """The keys of a ``get_many``, each checked, duplicates dropped (first kept), or
    InvalidInputError."""
    if isinstance(keys, (str, bytes)) or not isinstance(keys, (builtins.list, tuple)):
        raise InvalidInputError(f"keys must be a list or tuple of str, got {keys!r}")
    return builtins.list(dict.fromkeys(validate_key(key) for key in keys))


def validate_reads(reads: Any) -> builtins.list[Read]:
    """The reads of a ``read_many``, each checked (namespace, keys), or InvalidInputError."""
    if isinstance(reads, (str, bytes)) or not isinstance(reads, Sequence):
        raise InvalidInputError(f"reads must be a list of GetMany or ChangesSince, got {reads!r}")
    for read in reads:
        if isinstance(read, GetMany):
            validate_namespace(read.namespace)
            validate_keys(read.keys)
        elif isinstance(read, ChangesSince):
            validate_namespace(read.namespace)
            if read.since is not None and not isinstance(read.since, ChangeMark):
                raise InvalidInputError(f"since must be a ChangeMark or None, got {read.since!r}")
        else:
            raise InvalidInputError(f"a read must be a GetMany or ChangesSince, got {read!r}")
    return builtins.list(reads)


def validate_updates(updates: Any) -> builtins.list[str]:
    """The keys of a ``{key: fn}`` mapping, each checked, or InvalidInputError."""
    if not isinstance(updates, Mapping):
        raise InvalidInputError(f"updates must be a mapping of key to fn, got {updates!r}")
    keys = [validate_key(key) for key in updates]
    for key in keys:
        if not callable(updates[key]):
            raise InvalidInputError(f"the update of key {key!r} is not callable")
    return keys


def encode_namespace(namespace: Namespace) -> str:
    """``("a", "b")`` → ``"a\\x1fb\\x1f"``: every prefix of a namespace encodes to a text prefix."""
    return "".join(label + NAMESPACE_SEPARATOR for label in namespace)


def decode_namespace(text: str) -> Namespace:
    return tuple(text.split(NAMESPACE_SEPARATOR)[:-1])


def prefix_upper_bound(prefix_text: str) -> str:
    """The smallest text greater than every text starting with ``prefix_text``.

    Encoded namespaces end with the separator, so the bound replaces that last separator with the
    next code point; for the empty prefix every namespace is below U+10FFFF.
    """
    if not prefix_text:
        return "\U0010ffff"
    return prefix_text[:-1] + chr(ord(NAMESPACE_SEPARATOR) + 1)


class Store(ABC):
    """A namespaced JSON document store. See the module docstring for the guarantees."""

    @abstractmethod
    def get(self, namespace: Namespace, key: str) -> Item | None:
        """Returns the item, or None when it is absent or expired."""

    def get_many(self, namespace: Namespace, keys: Sequence[str]) -> dict[str, Item]:
        """The live items among ``keys`` of ``namespace``, by key in the order asked; absent and
        expired keys are left out. A layer that opens a run with several records reads them
        with this: one statement on the SQL stores (up to 500 keys on SQLite), so one round
        trip on PostgreSQL."""
        namespace = validate_namespace(namespace)
        found = {key: self.get(namespace, key) for key in validate_keys(keys)}
        return {key: item for key, item in found.items() if item is not None}

    def read_many(self, reads: Sequence[Read]) -> builtins.list[Answer]:
        """The answers to several reads, in their order, each as if made alone: one round
        trip on PostgreSQL, where up to 32 reads are one statement. A run opens with the reads
        its layers ask for this way (see ``Layer.opening_reads``).

        Raises:
            InvalidInputError: A read is not a GetMany or ChangesSince, or is malformed; nothing
                is read.
        """
        checked = validate_reads(reads)
        return [
            self.get_many(read.namespace, read.keys)
            if isinstance(read, GetMany)
            else self.changes(read.namespace, read.since)
            for read in checked
        ]

    @abstractmethod
    def stamp(self, namespace: Namespace, key: str) -> tuple[int, float] | None:
        """``(version, created_at)`` of the live item, read without its value; None when absent
        or expired.

        A caller holding the value of an item with that stamp holds the current value: every
        write moves the version on, and a deleted (or expired) and re-created item numbers on
        from the versions it had, with a new ``created_at``.
        """

    @abstractmethod
    def put(
        self, namespace: Namespace, key: str, value: JSONValue, *, ttl: float | None = None
    ) -> Item:
        """Creates or overwrites the item (``created_at`` is kept on overwrite)."""

    @abstractmethod
    def delete(self, namespace: Namespace, key: str) -> bool:
        """Deletes the item; returns whether a live item was there."""

    @abstractmethod
    def delete_if_version(self, namespace: Namespace, key: str, *, expected_version: int) -> bool:
        """Deletes the item only if it is live at ``expected_version``; returns whether it did.
        A caller deleting what it read (a version it holds) never deletes a value written
        since, unseen."""

    @abstractmethod
    def list(
        self, namespace_prefix: Namespace = (), *, limit: int = 100, offset: int = 0
    ) -> list[Item]:
        """Live items whose namespace starts with the prefix, ordered by namespace then key."""

    def list_after(
        self,
        namespace_prefix: Namespace,
        after: tuple[Namespace, str] | None,
        *,
        limit: int = 100,
    ) -> builtins.list[Item]:
        """Live items whose namespace starts with the prefix and that come after ``after`` (the
        ``(namespace, key)`` a previous page ended with; None: from the first), in
        :meth:`list`'s order, at most ``limit``: a walk through a whole store (a copy of it)
        whose every page costs its own items, where ``list``'s ``offset`` reads past all
        the items before it. Only this store's own order means anything: another backend
        orders namespaces differently.

        The SQL stores read from their primary key; this default pages through ``list``,
        taken to order by the namespace tuple, then the key, as the in-memory store does."""
        prefix = validate_namespace(namespace_prefix, allow_empty=True)
        validate_page(limit, 0)
        after = validate_after(after)
        page, offset = max(limit, 500), 0
        found: builtins.list[Item] = []
        while len(found) < limit:
            items = self.list(prefix, limit=page, offset=offset)
            found.extend(
                item for item in items if after is None or (item.namespace, item.key) > after
            )
            if len(items) < page:
                break
            offset += page
        return found[:limit]

    @abstractmethod
    def changes(self, namespace: Namespace, since: ChangeMark | None = None) -> Changes:
        """The live items of exactly ``namespace`` (no sub-namespaces) or, given a mark, what
        was written or deleted in it after the mark, and a new mark to pass next time.

        ``since`` is a mark from :meth:`change_mark` or from an earlier answer's ``mark``. The
        new mark is taken no later than the read: a write racing with the call is reported now
        or next time, never lost. Finding the changes reads indexes on write order, so the cost
        follows what changed since the mark, not the namespace's size. A TTL running out is not
        a change: items a caller holds keep their ``expires_at`` for it to check.

        Returns:
            ``complete=True`` with every live item when ``since`` is None, or when it is older
            than the oldest tombstone kept (see ``purge_expired``) and so might miss a deletion.

        Raises:
            InvalidInputError: ``since`` is not a mark of this backend for ``namespace``.
        """

    def changes_each(
        self, namespace: Namespace, since: ChangeMark | None, each: Callable[[Item], None]
    ) -> Changes:
        """:meth:`changes`, handing each item to ``each`` in key order as it is read instead of
        collecting them: the answer's ``items`` is empty. A caller that keeps a digest of each
        item (a decoded vector, say) holds one item at a time, never the whole namespace.

        ``each`` may run while the store holds its lock and a read transaction: it must not
        call the store. An exception from it ends the read and propagates.
        """
        changes = self.changes(namespace, since)
        for item in changes.items:
            each(item)
        return Changes(changes.mark, [], changes.removed, changes.complete)

    def encoded_each(
        self, namespace: Namespace, each: Callable[[builtins.list[EncodedItem]], None]
    ) -> Changes:
        """Every live item of ``namespace`` as an :data:`EncodedItem` (its value as JSON text,
        undecoded), handed to ``each`` a batch at a time in key order, and the mark of that
        read: ``changes(namespace)`` for a bulk reader that parses or digests the values
        itself (each batch is a new list, the reader's to keep).

        ``each`` may run while the store holds its lock and a read transaction: it must not
        call the store. An exception from it ends the read and propagates.
        """
        changes = self.changes(namespace)
        _hand_encoded(changes.items, each)
        return Changes(changes.mark, [], [], True)

    @abstractmethod
    def update(
        self, namespace: Namespace, key: str, fn: Updater, *, ttl: float | None = None
    ) -> Item:
        """Atomically stores ``fn(current value or None)``; ``fn`` may run once per attempt."""

    @abstractmethod
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
        """Writes only if the live item is still at ``expected_version`` (0: absent); returns
        None, writing nothing, when another writer got there first.

        A caller that already holds the current value (a run caches its state) writes without
        reading the stored value back, and falls back to ``update`` on a conflict.

        ``validated=True`` says ``value`` is known JSON data (a ``deep_merge`` or
        ``strip_unsafe_keys`` result, every number finite) and skips the walk that checks it,
        which costs as much as encoding a large value; the encoding limits still apply. Passing
        it for unchecked data can store NaN as null. ``encoded`` is ``value``'s JSON text as the
        caller already holds it (any whitespace), stored as it is instead of encoding ``value``
        again; the caller vouches that it encodes ``value``.
        """

    @abstractmethod
    def put_many_if_versions(
        self,
        namespace: Namespace,
        writes: Mapping[str, ConditionalWrite],
        *,
        validated: bool = False,
    ) -> builtins.list[Item] | None:
        """Writes every ``key: ConditionalWrite`` in one transaction, only if every key's live
        item is still at its write's ``expected_version``; returns the items in the order of
        ``writes``, or None, writing nothing, when any key was written by someone else first.

        The values are checked and encoded before anything is written, so bad data is refused
        with every key untouched. ``validated`` is as for :meth:`put_if_version`, for all the
        values. A layer whose record spans several keys (a working memory's snapshot and its
        journal) moves them together with it, so a reader never sees one without the other.
        """

    @abstractmethod
    def update_many(
        self, namespace: Namespace, updates: Mapping[str, Updater], *, ttl: float | None = None
    ) -> builtins.list[Item]:
        """Atomically stores ``fn(current value or None)`` for every ``key: fn`` in ``updates``,
        all in one transaction: either every key is written or, if any ``fn`` raises or a value
        cannot be stored, none is and the exception propagates. Returns the items in the order
        of ``updates``. A layer flushing a run's drafts uses it so a crash never leaves half a
        flush behind.
        """

    @abstractmethod
    def change_mark(self, namespace: Namespace) -> ChangeMark:
        """A mark of now in ``namespace``'s history: items written (or deleted) after it are
        changes since it for :meth:`changes` and :meth:`update_many_since` (on PostgreSQL:
        written by transactions not committed when the mark was made).

        A reader takes the mark *before* reading, so a write racing with its read is reported
        as a change rather than missed; :meth:`changes` returns such a mark with its answer.
        """

    @abstractmethod
    def update_many_since(
        self,
        namespace: Namespace,
        since: ChangeMark,
        plan: Planner,
        *,
        ttl: float | None = None,
    ) -> builtins.list[Item]:
        """Reads what changed in ``namespace`` since a mark and writes what ``plan`` makes of
        it, in one transaction that no other ``update_many_since`` of the same namespace
        overlaps, in any process.

        ``plan(changed)`` receives the live items of exactly ``namespace`` (not its
        sub-namespaces) written after ``since``, ordered by key, and returns ``{key: fn}``,
        applied as :meth:`update_many` applies it. Finding the changed items reads an index on
        write order: the cost follows what changed since the mark, not the namespace's size.
        Deletions are not reported. If ``plan`` or any ``fn`` raises, nothing is written and
        the exception propagates. A layer that loaded a namespace at a mark uses this to
        reconcile its buffered writes with what other processes committed meanwhile
        (AgentMind folds a new belief into an equal one another run committed).

        Returns:
            The written items, in the order of the mapping ``plan`` returned.

        Raises:
            InvalidInputError: ``since`` is not a mark of this backend for ``namespace``, or
                ``plan`` returned a bad key or a non-callable.
        """

    def restore_items(self, items: Sequence[Item]) -> builtins.list[Item]:
        """Writes ``items`` as they are, in one transaction: each with its own value, version,
        ``created_at``, ``updated_at`` and ``expires_at``, and only where its key holds no live
        item (an expired row there is replaced). A key holding a live item is left as it is.
        Returns the items written, in the order given.

        What ``memstrata copy`` writes a store's records into another with
        (:func:`memstrata.stores.copy.copy_store`): a layer's records keep the versions its
        conditional writes and journals compare. Each item written is a write like any other
        for :meth:`changes` and :meth:`update_many_since`, so a server following the namespace
        sees it. An item whose ``expires_at`` has passed is not written. The version is kept
        even where the key's tombstone remembers a higher one: the copy is the record.

        Raises:
            InvalidInputError: An item is not an :class:`Item`, has a bad namespace, key,
                version or time, holds a value that cannot be stored, or names the same
                record as another item; nothing is written.
            NotImplementedError: The store cannot write a record at a version it did not
                number itself (a ``Store`` of your own that does not provide this); every
                memstrata store does.
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not provide restore_items: it cannot be copied into"
        )

    @abstractmethod
    def purge_expired(self) -> int:
        """Deletes expired rows, leaving a tombstone for each, and prunes tombstones older than
        ``tombstone_retention`` seconds; returns how many rows it deleted."""

    # How long a deletion stays reportable by ``changes``; set per store to keep more or fewer.
    tombstone_retention: float = TOMBSTONE_RETENTION

    def close(self) -> None:  # noqa: B027 - optional hook; in-memory stores hold nothing
        """Releases connections. The store must not be used afterwards."""

    def __enter__(self: _StoreT) -> _StoreT:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Async twins --------------------------------------------------------------------------
    #
    # Every I/O method ``m`` has an async twin ``am``. By default a twin runs ``m`` in a worker
    # thread, or directly for a store whose methods never wait (``waits = False``: the
    # in-memory store); SQLiteStore runs it inline unless the file is locked, and
    # PostgresStore has native async twins. Layer code run by an async method of the stack
    # (``await run.aprepare(...)``, see memstrata._bridge) calls the sync ``m``: the store then
    # serves it through ``am``, awaited by that coroutine, so a wait never blocks its loop.

    # False for a store whose methods are pure computation: their twins call them directly,
    # and layer code calls them as they are, even on an event loop.
    waits: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Makes each sync I/O method ``cls`` defines serve a call from bridged layer code
        (see memstrata._bridge) with :meth:`_serve_bridged`."""
        super().__init_subclass__(**kwargs)
        for name in IO_METHODS:
            method = cls.__dict__.get(name)
            if method is not None and not hasattr(method, "__wrapped__"):
                setattr(cls, name, _through_async_twin(name, method))

    def _serve_bridged(
        self, name: str, method: Callable[..., _T], args: tuple[Any, ...], kwargs: Any
    ) -> _T:
        """How a sync I/O method serves bridged layer code: directly when the store never
        waits (its callbacks pinned: they run under its lock), else through its async twin,
        awaited by the coroutine that runs the code."""
        if not self.waits:
            with pinned():
                return method(*args, **kwargs)
        twin: Callable[..., Awaitable[_T]] = getattr(self, "a" + name)
        return await_(twin(*args, **kwargs), finish=True)

    async def _call(self, method: Callable[..., _T], /, *args: Any, **kwargs: Any) -> _T:
        """How the default twins run a sync method: directly when the store never waits,
        else in a worker thread."""
        if not self.waits:
            return method(*args, **kwargs)
        return await in_thread(method, *args, **kwargs)

    async def aget(self, namespace: Namespace, key: str) -> Item | None:
        return await self._call(self.get, namespace, key)

    async def aput(
        self, namespace: Namespace, key: str, value: JSONValue, *, ttl: float | None = None
    ) -> Item:
        return await self._call(self.put, namespace, key, value, ttl=ttl)

    async def adelete(self, namespace: Namespace, key: str) -> bool:
        return await self._call(self.delete, namespace, key)

    async def adelete_if_version(
        self, namespace: Namespace, key: str, *, expected_version: int
    ) -> bool:
        return await self._call(
            self.delete_if_version, namespace, key, expected_version=expected_version
        )

    async def alist(
        self, namespace_prefix: Namespace = (), *, limit: int = 100, offset: int = 0
    ) -> builtins.list[Item]:
        return await self._call(self.list, namespace_prefix, limit=limit, offset=offset)

    async def aupdate(
        self, namespace: Namespace, key: str, fn: Updater, *, ttl: float | None = None
    ) -> Item:
        return await self._call(self.update, namespace, key, fn, ttl=ttl)

    async def achanges(self, namespace: Namespace, since: ChangeMark | None = None) -> Changes:
        return await self._call(self.changes, namespace, since)

    async def achanges_each(
        self, namespace: Namespace, since: ChangeMark | None, each: Callable[[Item], None]
    ) -> Changes:
        changes = await self.achanges(namespace, since)
        for item in changes.items:
            each(item)
        return Changes(changes.mark, [], changes.removed, changes.complete)

    async def aencoded_each(
        self, namespace: Namespace, each: Callable[[builtins.list[EncodedItem]], None]
    ) -> Changes:
        changes = await self.achanges(namespace)
        _hand_encoded(changes.items, each)
        return Changes(changes.mark, [], [], True)

    async def aget_many(self, namespace: Namespace, keys: Sequence[str]) -> dict[str, Item]:
        return await self._call(self.get_many, namespace, keys)

    async def aread_many(self, reads: Sequence[Read]) -> builtins.list[Answer]:
        return await self._call(self.read_many, reads)

    async def astamp(self, namespace: Namespace, key: str) -> tuple[int, float] | None:
        return await self._call(self.stamp, namespace, key)

    async def aput_if_version(
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
        return await self._call(
            self.put_if_version,
            namespace,
            key,
            value,
            expected_version=expected_version,
            ttl=ttl,
            validated=validated,
            encoded=encoded,
        )

    async def aput_many_if_versions(
        self,
        namespace: Namespace,
        writes: Mapping[str, ConditionalWrite],
        *,
        validated: bool = False,
    ) -> builtins.list[Item] | None:
        return await self._call(self.put_many_if_versions, namespace, writes, validated=validated)

    async def aupdate_many(
        self, namespace: Namespace, updates: Mapping[str, Updater], *, ttl: float | None = None
    ) -> builtins.list[Item]:
        return await self._call(self.update_many, namespace, updates, ttl=ttl)

    async def achange_mark(self, namespace: Namespace) -> ChangeMark:
        return await self._call(self.change_mark, namespace)

    async def aupdate_many_since(
        self,
        namespace: Namespace,
        since: ChangeMark,
        plan: Planner,
        *,
        ttl: float | None = None,
    ) -> builtins.list[Item]:
        return await self._call(self.update_many_since, namespace, since, plan, ttl=ttl)

    async def apurge_expired(self) -> int:
        return await self._call(self.purge_expired)

    async def aclose(self) -> None:
        await self._call(self.close)


# The methods that do I/O; each has an async twin named with an ``a`` in front.
IO_METHODS = (
    "get",
    "get_many",
    "read_many",
    "stamp",
    "put",
    "delete",
    "delete_if_version",
    "list",
    "changes",
    "changes_each",
    "encoded_each",
    "update",
    "put_if_version",
    "put_many_if_versions",
    "update_many",
    "change_mark",
    "update_many_since",
    "purge_expired",
    "close",
)


def erase(store: Store, namespace_prefix: Namespace) -> int:
    """Deletes every item whose namespace starts with ``namespace_prefix`` (a whole label at a
    time: ``("wm", "t1")`` does not reach ``("wm", "t10")``); returns how many live items it
    deleted. Each deletion leaves a tombstone, as :meth:`Store.delete` does, so other servers'
    caches see it. Expired items are not listed: :meth:`Store.purge_expired` deletes those
    (``MemoryStack.forget`` runs it once after its layers erased theirs).

    Not one transaction: an item written under the prefix meanwhile may stay (call it again
    once the writers stopped); a call that fails part way leaves the items it had not reached.
    """
    prefix = validate_namespace(namespace_prefix)
    erased = 0
    while True:
        items = store.list(prefix, limit=_ERASE_PAGE)
        if not items:
            break
        for item in items:
            erased += store.delete(item.namespace, item.key)
    return erased


_ERASE_PAGE = 500  # items listed at a time: a page's keys in memory, not a whole namespace's


def _through_async_twin(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def serve(self: Store, /, *args: Any, **kwargs: Any) -> Any:
        if bridged():
            return self._serve_bridged(name, method.__get__(self), args, kwargs)
        return method(self, *args, **kwargs)

    return serve
