"""A namespace's committed entries, kept by the layer between runs and brought up to date by
difference.

The layer keeps each namespace's committed entries with the store's
:class:`~memstrata.stores.ChangeMark` they stand at: a run reads only what was written or
deleted since (``Store.changes``), and that answer's mark is the one its flush reconciles from.
A change makes a new :class:`_Committed` (a new ``version``); what runs built from one version
(the header, recall's rankers) is kept with it.
"""

from __future__ import annotations

import gc
import itertools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Generic, Optional, TypeVar

import msgspec
import numpy as np
import numpy.typing as npt
import orjson

from memstrata._core import split_vector_members
from memstrata.exceptions import InvalidInputError, InvalidJSONError
from memstrata.layers.mind.entries import (
    MindBelief,
    MindEntry,
    MindGoal,
    MindReflection,
    entries_from_payloads,
    entries_from_texts,
)
from memstrata.layers.mind.ranking import CompositeRanker
from memstrata.layers.mind.records import UNREADABLE_PREFIX, VECTOR_FIELD
from memstrata.layers.mind.vectors import BLOCK_ROWS, VectorRows, append_encoded
from memstrata.stores import Item, Namespace, Store
from memstrata.stores.base import Answer, ChangeMark, Changes, ChangesSince, EncodedItem, Read

logger = logging.getLogger("memstrata.agent_mind")

_versions = itertools.count(1)
# Entries are built, and their vectors decoded, this many at a time as a full read streams in:
# a block of the vector rows, so that each batch's matrix becomes a block as it is.
LOAD_BATCH = BLOCK_ROWS
# Namespaces whose committed entries (and vector index) the layer keeps between runs: a server
# running one mind per user (``agent=f"support/{user}"``) must not hold every user's mind it
# ever served. The least recently run goes first; its next run reads it whole again.
MINDS_KEPT = 256

V = TypeVar("V")


class Kept(Generic[V]):
    """Values by namespace, the ``limit`` most recently used; shared by the layer's runs on
    any thread. A namespace dropped is read again from the store by its next run, so nothing
    here is ever the only copy of anything."""

    def __init__(self, limit: int = MINDS_KEPT) -> None:
        self.limit = limit
        self._held: OrderedDict[Namespace, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, namespace: Namespace) -> V | None:
        with self._lock:
            value = self._held.get(namespace)
            if value is not None:
                self._held.move_to_end(namespace)
            return value

    def __getitem__(self, namespace: Namespace) -> V:
        value = self.get(namespace)
        if value is None:
            raise KeyError(namespace)
        return value

    def __setitem__(self, namespace: Namespace, value: V) -> None:
        with self._lock:
            self._held[namespace] = value
            self._held.move_to_end(namespace)
            while len(self._held) > self.limit:
                self._held.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)


