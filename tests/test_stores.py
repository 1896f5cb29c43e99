"""The store conformance suite: every backend must pass all of it.

A new backend joins by adding a factory to ``BACKENDS``; nothing else changes.
"""

from __future__ import annotations

import asyncio
import json
import math
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
from store_checks import changed_keys, drop_postgres_tables, empty_postgres_tables

from memstrata import deep_merge
from memstrata.exceptions import (
    InvalidInputError,
    LimitExceededError,
    NonFiniteNumberError,
    UnsupportedTypeError,
)
from memstrata.stores import InMemoryStore, Item, PostgresStore, SQLiteStore, Store, open_store
from memstrata.stores.base import ChangeMark, ConditionalWrite, item_of

StoreFactory = Callable[[pytest.FixtureRequest, pathlib.Path], Store]


def _postgres(request: pytest.FixtureRequest, _tmp: pathlib.Path) -> Store:
    url = request.getfixturevalue("postgres_url")  # one throwaway cluster per session
    store = PostgresStore(url)
    empty_postgres_tables(url)
    return store


BACKENDS: dict[str, StoreFactory] = {
    "memory": lambda _request, _tmp: InMemoryStore(),
    "sqlite": lambda _request, tmp: SQLiteStore(tmp / "memstrata.db"),
    "postgres": _postgres,
}

NS = ("agents", "alice")


@pytest.fixture(params=sorted(BACKENDS))
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    s = BACKENDS[request.param](request, tmp_path)
    yield s
    s.close()


def test_put_then_get_round_trips_json(store: Store) -> None:
    value = {"name": "Ada", "tags": ["a", "b"], "n": 1.5, "ok": True, "none": None, "u": "日本"}
    item = store.put(NS, "profile", value)
    assert (item.namespace, item.key, item.value, item.version) == (NS, "profile", value, 1)
    got = store.get(NS, "profile")
    assert got is not None and got.value == value and got.version == 1
    assert got.created_at == item.created_at == got.updated_at


def test_overwrite_bumps_version_and_keeps_created_at(store: Store) -> None:
    first = store.put(NS, "k", 1)
    time.sleep(0.002)
    second = store.put(NS, "k", 2)
    assert second.version == 2 and second.value == 2
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at


def test_missing_item_is_none(store: Store) -> None:
    assert store.get(NS, "nope") is None
    assert store.get(("other",), "k") is None


def test_values_are_copied_in_and_out(store: Store) -> None:
    value: dict[str, Any] = {"list": [1, 2]}
    store.put(NS, "k", value)
    value["list"].append(3)
    got = store.get(NS, "k")
    assert got is not None and got.value == {"list": [1, 2]}
    got.value["list"].append(4)
    again = store.get(NS, "k")
    assert again is not None and again.value == {"list": [1, 2]}


def test_delete_reports_whether_an_item_was_there(store: Store) -> None:
    store.put(NS, "k", "v")
    assert store.delete(NS, "k") is True
    assert store.delete(NS, "k") is False
    assert store.get(NS, "k") is None


def test_list_by_prefix_is_ordered_and_paged(store: Store) -> None:
    for ns, key in [
        (("a", "x"), "2"),
        (("a", "x"), "1"),
        (("a", "y", "z"), "1"),
        (("ab",), "1"),
        (("b",), "1"),
    ]:
        store.put(ns, key, f"{ns}/{key}")
    under_a = [(i.namespace, i.key) for i in store.list(("a",))]
    # ("ab",) shares the text prefix "a" but not the label: it must not be listed under ("a",).
    assert under_a == [(("a", "x"), "1"), (("a", "x"), "2"), (("a", "y", "z"), "1")]
    assert [i.key for i in store.list(("a",), limit=1, offset=1)] == ["2"]
    assert len(store.list()) == 5
    assert store.list(("a", "y")) == store.list(("a", "y", "z"))
    assert store.list(("missing",)) == []


def test_expired_items_are_never_returned(store: Store) -> None:
    store.put(NS, "short", "v", ttl=0.05)
    store.put(NS, "long", "v", ttl=60)
    assert store.get(NS, "short") is not None
    time.sleep(0.08)
    assert store.get(NS, "short") is None
    assert [i.key for i in store.list(NS)] == ["long"]
    updated = store.update(NS, "short", lambda current: {"was": current})
    # Absent for the update, but its versions number on (see test_a_version_held_from_before...).
    assert updated.value == {"was": None} and updated.version == 2
    store.put(NS, "gone", "v", ttl=0.01)
    time.sleep(0.03)
    assert store.purge_expired() == 1
    assert store.delete(NS, "gone") is False


def test_get_many_reads_the_live_items_among_the_keys(store: Store) -> None:
    store.put(NS, "b", {"n": 2})
    store.put(NS, "a", {"n": 1})
    store.put(NS, "gone", "v", ttl=0.05)
    store.put(("agents", "bob"), "c", "other namespace")
    assert store.get_many(NS, ["gone"]) == {"gone": store.get(NS, "gone")}
    time.sleep(0.08)
    # Asked order, duplicates once; absent, expired and other namespaces' keys left out.
    got = store.get_many(NS, ["b", "missing", "gone", "a", "b", "c"])
    assert list(got) == ["b", "a"]
    assert got == {"b": store.get(NS, "b"), "a": store.get(NS, "a")}
    assert store.get_many(NS, ()) == {}
    got["a"].value["n"] = 99  # the caller's copy
    assert store.get(NS, "a").value == {"n": 1}  # type: ignore[union-attr]
    many = [f"k{i:04d}" for i in range(1200)]  # past SQLite's keys per statement
    for key in many[::100]:
        store.put(NS, key, key)
    assert list(store.get_many(NS, many)) == many[::100]


@pytest.mark.parametrize("keys", ["ab", [1], ["a", ""], None, {"a"}])
def test_get_many_names_bad_keys(store: Store, keys: Any) -> None:
    with pytest.raises(InvalidInputError, match="key"):
        store.get_many(NS, keys)


def test_update_is_read_modify_write(store: Store) -> None:
    seen: list[Any] = []

    def add_key(current: Any) -> Any:
        seen.append(current)
        return deep_merge(current or {}, {"count": len(seen)})

    first = store.update(NS, "state", add_key)
    second = store.update(NS, "state", add_key)
    assert seen == [None, {"count": 1}]
    assert (first.version, second.version, second.value) == (1, 2, {"count": 2})


