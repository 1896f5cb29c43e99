"""How a working memory is kept in its store: a snapshot of the state and a journal of the
updates since, so that an update writes its patch rather than the whole state.

Three keys in the layer's namespace:

* ``state``: the snapshot, the whole state (structured state as the indented JSON the model
  reads). A namespace written before the journal existed has only this key; it reads as a
  snapshot with an empty journal.
* ``journal``: ``{"version", "base", "arrays", "nulls", "patches", "archive"}``: the working
  memory's own version (one per accepted write), the store version of the snapshot the patches
  apply to, the merge options they were made with, the patches, oldest first, and the store
  version of the archive (0: none; a journal written before the archive existed has no such
  field, and reads as 0).
* ``archive``: ``{"patches"}``: older patches, moved out of a full journal. They apply after
  the snapshot and before the journal's own.

A state under ``JOURNAL_MIN_STATE_BYTES`` that has no journal is kept in ``state`` alone and
written whole, as before the journal existed: below that size a journal saves nothing. The
first write of a larger state makes the journal, and from then on every write goes through the
journal row, so its store version is what concurrent writers compare (``put_if_version``) and
what a run checks to reuse the state it holds. An append adds its patch to the journal. A
journal grown past ``MAX_JOURNAL_PATCHES`` patches or past what it is worth keeping
(``journal_fits``) moves its patches, and the new one, into the archive and empties itself, both
in one transaction (``put_many_if_versions``), while the archive stays within what it is worth
keeping (``archive_fits``). A replace, a clear, a change of merge options, or an archive that is
full writes the new state as the snapshot and empties the journal and the archive, all in one
transaction: a crash leaves either the old rows or the new ones.

Why two levels: the journal is rewritten on every append, so it is kept within a database page;
a full journal that wrote the whole state (236 KB in the whole-turn benchmark) made every
~50th turn ~0.9 ms against ~0.67 ms, and held up the turn's p95. Moving a page of patches into
an archive of at most 1/``ARCHIVE_SHARE`` of the state costs far less, and the state is
written whole only every few hundred appends. The replay a cold load does stays bounded
(``MAX_ARCHIVED_PATCHES`` small merges: ~4 ms for 1,024 on that state).

The keys are read by separate statements, so a reader racing a compaction or a move into the
archive can see the new journal with the old snapshot or archive, or the reverse; the journal's
``base`` and ``archive`` name the rows it belongs with, and a reader that sees others reads
again (:func:`read`).
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
ARCHIVE_KEY = "archive"
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
# The archive stays within 1/ARCHIVE_SHARE of the state's bytes and MAX_ARCHIVED_PATCHES
# patches: rewriting it costs a fraction of the state's write, and the patches bound the replay
# a cold load does.
ARCHIVE_SHARE = 8
MAX_ARCHIVED_PATCHES = 1024
# Reads that raced a compaction are retried this many times (each race needs a compaction
# landing between two statements, and compactions are rare).
MAX_READ_ATTEMPTS = 100

Options = tuple[Literal["replace", "union"], Literal["keep", "delete", "ignore"]]


# Not frozen (never changed once made, all the same): a frozen dataclass's __init__ costs five
# times as much, and one is made on every update.
@dataclass(slots=True)
class Position:
    """Where a state a run holds stands in the store.

    ``version`` is the working memory's version; ``snapshot_version``, ``journal_version`` and
    ``archive_version`` the store versions of the three rows (0: absent); ``stamp`` what
    ``head_stamp`` returns while nothing was written since; ``options`` the merge options of
    every patch held; ``patches`` the journal's patches, ``texts`` their JSON and
    ``journal_bytes`` its size; ``archived`` the archive's patches, ``archived_text`` their JSON
    joined by commas."""

    version: int = 0
    snapshot_version: int = 0
    journal_version: int = 0
    stamp: tuple[str, int, float] | None = None
    options: Options | None = None
    patches: tuple[Any, ...] = ()
    texts: tuple[bytes, ...] = field(default=(), repr=False)
    # Bytes of the patches' texts with their separators, kept rather than summed per write.
    journal_bytes: int = 0
    archive_version: int = 0
    archived: tuple[Any, ...] = ()
    archived_text: bytes = field(default=b"", repr=False)

    def all_patches(self) -> tuple[Any, ...]:
        """Every patch since the snapshot, oldest first: the archive's, then the journal's."""
        return self.archived + self.patches if self.archived else self.patches


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


def read(store: Store, namespace: Namespace) -> tuple[Item | None, Item | None, Item | None]:
    """The snapshot, the journal and the archive (None where the journal names none), from one
    state of the store.

    Raises:
        InvalidInputError: The journal belongs to no snapshot or archive: the rows read are the
            same twice in a row, so no compaction is under way (something else wrote or deleted
            one).
        StorageRaceError: Compactions kept landing between the reads.
    """
    last = None
    for attempt in range(MAX_READ_ATTEMPTS):
        journal = store.get(namespace, JOURNAL_KEY)
        if journal is None:
            return store.get(namespace, STATE_KEY), None, None
        value = journal.value
        base = value.get("base") if isinstance(value, dict) else None
        wanted = value.get("archive", 0) if isinstance(value, dict) else 0
        if not _is_count(base) or not _is_count(wanted):
            return store.get(namespace, STATE_KEY), journal, None  # parse() names it
        archive = store.get(namespace, ARCHIVE_KEY) if wanted else None
        snapshot = store.get(namespace, STATE_KEY)
        snapshot_version = snapshot.version if snapshot is not None else 0
        archive_version = archive.version if archive is not None else 0
        if base == snapshot_version and wanted == archive_version:
            return snapshot, journal, archive
        seen = (journal.version, journal.created_at, snapshot_version, archive_version)
        if seen == last:
            if base != snapshot_version:
                raise InvalidInputError(
                    f"the working-memory journal applies to snapshot version {base}, but the "
                    f"stored snapshot is at version {snapshot_version}"
                )
            raise InvalidInputError(
                f"the working-memory journal follows archive version {wanted}, but the stored "
                f"archive is at version {archive_version}"
            )
        last = seen
        time.sleep(0.0001 * attempt)
    raise StorageRaceError(
        f"working memory {'/'.join(namespace)} changed under every one of {MAX_READ_ATTEMPTS} reads"
    )


def _is_count(number: Any) -> bool:
    return isinstance(number, int) and not isinstance(number, bool) and number >= 0


def parse(journal: Item) -> tuple[int, int, Options, list[Any], int]:
    """``(version, base, options, patches, archive)`` of a journal row.

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
    archive = value.get("archive", 0)
    for name, number in (("version", version), ("base", base), ("archive", archive)):
        if not _is_count(number):
            raise InvalidInputError(f"the working-memory journal's {name} is {number!r}")
    if arrays not in ("replace", "union") or nulls not in ("keep", "delete", "ignore"):
        raise InvalidInputError(
            f"the working-memory journal has unknown merge options {arrays!r}, {nulls!r}"
        )
    if not isinstance(patches, list):
        raise InvalidInputError("the working-memory journal's patches are not a list")
    return version, base, cast(Options, (arrays, nulls)), patches, archive


