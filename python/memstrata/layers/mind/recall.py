"""Relevance: ``mind_recall``'s ranking of goals, beliefs and reflections for a query.

One composite score ranks every kind: ``similarity·s + recency·r + confidence·c`` (a goal's
priority stands in for confidence). A hit is at least ``similarity_floor`` similar to the query,
or, for a goal, holds every word of it; a belief or reflection also scores at least the
threshold, which, as in toolpack Agent Mind, does not apply to goals: a goal is matched to the
query, not measured against it. Beliefs and reflections are ranked exactly in one pass over the
vectors (:class:`~memstrata.layers.mind.ranking.CompositeRanker`); a ranker built by one run
serves the runs after it over the same committed version for ``RANKING_REUSE_MS``.
"""

from __future__ import annotations

import functools
import math
import re
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from memstrata.embedders import embed_texts
from memstrata.exceptions import ToolError
from memstrata.layers.mind.checks import check_tags, require_unicode
from memstrata.layers.mind.entries import (
    GOAL_STATUSES,
    GoalStatus,
    MindBelief,
    MindGoal,
    MindRecallResult,
    MindReflection,
)
from memstrata.layers.mind.ranking import CompositeRanker
from memstrata.layers.mind.records import DAY_MS
from memstrata.layers.mind.tools import MAX_RECALL_LIMIT

if TYPE_CHECKING:
    from memstrata.layers.mind.handle import AgentMindHandle

CONFIDENCE_SCORES: dict[str, float] = {"low": 0.3, "medium": 0.6, "high": 1.0}
PRIORITY_SCORES: dict[str, float] = {"low": 0.3, "normal": 0.6, "high": 1.0}
RECENCY_DECAY_DAYS = 30.0
DEFAULT_SIMILARITY_FLOOR = 0.25
GOAL_VECTORS_KEPT = 4096
_WORD = re.compile(r"\w+")
# Endings folded before words are compared, longest first; a word keeps three letters.
_ENDINGS = ("ions", "ion", "ings", "ing", "es", "ed", "s", "e")
# A ranking built by one run serves later runs this long (while no entry changed or expired):
# recency moves scores by at most 0.2 * (1 - exp(-1 min / 30 d)), under 5e-6, in that time.
RANKING_REUSE_MS = 60_000


def recall(
    handle: AgentMindHandle,
    query: str | None,
    *,
    type: Literal["belief", "reflection", "goal", "all"] = "all",
    status: GoalStatus = "active",
    tags: list[str] | None = None,
    pinned: bool | None = None,
    include_expired: bool = False,
    threshold: float | None = None,
    limit: int = 5,
) -> list[MindRecallResult]:
    """See :meth:`AgentMindHandle.recall`."""
    if type not in ("belief", "reflection", "goal", "all"):
        raise ToolError(f"unknown type {type!r}", code="invalid_arguments")
    if status not in GOAL_STATUSES:
        raise ToolError(f"unknown status {status!r}", code="invalid_arguments")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ToolError("limit must be a positive integer", code="invalid_arguments")
    limit = min(limit, MAX_RECALL_LIMIT)
    _check_flags(pinned, include_expired)
    wanted = set(check_tags(tags or []))
    if query is None or (isinstance(query, str) and not query.strip()):
        if pinned is True and type in ("reflection", "all"):
            return _pinned(handle, wanted, include_expired)
        raise ToolError(
            "query must be a non-empty string (only pinned=true lists without one)",
            code="invalid_arguments",
        )
    if not isinstance(query, str):
        raise ToolError("query must be a string", code="invalid_arguments")
    require_unicode(query, "query")
    if threshold is None:
        threshold = handle.layer.retrieval_threshold
    vector = handle.embed_one(query)
    scored: list[MindRecallResult] = []
    if type in ("goal", "all") and not pinned:
        scored += _recall_goals(handle, query, vector, status, wanted, limit)
    if type != "goal":
        scored += search(
            handle,
            vector,
            kinds=("belief", "reflection") if type == "all" else (type,),
            tags=wanted,
            pinned=pinned,
            include_expired=include_expired,
            threshold=threshold,
            limit=limit,
        )
    if type == "goal":
        return scored  # in _recall_goals' order: the goals the query names first
    scored.sort(key=lambda r: (-(r.score or 0.0), r.created_at, r.id))
    return scored[:limit]