@dataclass(eq=False)
class _Committed:
    """A namespace's committed entries in ``store`` as of ``mark``, kept by the layer between
    runs and shared by the handles reading them: never changed once handed out (except ``mark``
    moving on past writes elsewhere); a change makes a new one, with a new ``version``."""

    store: Store | None
    mark: ChangeMark | None
    goals: dict[str, MindGoal] = field(default_factory=dict)
    beliefs: dict[str, MindBelief] = field(default_factory=dict)
    reflections: dict[str, MindReflection] = field(default_factory=dict)
    # id -> (embedding model, dimension, row in ``rows[dimension]``; -1: no vector stored)
    vectors: dict[str, tuple[Any, int, int]] = field(default_factory=dict)
    # The stored vectors, decoded once, by dimension: shared (append-only) by the copies
    # ``changed`` makes, so a change never copies a vector.
    rows: dict[int, VectorRows] = field(default_factory=dict)
    # Keys stored with a store TTL -> when it runs out: the store does not report that.
    expiring: dict[str, float] = field(default_factory=dict)
    # Built over these entries by one run, reused by the next: the header, (budget, counter
    # encoding) -> (header, built at, valid until), and recall's rankers, (kinds, archived) ->
    # (ranker, built at, valid until); a ranker's rebuild costs 0.4 s at 100k entries.
    headers: dict[tuple[int | None, str], tuple[str, int, float]] = field(default_factory=dict)
    rankers: dict[tuple[tuple[str, ...], bool], tuple[CompositeRanker, int, int]] = field(
        default_factory=dict
    )
    # Unique among the copies this process makes: what the layer's vector index was synced from.
    version: int = field(default_factory=lambda: next(_versions))

    def changed(self, mark: ChangeMark, items: list[Item], removed: list[str]) -> _Committed:
        """A new copy with ``items`` written and ``removed`` keys gone."""
        fresh = _Committed(
            self.store,
            mark,
            dict(self.goals),
            dict(self.beliefs),
            dict(self.reflections),
            dict(self.vectors),
            dict(self.rows),
            dict(self.expiring),
        )
        fresh.apply(items, removed)
        fresh.compact()
        return fresh

    def apply(self, items: list[Item], removed: list[str]) -> None:
        self.remove([*removed, *(item.key for item in items)])
        self.add_many(items)
        self.seal()

    def remove(self, keys: list[str]) -> None:
        by_kind: dict[str, dict[str, Any]] = {
            "goal": self.goals,
            "belief": self.beliefs,
            "reflection": self.reflections,
        }
        for key in keys:
            kind, _, id_ = key.partition("/")
            if kind in by_kind and by_kind[kind].pop(id_, None) is not None and kind != "goal":
                self.vectors.pop(id_, None)
            self.expiring.pop(key, None)

    def add_many(self, items: list[Item]) -> None:
        """Takes in items not held yet: the entries built together, their vectors decoded into
        ``rows`` a dimension at a time (call :meth:`seal` once the items are in)."""
        values = [item.value for item in items]
        self._add(
            [item.key for item in items],
            entries_from_payloads(values),
            [_member(value, "embeddingModel") for value in values],
            [_member(value, VECTOR_FIELD) for value in values],
            [item.expires_at for item in items],
        )

    def add_encoded(self, batch: list[EncodedItem]) -> None:
        """:meth:`add_many` for items as a full read hands them over, values undecoded: a
        value's stored vector is cut out of its JSON text and decoded natively (no Python
        object for its base64), and the rest read straight into its entry when it is in the
        shape memstrata writes; any other value (a vector of another dimension than most of
        the batch's, a text the cut declines, a float time) is parsed whole. A text that is
        not JSON is skipped and logged, as a malformed entry is."""
        # A row a foreign writer filled with a number holds no text to cut: an empty one is
        # declined, and the parse of the value itself then skips it as not JSON.
        texts = [text if type(text) in (bytes, str) else b"" for _, text, _ in batch]
        rests, matrix = split_vector_members(texts, VECTOR_FIELD)
        cut = [text if rest is None else rest for text, rest in zip(texts, rests)]
        entries: list[MindEntry | InvalidInputError | None] = list(entries_from_texts(cut))
        models: list[Any] = [None] * len(batch)
        vector_texts: list[Any] = [None] * len(batch)
        kept = list(range(len(batch)))
        decode_model = _model_decoder.decode
        model: Any = None
        tail: bytes | str | None = None
        for n, (entry, rest) in enumerate(zip(entries, rests)):
            if entry is not None and rest is not None:
                # Usually every text of the batch ends with the same model: read once, then
                # recognised by its ending (and held once, not once per entry).
                if tail is None or not rest.endswith(tail):  # type: ignore[arg-type]
                    try:
                        model = decode_model(rest).embedding_model
                        tail = _model_ending(model, rest)
                    except _MODEL_REFUSED:  # no text or null: read as the whole parse reads it
                        model = tail = entry = None
                if entry is not None:
                    models[n] = model
                    continue
            # Parsed whole, a goal too: the cut, which declines any text holding a number
            # msgspec and orjson may read apart, has no vector to cut from a goal's.
            try:
                value = orjson.loads(cut[n])
            except orjson.JSONDecodeError as exc:
                logger.warning(
                    "skipping mind entry %r stored as malformed JSON: %s", batch[n][0], exc
                )
                kept.remove(n)
                continue
            entries[n] = entries_from_payloads([value])[0]
            models[n] = _member(value, "embeddingModel")
            vector_texts[n] = _member(value, VECTOR_FIELD)
        self._add(
            [batch[n][0] for n in kept],
            [entries[n] for n in kept],  # type: ignore[misc]
            [models[n] for n in kept],
            [vector_texts[n] for n in kept],
            [batch[n][2] for n in kept],
            (matrix, [-1 if rests[n] is None else n for n in kept]),
        )

    def _add(
        self,
        keys: list[str],
        entries: list[MindEntry | InvalidInputError],
        models: list[Any],
        vector_texts: list[Any],
        expiries: list[float | None],
        decoded: tuple[npt.NDArray[np.float32], list[int]] | None = None,
    ) -> None:
        """Takes in the ``entries`` stored under ``keys`` (an error in place of a malformed
        one, skipped and logged), with the model that made each one's vector; their vectors
        come from ``decoded`` (a matrix and, per entry, its row in it or -1) or from
        ``vector_texts`` (each one's stored ``embedding`` text)."""
        if decoded is not None and self._add_plain(keys, entries, models, expiries, decoded):
            return
        ids: list[str] = []
        id_models: list[Any] = []
        texts: list[Any] = []
        rows_of: list[int] = decoded[1] if decoded is not None else [-1] * len(entries)
        dim = decoded[0].shape[1] if decoded is not None else 0
        first = 0
        if dim and max(rows_of, default=-1) >= 0:
            # Every row, those no entry takes too (never referred to, as a replaced entry's row
            # is not): a full read's batches then land a block each, not copied again. Appended
            # before the entries refer to the rows: the rows are numbered by the append.
            assert decoded is not None
            target = self.rows.setdefault(dim, VectorRows(dim))
            appended = target.append(decoded[0])
            first = appended[0] if appended else 0
        # Bound once: the loop runs once per entry, 100,000 times for a full mind.
        add_id, add_model, add_text = ids.append, id_models.append, texts.append
        beliefs, reflections, expiring, vectors = (
            self.beliefs,
            self.reflections,
            self.expiring,
            self.vectors,
        )
        for n, (key, entry) in enumerate(zip(keys, entries)):
            if expiries[n] is not None:
                expiring[key] = expiries[n]  # type: ignore[assignment]
            if isinstance(entry, InvalidInputError):
                if not key.startswith(UNREADABLE_PREFIX):  # a flush kept it there on purpose
                    logger.warning("skipping malformed mind entry %r: %s", key, entry)
                continue
            if key != f"{entry.type}/{entry.id}":  # records.entry_key, inlined: once per entry
                logger.warning("skipping mind entry %r stored under a foreign key", key)
                continue
            if type(entry) is MindBelief:
                beliefs[entry.id] = entry
            elif type(entry) is MindReflection:
                reflections[entry.id] = entry
            else:
                self.goals[entry.id] = entry  # type: ignore[assignment]
                continue
            if rows_of[n] >= 0:
                vectors[entry.id] = (models[n], dim, first + rows_of[n])
                continue
            add_id(entry.id)
            add_model(models[n])
            add_text(vector_texts[n])
        dims, rows = append_encoded(self.rows, texts)
        vectors.update(zip(ids, zip(id_models, dims, rows)))

    def _add_plain(
        self,
        keys: list[str],
        entries: list[MindEntry | InvalidInputError],
        models: list[Any],
        expiries: list[float | None],
        decoded: tuple[npt.NDArray[np.float32], list[int]],
    ) -> bool:
        """:meth:`_add` for the usual batch of a full read, a column at a time: every entry a
        belief or reflection under its own key, with its vector in ``decoded`` row for row and
        no store TTL. False, having taken nothing, for any other batch."""
        matrix, rows_of = decoded
        count = len(entries)
        if not count or len(matrix) != count or rows_of[-1] != count - 1 or -1 in rows_of:
            return False
        if any(at is not None for at in expiries):
            return False
        prefixes = [_KEY_PREFIX.get(type(entry)) for entry in entries]
        if None in prefixes:
            return False
        ids = [entry.id for entry in entries]  # type: ignore[union-attr]
        if [p + i for p, i in zip(prefixes, ids)] != keys:  # type: ignore[operator]
            return False
        held: dict[str | None, dict[str, Any]] = {
            "belief/": self.beliefs,
            "reflection/": self.reflections,
        }
        if prefixes.count(prefixes[0]) == count:  # usually: keys come sorted
            held[prefixes[0]].update(zip(ids, entries))
        else:
            for prefix, id_, entry in zip(prefixes, ids, entries):
                held[prefix][id_] = entry
        dim = matrix.shape[1]
        first = self.rows.setdefault(dim, VectorRows(dim)).append(matrix)[0]
        self.vectors.update(zip(ids, zip(models, repeat(dim), range(first, first + count))))
        return True

    def seal(self) -> None:
        for rows in self.rows.values():
            rows.seal()

    def compact(self) -> None:
        """Copies the rows still in use out of a store mostly made of replaced ones (the
        shared one stays with the older copies that use it)."""
        for dim, rows in list(self.rows.items()):
            used = {i: row for i, (_m, d, row) in self.vectors.items() if d == dim and row >= 0}
            if rows.size <= 2 * len(used) + BLOCK_ROWS:
                continue
            fresh, moved = rows.compacted(used)
            self.rows[dim] = fresh
            for i, row in moved.items():
                model = self.vectors[i][0]
                self.vectors[i] = (model, dim, row)