def parse_archive(archive: Item) -> list[Any]:
    """The patches of an archive row.

    Raises:
        InvalidInputError: The row is not an archive this module wrote.
    """
    value = archive.value
    if not isinstance(value, dict) or not isinstance(value.get("patches"), list):
        raise InvalidInputError("the working-memory archive is not an object with a patches list")
    return cast(list[Any], value["patches"])


def journal_since(
    store: Store, namespace: Namespace, held: Position
) -> tuple[Item, Item | None] | None:
    """The journal, and the archive if it moved on, read if they still apply to the snapshot
    ``held`` stands on: None if there is no journal or the snapshot moved on. The archive is
    None where ``held``'s still applies (it is read only when the journal names another)."""
    if not held.snapshot_version:
        return None
    journal = store.get(namespace, JOURNAL_KEY)
    if journal is None or not isinstance(journal.value, dict):
        return None
    if journal.value.get("base") != held.snapshot_version:
        return None
    wanted = journal.value.get("archive", 0)
    archive = None
    if wanted != held.archive_version:
        if not _is_count(wanted) or not wanted:
            return None
        archive = store.get(namespace, ARCHIVE_KEY)
        if archive is None or archive.version != wanted:
            return None
    # Read after the journal: a compaction in between shows as a new snapshot version.
    stamp = store.stamp(namespace, STATE_KEY)
    if stamp is None or stamp[0] != held.snapshot_version:
        return None
    return journal, archive