def _check_flags(pinned: Any, include_expired: Any) -> None:
    """``pinned`` (None, True or False) and ``include_expired``: a truthy string would filter."""
    if pinned is not None and not isinstance(pinned, bool):
        raise ToolError(
            f"pinned must be true, false or null, got {pinned!r}", code="invalid_arguments"
        )
    if not isinstance(include_expired, bool):
        raise ToolError(
            f"include_expired must be true or false, got {include_expired!r}",
            code="invalid_arguments",
        )


def _pinned(
    handle: AgentMindHandle, tags: set[str], include_expired: bool
) -> list[MindRecallResult]:
    now = handle.started_at
    rules = [
        r
        for r in handle._reflections.values()
        if r.pinned and tags.issubset(r.tags) and (include_expired or not r.expired(now))
    ]
    rules.sort(key=lambda r: (r.created_at, r.id))
    return [MindRecallResult.of(r) for r in rules]


def _recall_goals(
    handle: AgentMindHandle,
    query_text: str,
    vector: npt.NDArray[np.float32],
    status: str,
    tags: set[str],
    limit: int,
) -> list[MindRecallResult]:
    """The goals at least ``similarity_floor`` similar to the query, or holding every word of
    it (:func:`keywords`), scored like beliefs (similarity of their text to the query, recency,
    and priority in place of confidence) for the ranking only: the threshold is not applied to
    goals, whose age or low priority must not hide one the query names. Goals the query names
    by keyword come first for ``limit``: a goal the model read in the header and names by one
    of its words is found, however little a long text is similar to one word."""
    goals = [g for g in handle._goals.values() if g.status == status and tags.issubset(g.tags)]
    if not goals:
        return []
    query = np.asarray(vector, dtype=np.float64)
    query = query / np.linalg.norm(query)
    texts = [_goal_text(g) for g in goals]
    units = _goal_units(handle, texts)
    named = _goal_keyword_hits(handle, query_text, texts)
    layer = handle.layer
    w, now, floor = layer.score_weights, handle.started_at, layer.similarity_floor
    scored = []
    for goal, unit, by_keyword in zip(goals, units, named):
        similarity = float(unit @ query)
        score = (
            w.similarity * similarity
            + w.recency * _recency(goal.updated_at, now)
            + w.confidence * PRIORITY_SCORES[goal.priority]
        )
        if by_keyword or similarity >= floor:
            scored.append((by_keyword, score, goal))
    scored.sort(key=lambda t: (not t[0], -t[1], t[2].created_at, t[2].id))
    return [
        MindRecallResult.of(goal, score=max(0.0, min(1.0, score)))
        for _, score, goal in scored[:limit]
    ]


def _goal_text(goal: MindGoal) -> str:
    """What a goal is matched by: its description, progress notes and tags."""
    return " ".join([goal.description, *goal.progress, *goal.tags])


def keywords(text: str) -> frozenset[str]:
    """``text``'s words, case-folded, each with the first of ``_ENDINGS`` it ends in folded
    (if three letters are left): "Databases" and "database" give "databas", "migrate" and
    "migration" give "migrat"."""
    return frozenset(map(_folded, _WORD.findall(text.casefold())))


# Every recall folds its query's words: most recur, so their folded forms are kept.
@functools.lru_cache(maxsize=65_536)
def _folded(word: str) -> str:
    for ending in _ENDINGS:
        if word.endswith(ending) and len(word) - len(ending) >= 3:
            return word[: -len(ending)]
    return word


def _goal_keyword_hits(handle: AgentMindHandle, query: str, texts: list[str]) -> list[bool]:
    """For each goal text, whether it holds every word of ``query``; the texts' words are kept
    by the layer."""
    wanted = keywords(query)
    if not wanted:
        return [False] * len(texts)
    kept = handle.layer._goal_words
    missing = [t for t in texts if t not in kept]
    if missing and len(kept) + len(missing) > GOAL_VECTORS_KEPT:
        kept.clear()
    for text in missing:
        kept[text] = keywords(text)
    return [wanted <= kept[t] for t in texts]


