"""How a working memory is kept in its store: one record, ``state``, holding the whole state,
written with ``put_if_version``; its store version is the working memory's version.

Older memstrata kept a large state as a snapshot in ``state``, a ``journal`` of the patches since
and an ``archive`` of older ones. :func:`read` merges such rows into the state they stand for;
:func:`fold_legacy_rows` writes it as the one record, in the same transaction as a journal
emptied of patches (older code reading meanwhile still sees that state), then deletes the rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memstrata._core import deep_merge
from memstrata.exceptions import InvalidInputError
from memstrata.stores import ConditionalWrite, Item, Namespace, Store

STATE_KEY, JOURNAL_KEY, ARCHIVE_KEY = "state", "journal", "archive"
ALL_KEYS = (STATE_KEY, JOURNAL_KEY, ARCHIVE_KEY)
# What read() starts with: the journal is almost always absent, and asking costs no round trip.
OPENING_KEYS = (STATE_KEY, JOURNAL_KEY)


@dataclass(frozen=True)
class Stored:
    """The state (None: never written), the state record's version (0: none), and the older
    rows, if any (``patched``: the journal held patches the state record lacks)."""

    state: Any
    version: int
    journal: Item | None = None
    patched: bool = False

    @property
    def legacy(self) -> bool:
        return self.journal is not None


def read(
    store: Store,
    namespace: Namespace,
    initial: Any = None,
    rows: Mapping[str, Item] | None = None,
) -> Stored:
    """The stored state, an older journal's patches applied (to ``initial`` if the snapshot is
    missing). ``rows`` is ``store.get_many(namespace, OPENING_KEYS)`` if the caller read it.

    Raises:
        InvalidInputError: The older rows are malformed or do not belong together.
    """
    if rows is None:
        rows = store.get_many(namespace, OPENING_KEYS)
    journal, snapshot = rows.get(JOURNAL_KEY), rows.get(STATE_KEY)
    version = snapshot.version if snapshot is not None else 0
    state = snapshot.value if snapshot is not None else None
    if journal is None:
        return Stored(state, version)
    value = journal.value if isinstance(journal.value, dict) else {}
    patches, archived = value.get("patches"), value.get("archive", 0)
    arrays, nulls = value.get("arrays"), value.get("nulls")
    if not isinstance(patches, list) or arrays not in ("replace", "union"):
        raise InvalidInputError("the working-memory journal is not one memstrata wrote")
    if nulls not in ("keep", "delete", "ignore"):
        raise InvalidInputError(f"the working-memory journal has unknown nulls {nulls!r}")
    if not patches and not archived:
        return Stored(state, version, journal)
    if value.get("base") != version:
        raise InvalidInputError(
            f"the working-memory journal applies to snapshot version {value.get('base')!r}, "
            f"but the stored snapshot is at version {version}"
        )
    if archived:
        archive = store.get(namespace, ARCHIVE_KEY)
        older = archive.value.get("patches") if archive and isinstance(archive.value, dict) else 0
        if archive is None or archive.version != archived or not isinstance(older, list):
            raise InvalidInputError(
                f"the working-memory journal follows archive version {archived!r}, not stored"
            )
        patches = [*older, *patches]
    state = state if snapshot is not None else initial
    for patch in patches:
        if isinstance(patch, dict):
            state = deep_merge(state, patch, arrays=arrays, nulls=nulls)
        else:
            state = (
                f"{state.rstrip()}\n\n{patch}"
                if isinstance(state, str) and state.strip()
                else patch
            )
    return Stored(state, version, journal, patched=True)


def fold_legacy_rows(store: Store, namespace: Namespace, stored: Stored, state: Any) -> int | None:
    """Writes ``state`` (``stored``'s, as checked) as the one record and deletes the older
    rows; returns the record's version, or None when someone wrote since ``stored`` was read."""
    assert stored.journal is not None
    version = stored.version
    if stored.patched:
        emptied = {"version": version + 1, "base": version + 1, "arrays": "replace"}
        emptied.update(nulls="keep", patches=[], archive=0)
        written = store.put_many_if_versions(
            namespace,
            {
                STATE_KEY: ConditionalWrite(state, version),
                JOURNAL_KEY: ConditionalWrite(emptied, stored.journal.version),
            },
        )
        if written is None:
            return None
        version = written[0].version
    # A crash before this leaves an emptied journal, which reads as no journal at all.
    delete_legacy_rows(store, namespace)
    return version


def delete_legacy_rows(store: Store, namespace: Namespace) -> None:
    for key in (JOURNAL_KEY, ARCHIVE_KEY):
        store.delete(namespace, key)


def read_state(store: Store, namespace: Namespace) -> tuple[Any, int] | None:
    """The stored state and its version, or None if never written: a plain read (no schema
    check, nothing written) for tools that look at a store from outside, such as ``memstrata
    inspect``.

    Raises:
        InvalidInputError: Rows of older memstrata are malformed.
    """
    stored = read(store, namespace)
    return None if stored.state is None else (stored.state, stored.version)
