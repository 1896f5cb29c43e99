"""Recall's ranker: the exact scan that answers while its VectorSet is built in the background
gives the set's answer, and the ranker moves to the set once it is built."""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from typing import Any

import numpy as np
import pytest

from memstrata import AgentMind, InMemoryStore
from memstrata._core import VectorSet
from memstrata.layers.mind import ranking
from memstrata.layers.mind.entries import MindBelief
from memstrata.layers.mind.ranking import CompositeRanker
from memstrata.layers.mind.records import stored_payload
from memstrata.layers.mind.vectors import VectorRows

DIM = 48


class HeldRows(VectorRows):
    """Rows whose ``blocks`` (what the set's build reads) waits for ``release``: the ranker
    built over them answers from the exact scan until then."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.release = threading.Event()
        self.fail = False

    def blocks(self) -> Any:
        assert self.release.wait(30)
        if self.fail:
            raise MemoryError("no room for the index")
        return super().blocks()


def filled(rows: VectorRows, n: int, seed: int) -> tuple[list[str], list[int], Any]:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((n, DIM)).astype(np.float32)
    # Near-duplicates and exact duplicates: ties and near-ties in similarity.
    matrix[n // 2 : n // 2 + 20] = matrix[:20]
    matrix[n // 2 + 20 : n // 2 + 40] = matrix[:20] + np.float32(1e-4)
    placed = rows.append(matrix)
    rows.seal()
    # Biases on a coarse grid: many rows share one, so scores tie.
    biases = np.round(rng.uniform(0.0, 0.4, n) * 20) / 20
    return [f"e{i}" for i in range(n)], placed, biases


def queries(seed: int) -> list[Any]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(DIM).astype(np.float32) for _ in range(12)]


def test_exact_scan_answers_as_the_built_set_does() -> None:
    built_rows, held_rows = VectorRows(DIM), HeldRows(DIM)
    ids, placed, biases = filled(built_rows, 3000, seed=1)
    filled(held_rows, 3000, seed=1)
    built = CompositeRanker(ids, built_rows, placed, biases, 0.6, background_min_rows=10**9)
    exact = CompositeRanker(ids, held_rows, placed, biases, 0.6, background_min_rows=0)
    try:
        assert built.wait(0) and not exact.wait(0)
        for query in queries(2):
            for k in (1, 5, 60):
                for threshold in (None, 0.2, 0.45):
                    want = built.top(query, k, threshold=threshold)
                    got = exact.top(query, k, threshold=threshold)
                    assert [i for i, _ in got] == [i for i, _ in want], (k, threshold)
                    assert np.allclose([s for _, s in got], [s for _, s in want], atol=1e-5)
            unit = query / np.linalg.norm(query)
            for threshold in (0.1, 0.3):
                cosines = built_rows.gather(placed) @ unit
                must = {ids[i] for i in np.flatnonzero(cosines >= threshold + 1e-5)}
                near = {ids[i] for i in np.flatnonzero(cosines >= threshold - 2e-3)}
                for found in (
                    set(exact.candidates(unit, threshold)),
                    set(built.candidates(unit, threshold)),
                ):
                    assert must <= found <= near
        assert not exact.wait(0)  # every answer above came from the exact scan
    finally:
        held_rows.release.set()
        assert exact.wait(30)


def test_the_built_set_reads_the_minds_rows_and_answers_as_its_own_copy_did() -> None:
    """The set reads the mind's unit rows in place (one float32 copy of the vectors), and
    ranks as a set holding its own copy of the same rows, in the same order, does."""
    rows = VectorRows(DIM)
    ids, placed, biases = filled(rows, 20_000, seed=11)
    blocks = rows.blocks()
    held = [sys.getrefcount(b) for b in blocks]
    ranker = CompositeRanker(ids, rows, placed, biases, 0.6, background_min_rows=10**9)
    assert ranker._set is not None
    # Each block is referenced by the set (once, however many calls gave it), not copied.
    assert [sys.getrefcount(b) for b in blocks] == [h + 1 for h in held]
    order = np.argsort(-np.asarray(biases, dtype=np.float32), kind="stable")
    own = VectorSet(DIM)
    own.add(
        [ids[i] for i in order],
        rows.gather(np.asarray(placed)[order]),
        biases=np.asarray(biases, dtype=np.float32)[order],
    )
    for query in queries(12):
        for k, threshold in ((5, None), (60, None), (10, 0.3)):
            got = ranker._set.top_k(query, k, threshold=threshold, weight=0.6)
            want = own.top_k(query, k, threshold=threshold, weight=0.6)
            assert [i for i, _ in got] == [i for i, _ in want]
            assert np.allclose([s for _, s in got], [s for _, s in want], atol=1e-6)


def test_ranker_moves_to_the_set_once_built() -> None:
    rows = HeldRows(DIM)
    ids, placed, biases = filled(rows, 500, seed=3)
    ranker = CompositeRanker(ids, rows, placed, biases, 0.6, background_min_rows=100)
    query = queries(4)[0]
    before = ranker.top(query, 10)
    assert not ranker.wait(0)
    rows.release.set()
    assert ranker.wait(30)
    assert ranker._set is not None and len(ranker._set) == 500
    after = ranker.top(query, 10)
    assert [i for i, _ in after] == [i for i, _ in before]


def test_a_failed_build_leaves_the_exact_scan_answering(caplog: pytest.LogCaptureFixture) -> None:
    rows = HeldRows(DIM)
    ids, placed, biases = filled(rows, 500, seed=5)
    ranker = CompositeRanker(ids, rows, placed, biases, 0.6, background_min_rows=100)
    query = queries(6)[0]
    before = ranker.top(query, 10)
    rows.fail = True
    with caplog.at_level(logging.WARNING, logger="memstrata.agent_mind"):
        rows.release.set()
        assert ranker.wait(30)
    assert ranker._set is None
    assert "building a recall index failed" in caplog.text
    assert ranker.top(query, 10) == before and len(before) == 10


def test_mind_recall_and_dedup_while_the_index_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mind whose rankers are all built in the background recalls and folds as one whose
    rankers are built at once."""
    store = InMemoryStore()
    mind = AgentMind(namespace=("t", "rank"))
    with mind.session(store) as run:
        for i in range(60):
            run.believe(f"service {i} deploys from the {['blue', 'green', 'red'][i % 3]} pipeline")
            run.reflect(f"release note {i}: check the {['cache', 'queue'][i % 2]} first")

    def answers() -> tuple[list[Any], dict[str, Any]]:
        run = AgentMind(namespace=("t", "rank")).open(store)  # never flushed: nothing written
        found = [
            [(r.id, round(r.score or 0, 5)) for r in run.recall(q, limit=8)]
            for q in ("blue pipeline deploys", "check the queue first", "service 7 deploys")
        ]
        return found, run.believe("service 4 deploys from the green pipeline")

    at_once = answers()
    monkeypatch.setattr(ranking, "BACKGROUND_MIN_ROWS", 0)
    assert answers() == at_once
    assert all(at_once[0]) and at_once[1]["action"] == "updated_store"