def _goal_units(handle: AgentMindHandle, texts: list[str]) -> list[npt.NDArray[np.float64]]:
    """The goals' unit vectors (by their texts, :func:`_goal_text`), kept by the layer by
    text and embedder model."""
    layer = handle.layer
    kept = layer._goal_vectors
    model = layer.embedder.model
    missing = sorted({t for t in texts if (model, t) not in kept})
    if missing:
        if len(kept) + len(missing) > GOAL_VECTORS_KEPT:
            kept.clear()
        matrix = np.asarray(embed_texts(layer.embedder, missing), dtype=np.float64)
        for text, row in zip(missing, matrix):
            norm = float(np.linalg.norm(row))
            kept[(model, text)] = row / norm if norm and math.isfinite(norm) else row * 0
    return [kept[(model, t)] for t in texts]


def ranker(handle: AgentMindHandle, kinds: tuple[str, ...], expired: bool) -> CompositeRanker:
    """The run's ranker over the live (or the archived) entries of the given kinds: the one an
    earlier run built over the same committed version while it is valid, else a new one."""
    key = (kinds, expired)
    found = handle._rankers.get(key)
    if found is not None:
        return found
    now = handle.started_at
    committed = handle._committed
    shared = committed.rankers.get(key)
    if shared is not None and shared[1] <= now < shared[2]:
        handle._rankers[key] = shared[0]
        return shared[0]
    built, next_expiry = _build_ranker(handle, kinds, expired)
    handle._rankers[key] = built
    # Valid until the first entry of these kinds expires (it would change sides).
    committed.rankers[key] = (built, now, int(min(now + RANKING_REUSE_MS, next_expiry)))
    return built


def _build_ranker(
    handle: AgentMindHandle, kinds: tuple[str, ...], expired: bool
) -> tuple[CompositeRanker, float]:
    """A ranker over the live (or the archived) entries of the given kinds, at the run's
    start time, and when the first of those entries expires after it (inf: never).

    The columns the ranker needs are gathered a column at a time and filtered with numpy: at
    100,000 entries the first recall feels every step taken per entry."""
    index = handle.index()
    rows_of = index.rows.get
    now = handle.started_at
    ids: list[str] = []
    rows: list[npt.NDArray[np.int64]] = []
    updated: list[npt.NDArray[np.float64]] = []
    levels: list[npt.NDArray[np.float64]] = []
    next_expiry = math.inf
    low = CONFIDENCE_SCORES["low"]
    for kind in kinds:
        entries = handle._beliefs if kind == "belief" else handle._reflections
        if not entries:
            continue
        values: list[MindBelief | MindReflection] = list(entries.values())
        # None (no expiry) becomes NaN, which compares false either way.
        expires = np.array([e.expires_at for e in values], dtype=np.float64)
        later = expires[expires > now]
        if len(later):
            next_expiry = min(next_expiry, float(later.min()))
        row = np.array([rows_of(e.id, -1) for e in values], dtype=np.int64)
        keep = (row >= 0) & ((expires <= now) == expired)
        where = np.flatnonzero(keep).tolist()
        ids += [values[n].id for n in where]
        rows.append(row[keep])
        updated.append(np.array([values[n].updated_at for n in where], dtype=np.float64))
        level = [CONFIDENCE_SCORES[getattr(values[n], "confidence", "medium")] for n in where]
        errors = np.array([values[n].error for n in where], dtype=np.bool_)
        levels.append(np.where(errors, low, np.array(level, dtype=np.float64)))
    w = handle.layer.score_weights
    ages = (now - _joined(updated)) / DAY_MS
    recency = np.exp(-np.maximum(0.0, ages) / RECENCY_DECAY_DAYS)
    confidence = _joined(levels)
    ranker = CompositeRanker(
        ids,
        index.vectors,
        _joined(rows),
        w.recency * recency + w.confidence * confidence,
        w.similarity,
    )
    return ranker, next_expiry


def _joined(parts: list[Any]) -> Any:
    return np.concatenate(parts) if parts else np.zeros(0)


def _bias(handle: AgentMindHandle, entry: MindBelief | MindReflection) -> float:
    """The recency and confidence part of ``entry``'s score (see :func:`_build_ranker`)."""
    w = handle.layer.score_weights
    level = "low" if entry.error else getattr(entry, "confidence", "medium")
    return (
        w.recency * _recency(entry.updated_at, handle.started_at)
        + w.confidence * (CONFIDENCE_SCORES[level])
    )


