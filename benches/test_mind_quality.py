"""Agent mind quality: belief folding on labelled pairs and recall precision/recall@5.

Folding (tests/data/belief_pairs.jsonl): a pair "folds" when the cosine of its two texts is at
least 0.85 (the mind's default ``deduplication_threshold``), and, under the new rules, when
``facts_disagree`` also finds nothing that tells them apart. Printed for the version 1 hashing
embedder (words and their character n-grams, re-implemented below in pure Python), for the
version 2 embedder (memstrata's ``hash_embed`` today) alone, and for version 2 with the rules.

Recall (tests/data/recall_set.json): each query is answered from one pool of goals, beliefs and
reflections of known ages, by

* the toolpack formula, as toolpack Agent Mind describes it, written here in Python: goals that
  share any word with the query first, then beliefs and reflections scoring
  ``0.6·similarity + 0.2·recency + 0.2·confidence`` at least 0.35, five in all. toolpack Agent Mind
  does not define recency or the confidence values; this uses memstrata's (``exp(-age / 30 days)``;
  low 0.3, medium 0.6, high 1.0, reflections medium) so the two differ only where toolpack Agent
  Mind does say something;
* memstrata's ``mind_recall`` tool, through a MemoryStack with a default AgentMind over an
  InMemoryStore, the entries stored with their ages as earlier runs would have left them.

and, as a preview of a similarity floor, the composite over goals, beliefs and reflections in
one ranking (goals embedded like the rest, scored as medium confidence), keeping only entries at
least ``floor`` similar to the query, for a few floors.

All use the default HashingEmbedder. Precision@5 is the share of returned entries that are
relevant (a query with nothing relevant scores 1 when nothing is returned, else 0); recall@5
the share of a query's relevant entries returned (1 for a query with none).
"""

from __future__ import annotations

import json
import math
import pathlib
import re
import string
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from benchkit import record

from memstrata import AgentMind, HashingEmbedder, MemoryStack
from memstrata.layers.mind.conflicts import facts_disagree
from memstrata.stores import InMemoryStore

DATA = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data"
DAY_MS = 86_400_000
AGENT = "quality"
THRESHOLD = 0.85
CONFIDENCE = {"low": 0.3, "medium": 0.6, "high": 1.0}


# Version 1 of hash_embed, for comparison: every word and the character 3- to 5-grams of
# <word>, weight 1, hashed like version 2.
_SEPARATORS = (
    set(string.whitespace)
    | set(string.punctuation)
    | set("\u2018\u2019\u201c\u201d\u2013\u2014\u2026\u00ab\u00bb")
)


def _hash(kind: bytes, data: bytes) -> int:
    mask = (1 << 64) - 1
    h = 0xCBF29CE484222325
    for b in kind + data:
        h = ((h ^ b) * 0x100000001B3) & mask
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & mask
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & mask
    return h ^ (h >> 33)


def v1_embed(texts: list[str], dim: int = 384) -> np.ndarray:
    out = np.zeros((len(texts), dim))
    for row, text in enumerate(texts):
        words = "".join(" " if c in _SEPARATORS else c for c in text.lower()).split()
        for word in words:
            padded = f"<{word}>"
            features = [(b"w", word)] + [
                (b"g", padded[i : i + n]) for n in (3, 4, 5) for i in range(len(padded) - n + 1)
            ]
            for kind, feature in features:
                h = _hash(kind, feature.encode())
                out[row, ((h & 0xFFFFFFFF) * dim) >> 32] += 1.0 if h >> 63 == 0 else -1.0
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


