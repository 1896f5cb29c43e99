"""How a working memory is stored: a snapshot, an archive and a journal of the patches since.

Updates append their patch to the journal; a full journal moves its patches into the archive;
a replace, a clear, the first write, a change of merge options or a full archive write the
whole state (and empty the journal and the archive) in one transaction. Every reader (a fresh
layer, a long-lived layer catching up, ``read_state``) sees the state the writer saw.
"""

from __future__ import annotations

import logging
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference_merge import deep_merge as reference_merge

import memstrata.layers.wm_journal as wm_journal_module
import memstrata.layers.working_memory as working_memory_module
from memstrata.exceptions import InvalidInputError
from memstrata.layers import WorkingMemory
from memstrata.layers.wm_journal import (
    ARCHIVE_KEY,
    ARCHIVE_SHARE,
    JOURNAL_KEY,
    JOURNAL_MIN_STATE_BYTES,
    JOURNAL_PAGE_BYTES,
    MAX_JOURNAL_PATCHES,
    STATE_KEY,
    read,
    read_state,
)
from memstrata.stack import MemoryStack
from memstrata.stores import InMemoryStore, SQLiteStore, Store

NS = ("working-memory", "thread", "t")


@pytest.fixture(autouse=True)
def journal_from_the_first_write(monkeypatch: pytest.MonkeyPatch) -> None:
    # These tests use small states; a state this small is written whole unless told otherwise
    # (test_a_small_state_is_written_whole_until_it_grows checks that rule itself).
    monkeypatch.setattr(working_memory_module, "JOURNAL_MIN_STATE_BYTES", 0)


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "wm.db")
    yield s
    s.close()


def update(layer: WorkingMemory, store: Store, patch: Any, mode: str = "append") -> Any:
    with MemoryStack([layer], store=store).run(thread_id="t") as run:
        handle = run.layer("working-memory")
        handle.update(patch, mode)
        return handle.state


def loaded(layer: WorkingMemory, store: Store) -> tuple[Any, int, str]:
    with MemoryStack([layer], store=store).run(thread_id="t") as run:
        handle = run.layer("working-memory")
        return handle.state, handle.version, handle.render()


def versions(store: Store) -> tuple[int, int, int]:
    """(snapshot version, journal version, patches in the journal)."""
    snapshot, journal = store.get(NS, STATE_KEY), store.get(NS, JOURNAL_KEY)
    assert snapshot is not None and journal is not None
    return snapshot.version, journal.version, len(journal.value["patches"])