def test_put_if_version_writes_only_over_the_expected_version(store: Store) -> None:
    created = store.put_if_version(NS, "k", {"v": 1}, expected_version=0)
    assert created is not None and created.version == 1
    assert store.put_if_version(NS, "k", {"v": "lost"}, expected_version=0) is None
    second = store.put_if_version(NS, "k", {"v": 2}, expected_version=1)
    assert second is not None and second.version == 2
    assert store.put_if_version(NS, "k", {"v": "stale"}, expected_version=1) is None
    got = store.get(NS, "k")
    assert got is not None and got.value == {"v": 2} and got.version == 2
    with pytest.raises(InvalidInputError, match="expected_version"):
        store.put_if_version(NS, "k", 1, expected_version=-1)


def test_delete_if_version_deletes_only_the_version_read(store: Store) -> None:
    """A delete of what the caller read never removes a value written since: at another
    version, or absent, nothing is deleted; at the version, the item goes like a delete (a
    tombstone the change tracking reports, versions numbering on)."""
    store.put(NS, "k", {"v": 1})
    mark = store.change_mark(NS)
    store.put(NS, "k", {"v": 2})  # written since the caller read version 1
    assert store.delete_if_version(NS, "k", expected_version=1) is False
    got = store.get(NS, "k")
    assert got is not None and got.value == {"v": 2} and got.version == 2
    assert store.delete_if_version(NS, "k", expected_version=2) is True
    assert store.get(NS, "k") is None
    assert store.changes(NS, mark).removed == ["k"]
    assert store.delete_if_version(NS, "k", expected_version=2) is False  # gone already
    assert store.delete_if_version(NS, "never", expected_version=0) is False
    again = store.put_if_version(NS, "k", {"v": 3}, expected_version=0)
    assert again is not None and again.version == 3
    with pytest.raises(InvalidInputError):
        store.delete_if_version(NS, "k", expected_version=-1)


def test_adelete_if_version_answers_as_the_sync_form(store: Store) -> None:
    store.put(NS, "k", {"v": 1})
    assert asyncio.run(store.adelete_if_version(NS, "k", expected_version=2)) is False
    assert asyncio.run(store.adelete_if_version(NS, "k", expected_version=1)) is True
    assert store.get(NS, "k") is None


@pytest.mark.parametrize("version", [2**63, 2**64 - 1, 2**80])
def test_a_version_past_64_bits_matches_nothing(store: Store, version: int) -> None:
    """No item reaches a version past the 64-bit range: a conditional write or delete naming
    one is refused like any other stale version on every backend, nothing written (a model
    passes such a number through memory_write's expected_version)."""
    store.put(NS, "k", {"v": 1})
    assert store.put_if_version(NS, "k", {"v": 2}, expected_version=version) is None
    assert store.put_if_version(NS, "new", {"v": 2}, expected_version=version) is None
    writes = {"k": ConditionalWrite({"v": 3}, 1), "new": ConditionalWrite({"v": 3}, version)}
    assert store.put_many_if_versions(NS, writes) is None
    assert store.delete_if_version(NS, "k", expected_version=version) is False
    got = store.get(NS, "k")
    assert got is not None and (got.value, got.version) == ({"v": 1}, 1)
    assert store.get(NS, "new") is None


def test_put_if_version_over_an_expired_item_counts_it_absent(store: Store) -> None:
    first = store.put_if_version(NS, "t", {"v": 1}, expected_version=0, ttl=0.05)
    assert first is not None and first.expires_at is not None
    again = store.put_if_version(NS, "t", {"v": 2}, expected_version=1, ttl=0.05)
    assert again is not None and again.version == 2 and again.created_at == first.created_at
    mark = store.change_mark(NS)
    time.sleep(0.08)
    # Expired: its version no longer counts, and a write expecting none starts it over.
    assert store.put_if_version(NS, "t", {"v": "stale"}, expected_version=2) is None
    fresh = store.put_if_version(NS, "t", {"v": 3}, expected_version=0)
    # A new record (new created_at), numbered on from the expired one's versions.
    assert fresh is not None and fresh.version == 3 and fresh.expires_at is None
    assert fresh.created_at > first.created_at
    assert store.put_if_version(NS, "t", {"v": "lost"}, expected_version=0) is None
    got = store.get(NS, "t")
    assert got is not None and (got.value, got.version) == ({"v": 3}, 3)
    # Each write took a new change number: a reader of the changes since the mark sees it.
    changed = store.changes(NS, mark)
    assert [(i.key, i.value) for i in changed.items] == [("t", {"v": 3})]


def test_put_if_version_of_validated_data_skips_only_the_walk(store: Store) -> None:
    merged = deep_merge({"a": {"b": [1, 2]}}, {"a": {"c": "x"}})
    written = store.put_if_version(NS, "v", merged, expected_version=0, validated=True)
    assert written is not None and written.version == 1
    got = store.get(NS, "v")
    assert got is not None and got.value == {"a": {"b": [1, 2], "c": "x"}}
    # Unvalidated data is still walked (a NaN would otherwise be stored as null) ...
    with pytest.raises(NonFiniteNumberError):
        store.put_if_version(NS, "v", {"x": math.nan}, expected_version=1)
    # ... and what the encoder refuses is refused either way, the stored value untouched.
    with pytest.raises(InvalidInputError):
        store.put_if_version(NS, "v", {"x": "\ud800"}, expected_version=1, validated=True)
    got = store.get(NS, "v")
    assert got is not None and got.version == 1 and got.value == {"a": {"b": [1, 2], "c": "x"}}


def test_put_if_version_stores_the_callers_encoding(store: Store) -> None:
    value = {"a": {"b": [1, 2]}, "c": "x"}
    indented = orjson.dumps(value, option=orjson.OPT_INDENT_2)
    written = store.put_if_version(NS, "e", value, expected_version=0, encoded=indented)
    assert written is not None and written.value == value
    got = store.get(NS, "e")
    assert got is not None and got.value == value
    with pytest.raises(InvalidInputError, match="encoded must be bytes"):
        store.put_if_version(NS, "e", value, expected_version=1, encoded=indented.decode())  # type: ignore[arg-type]
    huge = b'"' + b"x" * (16 << 20) + b'"'
    with pytest.raises(LimitExceededError):
        store.put_if_version(NS, "e", "x", expected_version=1, encoded=huge)
    got = store.get(NS, "e")
    assert got is not None and got.version == 1 and got.value == value