def fold_figures() -> dict[str, dict[str, float]]:
    pairs = [json.loads(line) for line in (DATA / "belief_pairs.jsonl").read_text().splitlines()]
    same = np.array([p["fold"] for p in pairs])
    a, b = [p["a"] for p in pairs], [p["b"] for p in pairs]
    disagree = np.array([facts_disagree(x, y) for x, y in zip(a, b)])
    embedder = HashingEmbedder()
    cos_v1 = np.einsum("ij,ij->i", v1_embed(a), v1_embed(b))
    cos_v2 = np.einsum("ij,ij->i", embedder.embed(a), embedder.embed(b))
    out = {}
    for name, folded in {
        "v1 embedder alone": cos_v1 >= THRESHOLD,
        "v1 embedder + facts_disagree": (cos_v1 >= THRESHOLD) & ~disagree,
        "v2 embedder alone": cos_v2 >= THRESHOLD,
        "v2 embedder + facts_disagree": (cos_v2 >= THRESHOLD) & ~disagree,
    }.items():
        out[name] = {
            "rewordings_folded": float(folded[same].mean()),
            "distinct_folded": int(folded[~same].sum()),
            "distinct_pairs": int((~same).sum()),
        }
    out["cosine medians"] = {
        "v1 rewordings": float(np.median(cos_v1[same])),
        "v1 distinct": float(np.median(cos_v1[~same])),
        "v2 rewordings": float(np.median(cos_v2[same])),
        "v2 distinct": float(np.median(cos_v2[~same])),
    }
    return out


def test_belief_folding(benchmark: Any) -> None:
    figures = benchmark.pedantic(fold_figures, rounds=1, iterations=1)
    lines = ["\n[belief folding on labelled pairs, cosine >= 0.85]"]
    for name, f in figures.items():
        if name == "cosine medians":
            lines.append("  cosine medians: " + ", ".join(f"{k} {v:.3f}" for k, v in f.items()))
        else:
            lines.append(
                f"  {name}: rewordings folded {f['rewordings_folded']:.1%},"
                f" distinct facts folded {f['distinct_folded']}/{f['distinct_pairs']}"
            )
    lines.append("  target: v2 + facts_disagree folds no distinct fact and >= 60% of rewordings")
    print("\n".join(lines))
    record({"title": "belief folding", "figures": figures})
    rules = figures["v2 embedder + facts_disagree"]
    assert rules["distinct_folded"] == 0 and rules["rewordings_folded"] >= 0.6


# Recall ------------------------------------------------------------------------------------

_WORDS = re.compile(r"\w+", re.UNICODE)


def load_recall() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / "recall_set.json").read_text())
    return data


def seed_recall(data: dict[str, Any], now: int) -> Callable[[str], list[str]]:
    """The toolpack formula: goals sharing a word first, then score >= 0.35, five in all."""
    embedder = HashingEmbedder()
    entries = data["entries"]
    goals = sorted((e for e in entries if e["type"] == "goal"), key=lambda e: -float(e["age_days"]))
    others = [e for e in entries if e["type"] != "goal"]
    vectors = embedder.embed([e["content"] for e in others])
    bonus = np.array(
        [
            0.2 * math.exp(-float(e["age_days"]) / 30)
            + 0.2 * CONFIDENCE[e.get("confidence", "medium")]
            for e in others
        ]
    )

    def recall(query: str) -> list[str]:
        words = {w.lower() for w in _WORDS.findall(query)}
        found = [
            g["id"] for g in goals if words & {w.lower() for w in _WORDS.findall(g["content"])}
        ][:5]
        scores = 0.6 * (vectors @ embedder.embed([query])[0]) + bonus
        order = np.argsort(-scores, kind="stable")
        found += [others[i]["id"] for i in order if scores[i] >= 0.35][: 5 - len(found)]
        return found

    return recall


def floor_recall(data: dict[str, Any], floor: float) -> Callable[[str], list[str]]:
    """One ranking of every entry by the composite, entries below ``floor`` similarity out."""
    embedder = HashingEmbedder()
    entries = data["entries"]
    vectors = embedder.embed([e["content"] for e in entries])
    bonus = np.array(
        [
            0.2 * math.exp(-float(e["age_days"]) / 30)
            + 0.2 * CONFIDENCE[e.get("confidence", "medium")]
            for e in entries
        ]
    )

    def recall(query: str) -> list[str]:
        similarity = vectors @ embedder.embed([query])[0]
        score = 0.6 * similarity + bonus
        order = np.argsort(-score, kind="stable")
        keep = (similarity >= floor) & (score >= 0.35)
        return [entries[i]["id"] for i in order if keep[i]][:5]

    return recall


