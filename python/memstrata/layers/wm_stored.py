"""How a working memory is kept in its store: one record, ``state``, holding the whole state.

Every write replaces the record with ``put_if_version``, so two processes writing one working
memory never lose each other's updates: the loser reads the winner's state and merges again.
The record's store version is the working memory's version.

Older memstrata kept large states as a snapshot in ``state`` plus a ``journal`` of the patches
since (and an ``archive`` of older patches). :func:`read` folds such rows into the one state they
stand for; :func:`fold_legacy_rows` then writes that state as the one record, in the same
transaction as a journal emptied of patches (so a reader that runs the older code still reads
the same state), and deletes the old rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memstrata._core import deep_merge
from memstrata.exceptions import InvalidInputError
from memstrata.stores import ConditionalWrite, Item, Namespace, Store

STATE_KEY = "state"
JOURNAL_KEY = "journal"
ARCHIVE_KEY = "archive"
ALL_KEYS = (STATE_KEY, JOURNAL_KEY, ARCHIVE_KEY)


@dataclass(frozen=True)
class Stored:
    """What a working memory's namespace holds: the state (None when never written), the
    state record's version (0: none), and the older format's rows, when there are any."""

    state: Any
    version: int
    journal: Item | None = None
    archive: Item | None = None
    # Whether the journal held patches not yet in the state record.
    patched: bool = False

    @property
    def legacy(self) -> bool:
        return self.journal is not None


def read(store: Store, namespace: Namespace, initial: Any = None) -> Stored:
    """The state stored in ``namespace``, a journal of older memstrata merged in (its patches
    applied to the snapshot, or to ``initial`` when there is none).

    Raises:
        InvalidInputError: The older rows are malformed or do not belong together.
    """
    journal = store.get(namespace, JOURNAL_KEY)
    snapshot = store.get(namespace, STATE_KEY)
    version = snapshot.version if snapshot is not None else 0
    state = snapshot.value if snapshot is not None else None
    if journal is None:
        return Stored(state, version)
    value = journal.value
    fields = ("base", "arrays", "nulls", "patches")
    if not isinstance(value, dict) or any(name not in value for name in fields):
        raise InvalidInputError(
            f"the working-memory journal is not an object with {', '.join(fields)}"
        )
    archive_version = value.get("archive", 0)
    patches = value["patches"]
    if not isinstance(patches, list):
        raise InvalidInputError("the working-memory journal's patches are not a list")
    if not patches and not archive_version:
        return Stored(state, version, journal, store.get(namespace, ARCHIVE_KEY))
    if value["base"] != version:
        raise InvalidInputError(
            f"the working-memory journal applies to snapshot version {value['base']!r}, but "
            f"the stored snapshot is at version {version}"
        )
    archive = store.get(namespace, ARCHIVE_KEY) if archive_version else None
    archived: Any = []
    if archive_version:
        if archive is None or archive.version != archive_version:
            raise InvalidInputError(
                f"the working-memory journal follows archive version {archive_version!r}, "
                "which is not stored"
            )
        archived = archive.value.get("patches") if isinstance(archive.value, dict) else None
        if not isinstance(archived, list):
            raise InvalidInputError("the working-memory archive has no patches list")
    arrays, nulls = value["arrays"], value["nulls"]
    if arrays not in ("replace", "union") or nulls not in ("keep", "delete", "ignore"):
        raise InvalidInputError(
            f"the working-memory journal has unknown merge options {arrays!r}, {nulls!r}"
        )
    state = snapshot.value if snapshot is not None else initial
    for patch in [*archived, *patches]:
        if isinstance(patch, dict):
            state = deep_merge(state, patch, arrays=arrays, nulls=nulls)
        elif isinstance(state, str) and state.strip():
            state = f"{state.rstrip()}\n\n{patch}"
        else:
            state = patch
    return Stored(state, version, journal, archive, patched=True)


def fold_legacy_rows(store: Store, namespace: Namespace, stored: Stored) -> int | None:
    """Writes ``stored.state`` as the one record and retires the older rows; returns the
    record's new version, or None when someone wrote since ``stored`` was read."""
    assert stored.journal is not None
    version = stored.version
    if stored.patched:
        # Emptied, and naming the state record about to be written: older memstrata reading
        # the rows before they are deleted still sees this state.
        emptied = {
            "version": stored.version + 1,
            "base": stored.version + 1,
            "arrays": "replace",
            "nulls": "keep",
            "patches": [],
            "archive": 0,
        }
        writes = {
            STATE_KEY: ConditionalWrite(stored.state, stored.version),
            JOURNAL_KEY: ConditionalWrite(emptied, stored.journal.version),
        }
        written = store.put_many_if_versions(namespace, writes)
        if written is None:
            return None
        version = written[0].version
    # A crash before this leaves an emptied journal, which reads as no journal at all.
    delete_legacy_rows(store, namespace)
    return version


def delete_legacy_rows(store: Store, namespace: Namespace) -> None:
    """Deletes the journal and archive rows of older memstrata, if there are any."""
    for key in (JOURNAL_KEY, ARCHIVE_KEY):
        store.delete(namespace, key)


def read_state(store: Store, namespace: Namespace) -> tuple[Any, int] | None:
    """The state stored in a working memory's namespace and its version, or None if it was
    never written: a plain read (no schema check, nothing written) for tools that look at a
    store from outside a run, such as ``memstrata inspect``.

    Raises:
        InvalidInputError: Rows of older memstrata are malformed.
    """
    stored = read(store, namespace)
    if stored.state is None:
        return None
    return stored.state, stored.version
