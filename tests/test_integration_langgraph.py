"""memstrata.integrations.langgraph, checked against LangGraph's documented store semantics.

Every store test runs against LangGraph's own InMemoryStore (the reference) and MemstrataStore on
the memory, SQLite and PostgreSQL backends, so a difference shows as a failure or as an explicit,
commented branch on ``is_reference``.
"""

from __future__ import annotations

import asyncio
import pathlib
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import orjson
import pytest

pytest.importorskip("langgraph.store.base")

from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore as LangGraphInMemoryStore
from scripted_chat_models import ToolCallingFake
from store_checks import ThreadNotingSQLiteStore

from memstrata import MemoryStack, SQLiteStore, WorkingMemory, hash_embed
from memstrata.exceptions import InvalidInputError
from memstrata.integrations.langgraph import (
    MemstrataStore,
    memory_prompt,
    memstrata_tools,
    react_prompt,
)
from memstrata.stores import InMemoryStore, PostgresStore

DIMS = 64


class CountingEmbed:
    """The same embedding function for every store, counting the texts it embeds."""

    def __init__(self) -> None:
        self.texts = 0

    def __call__(self, texts: Sequence[str]) -> list[list[float]]:
        self.texts += len(texts)
        return hash_embed(list(texts), DIMS).tolist()  # type: ignore[no-any-return]


BACKENDS = ["langgraph", "memory", "sqlite", "postgres"]


def make_store(kind: str, request: pytest.FixtureRequest, tmp_path: pathlib.Path, **kw: Any) -> Any:
    if kind == "langgraph":
        kw.pop("ttl", None)
        return LangGraphInMemoryStore(**kw)
    if kind == "memory":
        return MemstrataStore(InMemoryStore(), **kw)
    if kind == "sqlite":
        return MemstrataStore(SQLiteStore(tmp_path / "lg.db"), **kw)
    from store_checks import empty_postgres_tables

    url = request.getfixturevalue("postgres_url")
    backend = PostgresStore(url)  # creates the schema
    empty_postgres_tables(url)
    return MemstrataStore(backend, **kw)


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[BaseStore]:
    index = {"dims": DIMS, "embed": CountingEmbed(), "fields": ["text"]}
    made = make_store(request.param, request, tmp_path, index=index)
    yield made
    if isinstance(made, MemstrataStore):
        made.store.close()


def is_reference(store: BaseStore) -> bool:
    return isinstance(store, LangGraphInMemoryStore)


# get / put / delete -------------------------------------------------------------------------


def test_put_get_delete_with_datetime_timestamps(store: BaseStore) -> None:
    assert store.get(("users", "1"), "prefs") is None
    store.put(("users", "1"), "prefs", {"text": "dark mode", "n": 1})
    item = store.get(("users", "1"), "prefs")
    assert item is not None
    assert (item.namespace, item.key, item.value) == (("users", "1"), "prefs", item.value)
    assert item.value == {"text": "dark mode", "n": 1}
    assert isinstance(item.created_at, datetime) and item.created_at.tzinfo is not None
    assert item.updated_at >= item.created_at
    item.value["n"] = 99
    again = store.get(("users", "1"), "prefs")
    assert again is not None
    if is_reference(store):
        # LangGraph's InMemoryStore hands out the stored dict itself: the edit reached it.
        assert again.value["n"] == 99
    else:
        assert again.value["n"] == 1  # memstrata returns copies
    store.delete(("users", "1"), "prefs")
    assert store.get(("users", "1"), "prefs") is None
    store.delete(("users", "1"), "never-there")  # deleting nothing is fine


def test_a_key_no_store_can_hold_is_refused_and_leaves_the_namespace_searchable(
    store: BaseStore,
) -> None:
    if is_reference(store):
        pytest.skip("LangGraph's InMemoryStore keeps a lone surrogate in a key")
    store.put(("memories", "u1"), "m1", {"text": "kept"})
    with pytest.raises(InvalidInputError, match="not valid Unicode"):
        store.put(("memories", "u1"), "m\ud800", {"text": "lone surrogate"})
    with pytest.raises(InvalidInputError, match="not valid Unicode"):
        store.put(("memories", "u\ud800"), "m1", {"text": "lone surrogate"})
    assert [i.key for i in store.search(("memories",), query="kept")] == ["m1"]
    assert store.list_namespaces() == [("memories", "u1")]


def test_overwrite_moves_updated_at(store: BaseStore) -> None:
    store.put(("users",), "k", {"text": "one"})
    first = store.get(("users",), "k")
    time.sleep(0.01)
    store.put(("users",), "k", {"text": "two"})
    second = store.get(("users",), "k")
    assert first is not None and second is not None
    assert second.value == {"text": "two"}
    assert second.updated_at > first.updated_at
    if is_reference(store):
        # LangGraph's InMemoryStore makes a new item on every put: created_at moves too.
        assert second.created_at > first.created_at
    else:
        # memstrata keeps the creation time, as LangGraph's PostgresStore does.
        assert second.created_at == first.created_at