def search(
    handle: AgentMindHandle,
    vector: npt.NDArray[np.float32],
    *,
    kinds: tuple[str, ...] = ("belief", "reflection"),
    tags: set[str] | frozenset[str] = frozenset(),
    pinned: bool | None = None,
    include_expired: bool = False,
    threshold: float = 0.35,
    limit: int = 5,
) -> list[MindRecallResult]:
    """See :meth:`AgentMindHandle.search`."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise ToolError("threshold must be a number", code="invalid_arguments")
    if not 0 <= threshold <= 1:
        raise ToolError("threshold must be between 0 and 1", code="invalid_arguments")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ToolError(
            f"limit must be a positive integer, got {limit!r}", code="invalid_arguments"
        )
    if not isinstance(kinds, (tuple, list)) or not set(kinds) <= {"belief", "reflection"}:
        # A string would be taken one character per kind, and match nothing.
        raise ToolError(
            f"kinds must be a tuple of 'belief' and/or 'reflection', got {kinds!r}",
            code="invalid_arguments",
        )
    if not isinstance(tags, (set, frozenset)):
        tags = set(check_tags(tags))
    _check_flags(pinned, include_expired)
    try:
        query = np.asarray(vector, dtype=np.float32)
    except (TypeError, ValueError):
        raise ToolError(
            f"vector must be an array of numbers, got {type(vector).__name__}",
            code="invalid_arguments",
        ) from None
    dim = handle.layer.embedder.dim
    if query.shape != (dim,):
        # Of another shape, the scan would find nothing (or fail) rather than say why.
        raise ToolError(
            f"vector has shape {query.shape}; the mind's embedder gives vectors of {dim} numbers",
            code="invalid_arguments",
        )
    # The ranker normalises the query itself; this only refuses one it cannot.
    norm2 = float(query @ query)
    if not norm2 or not math.isfinite(norm2):
        raise ToolError("the query has no direction to search by", code="invalid_arguments")
    w = handle.layer.score_weights
    floor = handle.layer.similarity_floor if w.similarity > 0 else 0.0
    filtered = bool(tags) or pinned is not None or floor > 0
    if pinned:
        kinds = tuple(kind for kind in kinds if kind != "belief")
    hits: list[tuple[float, str, MindBelief | MindReflection]] = []
    # Little Python runs after the scan, and it runs cold: the scan has just streamed
    # megabytes through the caches. Each hit's entry is looked up once.
    beliefs, reflections = handle._beliefs, handle._reflections
    for expired in [False, True] if include_expired and kinds else [False]:
        if not kinds:
            break
        found_by = ranker(handle, kinds, expired)
        # A hit at the floor scores at least w * floor + its bias: the scan skips the rest.
        cut = max(threshold, w.similarity * floor + found_by.min_bias) if floor else threshold
        # Tags and pins may drop many hits, so the scan is asked for more at once; the floor
        # drops few (the cut already keeps out every hit further under it than the biases'
        # spread), so the scan is asked for more only when it did.
        k = 4 * limit if tags or pinned is not None else limit
        while found_by.size:
            found = found_by.top(query, k, threshold=cut)
            passing = []
            for id_, score in found:
                entry = beliefs.get(id_) or reflections[id_]
                if filtered:
                    if floor and score - _bias(handle, entry) < w.similarity * floor - 1e-6:
                        continue
                    if tags and not tags.issubset(entry.tags):
                        continue
                    if (
                        pinned is not None
                        and isinstance(entry, MindReflection)
                        and entry.pinned != pinned
                    ):
                        continue
                passing.append((score, id_, entry))
            if len(passing) >= limit or len(found) < k or k >= found_by.size:
                hits += passing[:limit]
                break
            k *= 4
    hits.sort(key=_best_first)
    return [
        MindRecallResult.of(entry, score=max(0.0, min(1.0, score)))
        for score, _, entry in hits[:limit]
    ]


def _recency(updated_at: int, now: int) -> float:
    age_days = max(0.0, (now - updated_at) / DAY_MS)
    return math.exp(-age_days / RECENCY_DECAY_DAYS)


def _best_first(hit: tuple[float, str, object]) -> tuple[float, str]:
    """Recall order: higher score first, then the lower id (stable across runs and kinds)."""
    return (-hit[0], hit[1])
