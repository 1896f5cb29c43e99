"""Belief folding quality on labelled pairs (tests/data/belief_pairs.jsonl).

A second belief folds into a first when the default embedder puts them at cosine >= the
mind's default ``deduplication_threshold`` (0.85) and :func:`facts_disagree` finds no rule
that tells them apart. Distinct facts must never fold; most rewordings of one fact should.
Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest

from memstrata import AgentMind, HashingEmbedder
from memstrata.layers.mind.conflicts import disagreement

PAIRS = pathlib.Path(__file__).parent / "data" / "belief_pairs.jsonl"
THRESHOLD = AgentMind().deduplication_threshold


def load_pairs() -> list[dict[str, Any]]:
    return [json.loads(line) for line in PAIRS.read_text(encoding="utf-8").splitlines() if line]


def cosines(pairs: list[dict[str, Any]]) -> np.ndarray:
    embedder = HashingEmbedder()
    a = embedder.embed([p["a"] for p in pairs])
    b = embedder.embed([p["b"] for p in pairs])
    return np.einsum("ij,ij->i", a, b)


def quantiles(values: np.ndarray) -> str:
    q = np.quantile(values, [0.0, 0.1, 0.5, 0.9, 1.0])
    return " / ".join(f"{x:.3f}" for x in q)


def test_the_data_is_big_enough_and_well_formed() -> None:
    pairs = load_pairs()
    same = [p for p in pairs if p["fold"]]
    distinct = [p for p in pairs if not p["fold"]]
    assert len(same) >= 150 and len(distinct) >= 150
    whys = {"number", "date", "quantity", "negation", "entity", "order"}
    assert {p["why"] for p in distinct} == whys
    assert len({(p["a"], p["b"]) for p in pairs}) == len(pairs)


def test_distinct_facts_never_fold_and_most_rewordings_do() -> None:
    pairs = load_pairs()
    cos = cosines(pairs)
    rules = [disagreement(p["a"], p["b"]) for p in pairs]
    same = np.array([p["fold"] for p in pairs])
    blocked = np.array([r is not None for r in rules])
    folded = (cos >= THRESHOLD) & ~blocked

    print(f"\ncosine min / p10 / median / p90 / max (default embedder, threshold {THRESHOLD}):")
    print(f"  same fact reworded ({same.sum()}): {quantiles(cos[same])}")
    print(f"  distinct facts     ({(~same).sum()}): {quantiles(cos[~same])}")
    for why in sorted({p["why"] for p in pairs if not p["fold"]}):
        rows = np.array([not p["fold"] and p["why"] == why for p in pairs])
        print(
            f"    {why:9s} ({rows.sum():3d}): {quantiles(cos[rows])}; at or above the threshold"
            f" {(cos[rows] >= THRESHOLD).sum()}, caught by facts_disagree {blocked[rows].sum()}"
        )
    print(
        f"  rewordings folded: {folded[same].sum()}/{same.sum()}"
        f" ({folded[same].mean():.1%});"
        f" by the embedder alone {(cos[same] >= THRESHOLD).mean():.1%};"
        f" refused by facts_disagree {(blocked & same).sum()}"
    )
    print(
        f"  distinct facts folded: {folded[~same].sum()}"
        f" (by the embedder alone: {(cos[~same] >= THRESHOLD).sum()})"
    )
    wrongly = [(pairs[i]["a"], pairs[i]["b"]) for i in np.flatnonzero(folded & ~same)]
    assert wrongly == []
    assert folded[same].mean() >= 0.60


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("TSMC Q2 capacity is fully booked", "TSMC Q3 capacity is fully booked"),
        ("The payments API allows 100 req/min", "The payments API allows 500 req/min"),
        ("The user is allergic to peanuts.", "The user is not allergic to peanuts."),
    ],
)
def test_the_embedder_alone_keeps_numbers_and_negation_apart(a: str, b: str) -> None:
    v = HashingEmbedder().embed([a, b])
    assert float(v[0] @ v[1]) < THRESHOLD


def test_word_order_moves_the_vector() -> None:
    v = HashingEmbedder().embed(["X differs from Y", "Y differs from X"])
    assert float(v[0] @ v[1]) < 0.99