@pytest.mark.parametrize(
    "namespace", [(), ("langgraph", "x"), ("a.b",), ("a", ""), ("ok", 3)], ids=repr
)
def test_bad_namespaces_are_refused(store: BaseStore, namespace: Any) -> None:
    with pytest.raises(InvalidNamespaceError):
        store.put(namespace, "k", {"text": "v"})


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_a_namespace_with_no_room_for_its_vectors_is_refused_before_anything_is_written(
    kind: str, request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    # The vectors live one label deeper, under "langgraph": a 16-label namespace has no room.
    made = make_store(kind, request, tmp_path, index={"dims": DIMS, "embed": CountingEmbed()})
    deep = tuple(f"l{i}" for i in range(16))
    try:
        for value in ({"text": "v"}, None):
            with pytest.raises(InvalidNamespaceError, match="16 labels; the limit is 15"):
                made.put(deep, "k", value)  # type: ignore[arg-type]
        assert made.store.list((), limit=10) == []
        made.put(deep[:15], "k", {"text": "v"})
        assert made.search(deep[:15], query="v")[0].key == "k"
    finally:
        made.store.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_vectors_past_the_value_limit_refuse_the_put_and_keep_the_old_item(
    kind: str,
    request: pytest.FixtureRequest,
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memstrata.exceptions import LimitExceededError
    from memstrata.stores import codec

    index = {"dims": DIMS, "embed": CountingEmbed(), "fields": ["texts[*]"]}
    made = make_store(kind, request, tmp_path, index=index)
    try:
        made.put(("u",), "k", {"texts": ["old words"]})
        monkeypatch.setattr(codec, "MAX_VALUE_BYTES", 1 << 16)
        # 300 texts: the item is a few KB, its 300 vectors of 64 floats about 100 KB.
        many = {"texts": [f"word{i}" for i in range(300)]}
        with pytest.raises(LimitExceededError, match="300 indexed texts"):
            made.put(("u",), "k", many)
        with pytest.raises(LimitExceededError):
            made.put(("u",), "fresh", many)
        item = made.get(("u",), "k")
        assert item is not None and item.value == {"texts": ["old words"]}
        assert made.get(("u",), "fresh") is None
        assert [i.key for i in made.search(("u",), query="old words")] == ["k"]
        assert made.search(("u",), query="old words")[0].score is not None
    finally:
        made.store.close()


# search -------------------------------------------------------------------------------------


def fill(store: BaseStore) -> None:
    store.put(("docs", "u1"), "py", {"text": "python tutorial for beginners", "stars": 5})
    store.put(("docs", "u1"), "ts", {"text": "typescript guide", "stars": 3})
    store.put(("docs", "u2"), "pasta", {"text": "cooking pasta at home", "stars": 4})
    store.put(("docs", "u2"), "meta", {"text": "python packaging", "meta": {"lang": "py"}})
    store.put(("other",), "x", {"text": "python elsewhere", "stars": 5})


def keys(items: Sequence[Any]) -> list[str]:
    return [item.key for item in items]


def test_search_scopes_to_the_namespace_prefix(store: BaseStore) -> None:
    fill(store)
    assert sorted(keys(store.search(("docs",), limit=100))) == [["meta", "pasta", "py", "ts"]][0]
    assert sorted(keys(store.search(("docs", "u2")))) == ["meta", "pasta"]
    assert len(store.search((), limit=100)) == 5
    assert store.search(("nothing",)) == []
    assert all(r.score is None for r in store.search(("docs",)))  # no query: no score


def test_search_filters(store: BaseStore) -> None:
    fill(store)
    if is_reference(store):
        # LangGraph's InMemoryStore raises on a comparison with an item that lacks the field
        # ("meta" has no "stars"); MemstrataStore counts such an item as not matching.
        with pytest.raises(TypeError):
            store.search(("docs",), filter={"stars": {"$gte": 4}})
        store.delete(("docs", "u2"), "meta")
    assert keys(store.search(("docs",), filter={"stars": 3})) == ["ts"]
    assert sorted(keys(store.search(("docs",), filter={"stars": {"$gte": 4}}))) == ["pasta", "py"]
    assert sorted(keys(store.search(("docs",), filter={"stars": {"$lt": 4}}))) == ["ts"]
    if is_reference(store):
        store.put(("docs", "u2"), "meta", {"text": "python packaging", "meta": {"lang": "py"}})
    # $ne matches an item without the field (None != 5) in both.
    assert sorted(keys(store.search(("docs",), filter={"stars": {"$ne": 5}}))) == [
        "meta",
        "pasta",
        "ts",
    ]
    assert keys(store.search(("docs",), filter={"meta": {"lang": "py"}})) == ["meta"]
    assert keys(store.search((), filter={"stars": 5, "text": "python elsewhere"})) == ["x"]


def test_search_pages_without_overlap(store: BaseStore) -> None:
    for i in range(7):
        store.put(("p",), f"k{i}", {"text": f"item {i}"})
    pages = [keys(store.search(("p",), limit=3, offset=o)) for o in (0, 3, 6)]
    assert [len(p) for p in pages] == [3, 3, 1]
    assert sorted(k for page in pages for k in page) == [f"k{i}" for i in range(7)]


def test_search_by_query_ranks_by_similarity(store: BaseStore) -> None:
    fill(store)
    results = store.search(("docs",), query="python tutorial", limit=4)
    assert results[0].key == "py"
    scores = [r.score for r in results]
    assert all(isinstance(s, float) for s in scores)
    assert scores == sorted(scores, reverse=True)  # type: ignore[type-var]
    assert keys(store.search(("docs",), query="python tutorial", limit=1, offset=1)) == [
        results[1].key
    ]
    filtered = store.search(
        ("docs",), query="python tutorial", filter={"stars": 4, "text": {"$ne": ""}}
    )
    assert keys(filtered) == ["pasta"]
    filtered = store.search(
        ("docs",), query="python tutorial", filter={"text": {"$ne": "typescript guide"}}
    )
    assert "ts" not in keys(filtered) and filtered[0].key == "py"
    filtered = store.search(("other",), query="python", filter={"stars": {"$gte": 4}})
    assert keys(filtered) == ["x"]


def test_query_with_fields_index_false_and_arrays(store: BaseStore) -> None:
    store.put(("n",), "hidden", {"text": "python python python"}, index=False)
    store.put(("n",), "title", {"text": "unrelated", "title": "python guide"}, index=["title"])
    store.put(
        ("n",),
        "chunks",
        {"text": "zzz", "parts": ["gardening", "python snakes"]},
        index=["parts[*]"],
    )
    results = store.search(("n",), query="python", limit=10)
    # Indexed items come scored; an item put with index=False is never scored but, as in
    # LangGraph's InMemoryStore, fills the page after them.
    assert sorted(keys(results[:2])) == ["chunks", "title"]
    assert all(r.score is not None for r in results[:2])
    assert keys(results[2:]) == ["hidden"] and results[2].score is None
    assert keys(store.search(("n",), query="python", limit=2)) == keys(results[:2])


# list_namespaces ------------------------------------------------------------------------------


def test_list_namespaces_as_documented(store: BaseStore) -> None:
    for ns in [
        ("a", "b", "c"),
        ("a", "b", "d", "e"),
        ("a", "b", "d", "i"),
        ("a", "b", "f"),
        ("a", "c", "f"),
    ]:
        store.put(ns, "k", {"text": "v"})
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "b", "f"),
    ]
    assert store.list_namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(max_depth=1) == [("a",)]
    everything = store.list_namespaces()
    assert everything == sorted(everything) and len(everything) == 5
    assert store.list_namespaces(limit=2, offset=1) == everything[1:3]
    store.delete(("a", "c", "f"), "k")
    if is_reference(store):
        # LangGraph's InMemoryStore keeps listing a namespace whose last item was deleted.
        assert ("a", "c", "f") in store.list_namespaces()
    else:
        assert ("a", "c", "f") not in store.list_namespaces()