def recorded_keys(store: Store, method: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The keys ``store.<method>`` (``get``, ``stamp``) is called with from now on, in order
    (until ``monkeypatch.undo()``)."""
    keys: list[str] = []
    real = getattr(store, method)

    def recording(namespace: Any, key: str) -> Any:
        keys.append(key)
        return real(namespace, key)

    monkeypatch.setattr(store, method, recording)
    return keys


def archived(store: Store) -> tuple[int, int]:
    """(archive version, patches in the archive); (0, 0) when there is none."""
    archive = store.get(NS, ARCHIVE_KEY)
    return (0, 0) if archive is None else (archive.version, len(archive.value["patches"]))


def test_appends_write_the_journal_not_the_state(store: SQLiteStore) -> None:
    layer = WorkingMemory(schema={"type": "object"})
    for i in range(10):
        update(layer, store, {"items": {f"k{i}": i}, "last": i})
    # The first write is the snapshot; the nine after it are journal patches.
    assert versions(store) == (1, 10, 9)
    state = {"items": {f"k{i}": i for i in range(10)}, "last": 9}
    assert read_state(store, NS) == (state, 10)
    # A new process (a fresh layer) replays the journal onto the snapshot.
    fresh_state, version, block = loaded(WorkingMemory(schema={"type": "object"}), store)
    assert (fresh_state, version) == (state, 10)
    assert block == loaded(layer, store)[2]


def test_a_full_journal_is_folded_into_a_new_snapshot(store: SQLiteStore) -> None:
    layer = WorkingMemory(schema={"type": "object"}, budget=(0, 100_000))
    update(layer, store, {"n": 0})
    for i in range(1, MAX_JOURNAL_PATCHES + 1):
        update(layer, store, {"n": i})
    assert versions(store) == (1, MAX_JOURNAL_PATCHES + 1, MAX_JOURNAL_PATCHES)
    update(layer, store, {"n": "next"})  # one patch too many: the state is written whole
    assert versions(store) == (2, MAX_JOURNAL_PATCHES + 2, 0)
    assert read_state(store, NS) == ({"n": "next"}, MAX_JOURNAL_PATCHES + 2)
    # A patch bigger than a page, into a state less than 8 times its size, goes into a new
    # snapshot at once ...
    big = {"blob": "x" * (JOURNAL_PAGE_BYTES + 10)}
    update(layer, store, big)
    assert versions(store) == (3, MAX_JOURNAL_PATCHES + 3, 0)
    assert read_state(store, NS) == ({"n": "next", **big}, MAX_JOURNAL_PATCHES + 3)
    # ... and into a state 8 times its size or more, into the journal; the small patch after it
    # no longer fits in a page with it, and both move into the archive (within 1/8 of the state).
    update(layer, store, {"pad": "p" * 9 * JOURNAL_PAGE_BYTES}, mode="replace")
    assert versions(store) == (4, MAX_JOURNAL_PATCHES + 4, 0)
    update(layer, store, {"blob": "y" * (JOURNAL_PAGE_BYTES + 10)})
    assert versions(store) == (4, MAX_JOURNAL_PATCHES + 5, 1)
    assert archived(store) == (0, 0)
    update(layer, store, {"n": 1})
    assert versions(store) == (4, MAX_JOURNAL_PATCHES + 6, 0)
    assert archived(store) == (1, 2)
    expected = {"pad": "p" * 9 * JOURNAL_PAGE_BYTES, "blob": "y" * (JOURNAL_PAGE_BYTES + 10)}
    assert read_state(store, NS) == ({**expected, "n": 1}, MAX_JOURNAL_PATCHES + 6)
    # Small patches fill a page's worth of journal; the archive has no room for them, so the
    # state is written whole, and the archive emptied with it.
    for i in range(2, 2000):
        update(layer, store, {"n": i, "note": "z" * 60})  # 80 bytes of JSON
        if versions(store)[2] == 0:
            break
    assert JOURNAL_PAGE_BYTES // 81 <= i <= JOURNAL_PAGE_BYTES // 79 + 2, i
    assert versions(store)[0] == 5 and archived(store) == (2, 0)
    assert read_state(store, NS) == ({**expected, "n": i, "note": "z" * 60}, versions(store)[1])


def big_state(pages: int) -> dict[str, Any]:
    """A state whose archive has room for ``pages`` journal pages."""
    return {"pad": "p" * (ARCHIVE_SHARE * JOURNAL_PAGE_BYTES * pages + 1000)}


def test_a_full_journal_moves_into_the_archive(store: SQLiteStore) -> None:
    layer = WorkingMemory(schema={"type": "object"}, budget=(0, 1_000_000))
    update(layer, store, big_state(3), mode="replace")
    model = big_state(3)
    moves = []
    for i in range(1, 400):
        patch = {"n": i, "note": "z" * 60}  # 80 bytes of JSON
        update(layer, store, patch)
        model.update(patch)
        snapshot_version, journal_version, in_journal = versions(store)
        archive_version, in_archive = archived(store)
        if in_journal == 0:
            moves.append((i, snapshot_version, archive_version, in_archive))
        # Every write is one journal version; the state is where every reader finds it.
        assert journal_version == i + 1
        assert read_state(store, NS) == (model, i + 1)
        if snapshot_version > 1:
            break
    # A page of patches at a time moved into the archive (the snapshot untouched), until the
    # archive held what 1/8 of the state allows; then the state was written whole, and the
    # archive emptied in the same transaction.
    assert [move[1:] for move in moves[:-1]] == [
        (1, k, i) for k, (i, *_) in enumerate(moves[:-1], start=1)
    ], moves
    pages = [i - before for (i, *_), (before, *_) in zip(moves, [(0,), *moves])]
    assert all(JOURNAL_PAGE_BYTES // 82 <= n <= JOURNAL_PAGE_BYTES // 79 + 2 for n in pages), pages
    assert len(moves) - 1 in (2, 3), moves
    assert moves[-1][1:] == (2, len(moves), 0)
    # A new process replays the snapshot, the archive and the journal.
    update(layer, store, {"after": True})
    model["after"] = True
    fresh = loaded(WorkingMemory(schema={"type": "object"}, budget=(0, 1_000_000)), store)
    assert fresh[:2] == (model, versions(store)[1])
    assert fresh[2] == loaded(layer, store)[2]


def test_the_archive_holds_at_most_its_patch_limit(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(working_memory_module, "MAX_JOURNAL_PATCHES", 2)
    monkeypatch.setattr(wm_journal_module, "MAX_ARCHIVED_PATCHES", 6)
    layer = WorkingMemory(schema={"type": "object"}, budget=(0, 1_000_000))
    update(layer, store, big_state(3), mode="replace")
    seen = []
    for i in range(1, 11):
        update(layer, store, {"n": i})
        seen.append((versions(store)[0], versions(store)[2], archived(store)[1]))
    # Two patches in the journal, the third moves all three into the archive; twice; the next
    # move would make nine archived patches, over six: the state is written whole.
    assert seen == [
        (1, 1, 0),
        (1, 2, 0),
        (1, 0, 3),
        (1, 1, 3),
        (1, 2, 3),
        (1, 0, 6),
        (1, 1, 6),
        (1, 2, 6),
        (2, 0, 0),
        (2, 1, 0),
    ]
    assert read_state(store, NS) == ({**big_state(3), "n": 10}, 11)


def test_a_journal_written_before_the_archive_existed_still_loads_and_moves(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(working_memory_module, "MAX_JOURNAL_PATCHES", 2)
    state = big_state(3)
    store.put(NS, STATE_KEY, state)
    old = {"version": 3, "base": 1, "arrays": "replace", "nulls": "keep", "patches": [{"a": 1}]}
    store.put(NS, JOURNAL_KEY, old)  # no "archive" field
    layer = WorkingMemory(schema={"type": "object"}, budget=(0, 1_000_000))
    assert loaded(layer, store)[:2] == ({**state, "a": 1}, 3)
    update(layer, store, {"b": 2})
    update(layer, store, {"c": 3})  # the journal is full: all three move into a new archive
    assert versions(store) == (1, 3, 0) and archived(store) == (1, 3)
    expected = {**state, "a": 1, "b": 2, "c": 3}
    assert read_state(store, NS) == (expected, 5)
    assert loaded(WorkingMemory(schema={"type": "object"}), store)[:2] == (expected, 5)


def test_a_long_lived_layer_catches_up_across_a_move_into_the_archive(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(working_memory_module, "MAX_JOURNAL_PATCHES", 2)
    mine = WorkingMemory(schema={"type": "object"}, budget=(0, 1_000_000))
    theirs = WorkingMemory(schema={"type": "object"}, budget=(0, 1_000_000))
    update(mine, store, big_state(3), mode="replace")
    update(mine, store, {"mine": 1})
    held, _, _ = loaded(mine, store)
    update(theirs, store, {"theirs": 1})
    update(theirs, store, {"theirs": 2})  # moves all three into the archive
    update(theirs, store, {"last": 3})
    assert archived(store) == (1, 3)
    read_keys = recorded_keys(store, "get", monkeypatch)
    state, version, block = loaded(mine, store)
    # The journal, and the archive it names; not the snapshot.
    assert read_keys == [JOURNAL_KEY, ARCHIVE_KEY]
    assert (state, version) == ({**big_state(3), "mine": 1, "theirs": 2, "last": 3}, 5)
    assert state is not held
    # The block was spliced from the one it held, and is what a full render gives.
    monkeypatch.undo()
    assert block == loaded(WorkingMemory(schema={"type": "object"}), store)[2]
    # With the archive unchanged since, only the journal is read.
    update(theirs, store, {"later": 4})
    read_keys = recorded_keys(store, "get", monkeypatch)
    assert loaded(mine, store)[0]["later"] == 4
    assert read_keys == [JOURNAL_KEY]


def test_a_reader_racing_a_move_into_the_archive_reads_again(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(working_memory_module, "MAX_JOURNAL_PATCHES", 1)
    layer = WorkingMemory(schema={"type": "object"}, budget=(0, 1_000_000))
    update(layer, store, big_state(3), mode="replace")
    update(layer, store, {"a": 1})
    update(layer, store, {"b": 2})  # into the archive
    real_get = store.get
    raced = []

    def get(namespace: Any, key: str) -> Any:
        if key == ARCHIVE_KEY and not raced:
            # Another writer moves the journal into the archive between the two reads.
            raced.append(True)
            update(layer, store, {"c": 3})
            update(layer, store, {"d": 4})
        return real_get(namespace, key)

    monkeypatch.setattr(store, "get", get)
    _, journal, archive = read(store, NS)
    monkeypatch.undo()
    assert raced and journal is not None and archive is not None
    assert journal.value["archive"] == archive.version == 2
    assert read_state(store, NS) == ({**big_state(3), "a": 1, "b": 2, "c": 3, "d": 4}, 5)


def test_an_archive_that_never_matches_its_journal_is_an_error(store: SQLiteStore) -> None:
    store.put(NS, STATE_KEY, {"kept": True})
    journal = {
        "version": 4,
        "base": 1,
        "arrays": "replace",
        "nulls": "keep",
        "patches": [],
        "archive": 3,
    }
    store.put(NS, JOURNAL_KEY, journal)
    store.put(NS, ARCHIVE_KEY, {"patches": [{"x": 1}]})  # version 1, not 3
    with pytest.raises(InvalidInputError, match="archive version 3, but the stored archive is at"):
        read_state(store, NS)


def test_replace_and_clear_write_the_snapshot(store: SQLiteStore) -> None:
    layer = WorkingMemory(schema={"type": "object"})
    update(layer, store, {"a": 1})
    update(layer, store, {"b": 2})
    assert versions(store) == (1, 2, 1)
    update(layer, store, {"c": 3}, mode="replace")
    assert versions(store) == (2, 3, 0)
    with MemoryStack([layer], store=store).run(thread_id="t") as run:
        run.layer("working-memory").clear()
    assert versions(store) == (3, 4, 0)
    assert read_state(store, NS) == ({}, 4)


def test_a_small_state_is_written_whole_until_it_grows(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(working_memory_module, "JOURNAL_MIN_STATE_BYTES", JOURNAL_MIN_STATE_BYTES)
    layer = WorkingMemory(schema={"type": "object"}, budget=(0, 100_000))
    for i in range(3):
        update(layer, store, {"n": i})
    snapshot = store.get(NS, STATE_KEY)
    assert snapshot is not None and snapshot.version == 3 and snapshot.value == {"n": 2}
    assert store.get(NS, JOURNAL_KEY) is None
    assert loaded(WorkingMemory(schema={"type": "object"}), store)[:2] == ({"n": 2}, 3)
    # Past the size, the state is written whole once more, with a journal from then on ...
    big = {"blob": "x" * JOURNAL_MIN_STATE_BYTES}
    update(layer, store, big)
    assert versions(store) == (4, 1, 0)
    update(layer, store, {"n": 4})
    assert versions(store) == (4, 2, 1)
    # ... which stays when the state shrinks again.
    update(layer, store, {"n": 5}, mode="replace")
    update(layer, store, {"m": 6})
    assert versions(store) == (5, 4, 1)
    assert read_state(store, NS) == ({"n": 5, "m": 6}, 7)
    assert loaded(WorkingMemory(schema={"type": "object"}), store)[:2] == ({"n": 5, "m": 6}, 7)


def test_a_small_state_kept_between_runs_costs_one_stamp_read(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(working_memory_module, "JOURNAL_MIN_STATE_BYTES", JOURNAL_MIN_STATE_BYTES)
    layer = WorkingMemory(schema={"type": "object"}, budget=(0, 100_000))
    update(layer, store, {"n": 1})
    stamped = recorded_keys(store, "stamp", monkeypatch)
    assert loaded(layer, store)[:2] == ({"n": 1}, 1)
    assert stamped == [STATE_KEY]
    # Another process's write past the size makes a journal, and rewrites the state with it:
    # the changed stamp sends the layer to read both.
    big = {"blob": "x" * JOURNAL_MIN_STATE_BYTES}
    update(WorkingMemory(schema={"type": "object"}, budget=(0, 100_000)), store, big)
    update(WorkingMemory(schema={"type": "object"}, budget=(0, 100_000)), store, {"n": 2})
    assert versions(store) == (2, 2, 1)
    assert loaded(layer, store)[:2] == ({"n": 2, **big}, 3)


def test_a_long_lived_layer_reads_only_the_new_patches(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = WorkingMemory(schema={"type": "object"})
    theirs = WorkingMemory(schema={"type": "object"})  # another process's layer
    update(mine, store, {"mine": {"a": 1}, "shared": [1]})
    update(mine, store, {"mine": {"b": 2}})
    held, _, _ = loaded(mine, store)
    update(theirs, store, {"theirs": 1, "shared": [2]})
    update(theirs, store, {"mine": {"a": None}})
    read_keys = recorded_keys(store, "get", monkeypatch)
    state, version, block = loaded(mine, store)
    assert read_keys == [JOURNAL_KEY]  # the snapshot was not read, only its stamp
    expected = {"mine": {"a": None, "b": 2}, "shared": [2], "theirs": 1}
    assert (state, version) == (expected, 4)
    assert state is not held
    # The block was spliced from the one it held, and is what a full render gives.
    monkeypatch.undo()
    assert block == loaded(WorkingMemory(schema={"type": "object"}), store)[2]


def test_a_long_lived_layer_rereads_after_a_new_snapshot(store: SQLiteStore) -> None:
    mine, theirs = (
        WorkingMemory(schema={"type": "object"}),
        WorkingMemory(schema={"type": "object"}),
    )
    update(mine, store, {"a": 1})
    update(mine, store, {"b": 2})
    assert loaded(mine, store)[0] == {"a": 1, "b": 2}
    update(theirs, store, {"z": 26}, mode="replace")
    update(theirs, store, {"y": 25})
    assert loaded(mine, store)[:2] == ({"z": 26, "y": 25}, 4)


def test_replay_uses_the_merge_options_a_patch_was_made_with(store: SQLiteStore) -> None:
    union = WorkingMemory(schema={"type": "object"}, arrays="union", nulls="delete")
    update(union, store, {"tags": ["a"], "gone": 1})
    update(union, store, {"tags": ["b"], "gone": None})
    replace = WorkingMemory(schema={"type": "object"})  # arrays="replace", nulls="keep"
    assert loaded(replace, store)[0] == {"tags": ["a", "b"]}
    assert versions(store) == (1, 2, 1)
    # This layer's own patch uses its own options: the state is written whole first.
    assert update(replace, store, {"tags": ["c"], "kept": None}) == {"tags": ["c"], "kept": None}
    assert versions(store) == (2, 3, 0)
    update(replace, store, {"tags": ["d"]})
    assert versions(store) == (2, 4, 1)
    journal = store.get(NS, JOURNAL_KEY)
    assert journal is not None and (journal.value["arrays"], journal.value["nulls"]) == (
        "replace",
        "keep",
    )
    assert loaded(union, store)[0] == {"tags": ["d"], "kept": None}


def test_text_state_appends_through_the_journal(store: SQLiteStore) -> None:
    template = "# Notes\n"
    layer = WorkingMemory(template=template)
    update(layer, store, "first")
    update(layer, store, "second")
    update(layer, store, "third")
    assert versions(store) == (1, 3, 2)
    text = "# Notes\n\nfirst\n\nsecond\n\nthird"
    assert loaded(WorkingMemory(template="# Other template\n"), store)[:2] == (text, 3)
    assert read_state(store, NS) == (text, 3)


def test_a_state_stored_before_the_journal_still_loads(store: SQLiteStore) -> None:
    store.put(NS, STATE_KEY, {"old": True})
    layer = WorkingMemory(schema={"type": "object"})
    assert loaded(layer, store)[:2] == ({"old": True}, 1)
    assert read_state(store, NS) == ({"old": True}, 1)
    update(layer, store, {"new": 1})  # the first write makes the snapshot and the journal
    assert versions(store) == (2, 1, 0)
    update(layer, store, {"newer": 2})
    assert versions(store) == (2, 2, 1)
    assert loaded(WorkingMemory(schema={"type": "object"}), store)[:2] == (
        {"old": True, "new": 1, "newer": 2},
        3,
    )


@pytest.mark.parametrize(
    ("journal", "reason"),
    [
        ({"bogus": 1}, "is not an object with"),
        ({"version": 2, "base": 1, "arrays": "sideways", "nulls": "keep", "patches": []}, "merge"),
        ({"version": 2, "base": 1, "arrays": "replace", "nulls": "keep", "patches": 5}, "list"),
        ({"version": 2, "base": 7, "arrays": "replace", "nulls": "keep", "patches": []}, "7"),
        ({"version": 2, "base": 1, "arrays": "replace", "nulls": "keep", "patches": [3]}, "int"),
        (
            {
                "version": 2,
                "base": 1,
                "arrays": "replace",
                "nulls": "keep",
                "patches": [],
                "archive": "x",
            },
            "archive is 'x'",
        ),
        (
            {
                "version": 2,
                "base": 1,
                "arrays": "replace",
                "nulls": "keep",
                "patches": [],
                "archive": 2,
            },
            "archive version 2",
        ),
        (
            {
                "version": 2,
                "base": 1,
                "arrays": "replace",
                "nulls": "keep",
                "patches": [],
                "archive": 1,
            },
            "archive is not an object with a patches list",
        ),
    ],
)
def test_a_broken_journal_or_archive_is_moved_aside(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture, journal: Any, reason: str
) -> None:
    store.put(NS, STATE_KEY, {"kept": True})
    # The last case's journal names archive version 1: this row, which is not an archive.
    broken_archive = {"patches": "not a list"}
    if journal.get("archive") == 1:
        store.put(NS, ARCHIVE_KEY, broken_archive)
    store.put(NS, JOURNAL_KEY, journal)
    with caplog.at_level(logging.WARNING):
        layer = WorkingMemory(schema={"type": "object"})
        with MemoryStack([layer], store=store).run(thread_id="t") as run:
            handle = run.layer("working-memory")
            assert handle.state == {}
            moved = handle.quarantined()
    assert len(moved) == 1 and moved[0]["state"] == {"kept": True}
    assert moved[0]["journal"] == journal
    has_archive = journal.get("archive") == 1
    assert moved[0]["archive"] == (broken_archive if has_archive else None)
    assert any(reason in v for v in moved[0]["violations"]), moved[0]["violations"]
    assert "moved aside" in caplog.text
    # Started over with the rows reset together (an archive emptied); writes work again.
    assert read_state(store, NS) == ({}, 2)
    assert archived(store) == ((2, 0) if has_archive else (0, 0))
    assert update(layer, store, {"fresh": 1}) == {"fresh": 1}


_keys = st.sampled_from(["a", "b", "c", "__proto__"])
_leaves = st.one_of(st.none(), st.integers(-3, 3), st.text("xy", max_size=2))
_values = st.recursive(
    _leaves,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_keys, inner, max_size=3)),
    max_leaves=6,
)
_patches = st.dictionaries(_keys, _values, max_size=3)
# (writer: 0 or 1, operation, patch)
_steps = st.lists(
    st.tuples(
        st.integers(0, 1),
        st.sampled_from(["append"] * 6 + ["replace", "clear"]),
        _patches,
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=_steps,
    arrays=st.sampled_from(["replace", "union"]),
    # A journal from the first write, from when the block passes ~400 characters (the
    # guidelines alone are ~200), or never.
    journal_from=st.sampled_from([0, 400, 10**9]),
    # An archive that takes up to the state's size (most full journals move into it), or none.
    archive_share=st.sampled_from([1, 10**9]),
)
def test_every_reader_sees_what_the_writers_wrote(
    steps: list[tuple[int, str, dict[str, Any]]],
    arrays: str,
    journal_from: int,
    archive_share: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A journal of one patch and an archive of three, so that the steps move patches into the
    # archive and fold both into snapshots often.
    monkeypatch.setattr(working_memory_module, "MAX_JOURNAL_PATCHES", 1)
    monkeypatch.setattr(wm_journal_module, "MAX_ARCHIVED_PATCHES", 3)
    monkeypatch.setattr(wm_journal_module, "ARCHIVE_SHARE", archive_share)
    monkeypatch.setattr(working_memory_module, "JOURNAL_MIN_STATE_BYTES", journal_from)
    store = InMemoryStore()
    writers = [
        WorkingMemory(schema={"type": "object"}, arrays=arrays, nulls=nulls)  # type: ignore[arg-type]
        for nulls in ("keep", "delete")
    ]
    model: dict[str, Any] = {}
    for number, (who, operation, patch) in enumerate(steps, start=1):
        layer = writers[who]
        with MemoryStack([layer], store=store).run(thread_id="t") as run:
            handle = run.layer("working-memory")
            if operation == "clear":
                handle.clear()
                model = {}
            else:
                handle.update(patch, operation)
                if operation == "replace":
                    model = reference_merge({}, patch, arrays=arrays, nulls="keep")
                else:
                    model = reference_merge(model, patch, arrays=arrays, nulls=layer.nulls)
            assert handle.state == model
        assert read_state(store, NS) == (model, number)
        for reader in (*writers, WorkingMemory(schema={"type": "object"})):
            assert loaded(reader, store)[:2] == (model, number)