def test_put_many_if_versions_writes_every_key_or_none(store: Store) -> None:
    store.put(NS, "snapshot", {"n": 1})
    # One key stale (journal is absent, not at version 3): nothing is written.
    stale = {
        "snapshot": ConditionalWrite({"n": 2}, 1),
        "journal": ConditionalWrite({"base": 2}, 3),
    }
    assert store.put_many_if_versions(NS, stale) is None
    got = store.get(NS, "snapshot")
    assert got is not None and got.value == {"n": 1} and got.version == 1
    assert store.get(NS, "journal") is None
    # Both at their expected versions: both written, in the order given.
    indented = orjson.dumps({"n": 2}, option=orjson.OPT_INDENT_2)
    written = store.put_many_if_versions(
        NS,
        {
            "snapshot": ConditionalWrite({"n": 2}, 1, encoded=indented),
            "journal": ConditionalWrite({"base": 2}, 0),
        },
    )
    assert written is not None
    assert [(i.key, i.value, i.version) for i in written] == [
        ("snapshot", {"n": 2}, 2),
        ("journal", {"base": 2}, 1),
    ]
    assert store.get(NS, "snapshot").value == {"n": 2}  # type: ignore[union-attr]
    assert store.get(NS, "journal").value == {"base": 2}  # type: ignore[union-attr]
    # The same writes again are stale now.
    again = {"snapshot": ConditionalWrite({"n": 3}, 1), "journal": ConditionalWrite({}, 0)}
    assert store.put_many_if_versions(NS, again) is None
    assert store.put_many_if_versions(NS, {}) == []


def test_put_many_if_versions_refuses_bad_data_before_writing(store: Store) -> None:
    store.put(NS, "a", 1)
    with pytest.raises(NonFiniteNumberError):
        store.put_many_if_versions(
            NS, {"a": ConditionalWrite(2, 1), "b": ConditionalWrite({"x": math.nan}, 0)}
        )
    with pytest.raises(InvalidInputError, match="ConditionalWrite"):
        store.put_many_if_versions(NS, {"a": (2, 1)})  # type: ignore[dict-item]
    with pytest.raises(InvalidInputError, match="expected_version"):
        store.put_many_if_versions(NS, {"a": ConditionalWrite(2, -1)})
    with pytest.raises(InvalidInputError, match="mapping"):
        store.put_many_if_versions(NS, [("a", ConditionalWrite(2, 1))])  # type: ignore[arg-type]
    got = store.get(NS, "a")
    assert got is not None and got.value == 1 and got.version == 1
    assert store.get(NS, "b") is None


def test_failed_update_writes_nothing(store: Store) -> None:
    store.put(NS, "state", {"keep": 1})

    def boom(current: Any) -> Any:
        raise RuntimeError("model sent garbage")

    with pytest.raises(RuntimeError, match="garbage"):
        store.update(NS, "state", boom)
    with pytest.raises(UnsupportedTypeError):
        store.update(NS, "state", lambda current: {"bad": {1, 2}})
    got = store.get(NS, "state")
    assert got is not None and got.value == {"keep": 1} and got.version == 1


@pytest.mark.parametrize(
    ("value", "error", "where"),
    [
        ({"a": {"b": float("nan")}}, NonFiniteNumberError, "$.a.b"),
        ({"a": [1, math.inf]}, NonFiniteNumberError, "$.a[1]"),
        ({"a": b"bytes"}, UnsupportedTypeError, "$.a"),
        ({"a": object()}, UnsupportedTypeError, "$.a"),
        ({1: "int key"}, UnsupportedTypeError, "$"),
    ],
)
def test_non_json_values_are_refused_and_nothing_changes(
    store: Store, value: Any, error: type[Exception], where: str
) -> None:
    store.put(NS, "k", "old")
    with pytest.raises(error) as info:
        store.put(NS, "k", value)
    assert where in str(info.value)
    got = store.get(NS, "k")
    assert got is not None and got.value == "old" and got.version == 1


@pytest.mark.parametrize(
    ("namespace", "key", "message"),
    [
        ((), "k", "at least one label"),
        (("a", ""), "k", "label 1 is empty"),
        (("a\x1fb",), "k", "unit-separator"),
        (("a", 3), "k", "label 1 must be str"),
        ("agents", "k", "must be a tuple"),
        (("a",), "", "key is empty"),
        (("a",), "x" * 5000, "limit is 1024"),
        (("a",), "k\x00", "NUL"),
        # A lone surrogate: no JSON or UTF-8 text holds one, so no backend can keep it.
        (("a",), "k\ud800", "key is not valid Unicode"),
        (("a", "b\udc00"), "k", "label 1 is not valid Unicode"),
        (("a", "b\ud800"), "k", "label 1 is not valid Unicode"),
        (("a",), "k\udfff", "key is not valid Unicode"),
    ],
)
def test_bad_namespaces_and_keys_are_named(
    store: Store, namespace: Any, key: Any, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        store.put(namespace, key, 1)
    assert store.list(("a",)) == []


def test_bad_ttl_and_paging_are_refused(store: Store) -> None:
    for ttl in (0, -1, math.nan, "1d"):
        with pytest.raises(InvalidInputError, match="ttl"):
            store.put(NS, "k", 1, ttl=ttl)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="limit"):
        store.list(NS, limit=-1)


@pytest.mark.parametrize(
    "limit, offset, named", [(2**63, 0, "limit"), (10, 2**63, "offset"), (2**70, 0, "limit")]
)
def test_paging_past_64_bits_is_refused_by_name(
    store: Store, limit: int, offset: int, named: str
) -> None:
    """No store counts past 2**63 - 1: a larger limit or offset is bad input, named, not the
    database's overflow error."""
    store.put(NS, "k", 1)
    with pytest.raises(InvalidInputError, match=f"{named} must be .* up to 2\\*\\*63 - 1"):
        store.list(NS, limit=limit, offset=offset)
    assert len(store.list(NS, limit=2**63 - 1, offset=0)) == 1


def test_sql_looking_strings_are_plain_data(store: Store) -> None:
    ns = ("x'; DROP TABLE items; --",)
    store.put(ns, "' OR 1=1 --", {"q": "'; DELETE FROM items"})
    store.put(("y",), "k", 1)
    assert [i.key for i in store.list(ns)] == ["' OR 1=1 --"]
    assert len(store.list()) == 2


