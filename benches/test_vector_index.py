"""Where VectorIndex should switch from the exact VectorSet to an hnswlib graph.

Both backends through the one interface AgentMind uses (``VectorIndex.build`` with
``hnsw_threshold`` 1 or above the size), on ``hash_embed`` vectors of random 12-word texts (the
offline embedder's vectors: nearly orthogonal, the hardest case for HNSW recall), top-10
queries. Reports, per size: the exact query time, the graph's query time, its build time and its
recall@10 against the exact answer. The README and ``memstrata.vector_index`` quote this table;
``DEFAULT_HNSW_THRESHOLD`` follows from it.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from benchkit import fmt_seconds, record, timed

from memstrata import hash_embed
from memstrata.vector_index import DEFAULT_HNSW_THRESHOLD, VectorIndex

DIM = 384
K = 10
SIZES = [10_000, 25_000, 50_000, 100_000]
QUERIES = 50
WORDS = [f"w{i}" for i in range(5000)]


def texts(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, 12)) for _ in range(n)]


def cycling(index: VectorIndex, queries: np.ndarray) -> Any:
    """Top-10 of each query in turn, so no result is cached by a lucky query."""
    state = {"i": 0}

    def call() -> Any:
        state["i"] = (state["i"] + 1) % len(queries)
        return index.top_k(queries[state["i"]], K)

    return call


def test_exact_against_hnsw_by_size(benchmark: Any) -> None:
    rows = []
    queries = hash_embed(texts(QUERIES, 7), DIM)
    vectors_all = hash_embed(texts(max(SIZES), 1), DIM)
    for n in SIZES:
        ids = [f"e{i}" for i in range(n)]
        vectors = vectors_all[:n]
        exact = VectorIndex.build(ids, vectors, dim=DIM, hnsw_threshold=n + 1)
        started = time.perf_counter()
        graph = VectorIndex.build(ids, vectors, dim=DIM, hnsw_threshold=1)
        build = time.perf_counter() - started
        assert (exact.backend, graph.backend) == ("exact", "hnsw")
        truth = [[i for i, _ in exact.top_k(q, K)] for q in queries]
        found = [[i for i, _ in graph.top_k(q, K)] for q in queries]
        recall = float(np.mean([len(set(t) & set(f)) / K for t, f in zip(truth, found)]))
        t_exact = timed(cycling(exact, queries), min_time=0.3)
        t_graph = timed(cycling(graph, queries), min_time=0.3)
        rows.append((n, t_exact.median, t_graph.median, build, recall))
        record(
            {
                "title": f"VectorIndex top-10, {n:,} hash_embed vectors: exact vs hnswlib",
                "ours": {"median": t_exact.median, "p95": t_exact.p95, "p99": t_exact.p99},
                "peers": {
                    "hnswlib knn_query (M=16, ef=128; approximate)": {"median": t_graph.median}
                },
                "ratios": {
                    "hnswlib knn_query (M=16, ef=128; approximate)": t_graph.median / t_exact.median
                },
                "target": f"report (hnsw build {build:.1f} s, recall@10 {recall:.2f})",
            }
        )
    benchmark.pedantic(lambda: None, rounds=1)
    print(f"\n{'vectors':>9} {'exact top_k':>12} {'hnsw query':>11} {'hnsw build':>11} recall@10")
    for n, e, g, build, recall in rows:
        print(f"{n:>9,} {fmt_seconds(e):>12} {fmt_seconds(g):>11} {build:>10.1f}s {recall:>9.2f}")
    print(f"DEFAULT_HNSW_THRESHOLD = {DEFAULT_HNSW_THRESHOLD:,}")
