"""LangGraph store search: MemstrataStore against LangGraph's own InMemoryStore.

10,000 memories (one user each holding 1,000, in ten namespaces under ``("memories",)``), the
same 384-dimension embeddings in both stores (memstrata's hashing embedder, as a function of
texts, so neither store pays for embedding in the timed part but the query), the same query,
``limit=10``. Both stores answer through LangGraph's ``search``; the adapter's cost includes
asking the memstrata store what changed since the last search, so writes from other processes
are seen. Target: >= 5x.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from benchkit import compare

pytest.importorskip("langgraph.store.memory")

from langgraph.store.memory import InMemoryStore as LangGraphInMemoryStore

from memstrata import hash_embed
from memstrata.integrations.langgraph import MemstrataStore
from memstrata.stores import InMemoryStore, SQLiteStore

DIMS = 384
N = 10_000
TOPICS = ["hiking", "peanuts", "python", "release", "coffee", "music", "budget", "travel"]


def embed(texts: Sequence[str]) -> list[list[float]]:
    return hash_embed(list(texts), DIMS).tolist()  # type: ignore[no-any-return]


def fill(store: object) -> None:
    for i in range(N):
        topic = TOPICS[i % len(TOPICS)]
        store.put(  # type: ignore[attr-defined]
            ("memories", f"user-{i % 10}"),
            f"m{i}",
            {"text": f"note {i}: the user mentioned {topic} and item {i * 7 % 1000}"},
        )


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_search_10k(benchmark: object, backend: str, tmp_path: object) -> None:
    index = {"dims": DIMS, "embed": embed, "fields": ["text"]}
    inner = InMemoryStore() if backend == "memory" else SQLiteStore(tmp_path / "bench.db")  # type: ignore[operator]
    ours = MemstrataStore(inner, index=index)  # type: ignore[arg-type]
    peer = LangGraphInMemoryStore(index=index)  # type: ignore[arg-type]
    fill(ours)
    fill(peer)
    query = "what did the user say about peanuts"
    mine = [(r.key, round(r.score or 0, 4)) for r in ours.search(("memories",), query=query)]
    theirs = [(r.key, round(r.score or 0, 4)) for r in peer.search(("memories",), query=query)]
    assert [s for _, s in mine] == [s for _, s in theirs]  # the same ranking's scores
    compare(
        benchmark,
        f"langgraph search, 10k items, {backend} store",
        lambda: ours.search(("memories",), query=query, limit=10),
        {"langgraph InMemoryStore": lambda: peer.search(("memories",), query=query, limit=10)},
        target=">= 5x",
    )
    inner.close()