def test_async_twins(store: Store) -> None:
    async def scenario() -> None:
        await store.aput(NS, "k", {"a": 1})
        await store.aupdate(NS, "k", lambda v: deep_merge(v, {"b": 2}))
        item = await store.aget(NS, "k")
        assert item is not None and item.value == {"a": 1, "b": 2} and item.version == 2
        assert await store.aget_many(NS, ["x", "k"]) == {"k": item}
        assert [i.key for i in await store.alist(NS)] == ["k"]
        assert await store.adelete(NS, "k") is True
        assert await store.apurge_expired() == 0
        again = await store.aput_if_version(NS, "k", 1, expected_version=0)
        assert again is not None and again.version == 3  # numbered on from the deleted one
        both = {"k": ConditionalWrite(2, 3), "j": ConditionalWrite(3, 0)}
        written = await store.aput_many_if_versions(NS, both)
        assert written is not None and [i.version for i in written] == [4, 1]
        assert await store.aput_many_if_versions(NS, both) is None
        await store.aclose()

    asyncio.run(scenario())


def test_object_key_order_survives_a_round_trip(store: Store) -> None:
    # A working memory renders its state in key order; a store that reordered keys would change
    # the prompt between turns (and defeat providers' prompt caching).
    value = {"zebra": 1, "a": {"yy": 1, "b": 2}, "mid": [{"z": 1, "a": 2}]}
    store.put(NS, "ordered", value)
    got = store.get(NS, "ordered")
    assert got is not None
    assert json.dumps(got.value) == json.dumps(value)


def test_sqlite_survives_reopen(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "nested" / "dir" / "m.db"
    with SQLiteStore(path) as s:
        s.put(NS, "k", {"persisted": True})
    with SQLiteStore(path) as s:
        got = s.get(NS, "k")
        assert got is not None and got.value == {"persisted": True}


def test_open_store_urls(tmp_path: pathlib.Path) -> None:
    assert isinstance(open_store("memory://"), InMemoryStore)
    s = open_store(f"sqlite:///{tmp_path}/u.db")
    assert isinstance(s, SQLiteStore) and s.path == f"/{tmp_path}/u.db".replace("//", "/")
    s.close()
    for bad in ("redis://x", "sqlite://host/x.db", "sqlite:///", 42):
        with pytest.raises(InvalidInputError):
            open_store(bad)  # type: ignore[arg-type]


# Each worker is a separate interpreter (not a fork), as separate agent servers would be.
_MERGE_WORKER = """
import sys
from memstrata import deep_merge
from memstrata.stores import open_store
url, worker, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open_store(url) as s:
    for j in range(count):
        s.update(("agents", "alice"), "shared",
                 lambda v, j=j: deep_merge(v or {}, {f"w{worker}-{j}": j}))
"""


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/concurrent.db"
    url: str = request.getfixturevalue("postgres_url")
    drop_postgres_tables(url)
    return url


def test_two_processes_merging_into_one_record_lose_nothing(shared_url: str) -> None:
    open_store(shared_url).close()  # create the schema before the race
    procs = [
        subprocess.Popen([sys.executable, "-c", _MERGE_WORKER, shared_url, str(w), "250"])
        for w in range(2)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    with open_store(shared_url) as s:
        item = s.get(NS, "shared")
    assert item is not None
    assert sorted(item.value) == sorted(f"w{w}-{j}" for w in range(2) for j in range(250))
    assert item.version == 500


def test_update_many_writes_every_key_in_one_go(store: Store) -> None:
    store.put(NS, "a", {"n": 1})
    items = store.update_many(
        NS,
        {
            "a": lambda cur: {"n": cur["n"] + 1},
            "b": lambda cur: {"was": cur},
        },
    )
    assert [(i.key, i.value, i.version) for i in items] == [
        ("a", {"n": 2}, 2),
        ("b", {"was": None}, 1),
    ]
    assert store.get(NS, "a").value == {"n": 2}  # type: ignore[union-attr]
    assert store.get(NS, "b").value == {"was": None}  # type: ignore[union-attr]


def test_update_many_writes_nothing_when_one_update_fails(store: Store) -> None:
    store.put(NS, "a", 1)

    def boom(_cur: Any) -> Any:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        store.update_many(NS, {"a": lambda cur: cur + 1, "b": lambda _cur: 2, "c": boom})
    assert store.get(NS, "a").value == 1  # type: ignore[union-attr]
    assert store.get(NS, "b") is None
    with pytest.raises(NonFiniteNumberError):
        store.update_many(NS, {"a": lambda cur: cur + 1, "d": lambda _cur: math.nan})
    assert store.get(NS, "a").value == 1  # type: ignore[union-attr]
    assert store.get(NS, "d") is None
    with pytest.raises(InvalidInputError):
        store.update_many(NS, {"a": lambda cur: cur + 1, "": lambda _cur: 2})
    assert store.get(NS, "a").value == 1  # type: ignore[union-attr]


def test_aupdate_many_is_the_async_twin(store: Store) -> None:
    items = asyncio.run(store.aupdate_many(NS, {"x": lambda _cur: [1]}))
    assert items[0].value == [1] and store.get(NS, "x").value == [1]  # type: ignore[union-attr]


# Change tracking: change_mark and update_many_since --------------------------------------------


def test_update_many_since_plans_on_what_changed_after_the_mark(store: Store) -> None:
    store.put(NS, "untouched", 1)
    store.put(NS, "rewritten", 1)
    mark = store.change_mark(NS)
    store.put(NS, "new", 2)
    store.update(NS, "rewritten", lambda v: v + 1)
    store.put((*NS, "sub"), "below", 3)  # a sub-namespace is not the namespace
    store.put(("other",), "elsewhere", 4)
    store.put(NS, "expiring", 5, ttl=0.05)
    time.sleep(0.08)
    seen: list[tuple[str, Any, int]] = []

    def plan(changed: list[Item]) -> dict[str, Any]:
        seen.extend((i.key, i.value, i.version) for i in changed)
        return {"summary": lambda current: {"was": current, "saw": [i.key for i in changed]}}

    items = store.update_many_since(NS, mark, plan)
    assert seen == [("new", 2, 1), ("rewritten", 2, 2)]
    assert [(i.key, i.value, i.version) for i in items] == [
        ("summary", {"was": None, "saw": ["new", "rewritten"]}, 1)
    ]
    assert store.get(NS, "summary").value == items[0].value  # type: ignore[union-attr]
    # Its own write is a change for the old mark; nothing is, for a mark taken after it.
    later = store.change_mark(NS)
    assert changed_keys(store, NS, mark) == ["new", "rewritten", "summary"]
    assert changed_keys(store, NS, later) == []


def test_update_many_since_writes_nothing_when_the_plan_or_an_update_fails(store: Store) -> None:
    store.put(NS, "a", 1)
    mark = store.change_mark(NS)

    def failing_plan(_changed: list[Item]) -> dict[str, Any]:
        raise RuntimeError("plan failed")

    def boom(_current: Any) -> Any:
        raise RuntimeError("update failed")

    with pytest.raises(RuntimeError, match="plan failed"):
        store.update_many_since(NS, mark, failing_plan)
    with pytest.raises(RuntimeError, match="update failed"):
        store.update_many_since(NS, mark, lambda _c: {"a": lambda v: v + 1, "b": boom})
    with pytest.raises(NonFiniteNumberError):
        store.update_many_since(
            NS, mark, lambda _c: {"a": lambda v: v + 1, "b": lambda _v: math.nan}
        )
    bad_plans: list[tuple[Any, str]] = [
        ({"a": lambda v: v + 1, "": lambda _v: 1}, "key is empty"),
        ({"a": lambda v: v + 1, "b": 3}, "not callable"),
        ([("a", lambda v: v + 1)], "mapping"),
    ]
    for returned, message in bad_plans:
        with pytest.raises(InvalidInputError, match=message):
            store.update_many_since(NS, mark, lambda _c, r=returned: r)
    got = store.get(NS, "a")
    assert got is not None and (got.value, got.version) == (1, 1)
    assert store.get(NS, "b") is None


def test_update_many_since_refuses_a_foreign_or_garbled_mark(store: Store) -> None:
    mark = store.change_mark(NS)
    other = "sqlite" if mark.backend != "sqlite" else "memory"
    for bad in (
        None,
        mark.position,
        ChangeMark(other, NS, "1"),
        ChangeMark(mark.backend, NS, "1; --"),
    ):
        with pytest.raises(InvalidInputError, match="since"):
            store.update_many_since(NS, bad, lambda _c: {})  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"marks namespace \('agents', 'alice'\)"):
        store.update_many_since(("agents", "bob"), mark, lambda _c: {})
    with pytest.raises(InvalidInputError, match="label 0 is empty"):
        store.update_many_since(("",), mark, lambda _c: {})
    with pytest.raises(InvalidInputError, match="label 0 is empty"):
        store.change_mark(("",))


def test_a_write_after_the_newest_item_is_deleted_is_still_a_change(store: Store) -> None:
    store.put(NS, "a", 1)
    store.put(NS, "newest", 2)
    store.put(NS, "expiring", 3, ttl=0.05)
    mark = store.change_mark(NS)
    store.delete(NS, "newest")
    time.sleep(0.08)
    assert store.purge_expired() == 1
    store.put(NS, "later", 4)
    assert changed_keys(store, NS, mark) == ["later"]


def test_change_tracking_async_twins(store: Store) -> None:
    async def scenario() -> None:
        mark = await store.achange_mark(NS)
        await store.aput(NS, "k", 1)
        items = await store.aupdate_many_since(
            NS, mark, lambda changed: {"seen": lambda _v: [i.key for i in changed]}
        )
        assert [(i.key, i.value) for i in items] == [("seen", ["k"])]
        got = await store.aget(NS, "seen")
        assert got is not None and got.value == ["k"]
        await store.aclose()

    asyncio.run(scenario())


# Each claim counts the tickets already taken and takes the next number: two plans running at
# once in different processes would both take the same number, and the second write would fail.
_TICKET_WORKER = """
import sys
from memstrata.stores import open_store
from memstrata.stores.base import ChangeMark
url, backend, position, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
mark = ChangeMark(backend, ("agents", "alice"), position)

def claim(changed):
    n = sum(1 for item in changed if item.key.startswith("ticket-"))
    def fresh(current):
        assert current is None, f"ticket-{n} was taken twice"
        return n
    return {f"ticket-{n}": fresh}

with open_store(url) as s:
    for _ in range(count):
        s.update_many_since(("agents", "alice"), mark, claim)
"""


def test_update_many_since_is_serialised_across_processes(shared_url: str) -> None:
    with open_store(shared_url) as s:
        mark = s.change_mark(NS)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _TICKET_WORKER, shared_url, mark.backend, mark.position, "25"]
        )
        for _ in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    with open_store(shared_url) as s:
        tickets = sorted(i.value for i in s.list(NS, limit=1000))
    assert tickets == list(range(100))