# batch / abatch -------------------------------------------------------------------------------


def test_batch_answers_in_order(store: BaseStore) -> None:
    store.put(("b",), "old", {"text": "before"})
    results = store.batch(
        [
            GetOp(("b",), "old"),
            PutOp(("b",), "new", {"text": "written in the batch"}),
            SearchOp(("b",), limit=10),
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("b",)),)),
            GetOp(("b",), "new"),
        ]
    )
    assert results[0].value == {"text": "before"}  # type: ignore[union-attr]
    assert results[1] is None
    assert results[3] == [("b",)]
    if is_reference(store):
        # LangGraph's InMemoryStore answers every read before it applies the batch's puts.
        assert keys(results[2]) == ["old"] and results[4] is None  # type: ignore[arg-type]
    else:
        # MemstrataStore applies the ops in order, so a read sees the puts before it (as
        # LangGraph's PostgresStore does for puts placed before reads).
        assert keys(results[2]) == ["new", "old"]  # type: ignore[arg-type]
        assert results[4].value == {"text": "written in the batch"}  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "unstorable",
    [{"n": 1 << 70}, {"n": float("nan")}, {"blob": b"bytes"}, {"text": "x" * (17 << 20)}],
    ids=["integer past 64 bits", "NaN", "bytes", "past the value limit"],
)
def test_a_batch_with_a_value_no_store_can_hold_writes_none_of_its_puts(
    store: BaseStore, unstorable: dict[str, Any]
) -> None:
    if is_reference(store):
        pytest.skip("LangGraph's InMemoryStore keeps any Python value")
    ops = [
        PutOp(("b",), "first", {"text": "fine"}),
        PutOp(("b",), "bad", unstorable),
        PutOp(("b",), "third", {"text": "fine"}),
    ]
    with pytest.raises((InvalidInputError, TypeError), match="'bad'"):
        store.batch(ops)
    with pytest.raises((InvalidInputError, TypeError), match="'bad'"):
        asyncio.run(store.abatch(ops))
    assert store.search(("b",)) == []
    assert store.list_namespaces() == []


def test_abatch_and_async_methods(store: BaseStore) -> None:
    async def scenario() -> None:
        await store.aput(("as",), "k", {"text": "async python"})
        got = await store.aget(("as",), "k")
        assert got is not None and got.value == {"text": "async python"}
        found = await store.asearch(("as",), query="python")
        assert keys(found) == ["k"] and found[0].score is not None
        assert await store.alist_namespaces() == [("as",)]
        await store.adelete(("as",), "k")
        assert await store.aget(("as",), "k") is None

    asyncio.run(scenario())