def memstrata_recall(data: dict[str, Any], now: int) -> tuple[Callable[[str], list[str]], Any]:
    """mind_recall through a MemoryStack with a default AgentMind, entries stored with ages."""
    store = InMemoryStore()
    for e in data["entries"]:
        at = now - int(float(e["age_days"]) * DAY_MS)
        common = {"id": e["id"], "tags": [], "createdAt": at, "updatedAt": at}
        if e["type"] == "goal":
            value = {
                **common,
                "type": "goal",
                "description": e["content"],
                "priority": e["priority"],
                "status": "active",
                "progress": [],
            }
        elif e["type"] == "belief":
            value = {**common, "type": "belief", "content": e["content"]}
            value["confidence"] = e["confidence"]
        else:
            value = {**common, "type": "reflection", "content": e["content"]}
            value["pinned"] = e["pinned"]
        store.put(("mind", AGENT), f"{e['type']}/{e['id']}", value)
    stack = MemoryStack([AgentMind()], store=store)
    run = stack.run(agent=AGENT).__enter__()

    def recall(query: str) -> list[str]:
        result = run.call_tool("mind_recall", {"query": query})
        assert result.get("ok", True) is not False, result
        return [hit["id"] for hit in result.get("result", result)]

    return recall, run


def scores(recall: Callable[[str], list[str]], queries: list[dict[str, Any]]) -> dict[str, float]:
    precision, recall_at, empty_right = [], [], []
    for q in queries:
        got, relevant = recall(q["query"])[:5], set(q["relevant"])
        hits = len(relevant.intersection(got))
        if got:
            precision.append(hits / len(got))
        else:
            precision.append(0.0 if relevant else 1.0)
        recall_at.append(hits / len(relevant) if relevant else 1.0)
        if not relevant:
            empty_right.append(not got)
    return {
        "precision@5": float(np.mean(precision)),
        "recall@5": float(np.mean(recall_at)),
        "unrelated queries answered with nothing": float(np.mean(empty_right)),
        "mean results": float(
            np.mean([len(recall(q["query"])[:5]) for q in queries]),
        ),
    }


def test_recall_quality(benchmark: Any) -> None:
    data = load_recall()
    now = int(time.time() * 1000)
    queries = data["queries"]
    seed = seed_recall(data, now)
    ours, run = memstrata_recall(data, now)
    try:
        figures = benchmark.pedantic(
            lambda: {
                "toolpack formula": scores(seed, queries),
                "mind_recall": scores(ours, queries),
            },
            rounds=1,
            iterations=1,
        )
        for floor in (0.2, 0.25, 0.3):
            figures[f"preview, one ranking, floor {floor}"] = scores(
                floor_recall(data, floor), queries
            )
    finally:
        run.__exit__(None, None, None)
    lines = [
        f"\n[recall quality: {len(queries)} queries, {len(data['entries'])} entries,"
        f" {sum(not q['relevant'] for q in queries)} queries with nothing relevant]"
    ]
    for name, f in figures.items():
        lines.append(f"  {name}: " + ", ".join(f"{k} {v:.3f}" for k, v in f.items()))
    ratio = figures["mind_recall"]["precision@5"] / max(
        figures["toolpack formula"]["precision@5"], 1e-9
    )
    lines.append(f"  precision@5 mind_recall / toolpack formula: {ratio:.2f}x")
    lines.append("  target: precision@5 >= 2x the toolpack formula's, recall@5 not lower")
    print("\n".join(lines))
    record({"title": "recall quality", "figures": figures, "ratio": ratio})