# Change tracking: changes and stamp -----------------------------------------------------------


def _follow(store: Store, held: dict[str, Any], since: ChangeMark | None) -> ChangeMark:
    """Applies ``store.changes`` to ``held`` the way a caller keeping the items does."""
    changes = store.changes(NS, since)
    assert changes.mark.namespace == NS
    assert changes.complete or since is not None
    assert [i.key for i in changes.items] == sorted(i.key for i in changes.items)
    assert changes.removed == sorted(set(changes.removed))
    assert not {i.key for i in changes.items} & set(changes.removed)
    if changes.complete:
        assert changes.removed == []
        held.clear()
    for item in changes.items:
        assert item.namespace == NS
        held[item.key] = item.value
    for key in changes.removed:
        held.pop(key, None)
    return changes.mark


def _stored(store: Store) -> dict[str, Any]:
    return {i.key: i.value for i in store.list(NS, limit=1000) if i.namespace == NS}


def test_changes_lets_a_caller_keep_a_namespace_in_step(store: Store) -> None:
    store.put(NS, "a", {"n": 1})
    store.put(NS, "b", {"n": 2})
    store.put((*NS, "sub"), "c", {"n": 3})  # a sub-namespace is not part of NS
    store.put(("other",), "d", {"n": 4})
    held: dict[str, Any] = {}
    mark = _follow(store, held, None)
    assert held == {"a": {"n": 1}, "b": {"n": 2}}
    store.put(NS, "a", {"n": 10})
    store.update(NS, "e", lambda _cur: {"n": 5})
    store.update_many(NS, {"f": lambda _cur: {"n": 6}})
    assert store.put_if_version(NS, "b", {"n": 20}, expected_version=1) is not None
    store.delete(NS, "f")
    store.put(("other",), "d", {"n": 40})
    store.delete((*NS, "sub"), "c")
    changes = store.changes(NS, mark)
    assert [i.key for i in changes.items] == ["a", "b", "e"] and changes.removed == ["f"]
    assert not changes.complete
    mark = _follow(store, held, mark)
    assert held == {"a": {"n": 10}, "b": {"n": 20}, "e": {"n": 5}} == _stored(store)
    # Nothing written since: nothing to read; writes and deletions elsewhere change nothing.
    quiet = store.changes(NS, mark)
    assert (quiet.items, quiet.removed, quiet.complete) == ([], [], False)
    store.put(("other",), "d", {"n": 41})
    store.delete(("other",), "d")
    store.put((*NS, "sub"), "c", {"n": 30})
    quiet = store.changes(NS, mark)
    assert (quiet.items, quiet.removed, quiet.complete) == ([], [], False)
    # The mark of a later call moves on; the earlier one still answers from where it stood.
    store.put(NS, "g", 7)
    assert [i.key for i in store.changes(NS, mark).items] == ["g"]
    assert [i.key for i in store.changes(NS, store.changes(NS, mark).mark).items] == []