class _VectorModel(msgspec.Struct, rename="camel"):
    """The member of a stored belief or reflection naming the model of its vector: a model's
    name, or none. Any other value is read by the parser of the whole text, whose reading of
    numbers (an integer past 64 bits becomes a float) and of depth msgspec's does not share."""

    embedding_model: Optional[str] = None  # noqa: UP045 (msgspec evaluates it on Python 3.9)


_model_decoder = msgspec.json.Decoder(_VectorModel)
_MODEL_REFUSED = (msgspec.DecodeError, RecursionError)
# What a belief's or reflection's key starts with (see ``records.entry_key``).
_KEY_PREFIX: dict[type, str] = {MindBelief: "belief/", MindReflection: "reflection/"}


def _model_ending(model: Any, text: bytes | str) -> bytes | str | None:
    """How a stored text whose last member is ``"embeddingModel": model`` ends as memstrata
    writes it (None when ``model`` is no string). In a valid JSON object text the ending is
    that member and nothing else: the final brace closes the object itself (a nested one
    would be followed by the outer's), and the quote after the comma cannot be inside a string
    (a string's own quotes are escaped). The last of a key written twice is the one a parser
    keeps too."""
    if type(model) is not str:
        return None
    ending = b',"embeddingModel":' + orjson.dumps(model) + b"}"
    return ending if type(text) is bytes else ending.decode()


