"""Change marks in a namespace of 10,000 items, against reading the namespace back.

* A flush that reconciles with what other processes committed: another writer commits one item,
  then ``update_many_since`` reads what changed since a mark taken just before and writes one
  item, in one transaction. Peer: the plain way, reading the whole namespace back in the
  transaction (``list`` of every item, then the write), which is what a flush would cost if it
  had to compare with everything stored.
* A run catching up with what changed since the last one looked: another writer writes one item
  and deletes one, then ``changes`` since the previous answer's mark. Peer: ``list`` of every
  item, which is what a layer keeping nothing between runs reads.

SQLite and a throwaway PostgreSQL cluster (fsync off, as in the tests).
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from benchkit import compare
from postgres_cluster import throwaway_cluster

from memstrata.stores import Item, PostgresStore, SQLiteStore, Store

NS = ("mind", "bench")
SIZE = 10_000


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with throwaway_cluster() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    s: Store
    if request.param == "sqlite":
        s = SQLiteStore(tmp_path / "changes.db")
    else:
        s = PostgresStore(request.getfixturevalue("postgres_url"))
    payload = {"type": "belief", "content": "x" * 200, "embedding": "A" * 2048}
    for start in range(0, SIZE, 1000):
        s.update_many(NS, {f"belief/{i}": (lambda _c: payload) for i in range(start, start + 1000)})
    yield s
    s.close()


def test_reconcile_with_changes_in_a_10k_namespace(benchmark: Any, store: Store) -> None:
    state = {"i": 0}

    def other_writer_commits() -> None:
        state["i"] += 1
        store.put(NS, f"belief/other-{state['i'] % 50}", {"type": "belief", "n": state["i"]})

    def ours() -> Any:
        mark = store.change_mark(NS)
        other_writer_commits()

        def plan(changed: list[Item]) -> dict[str, Any]:
            assert len(changed) == 1
            return {"belief/mine": lambda _c: {"seen": changed[0].key}}

        return store.update_many_since(NS, mark, plan)

    def reread_everything() -> Any:
        other_writer_commits()

        def plan(_changed: list[Item]) -> dict[str, Any]:
            everything = [
                item
                for offset in range(0, SIZE + 100, 1000)
                for item in store.list(NS, limit=1000, offset=offset)
            ]
            return {"belief/mine": lambda _c: {"seen": len(everything)}}

        # The namespace lock and transaction of update_many_since, reading everything in it.
        return store.update_many_since(NS, store.change_mark(NS), plan)

    backend = type(store).__name__
    compare(
        benchmark,
        f"flush reconciling with others' writes, {SIZE:,}-item namespace, {backend}",
        ours,
        {"re-reading the namespace": reread_everything},
        target="independent of the namespace's size",
    )


def test_catch_up_with_changes_in_a_10k_namespace(benchmark: Any, store: Store) -> None:
    state = {"i": 0, "mark": store.changes(NS).mark}

    def other_writer_writes_and_deletes() -> None:
        state["i"] += 1
        store.put(NS, f"belief/other-{state['i'] % 50}", {"type": "belief", "n": state["i"]})
        store.delete(NS, f"belief/other-{(state['i'] + 25) % 50}")

    def ours() -> Any:
        other_writer_writes_and_deletes()
        changes = store.changes(NS, state["mark"])
        assert len(changes.items) == 1 and len(changes.removed) <= 1 and not changes.complete
        state["mark"] = changes.mark
        return changes

    def reread_everything() -> Any:
        other_writer_writes_and_deletes()
        return [
            item
            for offset in range(0, SIZE + 100, 1000)
            for item in store.list(NS, limit=1000, offset=offset)
        ]

    backend = type(store).__name__
    compare(
        benchmark,
        f"catching up with one write and one delete, {SIZE:,}-item namespace, {backend}",
        ours,
        {"re-reading the namespace": reread_everything},
        target="independent of the namespace's size",
    )