def test_changes_each_hands_over_what_changes_collects(store: Store) -> None:
    for key in ("c", "a", "b"):
        store.put(NS, key, {"key": key})
    store.put(NS, "gone", 1, ttl=0.001)
    store.put((*NS, "sub"), "x", 1)
    time.sleep(0.01)
    seen: list[Item] = []
    whole = store.changes_each(NS, None, seen.append)
    assert [i.key for i in seen] == ["a", "b", "c"] and seen[0].value == {"key": "a"}
    assert (whole.items, whole.removed, whole.complete) == ([], [], True)
    store.put(NS, "a", {"key": "A"})
    store.delete(NS, "b")
    seen.clear()
    since = store.changes_each(NS, whole.mark, seen.append)
    assert [(i.key, i.value) for i in seen] == [("a", {"key": "A"})]
    assert (since.items, since.removed, since.complete) == ([], ["b"], False)
    assert store.changes(NS, since.mark).items == []


def test_changes_report_deletes_and_purges_once(store: Store) -> None:
    store.put(NS, "kept", 1)
    store.put(NS, "deleted", 2)
    store.put(NS, "recreated", 3)
    store.put(NS, "purged", 4, ttl=0.05)
    held: dict[str, Any] = {}
    mark = _follow(store, held, None)
    assert set(held) == {"kept", "deleted", "recreated", "purged"}
    assert store.delete(NS, "deleted") is True
    assert store.delete(NS, "never-there") is False
    store.delete(NS, "recreated")
    store.put(NS, "recreated", 30)  # deleted, then written again: a write, not a removal
    time.sleep(0.08)
    # Expiring is not a change: a caller holding the item checks its expires_at itself ...
    assert store.changes(NS, mark).removed == ["deleted"]
    # ... but purging it is.
    assert store.purge_expired() == 1
    changes = store.changes(NS, mark)
    assert changes.removed == ["deleted", "purged"]
    assert [(i.key, i.value, i.version) for i in changes.items] == [("recreated", 30, 2)]
    mark = _follow(store, held, mark)
    assert held == {"kept": 1, "recreated": 30} == _stored(store)
    assert store.changes(NS, mark).removed == []  # reported once, not again
    store.delete(NS, "recreated")  # a second deletion of one key is reported again
    assert store.changes(NS, mark).removed == ["recreated"]


def test_changes_report_expired_writes_as_removed(store: Store) -> None:
    store.put(NS, "a", {"n": 1})
    held: dict[str, Any] = {}
    mark = _follow(store, held, None)
    store.put(NS, "short", {"n": 2}, ttl=0.05)
    store.put(NS, "a", {"n": 3}, ttl=0.05)
    store.put(NS, "long", {"n": 4}, ttl=60)
    time.sleep(0.1)
    changes = store.changes(NS, mark)
    assert changes.removed == ["a", "short"]
    assert [(i.key, i.expires_at is not None) for i in changes.items] == [("long", True)]
    _follow(store, held, mark)
    assert held == {"long": {"n": 4}} == _stored(store)
    assert [i.key for i in store.changes(NS).items] == ["long"]


def test_a_write_right_after_a_mark_is_never_lost(store: Store) -> None:
    """Whatever happens between two calls is in the second, however close to the first."""
    held: dict[str, Any] = {}
    mark = _follow(store, held, None)
    for n in range(20):
        store.put(NS, f"k{n % 7}", n)
        if n % 5 == 0:
            store.delete(NS, f"k{(n + 3) % 7}")
        mark = _follow(store, held, mark)
        assert held == _stored(store)


def test_a_mark_older_than_the_tombstones_kept_gets_the_whole_namespace(store: Store) -> None:
    store.put(NS, "a", 1)
    store.put(NS, "b", 2)
    store.put(NS, "c", 3)
    old = store.changes(NS).mark
    store.delete(NS, "a")
    store.delete(NS, "b")
    assert store.changes(NS, old).removed == ["a", "b"]
    store.tombstone_retention = 0.0  # every tombstone is old enough to prune
    time.sleep(0.01)
    assert store.purge_expired() == 0
    changes = store.changes(NS, old)
    assert changes.complete and changes.removed == []
    assert [(i.key, i.value) for i in changes.items] == [("c", 3)]
    # A mark from after the pruning answers with changes again, deletions included.
    recent = changes.mark
    store.put(NS, "d", 4)
    store.delete(NS, "c")
    later = store.changes(NS, recent)
    assert not later.complete
    assert ([i.key for i in later.items], later.removed) == (["d"], ["c"])
    # Numbers never go back: a write after the pruning is a change for every mark since.
    assert store.changes(NS, later.mark).items == []
    store.put(NS, "e", 5)
    assert [i.key for i in store.changes(NS, later.mark).items] == ["e"]


def test_a_namespace_erased_and_pruned_answers_every_reader_and_numbers_on(
    store: Store,
) -> None:
    """Every record of a namespace deleted and its tombstones pruned (a user erased): a server
    that held its records learns they are gone, and a write to it afterwards is a change for
    every mark made of it, before or after. The in-memory store keeps the namespace nowhere
    (each backend's own tests scan its tables)."""
    erased = ("wm", "user-priya", "t1")
    store.put(erased, "a", 1)
    store.put(erased, "b", 2)
    early = store.change_mark(erased)
    held = store.changes(erased)
    store.delete(erased, "a")
    store.delete(erased, "b")
    late = store.change_mark(erased)
    store.tombstone_retention = 0.0
    time.sleep(0.01)
    store.purge_expired()
    for mark in (early, held.mark, late):
        caught_up = store.changes(erased, mark)
        assert caught_up.items == [] and (caught_up.complete or caught_up.removed == [])
    caught_up = store.changes(erased, held.mark)
    assert caught_up.complete  # the deletions it missed are pruned: read whole
    if isinstance(store, InMemoryStore):
        assert "priya" not in repr(vars(store))
    store.put(erased, "c", 3)
    for mark in (early, held.mark, late, caught_up.mark):
        assert [i.key for i in store.changes(erased, mark).items] == ["c"]
    for mark in (early, held.mark):  # made while a and b were there: read whole
        assert store.changes(erased, mark).complete