def test_recall_keeps_looking_past_high_scoring_hits_under_the_similarity_floor() -> None:
    """Fresh, confident entries barely related to the query outrank (by composite score) the
    one entry similar enough to pass the floor: recall asks the scan for more until it has
    the hits that pass, however many it drops."""
    store = InMemoryStore()
    mind = AgentMind(namespace=("t", "floor"))
    model, dim = mind.embedder.model, mind.embedder.dim
    now = int(time.time() * 1000)
    basis = np.eye(dim, dtype=np.float32)
    query = basis[0]
    old = now - 200 * 86_400_000  # recency ~0: bias 0.2 * 0.3 = 0.06

    def put(entry: MindBelief, vector: Any) -> None:
        store.put(
            mind.namespace_for(None), f"belief/{entry.id}", stored_payload(entry, vector, model)
        )

    # cosine 0.5: score 0.6 * 0.5 + 0.06 = 0.36, over the 0.35 threshold and the 0.25 floor
    wanted = 0.5 * basis[0] + np.sqrt(0.75, dtype=np.float32) * basis[1]
    wanted_belief = MindBelief(
        id="b_wanted", content="the wanted one", confidence="low", created_at=old, updated_at=old
    )
    put(wanted_belief, wanted)
    for i in range(40):  # cosine 0.2, under the floor: score 0.12 + 0.4 = 0.52
        vector = 0.2 * basis[0] + np.sqrt(0.96, dtype=np.float32) * basis[2 + i]
        belief = MindBelief(
            id=f"b_{i:02d}",
            content=f"unrelated {i}",
            confidence="high",
            created_at=now,
            updated_at=now,
        )
        put(belief, vector)
    run = mind.open(store)
    for limit in (1, 3):
        found = run.search(query, limit=limit)
        assert [r.id for r in found] == ["b_wanted"]
        assert found[0].score == pytest.approx(0.36, abs=1e-3)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rankers_columns_are_those_gathered_entry_by_entry(seed: int) -> None:
    """The columns recall's ranker is built from (ids, rows, biases, the next expiry) on a
    random mind, against a plain walk of the entries: expiries absent, past, in the future and
    equal to the run's time (expired), errors, every confidence, reflections."""
    from memstrata.layers.mind.entries import MindReflection
    from memstrata.layers.mind.recall import CONFIDENCE_SCORES, _build_ranker, _recency

    rng = np.random.default_rng(seed)
    store = InMemoryStore()
    mind = AgentMind(namespace=("t", "columns"))
    model, dim = mind.embedder.model, mind.embedder.dim
    now = int(time.time() * 1000)
    ns = mind.namespace_for(None)
    for i in range(300):
        expires = [None, now, now - 5, now + int(rng.integers(1, 10**8)), now + 1][i % 5]
        updated = now - int(rng.integers(0, 90 * 86_400_000))
        error = bool(rng.random() < 0.2)
        vector = rng.standard_normal(dim).astype(np.float32)
        entry: MindBelief | MindReflection
        if rng.random() < 0.6:
            level: Any = ["low", "medium", "high"][int(rng.integers(0, 3))]
            entry = MindBelief(
                id=f"b{i}",
                content=f"fact {i}",
                confidence=level,
                expires_at=expires,
                created_at=updated,
                updated_at=updated,
                error=error,
            )
            key = f"belief/{entry.id}"
        else:
            entry = MindReflection(
                id=f"r{i}",
                content=f"note {i}",
                created_at=updated,
                updated_at=updated,
                error=error,
                expires_at=expires,
            )
            key = f"reflection/{entry.id}"
        store.put(ns, key, stored_payload(entry, vector, model))
    run = mind.open(store)
    run.started_at = now  # the entries expiring at ``now`` have just expired
    rows_of = run.index().rows
    weights = run.layer.score_weights
    for kinds in (("belief",), ("reflection",), ("belief", "reflection")):
        for expired in (False, True):
            ids, rows, biases, next_expiry = [], [], [], math.inf
            for kind in kinds:
                for e in (run.beliefs if kind == "belief" else run.reflections).values():
                    at = e.expires_at
                    if at is not None and now < at < next_expiry:
                        next_expiry = at
                    if e.id not in rows_of or (at is not None and at <= now) != expired:
                        continue
                    level = "low" if e.error else getattr(e, "confidence", "medium")
                    ids.append(e.id)
                    rows.append(rows_of[e.id])
                    biases.append(
                        weights.recency * _recency(e.updated_at, now)
                        + weights.confidence * CONFIDENCE_SCORES[level]
                    )
            ranker, got_expiry = _build_ranker(run, kinds, expired)
            assert ids and ranker._ids == ids, (kinds, expired)
            assert ranker._rows.tolist() == rows
            assert np.allclose(ranker._bias, biases, rtol=1e-6, atol=0)
            assert got_expiry == next_expiry