def _member(value: Any, name: str) -> Any:
    return value.get(name) if type(value) is dict else None


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pauses Python's cyclic garbage collector while a full read builds its entries.

    Every object such a read makes is kept, so the collections its allocations set off find
    nothing to free, yet they walk the ever larger set of entries again and again: a third of
    the time of loading 100,000 entries. Collection resumes at the end (unless it was off
    before); cycles made meanwhile by other threads are collected then.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def opening_read(held: _Committed | None, store: Store, namespace: Namespace) -> Read | None:
    """The read :func:`refresh` will make of ``store`` over ``held``, if it can be asked with
    other reads (not the first load: it streams every entry)."""
    if held is None or held.store is not store or held.mark is None:
        return None
    return ChangesSince(namespace, held.mark)


def refresh(
    held: _Committed | None,
    store: Store,
    namespace: Namespace,
    opened: Mapping[Read, Answer] | None = None,
) -> tuple[_Committed, ChangeMark]:
    """``held`` brought up to date with ``store``, reading only what was written or deleted
    since its mark (everything when there is none), and the mark of the store's answer: no
    later than what it read, so whatever is written meanwhile counts as a change at flush. A
    malformed entry is skipped and logged, never deleted. ``opened`` holds reads made when the
    run opened: the changes since ``held``'s mark are taken from there if they were read (a
    mark that moved on since is a different read, made again)."""
    if held is not None and held.store is not store:
        held = None  # a mark only means something to the store that made it
    if held is None:
        # Streamed: each batch's vectors are decoded into the rows as the store reads it.
        committed = _Committed(store, None)
        batch: list[EncodedItem] = []

        def take(items: list[EncodedItem]) -> None:
            batch.extend(items)
            while len(batch) >= LOAD_BATCH:
                committed.add_encoded(batch[:LOAD_BATCH])
                del batch[:LOAD_BATCH]

        with _collector_paused():
            changes = store.encoded_each(namespace, take)
            committed.add_encoded(batch)
        committed.mark = changes.mark
        committed.seal()
    else:
        read = (opened or {}).get(ChangesSince(namespace, held.mark))
        if isinstance(read, Changes):
            changes = read
        else:
            try:
                changes = store.changes(namespace, held.mark)
            except InvalidJSONError:
                # An entry another program made unreadable (not JSON): read whole, which
                # skips it with a warning, as a first load does.
                return refresh(None, store, namespace)
        if changes.complete:
            committed = _Committed(store, changes.mark)
            committed.apply(changes.items, changes.removed)
        elif changes.items or changes.removed:
            committed = held.changed(changes.mark, changes.items, changes.removed)
        else:
            committed = held
            held.mark = changes.mark
    # Rarely any: mind entries carry their expiry in the payload, not as a store TTL.
    now = time.time()
    expired = [key for key, at in committed.expiring.items() if at <= now]
    if expired:
        committed = committed.changed(changes.mark, [], expired)
    return committed, changes.mark
