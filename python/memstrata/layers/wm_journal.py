"""How a working memory is kept in its store: a snapshot of the state and a journal of the
updates since, so that an update writes its patch rather than the whole state.

Two keys in the layer's namespace:

* ``state``: the snapshot, the whole state (structured state as the indented JSON the model
  reads). A namespace written before the journal existed has only this key; it reads as a
  snapshot with an empty journal.
* ``journal``: ``{"version", "base", "arrays", "nulls", "patches"}``: the working memory's own
  version (one per accepted write), the store version of the snapshot the patches apply to, the
  merge options they were made with, and the patches, oldest first.

A state under ``JOURNAL_MIN_STATE_BYTES`` that has no journal is kept in ``state`` alone and
written whole, as before the journal existed: below that size a journal saves nothing. The
first write of a larger state makes the journal, and from then on every write goes through the
journal row, so its store version is what concurrent writers compare (``put_if_version``) and
what a run checks to reuse the state it holds. An append adds its patch to the journal. A
replace, a clear, a change of merge options, or a journal grown past ``MAX_JOURNAL_PATCHES``
patches or past what it is worth keeping (``journal_fits``) writes the new state as the
snapshot and empties the journal, both in one transaction (``put_many_if_versions``): a crash
leaves either the old pair or the new one.

The two keys are read by separate statements, so a reader racing such a compaction can see the
new journal with the old snapshot, or the reverse; the journal's ``base`` names the snapshot it
belongs to, and a reader that sees a different one reads again (:func:`read`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import orjson

from memstrata._core import deep_merge
from memstrata.exceptions import InvalidInputError, StorageRaceError
from memstrata.stores import Item, Namespace, Store

STATE_KEY = "state"
JOURNAL_KEY = "journal"
# States smaller than this (characters of their block) are written whole while they have no
# journal. Measured on SQLite, one small patch per update (p50): a 22 KB state 106 us whole
# against 121 us through the journal; even at 32-41 KB; 57 KB 236 against 137; 161 KB 427
# against 175. A state that grows past it gets a journal, and keeps it.
JOURNAL_MIN_STATE_BYTES = 48 * 1024
# Patches a journal holds before the state is written whole again: bounds the replay a cold
# load does (one small merge each).
MAX_JOURNAL_PATCHES = 128
# A journal of small patches stays within this many bytes: one database page with the row's
# other columns (SQLite's pages are 4 KB; PostgreSQL moves values past ~2 KB out of line). A
# journal that spills into overflow pages costs more to rewrite on every append than the rarer
# whole-state writes a smaller one needs: measured in the whole-turn scenario (236 KB state,
# ~80-byte patches), an update's mean went from ~335 to ~295 us with this limit instead of
# 1/8 of the state. A patch too big for a page on its own goes into the journal while the
# journal stays within 1/JOURNAL_SHARE of the state, as rewriting the state costs more.
JOURNAL_PAGE_BYTES = 3500
JOURNAL_SHARE = 8
# Reads that raced a compaction are retried this many times (each race needs a compaction
# landing between two statements, and compactions are rare).
MAX_READ_ATTEMPTS = 100

Options = tuple[Literal["replace", "union"], Literal["keep", "delete", "ignore"]]


# Not frozen (never changed once made, all the same): a frozen dataclass's __init__ costs five
# times as much, and one is made on every update.
@dataclass(slots=True)
class Position:
    """Where a state a run holds stands in the store.

    ``version`` is the working memory's version; ``snapshot_version`` and ``journal_version``
    the store versions of the two rows (0: absent); ``stamp`` what ``head_stamp`` returns while
    nothing was written since; ``patches`` the journal's patches, ``texts`` their JSON and
    ``journal_bytes`` its size."""

    version: int = 0
    snapshot_version: int = 0
    journal_version: int = 0
    stamp: tuple[str, int, float] | None = None
    options: Options | None = None
    patches: tuple[Any, ...] = ()
    texts: tuple[bytes, ...] = field(default=(), repr=False)
    # Bytes of the patches' texts with their separators, kept rather than summed per write.
    journal_bytes: int = 0


def head_stamp(
    store: Store, namespace: Namespace, held: tuple[str, int, float] | None = None
) -> tuple[str, int, float] | None:
    """A stamp that changes with every write: the journal's, or the snapshot's where no journal
    was written yet; None when the working memory was never written.

    ``held`` is the stamp the caller last saw. When that is the snapshot's, the snapshot's stamp
    alone says whether anything was written since (one read, not two): a journal is only ever
    made by a write that also writes the snapshot."""
    if held is not None and held[0] == STATE_KEY:
        stamp = store.stamp(namespace, STATE_KEY)
        if stamp is not None and (STATE_KEY, *stamp) == held:
            return held
    stamp = store.stamp(namespace, JOURNAL_KEY)
    if stamp is not None:
        return (JOURNAL_KEY, *stamp)
    stamp = store.stamp(namespace, STATE_KEY)
    return None if stamp is None else (STATE_KEY, *stamp)


def read(store: Store, namespace: Namespace) -> tuple[Item | None, Item | None]:
    """The snapshot and the journal, from one state of the store.

    Raises:
        InvalidInputError: The journal belongs to no snapshot: the pair read is the same twice
            in a row, so no compaction is under way (something else wrote or deleted one).
        StorageRaceError: Compactions kept landing between the two reads.
    """
    last = None
    for attempt in range(MAX_READ_ATTEMPTS):
        journal = store.get(namespace, JOURNAL_KEY)
        snapshot = store.get(namespace, STATE_KEY)
        if journal is None:
            return snapshot, None
        base = journal.value.get("base") if isinstance(journal.value, dict) else None
        snapshot_version = snapshot.version if snapshot is not None else 0
        if base == snapshot_version or not isinstance(base, int) or isinstance(base, bool):
            return snapshot, journal  # consistent, or malformed (parse() names it)
        seen = (journal.version, journal.created_at, snapshot_version)
        if seen == last:
            raise InvalidInputError(
                f"the working-memory journal applies to snapshot version {base}, but the "
                f"stored snapshot is at version {snapshot_version}"
            )
        last = seen
        time.sleep(0.0001 * attempt)
    raise StorageRaceError(
        f"working memory {'/'.join(namespace)} changed under every one of {MAX_READ_ATTEMPTS} reads"
    )


def parse(journal: Item) -> tuple[int, int, Options, list[Any]]:
    """``(version, base, options, patches)`` of a journal row.

    Raises:
        InvalidInputError: The row is not a journal this module wrote.
    """
    value = journal.value
    fields = ("version", "base", "arrays", "nulls", "patches")
    if not isinstance(value, dict) or any(name not in value for name in fields):
        raise InvalidInputError(
            f"the working-memory journal is not an object with {', '.join(fields)}"
        )
    version, base, arrays, nulls, patches = (value[name] for name in fields)
    for name, number in (("version", version), ("base", base)):
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            raise InvalidInputError(f"the working-memory journal's {name} is {number!r}")
    if arrays not in ("replace", "union") or nulls not in ("keep", "delete", "ignore"):
        raise InvalidInputError(
            f"the working-memory journal has unknown merge options {arrays!r}, {nulls!r}"
        )
    if not isinstance(patches, list):
        raise InvalidInputError("the working-memory journal's patches are not a list")
    return version, base, cast(Options, (arrays, nulls)), patches


def journal_since(store: Store, namespace: Namespace, snapshot_version: int) -> Item | None:
    """The journal, read alone, if it still applies to the snapshot at ``snapshot_version``
    (which a caller holds): None if there is none or the snapshot moved on."""
    if not snapshot_version:
        return None
    journal = store.get(namespace, JOURNAL_KEY)
    if journal is None or not isinstance(journal.value, dict):
        return None
    if journal.value.get("base") != snapshot_version:
        return None
    # Read after the journal: a compaction in between shows as a new snapshot version.
    stamp = store.stamp(namespace, STATE_KEY)
    return journal if stamp is not None and stamp[0] == snapshot_version else None


def position_of(
    snapshot: Item | None, journal: Item | None, *, snapshot_version: int | None = None
) -> Position:
    """The position of what :func:`read` returned (a journal :func:`parse` accepted), or of a
    journal alone from :func:`journal_since` with the ``snapshot_version`` it applies to."""
    if snapshot_version is None:
        snapshot_version = snapshot.version if snapshot is not None else 0
    if journal is None:
        stamp = None if snapshot is None else (STATE_KEY, snapshot.version, snapshot.created_at)
        return Position(snapshot_version, snapshot_version, 0, stamp)
    version, _base, options, patches = parse(journal)
    texts = tuple(orjson.dumps(patch) for patch in patches)
    return Position(
        version,
        snapshot_version,
        journal.version,
        (JOURNAL_KEY, journal.version, journal.created_at),
        options,
        tuple(patches),
        texts,
        sum(len(text) + 1 for text in texts),
    )


def journal_fits(journal_bytes: int, patch_bytes: int, state_bytes: int) -> bool:
    """Whether a journal of ``journal_bytes`` of patches, the newest ``patch_bytes`` of them, is
    worth keeping next to a state of ``state_bytes`` rather than writing the state whole."""
    if journal_bytes <= JOURNAL_PAGE_BYTES:
        return True
    return patch_bytes > JOURNAL_PAGE_BYTES and journal_bytes <= state_bytes // JOURNAL_SHARE


def journal_value(
    version: int, base: int, options: Options, patches: tuple[Any, ...], texts: tuple[bytes, ...]
) -> tuple[dict[str, Any], bytes]:
    """A journal row's value and its JSON text, built from the patches' own JSON texts (no
    re-encoding of the patches already there)."""
    arrays, nulls = options
    value: dict[str, Any] = {"version": version, "base": base, "arrays": arrays, "nulls": nulls}
    head = orjson.dumps(value)
    value["patches"] = list(patches)
    return value, b"".join((head[:-1], b',"patches":[', b",".join(texts), b"]}"))


def apply_patch(state: Any, patch: Any, options: Options) -> Any:
    """``patch`` appended to ``state`` as an update appends it: an object deep-merged with the
    ``(arrays, nulls)`` options, text added after a blank line."""
    if isinstance(patch, dict):
        arrays, nulls = options
        return deep_merge(state, patch, arrays=arrays, nulls=nulls)
    if not isinstance(state, str) or not state.strip():
        return patch
    return f"{state.rstrip()}\n\n{patch}"


def replay(state: Any, patches: Sequence[Any], options: Options) -> Any:
    """``state`` with ``patches`` appended in order, as the updates that wrote them did."""
    for patch in patches:
        state = apply_patch(state, patch, options)
    return state


def read_state(store: Store, namespace: Namespace) -> tuple[Any, int] | None:
    """The state stored in a working memory's namespace and its version, the journal merged
    in, or None if it was never written. A plain read (no schema check, no cache) for tools
    that look at a store from outside a run, such as ``memstrata inspect``.

    Raises:
        InvalidInputError: The journal is malformed or belongs to no snapshot.
    """
    snapshot, journal = read(store, namespace)
    if journal is None:
        return None if snapshot is None else (snapshot.value, snapshot.version)
    version, _base, options, patches = parse(journal)
    return replay(snapshot.value if snapshot is not None else None, patches, options), version