def position_of(
    snapshot: Item | None,
    journal: Item | None,
    archive: Item | None = None,
    *,
    held: Position | None = None,
) -> Position:
    """The position of what :func:`read` returned (a journal :func:`parse` accepted), or of what
    :func:`journal_since` returned, with the position ``held`` it read from.

    Raises:
        InvalidInputError: The journal or the archive is malformed.
    """
    snapshot_version = (
        held.snapshot_version
        if held is not None
        else snapshot.version
        if snapshot is not None
        else 0
    )
    if journal is None:
        stamp = None if snapshot is None else (STATE_KEY, snapshot.version, snapshot.created_at)
        return Position(snapshot_version, snapshot_version, 0, stamp)
    version, _base, options, patches, archive_version = parse(journal)
    texts = tuple(orjson.dumps(patch) for patch in patches)
    archived: tuple[Any, ...] = ()
    archived_text = b""
    if archive is not None:
        archived = tuple(parse_archive(archive))
        archived_text = orjson.dumps(list(archived))[1:-1]
    elif held is not None and archive_version == held.archive_version:
        archived, archived_text = held.archived, held.archived_text
    return Position(
        version,
        snapshot_version,
        journal.version,
        (JOURNAL_KEY, journal.version, journal.created_at),
        options,
        tuple(patches),
        texts,
        sum(len(text) + 1 for text in texts),
        archive_version,
        archived,
        archived_text,
    )


def journal_fits(journal_bytes: int, patch_bytes: int, state_bytes: int) -> bool:
    """Whether a journal of ``journal_bytes`` of patches, the newest ``patch_bytes`` of them, is
    worth keeping next to a state of ``state_bytes`` rather than writing the state whole."""
    if journal_bytes <= JOURNAL_PAGE_BYTES:
        return True
    return patch_bytes > JOURNAL_PAGE_BYTES and journal_bytes <= state_bytes // JOURNAL_SHARE


def archive_fits(archived_bytes: int, archived_patches: int, state_bytes: int) -> bool:
    """Whether an archive of ``archived_bytes`` of patches, ``archived_patches`` of them, is
    worth keeping next to a state of ``state_bytes`` rather than writing the state whole."""
    return (
        archived_patches <= MAX_ARCHIVED_PATCHES and archived_bytes <= state_bytes // ARCHIVE_SHARE
    )


def journal_value(
    version: int,
    base: int,
    options: Options,
    patches: tuple[Any, ...],
    texts: tuple[bytes, ...],
    archive: int,
) -> tuple[dict[str, Any], bytes]:
    """A journal row's value and its JSON text, built from the patches' own JSON texts (no
    re-encoding of the patches already there)."""
    arrays, nulls = options
    value: dict[str, Any] = {
        "version": version,
        "base": base,
        "arrays": arrays,
        "nulls": nulls,
        "archive": archive,
    }
    head = orjson.dumps(value)
    value["patches"] = list(patches)
    return value, b"".join((head[:-1], b',"patches":[', b",".join(texts), b"]}"))


def archive_value(patches: tuple[Any, ...], text: bytes) -> tuple[dict[str, Any], bytes]:
    """An archive row's value and its JSON text, from the patches and their JSON joined by
    commas."""
    return {"patches": list(patches)}, b"".join((b'{"patches":[', text, b"]}"))


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
    snapshot, journal, archive = read(store, namespace)
    if journal is None:
        return None if snapshot is None else (snapshot.value, snapshot.version)
    version, _base, options, patches, _archive = parse(journal)
    archived = parse_archive(archive) if archive is not None else []
    state = snapshot.value if snapshot is not None else None
    return replay(state, [*archived, *patches], options), version
