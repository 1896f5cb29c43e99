"""How a working memory is stored: a snapshot, and a journal of the patches since.

Updates append their patch to the journal; a replace, a clear, the first write, a change of
merge options or a full journal write the whole state (and empty the journal) in one
transaction. Every reader (a fresh layer, a long-lived layer catching up, ``read_state``) sees
the state the writer saw.
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

import memstrata.layers.working_memory as working_memory_module
from memstrata.layers import WorkingMemory
from memstrata.layers.wm_journal import (
    JOURNAL_KEY,
    JOURNAL_MIN_STATE_BYTES,
    JOURNAL_PAGE_BYTES,
    MAX_JOURNAL_PATCHES,
    STATE_KEY,
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
    # no longer fits in a page with it, and the state is written whole.
    update(layer, store, {"pad": "p" * 9 * JOURNAL_PAGE_BYTES}, mode="replace")
    assert versions(store) == (4, MAX_JOURNAL_PATCHES + 4, 0)
    update(layer, store, {"blob": "y" * (JOURNAL_PAGE_BYTES + 10)})
    assert versions(store) == (4, MAX_JOURNAL_PATCHES + 5, 1)
    update(layer, store, {"n": 1})
    assert versions(store) == (5, MAX_JOURNAL_PATCHES + 6, 0)
    # Small patches fill a page's worth of journal, then the state is written whole.
    for i in range(2, 2000):
        update(layer, store, {"n": i, "note": "z" * 60})  # 80 bytes of JSON
        if versions(store)[2] == 0:
            break
    assert JOURNAL_PAGE_BYTES // 81 <= i <= JOURNAL_PAGE_BYTES // 79 + 2, i


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
    stamped: list[str] = []
    real_stamp = store.stamp

    def stamp(namespace: Any, key: str) -> Any:
        stamped.append(key)
        return real_stamp(namespace, key)

    monkeypatch.setattr(store, "stamp", stamp)
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
    read_keys: list[str] = []
    real_get = store.get

    def get(namespace: Any, key: str) -> Any:
        read_keys.append(key)
        return real_get(namespace, key)

    monkeypatch.setattr(store, "get", get)
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
    ],
)
def test_a_broken_journal_is_moved_aside(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture, journal: Any, reason: str
) -> None:
    store.put(NS, STATE_KEY, {"kept": True})
    store.put(NS, JOURNAL_KEY, journal)
    with caplog.at_level(logging.WARNING):
        layer = WorkingMemory(schema={"type": "object"})
        with MemoryStack([layer], store=store).run(thread_id="t") as run:
            handle = run.layer("working-memory")
            assert handle.state == {}
            moved = handle.quarantined()
    assert len(moved) == 1 and moved[0]["state"] == {"kept": True}
    assert moved[0]["journal"] == journal
    assert any(reason in v for v in moved[0]["violations"]), moved[0]["violations"]
    assert "moved aside" in caplog.text
    # Started over with both rows reset together; writes work again.
    assert read_state(store, NS) == ({}, 2)
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
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=_steps,
    arrays=st.sampled_from(["replace", "union"]),
    # A journal from the first write, from when the block passes ~400 characters (the
    # guidelines alone are ~200), or never.
    journal_from=st.sampled_from([0, 400, 10**9]),
)
def test_every_reader_sees_what_the_writers_wrote(
    steps: list[tuple[int, str, dict[str, Any]]],
    arrays: str,
    journal_from: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A small journal, so that the steps fold it into snapshots often.
    monkeypatch.setattr(working_memory_module, "MAX_JOURNAL_PATCHES", 3)
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
