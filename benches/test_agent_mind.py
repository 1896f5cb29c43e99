"""AgentMind hot paths, embedding excluded (HashingEmbedder vectors precomputed).

* ``mind_believe``'s dedup check against 10,000 committed beliefs;
* ``mind_recall``'s scoring over 10,000 beliefs and reflections (composite score, threshold,
  top 5);
* header assembly from 1,000 entries.

Peer: the same operation written the plain way with numpy and Python (a float32 matrix of
normalised vectors, ``matrix @ query``, numpy masks and ``argpartition``; Python loops and the
same token counter for the header), timed in the same run on the same data.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from benchkit import compare
from mind_data import DAY_MS, DIM, NS, corpus, fill_store

from memstrata import AgentMind, hash_embed
from memstrata.layers.mind import AgentMindHandle
from memstrata.layers.mind.header import build_header
from memstrata.tokens import EstimatingCounter


def open_handle(store: Any) -> AgentMindHandle:
    mind = AgentMind(namespace=NS)
    handle = mind.open(store, tokens=EstimatingCounter())
    handle.index()  # built once per run, then reused; the benchmarks time the per-call work
    return handle


class PlainMind:
    """The peer: the committed entries as numpy arrays and Python lists."""

    def __init__(self, handle: AgentMindHandle) -> None:
        entries = [*handle.beliefs.values(), *handle.reflections.values()]
        self.entries = entries
        self.now = handle.started_at
        index = handle.index()
        matrix = index.vectors.gather([index.rows[e.id] for e in entries])
        self.matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
        self.is_belief = np.array([e.type == "belief" for e in entries])
        conf = {"low": 0.3, "medium": 0.6, "high": 1.0}
        self.bonus = np.array(
            [
                0.2 * math.exp(-max(0.0, (self.now - e.updated_at) / DAY_MS) / 30)
                + 0.2
                * conf[
                    "low" if e.error else (e.confidence if e.type == "belief" else "medium")  # type: ignore[union-attr]
                ]
                for e in entries
            ]
        )
        self.live = np.array([not e.expired(self.now) for e in entries])
        self.belief_rows = np.flatnonzero(self.is_belief & self.live)
        self.belief_matrix = np.ascontiguousarray(self.matrix[self.belief_rows])

    def find_duplicate(self, vector: npt.NDArray[np.float32], threshold: float) -> Any:
        q = vector / np.linalg.norm(vector)
        sims = self.belief_matrix @ q
        best = int(np.argmax(sims))
        if sims[best] >= threshold:
            return self.entries[self.belief_rows[best]].id, float(sims[best])
        return None

    def recall(self, vector: npt.NDArray[np.float32], threshold: float, limit: int) -> list[Any]:
        q = vector / np.linalg.norm(vector)
        scores = 0.6 * (self.matrix @ q) + self.bonus
        candidates = np.flatnonzero(self.live & (scores >= threshold))
        if len(candidates) > limit:
            top = np.argpartition(-scores[candidates], limit)[:limit]
            candidates = candidates[top]
        order = candidates[np.argsort(-scores[candidates], kind="stable")]
        return [(self.entries[i].id, float(scores[i])) for i in order]


def plain_header(handle: AgentMindHandle, counter: EstimatingCounter, budget: int) -> str:
    now = handle.started_at
    goals = sorted(
        (g for g in handle.goals.values() if g.status == "active"), key=lambda g: g.created_at
    )
    rules = [r for r in handle.reflections.values() if r.pinned and not r.expired(now)]
    rank = {"high": 0, "medium": 1}
    beliefs = sorted(
        (
            b
            for b in handle.beliefs.values()
            if b.confidence in rank and not b.error and not b.expired(now)
        ),
        key=lambda b: (rank[b.confidence], -b.updated_at),
    )
    recent = sorted(
        (
            r
            for r in handle.reflections.values()
            if not r.pinned
            and not r.expired(now)
            and r.created_at >= now - handle.layer.recency_window_days * DAY_MS
        ),
        key=lambda r: -r.created_at,
    )
    lines = ["--- AGENT MIND ---", "## Goals"]
    lines += [f"[{g.priority}] {g.description}" for g in goals]
    lines += ["## Standing Rules (Pinned)"] + [f"- {r.content}" for r in rules]
    left = budget
    lines.append("## Beliefs")
    for b in beliefs:
        line = f"- {b.content} ({b.confidence} confidence)"
        cost = counter.count(line)
        if cost <= left:
            lines.append(line)
            left -= cost
    lines.append("## Recent Reflections")
    for r in recent:
        day = time.strftime("%Y-%m-%d", time.gmtime(r.created_at / 1000))
        line = f"- [{day}] {r.content}"
        cost = counter.count(line)
        if cost <= left:
            lines.append(line)
            left -= cost
    lines.append("---")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def big() -> tuple[AgentMindHandle, PlainMind, npt.NDArray[np.float32]]:
    store, _texts = fill_store(10_000, 0)
    handle = open_handle(store)
    queries = hash_embed(corpus(64, seed=99), DIM)
    return handle, PlainMind(handle), queries


def test_believe_dedup_check_10k(benchmark: Any, big: Any) -> None:
    handle, plain, queries = big
    threshold = handle.layer.deduplication_threshold
    # Same answers first: a benchmark of a wrong result is worthless.
    for q in queries[:16]:
        ours = handle.find_duplicate_belief(q)
        theirs = plain.find_duplicate(q, threshold)
        assert (ours and ours[0]) == (theirs and theirs[0])
    state = {"i": 0}

    def ours() -> Any:
        state["i"] = (state["i"] + 1) % len(queries)
        return handle.find_duplicate_belief(queries[state["i"]])

    peer_state = {"i": 0}

    def peer() -> Any:
        peer_state["i"] = (peer_state["i"] + 1) % len(queries)
        return plain.find_duplicate(queries[peer_state["i"]], threshold)

    compare(
        benchmark,
        "mind_believe dedup check, 10k beliefs (dim 384)",
        ours,
        {"numpy matmul + argmax": peer},
        target=">= 3x the numpy peer",
    )


@pytest.fixture(scope="module")
def mixed() -> tuple[AgentMindHandle, PlainMind, npt.NDArray[np.float32]]:
    store, texts = fill_store(7_000, 3_000, seed=2)
    handle = open_handle(store)
    # Queries that resemble stored entries (what a model asks about), and unrelated ones.
    rng = np.random.default_rng(5)
    picks = [texts[int(i)].split(" note ")[0] for i in rng.integers(0, len(texts), 32)]
    queries = hash_embed(picks + corpus(32, seed=77), DIM)
    return handle, PlainMind(handle), queries


def test_recall_10k(benchmark: Any, mixed: Any) -> None:
    handle, plain, queries = mixed
    threshold = handle.layer.retrieval_threshold
    for q in queries:
        ours = [(r.id, r.score) for r in handle.search(q, threshold=threshold, limit=5)]
        theirs = plain.recall(q, threshold, 5)
        assert [i for i, _ in ours] == [i for i, _ in theirs]
        assert np.allclose([s for _, s in ours], [s for _, s in theirs], atol=1e-4)
    state = {"i": 0}

    def ours() -> Any:
        state["i"] = (state["i"] + 1) % len(queries)
        return handle.search(queries[state["i"]], threshold=threshold, limit=5)

    peer_state = {"i": 0}

    def peer() -> Any:
        peer_state["i"] = (peer_state["i"] + 1) % len(queries)
        return plain.recall(queries[peer_state["i"]], threshold, 5)

    compare(
        benchmark,
        "mind_recall scoring, 10k entries, top 5",
        ours,
        {"numpy matmul + composite + argpartition": peer},
        target=">= 3x the numpy peer",
    )


def test_header_1k(benchmark: Any) -> None:
    store, _ = fill_store(700, 300, seed=3)
    mind = AgentMind(namespace=NS, recency_window_days=60)
    counter = EstimatingCounter()
    handle = mind.open(store, tokens=counter)
    budget = mind.token_budget

    def ours() -> str:
        return build_header(handle, None)

    built = ours()
    assert built.count("\n- ") > 5

    compare(
        benchmark,
        "AgentMind header assembly, 1k entries",
        ours,
        {"plain Python": lambda: plain_header(handle, counter, budget)},
        target=">= 3x the plain implementation",
    )