def test_tombstones_inside_the_retention_are_kept(store: Store) -> None:
    store.put(NS, "a", 1)
    mark = store.change_mark(NS)
    store.delete(NS, "a")
    store.purge_expired()  # the default retention is a day
    changes = store.changes(NS, mark)
    assert not changes.complete and changes.removed == ["a"]


def test_change_mark_and_changes_marks_are_one_concept(store: Store) -> None:
    """A mark from change_mark serves changes, and one from changes serves update_many_since."""
    store.put(NS, "a", 1)
    mark = store.change_mark(NS)
    store.put(NS, "b", 2)
    assert [i.key for i in store.changes(NS, mark).items] == ["b"]
    answer = store.changes(NS)
    store.put(NS, "c", 3)
    assert changed_keys(store, NS, answer.mark) == ["c"]


def test_changes_refuses_a_foreign_or_garbled_mark(store: Store) -> None:
    mark = store.change_mark(NS)
    other = "sqlite" if mark.backend != "sqlite" else "memory"
    for bad in (3, mark.position, ChangeMark(other, NS, "1"), ChangeMark(mark.backend, NS, "x")):
        with pytest.raises(InvalidInputError, match="since"):
            store.changes(NS, bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"marks namespace \('agents', 'alice'\)"):
        store.changes(("agents", "bob"), mark)
    with pytest.raises(InvalidInputError, match="namespace"):
        store.changes(())


def test_change_tracking_reads_async_twins(store: Store) -> None:
    async def scenario() -> None:
        await store.aput(NS, "a", {"n": 1})
        first = await store.achanges(NS)
        assert [i.key for i in first.items] == ["a"] and first.complete
        await store.aput(NS, "b", 2)
        await store.adelete(NS, "a")
        later = await store.achanges(NS, first.mark)
        assert ([i.key for i in later.items], later.removed, later.complete) == (
            ["b"],
            ["a"],
            False,
        )
        item = await store.aget(NS, "b")
        assert item is not None and await store.astamp(NS, "b") == (item.version, item.created_at)
        assert await store.astamp(NS, "a") is None
        await store.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize("gone", ["deleted", "expired", "purged"])
def test_a_version_held_from_before_never_matches_the_key_written_again(
    store: Store, gone: str
) -> None:
    """A key deleted (or expired, or purged) and written again goes on from the versions it
    had: a writer still holding a version from before cannot take the new value for the one it
    read, so its conditional write fails instead of overwriting the new value unseen."""
    ttl = 0.05 if gone != "deleted" else None
    held = store.put(NS, "k", "read by a slow writer", ttl=ttl)
    assert held.version == 1
    if gone == "deleted":
        assert store.delete(NS, "k")
    else:
        time.sleep(0.1)
        if gone == "purged":
            assert store.purge_expired() == 1
    new = store.put(NS, "k", "written after")
    assert new.version == 2 and new.created_at > held.created_at
    assert store.put_if_version(NS, "k", "stale", expected_version=held.version) is None
    writes = {"k": ConditionalWrite("stale", held.version)}
    assert store.put_many_if_versions(NS, writes) is None
    got = store.get(NS, "k")
    assert got is not None and (got.value, got.version) == ("written after", 2)
    assert store.update(NS, "k", lambda v: v + "!").version == 3
    store.delete(NS, "k")
    assert store.put_if_version(NS, "k", "again", expected_version=0).version == 4  # type: ignore[union-attr]


def test_stamp_names_the_value_without_reading_it(store: Store) -> None:
    assert store.stamp(NS, "a") is None
    first = store.put(NS, "a", {"n": 1})
    assert store.stamp(NS, "a") == (first.version, first.created_at)
    second = store.put(NS, "a", {"n": 2})
    assert store.stamp(NS, "a") == (second.version, second.created_at) != (1, first.created_at)
    store.delete(NS, "a")
    assert store.stamp(NS, "a") is None
    time.sleep(0.01)
    again = store.put(NS, "a", {"n": 3})
    assert again.version == 3 and store.stamp(NS, "a") != (first.version, first.created_at)
    store.put(NS, "short", {"n": 4}, ttl=0.05)
    time.sleep(0.1)
    assert store.stamp(NS, "short") is None
    with pytest.raises(InvalidInputError, match="key"):
        store.stamp(NS, "")
    with pytest.raises(InvalidInputError, match="namespace"):
        store.stamp((), "a")


def test_item_of_builds_the_item_the_constructor_builds() -> None:
    args = (("a", "b"), "k", {"v": [1]}, 3, 1.5, 2.5, None)
    fast, slow = item_of(*args), Item(*args)
    assert type(fast) is Item and fast == slow and hash(fast.key) == hash(slow.key)
    assert vars(fast) == vars(slow)
    with pytest.raises(AttributeError):
        fast.key = "other"  # type: ignore[misc]


def test_encoded_each_hands_over_the_values_as_json_text(store: Store) -> None:
    """A bulk read of the values as stored text: every live item, in key order, in batches
    the reader keeps, parsing to the values ``changes`` gives; its mark misses no later write."""
    values = {
        f"k{n:04d}": {"n": n, "text": 'é\u2028"', "nested": [1, {"a": None}]} for n in range(600)
    }
    for key, value in reversed(values.items()):
        store.put(NS, key, value, ttl=60 if key == "k0007" else None)
    store.put(NS, "gone", 1, ttl=0.001)
    store.put((*NS, "sub"), "x", 1)
    time.sleep(0.01)
    batches: list[list[Any]] = []
    as_handed: list[list[Any]] = []

    def take(batch: list[Any]) -> None:
        batches.append(batch)
        as_handed.append(list(batch))

    whole = store.encoded_each(NS, take)
    assert (whole.items, whole.removed, whole.complete) == ([], [], True)
    # Each batch is the reader's to keep: none is reused or emptied by a later one.
    assert len(batches) > 1 and batches == as_handed
    seen = [item for batch in batches for item in batch]
    assert [key for key, _, _ in seen] == list(values)
    assert {key: orjson.loads(text) for key, text, _ in seen} == values
    expiring = {key: at for key, _, at in seen if at is not None}
    assert list(expiring) == ["k0007"] and expiring["k0007"] > time.time() + 50
    store.put(NS, "k0001", {"n": "again"})
    assert [i.key for i in store.changes(NS, whole.mark).items] == ["k0001"]