def test_abatch_runs_on_the_loop_and_answers_as_batch(tmp_path: pathlib.Path) -> None:
    """abatch makes no thread hop for a store call that need not wait: every record read or
    written runs on the event loop's thread; its answers and records are batch's."""
    ops: list[Any] = [
        PutOp(("docs",), "a", {"text": "red apples"}),
        PutOp(("docs",), "b", {"text": "blue sky"}),
        GetOp(("docs",), "a"),
        SearchOp(("docs",), query="apples", limit=2),
        ListNamespacesOp(),
        PutOp(("docs",), "b", None),
        GetOp(("docs",), "b"),
        PutOp(("docs", "x"), "c", {"text": "green pears"}, ttl=5),
    ]

    def index() -> dict[str, Any]:
        return {"dims": DIMS, "embed": CountingEmbed(), "fields": ["text"]}

    plain = MemstrataStore(SQLiteStore(tmp_path / "sync.db"), index=index())
    noted_store = ThreadNotingSQLiteStore(tmp_path / "async.db")
    noted = MemstrataStore(noted_store, index=index())
    plain.batch([PutOp(("docs",), "z", {"text": "before"})])  # a namespace's first read
    noted.batch([PutOp(("docs",), "z", {"text": "before"})])  # goes to a thread on SQLite
    noted_store.threads.clear()

    async def main() -> tuple[int, list[Any]]:
        return threading.get_ident(), await noted.abatch(ops)

    loop_thread, answers = asyncio.run(main())
    assert noted_store.threads == {loop_thread}

    def shown(result: Any) -> Any:
        """An answer without its timestamps (the two stores wrote at different times)."""
        if isinstance(result, list):
            return [shown(r) for r in result]
        if hasattr(result, "key"):
            return (result.namespace, result.key, result.value, getattr(result, "score", None))
        return result

    assert shown(answers) == shown(plain.batch(ops))
    assert shown(answers)[3][0][:3] == (("docs",), "a", {"text": "red apples"})

    def records(store: Any) -> list[tuple[Any, ...]]:
        found = store.list((), limit=100)
        return sorted((i.namespace, i.key, i.value, i.version) for i in found if i.key != "z")

    assert records(noted_store) == records(plain.store)
    noted_store.close()
    plain.store.close()


def test_abatch_stores_the_value_its_vectors_were_made_from(tmp_path: pathlib.Path) -> None:
    """abatch embeds a put's texts, awaits the embedder, then writes: a value the caller's
    other task changes meanwhile must not be stored beside vectors of its earlier text (the
    item would be found by words it no longer holds)."""
    value = {"text": "red apples"}
    embedded: dict[str, asyncio.Event] = {}  # made in the loop: Python 3.9 binds it to one

    async def aembed(texts: Sequence[str]) -> list[list[float]]:
        embedded["event"].set()
        await asyncio.sleep(0.01)  # an embedding service's round trip
        return hash_embed(list(texts), DIMS).tolist()  # type: ignore[no-any-return]

    store = MemstrataStore(SQLiteStore(tmp_path / "a.db"), index={"dims": DIMS, "embed": aembed})

    async def scenario() -> None:
        embedded["event"] = asyncio.Event()

        async def meddle() -> None:
            await embedded["event"].wait()
            value["text"] = "blue whales"

        await asyncio.gather(store.abatch([PutOp(("e",), "k", value)]), meddle())

    asyncio.run(scenario())
    got = store.get(("e",), "k")
    assert got is not None and got.value == {"text": "red apples"}
    found = asyncio.run(store.asearch(("e",), query="red apples"))
    assert keys(found) == ["k"] and found[0].score is not None and found[0].score > 0.5
    store.store.close()