def test_encoded_each_async_twin_agrees(store: Store) -> None:
    for key in ("b", "a", "c"):
        store.put(NS, key, {"key": key})
    sync: list[Any] = []
    store.encoded_each(NS, sync.extend)

    async def read() -> list[Any]:
        seen: list[Any] = []
        await store.aencoded_each(NS, seen.extend)
        return seen

    seen = asyncio.run(read())
    assert [(k, orjson.loads(t), e) for k, t, e in seen] == [
        (k, orjson.loads(t), e) for k, t, e in sync
    ]
    assert [k for k, _, _ in seen] == ["a", "b", "c"]


def test_changes_each_streams_items_equal_to_changes(store: Store) -> None:
    for key in ("b", "a"):
        store.put(NS, key, {"key": key}, ttl=60 if key == "a" else None)
    seen: list[Item] = []
    store.changes_each(NS, None, seen.append)
    assert seen == store.changes(NS).items
    assert all(type(i.namespace) is tuple and i.namespace == NS for i in seen)


def test_restore_items_writes_records_as_they_are_where_absent(store: Store) -> None:
    now = time.time()
    given = [
        Item(NS, "a", {"x": 1}, 7, now - 100.0, now - 50.0, None),
        Item(("other", "ns"), "b", [1, 2], 3, now - 10.0, now - 5.0, now + 3600.0),
        Item(NS, "gone", "expired", 2, now - 100.0, now - 90.0, now - 1.0),
    ]
    mark = store.change_mark(NS)
    written = store.restore_items(given)
    assert written == given[:2]  # an item already expired is not written
    assert store.get(NS, "a") == given[0]
    assert store.get(("other", "ns"), "b") == given[1]
    assert store.get(NS, "gone") is None
    # A write like any other for a reader following the namespace, and versions go on from it.
    assert [item.key for item in store.changes(NS, mark).items] == ["a"]
    assert changed_keys(store, NS, mark) == ["a"]
    assert store.put_if_version(NS, "a", {"x": 2}, expected_version=7) is not None
    assert store.get(NS, "a").version == 8  # type: ignore[union-attr]


def test_restore_items_leaves_a_live_record_and_replaces_an_expired_one(store: Store) -> None:
    there = store.put(NS, "live", "mine")
    store.put(NS, "old", "stale", ttl=0.05)
    time.sleep(0.1)
    now = time.time()
    given = [
        Item(NS, "live", "theirs", 5, now, now, None),
        Item(NS, "old", "fresh", 4, now - 1.0, now, None),
    ]
    assert store.restore_items(given) == [given[1]]
    assert store.get(NS, "live") == there
    assert store.get(NS, "old") == given[1]


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ("not items", "items must be a list"),
        ([{"key": "k"}], "items[1] must be an Item"),
        ([Item(NS, "k", 1, 0, 1.0, 1.0)], "version 0"),
        ([Item(NS, "k", 1, True, 1.0, 1.0)], "version True"),
        ([Item(NS, "k", 1, 2**63, 1.0, 1.0)], "version"),
        ([Item(NS, "k", 1, 1, math.nan, 1.0)], "created_at is nan"),
        ([Item(NS, "k", 1, 1, 1.0, "now")], "updated_at must be Unix seconds"),
        ([Item(NS, "k", 1, 1, 1.0, 1.0, math.inf)], "expires_at is inf"),
        ([Item(NS, "", 1, 1, 1.0, 1.0)], "key is empty"),
        ([Item(NS, "k", 1, 1, 1.0, 1.0), Item(NS, "k", 2, 1, 1.0, 1.0)], "again"),
    ],
)
def test_restore_items_refuses_bad_items_writing_nothing(
    store: Store, bad: Any, named: str
) -> None:
    good = Item(NS, "good", 1, 1, time.time(), time.time())
    with pytest.raises(InvalidInputError, match=named.replace("[", r"\[").replace("]", r"\]")):
        store.restore_items([good, *bad] if isinstance(bad, list) else bad)
    assert store.get(NS, "good") is None


def test_restore_items_refuses_a_value_that_cannot_be_stored(store: Store) -> None:
    now = time.time()
    with pytest.raises(NonFiniteNumberError):
        store.restore_items(
            [Item(NS, "a", 1, 1, now, now), Item(NS, "b", {"x": math.nan}, 1, now, now)]
        )
    assert store.get(NS, "a") is None


def test_restore_items_keeps_the_values_text_and_key_order(store: Store) -> None:
    now = time.time()
    value = {"z": 1, "a": [1.5, "日本", None], "m": {"y": True, "b": False}}
    store.restore_items([Item(NS, "k", value, 1, now, now)])
    got = store.get(NS, "k")
    assert got is not None and json.dumps(got.value) == json.dumps(value)


def test_list_after_walks_the_store_page_by_page_in_lists_order(store: Store) -> None:
    for ns in [("a",), ("a", "b"), ("a-b",), ("a\x01",), ("b",)]:
        for key in ["k2", "k1", "k10", "é", "z"]:
            store.put(ns, key, 1)
    store.put(("a",), "gone", 1, ttl=0.05)
    time.sleep(0.1)
    everything = store.list((), limit=100)
    for prefix in [(), ("a",)]:
        walked: list[Item] = []
        after = None
        while page := store.list_after(prefix, after, limit=3):
            walked.extend(page)
            after = (page[-1].namespace, page[-1].key)
        assert walked == store.list(prefix, limit=100)
    assert len(everything) == 25
    assert store.list_after((), None, limit=0) == []
    with pytest.raises(InvalidInputError, match="namespace must be a tuple of str"):
        store.list_after((), ("a", "k1"), limit=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="key is empty"):
        store.list_after((), (("a",), ""), limit=3)


def test_list_after_default_pages_through_list() -> None:
    class ListOnly(InMemoryStore):
        list_after = Store.list_after

    store = ListOnly()
    for i in range(1200):
        store.put(("n", str(i % 3)), f"k{i:05}", i)
    walked: list[Item] = []
    after = None
    while page := store.list_after(("n",), after, limit=500):
        walked.extend(page)
        after = (page[-1].namespace, page[-1].key)
    assert walked == store.list(("n",), limit=2000)