def test_async_embedding_function(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> None:
    async def aembed(texts: Sequence[str]) -> list[list[float]]:
        return hash_embed(list(texts), DIMS).tolist()  # type: ignore[no-any-return]

    for kind in ("langgraph", "memory"):
        s = make_store(kind, request, tmp_path, index={"dims": DIMS, "embed": aembed})

        async def scenario(s: BaseStore = s) -> list[Any]:
            await s.aput(("e",), "a", {"text": "red apples"})
            await s.aput(("e",), "b", {"text": "blue sky"})
            return await s.asearch(("e",), query="apples")

        assert keys(asyncio.run(scenario()))[0] == "a"


# TTL ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", BACKENDS)
def test_ttl_in_minutes_with_refresh_on_read(
    kind: str, request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    store = make_store(kind, request, tmp_path, index=None)
    if is_reference(store):
        # LangGraph's InMemoryStore has no TTL support: it refuses one.
        assert store.supports_ttl is False
        with pytest.raises(NotImplementedError):
            store.put(("t",), "k", {"text": "v"}, ttl=1)
        return
    ttl = 0.6 / 60  # 0.6 seconds, in minutes
    store.put(("t",), "kept", {"text": "v"}, ttl=ttl)
    store.put(("t",), "gone", {"text": "v"}, ttl=ttl)
    store.put(("t",), "forever", {"text": "v"})
    for _ in range(3):
        time.sleep(0.3)
        assert store.get(("t",), "kept") is not None  # each read moves the expiry on
        assert store.get(("t",), "gone", refresh_ttl=False) is not None or _ > 0
    assert store.get(("t",), "gone") is None
    assert store.search(("t",), filter={"text": "v"}, limit=10)[0].key in ("forever", "kept")
    assert sorted(keys(store.search(("t",)))) == ["forever", "kept"]
    store.store.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_default_ttl_and_no_refresh(
    kind: str, request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    ttl_config = {"default_ttl": 0.4 / 60, "refresh_on_read": False}
    store = make_store(kind, request, tmp_path, index=None, ttl=ttl_config)
    store.put(("t",), "short", {"text": "v"})
    store.put(("t",), "long", {"text": "v"}, ttl=None)  # an explicit None: no expiry
    time.sleep(0.25)
    assert store.get(("t",), "short") is not None  # read without refreshing
    time.sleep(0.25)
    assert store.get(("t",), "short") is None
    assert store.get(("t",), "long") is not None
    assert store.list_namespaces() == [("t",)]
    store.sweep_ttl()
    store.store.close()


# persistence and several processes ------------------------------------------------------------


def test_a_new_process_searches_without_re_embedding(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "restart.db"
    first_embed = CountingEmbed()
    with MemstrataStore(SQLiteStore(path), index={"dims": DIMS, "embed": first_embed}) as first:
        first.put(("mem", "u1"), "a", {"text": "likes hiking in the alps"})
        first.put(("mem", "u1"), "b", {"text": "allergic to peanuts"})
        first.store.close()
    embed = CountingEmbed()
    second = MemstrataStore(f"sqlite:///{path}", index={"dims": DIMS, "embed": embed})
    results = second.search(("mem",), query="peanuts allergy")
    assert results[0].key == "b" and results[0].score is not None
    assert embed.texts == 1  # the query only: stored vectors were reused
    assert second.list_namespaces() == [("mem", "u1")]
    second.close()


def test_two_adapters_on_one_database_see_each_other(tmp_path: pathlib.Path) -> None:
    index = {"dims": DIMS, "embed": CountingEmbed()}
    one = MemstrataStore(SQLiteStore(tmp_path / "two.db"), index=index)  # type: ignore[arg-type]
    two = MemstrataStore(SQLiteStore(tmp_path / "two.db"), index=index)  # type: ignore[arg-type]
    one.put(("s",), "a", {"text": "alpha particle"})
    assert keys(two.search(("s",), query="alpha")) == ["a"]
    two.put(("s", "deeper"), "b", {"text": "beta decay"})
    one.put(("s",), "a", {"text": "gamma ray"})
    assert keys(one.search(("s",), query="beta decay"))[0] == "b"
    assert two.search(("s",), query="gamma", limit=1)[0].key == "a"
    two.delete(("s",), "a")
    assert keys(one.search(("s",), query="gamma")) == ["b"]
    assert one.list_namespaces() == [("s", "deeper")]


def test_items_written_by_the_memstrata_store_directly_are_found(tmp_path: pathlib.Path) -> None:
    raw = SQLiteStore(tmp_path / "raw.db")
    raw.put(("legacy", "u1"), "note", {"text": "written before the adapter"})
    store = MemstrataStore(raw, index={"dims": DIMS, "embed": CountingEmbed()})
    assert store.list_namespaces() == [("legacy", "u1")]
    # Written without the adapter, it has no vectors: a query lists it without a score.
    [found] = store.search(("legacy",), query="adapter")
    assert found.key == "note" and found.score is None
    raw.close()


def test_default_index_is_a_hashing_embedder() -> None:
    store = MemstrataStore("memory://")
    store.put(("d",), "a", {"text": "solar panels on the roof"})
    store.put(("d",), "b", {"text": "a recipe for bread"})
    assert store.search(("d",), query="roof solar")[0].key == "a"
    no_index = MemstrataStore("memory://", index=None)
    no_index.put(("d",), "a", {"text": "solar"})
    assert no_index.search(("d",), query="solar")[0].score is None  # query ignored, as LangGraph


# LangGraph graphs and create_react_agent --------------------------------------------------------


def test_compiled_graph_uses_the_store(tmp_path: pathlib.Path) -> None:
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    class State(TypedDict):
        query: str
        found: list[str]

    def recall(state: State, *, store: BaseStore) -> dict[str, Any]:
        store.put(("notes",), "n1", {"text": "the deploy key rotates monthly"})
        return {"found": [r.key for r in store.search(("notes",), query=state["query"])]}

    graph = StateGraph(State)
    graph.add_node("recall", recall)
    graph.add_edge(START, "recall")
    graph.add_edge("recall", END)
    store = MemstrataStore(f"sqlite:///{tmp_path / 'graph.db'}")
    app = graph.compile(store=store)
    assert app.invoke({"query": "deploy key", "found": []})["found"] == ["n1"]
    store.close()


def test_react_agent_writes_working_memory_that_survives_a_restart(
    tmp_path: pathlib.Path,
) -> None:
    from langgraph.prebuilt import create_react_agent

    path = tmp_path / "agent.db"
    stack = MemoryStack([WorkingMemory(schema={"type": "object"})], store=SQLiteStore(path))
    model = ToolCallingFake(
        responses=[
            AIMessage(
                content="",
                tool_calls=[
                    {
                        "name": "working-memory_update",
                        "args": {"user": {"name": "Priya", "ships": "v2.4 on Friday"}},
                        "id": "call-1",
                    }
                ],
            ),
            AIMessage(content="Noted, Priya."),
        ]
    )
    with stack.run(thread_id="t1", resource_id="u1") as run:
        tools = memstrata_tools(run)
        assert {t.name for t in tools} == {"working-memory_update", "working-memory_replace"}
        agent = create_react_agent(model, tools, prompt=react_prompt(run, system="Be brief."))
        out = agent.invoke({"messages": [("user", "I'm Priya; we ship v2.4 on Friday.")]})
        tool_message = out["messages"][2]
        assert tool_message.type == "tool" and '"ok":true' in tool_message.content
        assert out["messages"][-1].content == "Noted, Priya."
    stack.store.close()

    restarted = MemoryStack([WorkingMemory(schema={"type": "object"})], store=SQLiteStore(path))
    with restarted.run(thread_id="t1", resource_id="u1") as run:
        text = memory_prompt(run, system="Be brief.")
        assert text.startswith("Be brief.")
        assert "Priya" in text and "v2.4 on Friday" in text
    restarted.store.close()


def test_a_bad_tool_call_comes_back_as_a_readable_error() -> None:
    stack = MemoryStack([WorkingMemory(schema={"type": "object"})], store=InMemoryStore())
    with stack.run(thread_id="t", resource_id="u") as run:
        [update] = [t for t in memstrata_tools(run) if t.name == "working-memory_update"]
        answer = update.invoke({"__proto__": {"x": 1}})
        assert isinstance(answer, str)
        assert asyncio.run(update.ainvoke({"note": "async"})).startswith('{"ok":true')


@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
def test_a_tool_s_arguments_cannot_name_another_tool(sync: bool) -> None:
    # An app that hands the model only memory_read: no argument the model sends makes that
    # tool run memory_write.
    from memstrata import SharedMemory

    store = InMemoryStore()
    memory = SharedMemory(store=store, namespace=("workflow", "w1"))
    stack = MemoryStack([memory], store=store)
    with stack.run(thread_id="t") as run:
        [read] = [t for t in memstrata_tools(run) if t.name == "memory_read"]
        for forged in ("_name", "name", "tool"):
            arguments = {forged: "memory_write", "key": "x", "value": "forged"}
            answer = read.invoke(arguments) if sync else asyncio.run(read.ainvoke(arguments))
            payload = orjson.loads(answer)
            assert payload["ok"] is False and payload["tool"] == "memory_read", payload
    assert store.list(("workflow",)) == []


# Names LangChain's tool machinery gives a meaning of its own: as keyword arguments they were
# swallowed (config, run_manager) or collided with the method (self).
TOOLING_NAMES = ("config", "run_manager", "callbacks", "self", "args", "kwargs", "tool_call_id")


@pytest.mark.parametrize("sync", [True, False], ids=["invoke", "ainvoke"])
def test_arguments_named_like_langchain_s_own_parameters_reach_the_memory(sync: bool) -> None:
    from langgraph.prebuilt import create_react_agent

    schema = {"type": "object", "properties": {name: {} for name in TOOLING_NAMES}}
    stack = MemoryStack([WorkingMemory(schema=schema)], store=InMemoryStore())
    with stack.run(thread_id="t") as run:
        [update] = [t for t in memstrata_tools(run) if t.name == "working-memory_update"]
        for number, name in enumerate(TOOLING_NAMES):
            call = {"type": "tool_call", "id": f"c{number}", "name": update.name}
            call["args"] = {name: {"set": name}}
            answer = update.invoke(call) if sync else asyncio.run(update.ainvoke(call))
            assert orjson.loads(answer.content) == {"ok": True, "version": number + 1}, name
        assert run.layer("working-memory").snapshot == {n: {"set": n} for n in TOOLING_NAMES}
        # Through an agent's graph, as LangGraph runs it.
        call = {"id": "n1", "name": update.name, "args": {"config": {"set": "graph"}}}
        model = ToolCallingFake(responses=[AIMessage("", tool_calls=[call]), AIMessage("ok")])
        agent = create_react_agent(model, [update])
        state = {"messages": [("user", "hi")]}
        out = agent.invoke(state) if sync else asyncio.run(agent.ainvoke(state))
        assert orjson.loads(out["messages"][2].content)["ok"] is True
        assert run.layer("working-memory").snapshot["config"] == {"set": "graph"}


def test_a_tool_takes_the_json_text_a_model_sent() -> None:
    stack = MemoryStack([WorkingMemory(schema={"type": "object"})], store=InMemoryStore())
    with stack.run(thread_id="t") as run:
        [update] = [t for t in memstrata_tools(run) if t.name == "working-memory_update"]
        assert orjson.loads(update.invoke('{"name": "Priya"}')) == {"ok": True, "version": 1}
        refused = orjson.loads(update.invoke('{"name": '))
        assert refused["ok"] is False and refused["error"]["code"] == "invalid_arguments"
        assert run.layer("working-memory").snapshot == {"name": "Priya"}


def test_lone_surrogates_a_model_sends_come_back_as_an_answer_the_host_can_send() -> None:
    # LangChain parses a model's tool arguments with json.loads, which lets a "\\ud800" escape
    # through as a lone surrogate; an answer echoing one could not be encoded as JSON.
    from memstrata import AgentMind, SharedMemory, ToolResults

    lone = "note\ud800"
    store = InMemoryStore()
    shared = SharedMemory(store=store, namespace=("workflow", "w1"))
    layers = [WorkingMemory(tools="voltagent"), AgentMind(), shared, ToolResults()]
    stack = MemoryStack(layers, store=store)
    with stack.run(thread_id="t", agent="a") as run:
        for tool in memstrata_tools(run):
            properties = tool.args_schema["properties"]  # type: ignore[index]
            for name, schema in properties.items():
                sent = [lone] if schema.get("type") == "array" else lone
                answer = orjson.loads(tool.invoke({name: sent}))
                assert "ok" not in answer or answer["ok"] is False, (tool.name, name, answer)
    assert store.list(("workflow",)) == []


def test_a_tool_over_an_open_schema_lists_its_arguments() -> None:
    stack = MemoryStack([WorkingMemory(schema={"type": "object"})], store=InMemoryStore())
    with stack.run(thread_id="t") as run:
        for tool in memstrata_tools(run):
            assert tool.args == {}, tool.name


@pytest.mark.parametrize("name", ["langgraph_agent.py", "langchain_agent.py"])
def test_the_example_runs_with_a_fake_model(tmp_path: pathlib.Path, name: str) -> None:
    import runpy

    if name == "langchain_agent.py":
        pytest.importorskip("langchain.agents.middleware")
    example = pathlib.Path(__file__).resolve().parent.parent / "examples" / name
    main = runpy.run_path(str(example))["main"]
    call = {"name": "working-memory_update", "args": {"name": "Priya"}, "id": "c1"}
    path = str(tmp_path / "example.db")
    model = ToolCallingFake(responses=[AIMessage(content="", tool_calls=[call]), AIMessage("ok")])
    assert main("I'm Priya.", model=model, path=path) == "ok"
    seen: list[str] = []

    class Recording(ToolCallingFake):
        def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            seen.append(str(messages[0].content))
            return super()._generate(messages, *args, **kwargs)

    assert main("Who am I?", model=Recording(responses=[AIMessage("Priya")]), path=path) == "Priya"
    assert "Priya" in seen[0]  # the second run's prompt holds what the first one wrote


def test_a_cancelled_abatch_finishes_its_ops_before_it_raises(tmp_path: pathlib.Path) -> None:
    """A put is several store writes (the item, its vectors, its namespace's registry entry):
    an abatch cancelled while a write waits (the SQLite file locked by another process) still
    makes them all, then raises the cancellation, as batch run in a thread did; the item is
    found by a search from a fresh adapter."""
    import sqlite3

    def index() -> dict[str, Any]:
        return {"dims": DIMS, "embed": CountingEmbed(), "fields": ["text"]}

    adapter = MemstrataStore(SQLiteStore(tmp_path / "s.db"), index=index())
    adapter.batch([PutOp(("docs",), "z", {"text": "before"})])
    other = sqlite3.connect(tmp_path / "s.db", isolation_level=None)

    async def main() -> None:
        other.execute("BEGIN IMMEDIATE")
        put = asyncio.ensure_future(
            adapter.abatch([PutOp(("notes",), "a", {"text": "red apples"})])
        )
        await asyncio.sleep(0.2)  # the item's write waits for the file in a worker thread
        put.cancel()
        await asyncio.sleep(0.05)
        other.execute("COMMIT")
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(put, timeout=10)

    asyncio.run(main())
    other.close()
    fresh = MemstrataStore(SQLiteStore(tmp_path / "s.db"), index=index())
    assert ("notes",) in fresh.list_namespaces()
    found = fresh.search(("notes",), query="red apples", limit=1)
    assert [(r.key, r.value) for r in found] == [("a", {"text": "red apples"})]
    assert found[0].score is not None


def test_asearch_embeds_an_item_whose_vectors_were_lost_through_the_async_embedder(
    tmp_path: pathlib.Path,
) -> None:
    """An adapter whose embedder is async only (or whose sync form would block the event loop)
    repairs an item left without vectors from asearch through the async form: the first
    asearch finds it by meaning, and the sync form is never called."""
    sync_calls: list[int] = []
    counting = CountingEmbed()

    class AsyncFirst(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            sync_calls.append(len(texts))
            raise AssertionError("the sync embedder blocks the event loop")

        def embed_query(self, text: str) -> list[float]:
            return self.embed_documents([text])[0]

        async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
            return counting(texts)

        async def aembed_query(self, text: str) -> list[float]:
            return counting([text])[0]

    index = {"dims": DIMS, "embed": AsyncFirst(), "fields": ["text"]}
    backend = SQLiteStore(tmp_path / "lg.db")

    async def main() -> None:
        first = MemstrataStore(backend, index=index)
        await first.aput(("docs",), "py", {"text": "python tutorial for beginners"})
        await first.aput(("docs",), "ts", {"text": "typescript guide"})
        # As a crash between the item's write and its vectors' leaves it.
        backend.delete(("langgraph", "docs"), "py")
        for adapter in (MemstrataStore(backend, index=index), first):
            found = await adapter.asearch(("docs",), query="python tutorial", limit=1)
            assert keys(found) == ["py"]
            assert isinstance(found[0].score, float) and found[0].score > 0

    asyncio.run(main())
    assert sync_calls == []
    backend.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_an_item_whose_vectors_a_crash_lost_is_found_by_the_next_search(
    kind: str, request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    """The item and its vectors are two writes (two namespaces). A put cut off between them
    (here a KeyboardInterrupt just before the vectors are written; a crash alike) leaves the
    item stored, new or overwritten, with no vectors of its version: the next search, in this
    process or a new one, embeds it again and finds it by meaning."""
    import sys

    import memstrata.integrations.langgraph_store as lg

    index = {"dims": DIMS, "embed": CountingEmbed(), "fields": ["text"]}
    first = make_store(kind, request, tmp_path, index=index)
    first.put(("docs",), "py", {"text": "an old note about gardening"})
    first.put(("docs",), "ts", {"text": "typescript guide"})
    with open(lg.__file__, encoding="utf-8") as source:
        shadow_put = {
            n for n, line in enumerate(source, 1) if "self.store.put(shadow_ns, key, shadow" in line
        }
    for key, text in (("py", "python tutorial for beginners"), ("new", "python packaging")):
        hit: list[int] = []

        def in_put(frame: Any, event: str, _arg: Any, hit: list[int] = hit) -> Any:
            if event == "line" and frame.f_lineno in shadow_put and not hit:
                hit.append(frame.f_lineno)
                raise KeyboardInterrupt
            return in_put

        sys.settrace(lambda frame, _e, _a: in_put if frame.f_code.co_name == "_put" else None)
        try:
            with pytest.raises(KeyboardInterrupt):
                first.put(("docs",), key, {"text": text})
        finally:
            sys.settrace(None)
        assert hit
        stored = first.store.get(("docs",), key)
        assert stored is not None and stored.value == {"text": text}  # the item was written
    later = MemstrataStore(first.store, index=index)  # a new process on the same store
    for adapter in (later, first):
        found = adapter.search(("docs",), query="python tutorial", limit=2)
        assert keys(found) == ["py", "new"]
        assert all(isinstance(r.score, float) and r.score > 0 for r in found)
    first.store.close()


class _DeleteDuringRepair(SQLiteStore):
    """A SQLite store on which another adapter deletes an item just as a search repairing the
    item's vectors writes them: the interleaving of two processes, made certain."""

    other: MemstrataStore | None = None

    def update(self, namespace: Any, key: str, fn: Any, **kw: Any) -> Any:
        if self.other is not None and namespace[0] == "langgraph":
            other, self.other = self.other, None
            other.delete(tuple(namespace[1:]), key)
        return super().update(namespace, key, fn, **kw)


def test_a_repair_racing_a_delete_leaves_no_vectors_behind(tmp_path: pathlib.Path) -> None:
    """A search repairs an item written past the adapter (no vectors of its version) while
    another process deletes the item: the vectors the repair wrote after the delete are
    removed with it, not left as a row with no item and no TTL; the item stays deleted."""
    index = {"dims": DIMS, "embed": CountingEmbed(), "fields": ["text"]}
    backend = _DeleteDuringRepair(tmp_path / "lg.db")
    adapter = MemstrataStore(backend, index=index)
    adapter.put(("docs",), "ts", {"text": "typescript guide"})  # the namespace is listed
    backend.put(("docs",), "py", {"text": "python tutorial"})  # no vectors: repaired
    backend.other = MemstrataStore(backend, index=index)
    assert keys(adapter.search(("docs",), query="python tutorial")) == ["ts"]
    assert backend.other is None  # the delete ran during the repair
    assert backend.get(("docs",), "py") is None
    assert backend.get(("langgraph", "docs"), "py") is None
    assert [i.key for i in backend.list(("langgraph", "docs"))] == ["ts"]
    assert adapter.get(("docs",), "py") is None
    backend.close()


class _DeleteDuringRefresh(SQLiteStore):
    """A SQLite store on which another adapter deletes an item just after a read moved its
    expiry on and before the read carries its vectors along: two processes' interleaving."""

    other: MemstrataStore | None = None

    def put_if_version(self, namespace: Any, key: str, value: Any, **kw: Any) -> Any:
        written = super().put_if_version(namespace, key, value, **kw)
        if self.other is not None and namespace[0] != "langgraph":
            other, self.other = self.other, None
            other.delete(tuple(namespace), key)
        return written


def test_a_refresh_racing_a_delete_leaves_no_vectors_behind(tmp_path: pathlib.Path) -> None:
    """A read that refreshes a TTL'd item's expiry while another process deletes the item does
    not write the item's vectors back after the delete: no row is left with no item."""
    index = {"dims": DIMS, "embed": CountingEmbed(), "fields": ["text"]}
    backend = _DeleteDuringRefresh(tmp_path / "lg.db")
    adapter = MemstrataStore(backend, index=index)
    adapter.put(("docs",), "py", {"text": "python tutorial"}, ttl=5)
    adapter.put(("docs",), "ts", {"text": "typescript guide"}, ttl=5)
    assert backend.get(("langgraph", "docs"), "py") is not None
    assert keys(adapter.search(("docs",), query="python tutorial")) == ["py", "ts"]  # cached
    backend.other = MemstrataStore(backend, index=index)
    assert adapter.get(("docs",), "py", refresh_ttl=True) is not None  # read before the delete
    assert backend.other is None  # the delete ran during the refresh
    assert backend.get(("docs",), "py") is None
    assert backend.get(("langgraph", "docs"), "py") is None
    assert [i.key for i in backend.list(("langgraph", "docs"))] == ["ts"]
    assert keys(adapter.search(("docs",), query="python tutorial")) == ["ts"]
    # Without a race, a refresh carries the vectors' expiry along with the item's.
    before = backend.get(("langgraph", "docs"), "ts")
    time.sleep(0.01)
    assert adapter.get(("docs",), "ts", refresh_ttl=True) is not None
    after = backend.get(("langgraph", "docs"), "ts")
    assert before is not None and after is not None
    assert after.expires_at > before.expires_at  # type: ignore[operator]
    assert after.value["version"] == backend.get(("docs",), "ts").version  # type: ignore[index, union-attr]
    backend.close()


def test_a_namespace_per_user_keeps_only_the_recent_namespaces_in_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memstrata.integrations import langgraph_store

    kept = 16  # the bound's own value (1,024) takes seconds of namespaces to pass
    monkeypatch.setattr(langgraph_store, "SPACES_KEPT", kept)
    backend = InMemoryStore()
    index = {"dims": DIMS, "embed": CountingEmbed(), "fields": ["text"]}
    store = MemstrataStore(backend, index=index)  # type: ignore[arg-type]
    for n in range(kept + 10):
        store.put(("memories", f"u{n}"), "m", {"text": f"u{n} prefers dark mode"})
        assert store.search(("memories", f"u{n}"), query="dark mode", limit=2)
    assert len(store._spaces) <= kept
    # The first user's copy was let go; another server writes to that namespace meanwhile.
    MemstrataStore(backend, index=index).put(  # type: ignore[arg-type]
        ("memories", "u0"), "m2", {"text": "u0 works in Lisbon"}
    )
    found = store.search(("memories", "u0"), query="u0", limit=5)
    assert sorted(item.value["text"] for item in found) == [
        "u0 prefers dark mode",
        "u0 works in Lisbon",
    ]
    assert store.search(("memories", "u0"), query="Lisbon", limit=1)[0].key == "m2"
