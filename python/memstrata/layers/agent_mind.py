"""AgentMind: persistent goals, beliefs and reflections, a prompt header and seven tools.

Implements seed 001. Each run reads the committed store once, shows the model a
``--- AGENT MIND ---`` header, offers ``mind_recall``, ``mind_believe``, ``mind_reflect``,
``mind_unpin_reflection``, ``mind_set_goal``, ``mind_update_goal`` and ``mind_complete_goal``,
buffers every write but ``mind_complete_goal`` in a draft, and flushes the draft in one store
transaction when the run closes (clean or error flush).

Usable in a :class:`~memstrata.MemoryStack` or on its own::

    mind = AgentMind(embedder=HashingEmbedder())
    with mind.session(store, agent="research-tracker") as handle:
        handle.believe("TSMC Q2 capacity is fully booked.", confidence="high")

Decisions where the seed is silent (or its code differs from its text):

* Storage: namespace ``("mind", agent)`` (``namespace=`` overrides; ``"a/b"`` means
  ``("a", "b")``), one key per entry (``goal/<id>``, ``belief/<id>``, ``reflection/<id>``); the
  value is the seed's camelCase payload plus ``embedding`` (float32, base64) and
  ``embeddingModel``. Expiry is a field, not a store TTL: an expired belief is archived (kept,
  hidden from the header, dedup and recall unless ``includeExpired``), never deleted.
* A configured reflection TTL is applied (the seed's code ignores it); expired reflections are
  archived like beliefs.
* Recency is measured from ``updatedAt`` (a re-confirmed belief is fresh). Reflections have no
  confidence: they count as medium (0.6), or low when error-flagged, like beliefs.
* Dedup of a belief considers live beliefs only, in the draft and the committed store; the
  update replaces content and expiry, unions tags, and only raises confidence unless
  ``allowDowngrade``. An update of a stored belief is checked against the stored confidence
  again at flush time, so a concurrent upgrade by another run is not undone.
* Dedup across runs that overlap (several processes or servers on one store): ``mind_believe``
  compares with the store as the run loaded it, so two overlapping runs can each create the
  same belief. The flush therefore writes through ``Store.update_many_since`` from a mark taken
  before the load: mind flushes of one namespace are serialised (in any process), and each
  belief this run *created* that is at least ``deduplication_threshold`` similar to a live
  belief committed since the run loaded is folded into it by the same merge rules (content and
  expiry replaced, confidence only rises unless ``allowDowngrade``, tags united, ``createdAt``
  kept, error flag on an error flush). Only what changed since the load is read, however big
  the mind. What ``mind_believe`` reported stays as reported; the ``id`` it returned for a
  folded belief is then never stored: the belief lives on under the other run's id, which
  ``handle.folded`` maps it to (also logged at INFO).
* ``pinned: true`` in ``mind_recall`` returns pinned reflections only (no goals, no beliefs);
  ``pinned: false`` excludes pinned reflections; absent means no filter.
* Recall ranks exactly by the composite score in one pass over the vectors
  (:mod:`memstrata.layers.mind_ranking`); the belief dedup check searches the same ranker by
  similarity alone, so the vectors are held once in the ranker and once as loaded. Every
  search is exact: at the sizes a mind holds (up to ``max_entries``, 100,000 by default) the
  exact scan answers the dedup check faster than an hnswlib graph does
  (``benches/test_vectors.py``), with no graph to build or store.
* ``type: 'all'`` lists matching goals first (by words matched), then beliefs and reflections
  by score, ``limit`` in total. Goals match when a query word (two characters or more) occurs
  in their description, progress or tags.
* Completing a goal folds in this run's pending updates to it; completing a goal created in
  this run writes it (completed) at once. Both survive an error flush, as the seed's exemption
  of ``mind_complete_goal`` implies.
* The header's beliefs and reflections share ``token_budget``, further capped by the stack's
  budget for the layer minus the goals and standing rules (which are always shown). Beliefs
  are listed newest first, reflections newest first.
* A namespace holds at most ``max_entries`` goals, beliefs and reflections together (100,000
  by default; archived ones count, as they are kept). A write that would add one past it is
  refused with :class:`~memstrata.exceptions.LimitExceededError`; updating a belief never
  counts as adding. The count is what the run loaded plus its draft, so runs of one agent
  flushing at the same time can pass it by their drafts, never without bound.
* A sub-run (``run.spawn``) gets its own draft over the same namespace (or its agent's).
* The embedder and the vector indexes are created on first use. Indexes are kept by the layer
  between runs and updated by difference, so a run only embeds or indexes what changed.
* The layer keeps each namespace's committed entries between runs, with the store's
  :class:`~memstrata.stores.ChangeMark` they stand at: a run reads only what was written or
  deleted since (``Store.changes``), and that answer's mark is the one its flush reconciles from.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import operator
import re
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from memstrata._core import VectorSet
from memstrata.embedders import Embedder, HashingEmbedder
from memstrata.exceptions import InvalidInputError, LimitExceededError, ToolError
from memstrata.layers.mind_entries import (
    CONFIDENCE_LEVELS,
    GOAL_PRIORITIES,
    GOAL_STATUSES,
    MAX_PREVIOUS,
    ConfidenceLevel,
    GoalPriority,
    GoalStatus,
    MindBelief,
    MindEntry,
    MindGoal,
    MindRecallResult,
    MindReflection,
    decode_vector,
    encode_vector,
    entry_from_payload,
    next_sequence,
    now_ms,
    parse_due_by,
    parse_duration,
)
from memstrata.layers.mind_ranking import CompositeRanker
from memstrata.layers.mind_tools import (
    MAX_CONTENT_CHARS,
    MAX_RECALL_LIMIT,
    MAX_TAG_CHARS,
    MAX_TAGS,
    mind_tools,
)
from memstrata.layers.mind_vectors import BLOCK_ROWS, VectorRows, decode_raw
from memstrata.prompts import one_line
from memstrata.stack import Budget, Message, RunContext
from memstrata.stores import Item, Namespace, Store
from memstrata.stores.base import ChangeMark, Updater
from memstrata.tools import Tool

logger = logging.getLogger("memstrata.agent_mind")

CONFIDENCE_SCORES: dict[str, float] = {"low": 0.3, "medium": 0.6, "high": 1.0}
_CONFIDENCE_RANK = {"low": 0, "medium": 1, "high": 2}
MAX_GOALS_CEILING = 10
MAX_PINNED_CEILING = 10
PINNED_WARNING_MARGIN = 2
DAY_MS = 86_400_000
RECENCY_DECAY_DAYS = 30.0
REEMBED_BATCH = 256
LINE_TOKEN_CACHE = 100_000
# A ranking built by one run serves later runs this long (while no entry changed or expired):
# recency moves scores by at most 0.2 * (1 - exp(-1 min / 30 d)), under 5e-6, in that time.
RANKING_REUSE_MS = 60_000
DEFAULT_MAX_ENTRIES = 100_000
DEFAULT_SIMILARITY_FLOOR = 0.2
# A goal or standing-rule line in the header is cut to this many characters.
HEADER_LINE_CHARS = 300
MIN_HEADER_LINE_CHARS = 40
PRIORITY_SCORES: dict[str, float] = {"low": 0.3, "normal": 0.6, "high": 1.0}
GOAL_VECTORS_KEPT = 4096
# An embedding's squared norm is below this, so float32 arithmetic on it (its squared norm,
# its dot product with another such vector) stays far from float32's limit, 3.4e38.
MAX_EMBEDDING_NORM2 = 1e30
_WORD = re.compile(r"\w{2,}", re.UNICODE)

ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True)
class MindTtlDefaults:
    """Default expiry of new entries as a duration (``"30d"``, ``"12h"``...); None: never."""

    belief: str | None = "30d"
    reflection: str | None = None


@dataclass(frozen=True)
class ScoreWeights:
    """Weights of the recall score: ``similarity·s + recency·r + confidence·c``."""

    similarity: float = 0.6
    recency: float = 0.2
    confidence: float = 0.2


class AgentMind:
    """The agent-mind layer (seed 001).

    Args:
        embedder: An :class:`~memstrata.embedders.Embedder`, or a zero-argument factory that
            makes one on first use. Default: a :class:`~memstrata.embedders.HashingEmbedder`.
        namespace: Store namespace; default ``("mind", <run's agent>)``.
        token_budget: Tokens for the header's beliefs and recent reflections together.
        recency_window_days: Age limit of the header's recent reflections.
        max_goals: Cap on active goals (at most 10).
        max_pinned_reflections: Cap on pinned reflections (at most 10).
        deduplication_threshold: Cosine similarity from which a new belief updates an old one.
        retrieval_threshold: Default minimum score of ``mind_recall`` hits.
        similarity_floor: Minimum cosine similarity between a query and a hit, whatever its
            score: recency and confidence rank related entries, they never make an unrelated
            one a hit (a fresh high-confidence belief scores 0.40 with no similarity at all).
        ttl_defaults: Default expiry of beliefs and reflections (a :class:`MindTtlDefaults` or a
            dict with ``belief``/``reflection``).
        score_weights: Weights of the recall score.
        max_entries: Most goals, beliefs and reflections one namespace holds.
        purge_expired_after: How long an expired (archived) belief or reflection is kept, as a
            duration (``"30d"``); None keeps it for ever. Past that, it is deleted when a write
            needs room under ``max_entries`` or by :meth:`AgentMindHandle.purge_expired`.
        on_progress: Called ``(done, total)`` while entries are re-embedded after an embedder
            change; progress is also logged at INFO.
        budget: The stack's ``(min, max)`` tokens for the whole header.
        slot: Order among the layers' prompt items (low: early in the prompt).
        name: The layer's name.
    """

    def __init__(
        self,
        *,
        embedder: Embedder | Callable[[], Embedder] | None = None,
        namespace: Namespace | str | None = None,
        token_budget: int = 300,
        recency_window_days: float = 7,
        max_goals: int = 10,
        max_pinned_reflections: int = 10,
        deduplication_threshold: float = 0.85,
        retrieval_threshold: float = 0.35,
        similarity_floor: float = DEFAULT_SIMILARITY_FLOOR,
        ttl_defaults: MindTtlDefaults | dict[str, str | None] | None = None,
        score_weights: ScoreWeights | None = None,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        purge_expired_after: str | None = "30d",
        on_progress: ProgressCallback | None = None,
        budget: tuple[int, int] | Budget = (0, 1500),
        slot: int = 10,
        name: str = "agent-mind",
    ) -> None:
        _check_int(token_budget, "token_budget", minimum=0)
        _check_number(recency_window_days, "recency_window_days", low=0)
        _check_int(max_goals, "max_goals", minimum=1)
        _check_int(max_pinned_reflections, "max_pinned_reflections", minimum=1)
        _check_int(max_entries, "max_entries", minimum=1)
        _check_number(deduplication_threshold, "deduplication_threshold", low=0, high=1)
        _check_number(retrieval_threshold, "retrieval_threshold", low=0, high=1)
        _check_number(similarity_floor, "similarity_floor", low=0, high=1)
        if isinstance(ttl_defaults, dict):
            unknown = set(ttl_defaults) - {"belief", "reflection"}
            if unknown:
                raise InvalidInputError(f"ttl_defaults has unknown keys: {sorted(unknown)}")
            ttl_defaults = MindTtlDefaults(**ttl_defaults)
        self.ttl_defaults = ttl_defaults if ttl_defaults is not None else MindTtlDefaults()
        self.belief_ttl_ms = (
            None
            if self.ttl_defaults.belief is None
            else parse_duration(self.ttl_defaults.belief, what="ttl_defaults.belief")
        )
        self.reflection_ttl_ms = (
            None
            if self.ttl_defaults.reflection is None
            else parse_duration(self.ttl_defaults.reflection, what="ttl_defaults.reflection")
        )
        self.score_weights = score_weights if score_weights is not None else ScoreWeights()
        for label, weight in vars(self.score_weights).items():
            _check_number(weight, f"score_weights.{label}", low=0)
        self.namespace = _parse_namespace(namespace) if namespace is not None else None
        self.token_budget = token_budget
        self.recency_window_days = recency_window_days
        self.max_goals = min(max_goals, MAX_GOALS_CEILING)
        self.max_pinned_reflections = min(max_pinned_reflections, MAX_PINNED_CEILING)
        self.max_entries = max_entries
        self.purge_expired_after_ms = (
            None
            if purge_expired_after is None
            else parse_duration(purge_expired_after, what="purge_expired_after")
        )
        self.deduplication_threshold = float(deduplication_threshold)
        self.retrieval_threshold = float(retrieval_threshold)
        self.similarity_floor = float(similarity_floor)
        self.on_progress = on_progress
        self.budget = budget if isinstance(budget, Budget) else Budget(*budget)
        self.slot = slot
        self.name = name
        self._embedder_spec = embedder
        self._embedder: Embedder | None = None
        self._indexes: dict[Namespace, _IndexCache] = {}
        # Each namespace's committed entries, brought up to date by each run (see load).
        self._committed: dict[Namespace, _Committed] = {}
        # Goals' unit vectors by (embedder model, goal text): goals have no stored vector.
        self._goal_vectors: dict[tuple[str, str], npt.NDArray[np.float64]] = {}
        # Header lines rarely change between runs; they and their token counts are kept.
        self._line_tokens: dict[Namespace, dict[str, dict[str, tuple[MindEntry, str, int]]]] = {}
        self._line_counter: Any = None

    @property
    def embedder(self) -> Embedder:
        """The embedder, created on first use."""
        if self._embedder is not None:
            return self._embedder
        spec: Any = self._embedder_spec
        made: Any
        if spec is None:
            made = HashingEmbedder()
        elif _is_embedder(spec):
            made = spec
        elif callable(spec):
            made = spec()
            if not _is_embedder(made):
                raise InvalidInputError(f"the embedder factory returned {made!r}")
        else:
            raise InvalidInputError(f"embedder must be an Embedder or a factory, got {spec!r}")
        embedder: Embedder = made
        self._embedder = embedder
        return embedder

    def namespace_for(self, agent: str | None) -> Namespace:
        if self.namespace is not None:
            return self.namespace
        if not agent:
            raise InvalidInputError(
                "AgentMind stores under ('mind', <agent>): use stack.run(agent=...) or give "
                "AgentMind(namespace=...)"
            )
        return ("mind", agent)

    # Layer protocol ---------------------------------------------------------------------------

    def init(self, ctx: RunContext) -> AgentMindHandle:
        return self.open(ctx.store, agent=ctx.agent, tokens=ctx.tokens)

    def recall(self, handle: AgentMindHandle, budget: int) -> list[Message]:
        header = handle.header(budget)
        return [{"content": header}] if header else []

    def observe(self, handle: AgentMindHandle, message: Message) -> None:
        """The mind is written through its tools only."""

    def tools(self, handle: AgentMindHandle) -> list[Tool]:
        return mind_tools(handle)

    def on_spawn(self, handle: AgentMindHandle, child: RunContext) -> AgentMindHandle:
        return self.init(child)

    def close(self, handle: AgentMindHandle, error: BaseException | None) -> None:
        handle.flush(error=error is not None)

    # Standalone use ---------------------------------------------------------------------------

    def open(
        self, store: Store, *, agent: str | None = None, tokens: Any = None
    ) -> AgentMindHandle:
        """Loads the committed store and returns a handle with an empty draft; call
        ``handle.flush(error=...)`` when done (or use :meth:`session`)."""
        handle = AgentMindHandle(self, store, self.namespace_for(agent), tokens)
        handle.load()
        return handle

    @contextmanager
    def session(
        self, store: Store, *, agent: str | None = None, tokens: Any = None
    ) -> Iterator[AgentMindHandle]:
        """A run without a stack: flushes cleanly on exit, or as an error flush on exception."""
        handle = self.open(store, agent=agent, tokens=tokens)
        try:
            yield handle
        except BaseException:
            handle.flush(error=True)
            raise
        handle.flush(error=False)


@dataclass(eq=False)
class _Committed:
    """A namespace's committed entries in ``store`` as of ``mark``, kept by the layer between
    runs and shared by the handles reading them: never changed once handed out (except ``mark``
    moving on past writes elsewhere); a change makes a new one."""

    store: Store | None
    mark: ChangeMark | None
    goals: dict[str, MindGoal] = field(default_factory=dict)
    beliefs: dict[str, MindBelief] = field(default_factory=dict)
    reflections: dict[str, MindReflection] = field(default_factory=dict)
    # id -> (embedding model, dimension, row in ``rows[dimension]``; -1: no vector stored)
    vectors: dict[str, tuple[Any, int, int]] = field(default_factory=dict)
    # The stored vectors, decoded once, by dimension: shared (append-only) by the copies
    # ``changed`` makes, so a change never copies a vector.
    rows: dict[int, VectorRows] = field(default_factory=dict)
    # Keys stored with a store TTL -> when it runs out: the store does not report that.
    expiring: dict[str, float] = field(default_factory=dict)
    # Built from these entries by one run, reused by the next: (budget, counter id) ->
    # (header, built at, valid until, counter), and (kinds, archived) -> (ranker, built at,
    # valid until).
    headers: dict[tuple[int | None, int], tuple[str, int, float, Any]] = field(default_factory=dict)
    rankers: dict[tuple[tuple[str, ...], bool], tuple[CompositeRanker, int, int]] = field(
        default_factory=dict
    )

    def changed(self, mark: ChangeMark, items: list[Item], removed: list[str]) -> _Committed:
        """A new copy with ``items`` written and ``removed`` keys gone."""
        fresh = _Committed(
            self.store,
            mark,
            dict(self.goals),
            dict(self.beliefs),
            dict(self.reflections),
            dict(self.vectors),
            dict(self.rows),
            dict(self.expiring),
        )
        fresh.apply(items, removed)
        fresh.compact()
        return fresh

    def apply(self, items: list[Item], removed: list[str]) -> None:
        self.remove([*removed, *(item.key for item in items)])
        for item in items:
            self.add(item)
        self.seal()

    def remove(self, keys: list[str]) -> None:
        by_kind: dict[str, dict[str, Any]] = {
            "goal": self.goals,
            "belief": self.beliefs,
            "reflection": self.reflections,
        }
        for key in keys:
            kind, _, id_ = key.partition("/")
            if kind in by_kind and by_kind[kind].pop(id_, None) is not None and kind != "goal":
                self.vectors.pop(id_, None)
            self.expiring.pop(key, None)

    def add(self, item: Item) -> None:
        """Takes in one item not held yet; its vector is decoded into ``rows`` (call
        :meth:`seal` once the items are in)."""
        if item.expires_at is not None:
            self.expiring[item.key] = item.expires_at
        try:
            entry = entry_from_payload(item.value)
        except InvalidInputError as exc:
            logger.warning("skipping malformed mind entry %r: %s", item.key, exc)
            return
        if item.key != _key(entry):
            logger.warning("skipping mind entry %r stored under a foreign key", item.key)
            return
        if entry.type == "belief":
            self.beliefs[entry.id] = entry
        elif entry.type == "reflection":
            self.reflections[entry.id] = entry
        else:
            self.goals[entry.id] = entry
            return
        value = item.value
        raw = decode_raw(value.get("embedding"))
        if raw is None:
            self.vectors[entry.id] = (value.get("embeddingModel"), 0, -1)
            return
        dim = len(raw) // 4
        rows = self.rows.get(dim)
        if rows is None:
            rows = self.rows[dim] = VectorRows(dim)
        self.vectors[entry.id] = (value.get("embeddingModel"), dim, rows.append_raw(raw))

    def seal(self) -> None:
        for rows in self.rows.values():
            rows.seal()

    def compact(self) -> None:
        """Copies the rows still in use out of a store mostly made of replaced ones (the
        shared one stays with the older copies that use it)."""
        for dim, rows in list(self.rows.items()):
            used = {i: row for i, (_m, d, row) in self.vectors.items() if d == dim and row >= 0}
            if rows.size <= 2 * len(used) + BLOCK_ROWS:
                continue
            fresh, moved = rows.compacted(used)
            self.rows[dim] = fresh
            for i, row in moved.items():
                model = self.vectors[i][0]
                self.vectors[i] = (model, dim, row)


@dataclass
class _IndexCache:
    """Which rows of the committed vectors serve one namespace's beliefs and reflections under
    the current embedder, kept by the layer across runs. No vector is copied here: recall's
    ranker reads the rows, and the belief dedup check searches that ranker (see
    :class:`_KindIndex`)."""

    model: str
    dim: int
    vectors: VectorRows
    rows: dict[str, int] = field(default_factory=dict)  # id -> row in ``vectors``
    source: object = None  # the _Committed entries last synced in: the same again needs nothing


class _KindIndex:
    """One kind's indexed entries for the dedup check, as a run sees them: exact cosine
    similarity against the entries live when recall's ranker was built.

    It holds no vectors of its own: candidates come from the run's live ranker (a search by
    similarity alone, see :meth:`CompositeRanker.candidates`) and are re-scored from the rows.
    """

    def __init__(self, handle: AgentMindHandle, cache: _IndexCache, kind: str) -> None:
        self._handle = handle
        self._cache = cache
        self._entries = handle.beliefs if kind == "belief" else handle.reflections
        self._size = sum(1 for i in self._entries if i in cache.rows)

    def __len__(self) -> int:
        return self._size

    def top_k(self, vector: npt.ArrayLike, k: int, *, threshold: float) -> list[tuple[str, float]]:
        """The ``k`` live entries most similar to ``vector``, at least ``threshold``."""
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        norm = float(np.sqrt(query.astype(np.float64) @ query.astype(np.float64)))
        if not norm or not math.isfinite(norm):
            return []
        unit = query / np.float32(norm)
        ranker = self._handle._ranker(("belief", "reflection"), False)
        ids = [i for i in ranker.candidates(unit, threshold) if i in self._entries]
        if not ids:
            return []
        rows = self._cache.rows
        sims = self._cache.vectors.gather([rows[i] for i in ids]) @ unit
        found = [
            (i, min(1.0, max(-1.0, float(sim)))) for i, sim in zip(ids, sims) if sim >= threshold
        ]
        found.sort(key=lambda hit: (-hit[1], hit[0]))
        return found[:k]

    def find_duplicate(self, vector: npt.ArrayLike, threshold: float) -> tuple[str, float] | None:
        best = self.top_k(vector, 1, threshold=threshold)
        return best[0] if best else None


@dataclass
class _Index:
    """A run's view of its namespace's vector index."""

    cache: _IndexCache
    beliefs: _KindIndex
    reflections: _KindIndex

    @property
    def dim(self) -> int:
        return self.cache.dim

    @property
    def rows(self) -> dict[str, int]:
        return self.cache.rows

    @property
    def vectors(self) -> VectorRows:
        return self.cache.vectors


@dataclass
class _GoalPatch:
    description: str | None = None
    priority: GoalPriority | None = None
    progress: list[str] = field(default_factory=list)

    def apply(self, goal: MindGoal, now: int) -> MindGoal:
        if self.description is not None:
            goal.description = self.description
        if self.priority is not None:
            goal.priority = self.priority
        goal.progress = [*goal.progress, *self.progress]
        goal.updated_at = now
        return goal


@dataclass
class _Draft:
    """What this run wrote: flushed by :meth:`AgentMindHandle.flush`."""

    beliefs: dict[str, tuple[MindBelief, npt.NDArray[np.float32], bool]] = field(
        default_factory=dict
    )  # id -> (belief, vector, stored before)
    belief_vectors: VectorSet | None = None
    reflections: dict[str, tuple[MindReflection, npt.NDArray[np.float32]]] = field(
        default_factory=dict
    )
    goals: dict[str, MindGoal] = field(default_factory=dict)
    goal_patches: dict[str, _GoalPatch] = field(default_factory=dict)
    unpins: set[str] = field(default_factory=set)
    pins: int = 0  # what the draft changes the number of live pinned reflections by
    downgrades: set[str] = field(default_factory=set)  # beliefs written with allowDowngrade

    def empty(self) -> bool:
        return not (self.beliefs or self.reflections or self.goals or self.goal_patches) and not (
            self.unpins
        )


class AgentMindHandle:
    """One run's view of the mind (``run.layer("agent-mind")``): the committed entries loaded at
    the start, and the draft of this run's writes."""

    def __init__(
        self, layer: AgentMind, store: Store, namespace: Namespace, tokens: Any = None
    ) -> None:
        self.layer = layer
        self.store = store
        self.namespace = namespace
        self._tokens = tokens
        self.started_at = now_ms()
        self.goals: dict[str, MindGoal] = {}
        self.beliefs: dict[str, MindBelief] = {}
        self.reflections: dict[str, MindReflection] = {}
        # id -> (model, dimension, row in the committed rows); see _Committed.vectors
        self._stored_vectors: dict[str, tuple[Any, int, int]] = {}
        # The four dicts above are the layer's shared copy (see load); the handle replaces
        # them rather than changing them.
        self._committed = _Committed(None, None)
        self.draft = _Draft()
        self._header: str | None = None
        self._header_budget: int | None = None
        self._index: _Index | None = None
        self._committed_pins: int | None = None
        self._purged: set[str] = set()  # ids this run deleted (purge_expired)
        self._rankers: dict[tuple[tuple[str, ...], bool], CompositeRanker] = {}
        self._mark: ChangeMark | None = None  # where the store's history stood at load
        # Beliefs this run created that a flush folded into an equal one another run had
        # committed meanwhile: the id mind_believe returned -> the id the belief is stored under.
        self.folded: dict[str, str] = {}

    # Loading ----------------------------------------------------------------------------------

    def load(self) -> None:
        """Brings the layer's copy of the committed entries up to date, reading only what was
        written or deleted since the last run looked, and takes it as this run's view. A
        malformed entry is skipped and logged, never deleted."""
        layer = self.layer
        held = layer._committed.get(self.namespace)
        if held is not None and held.store is not self.store:
            held = None  # a mark only means something to the store that made it
        if held is None:
            # Streamed: each entry's vector is decoded into the rows as the store reads it.
            committed = _Committed(self.store, None)
            changes = self.store.changes_each(self.namespace, None, committed.add)
            committed.mark = changes.mark
            committed.seal()
        else:
            changes = self.store.changes(self.namespace, held.mark)
        # The answer's mark is no later than what it read: whatever is written meanwhile counts
        # as a change at flush.
        self._mark = changes.mark
        if held is None:
            pass
        elif changes.complete:
            committed = _Committed(self.store, changes.mark)
            committed.apply(changes.items, changes.removed)
        elif changes.items or changes.removed:
            committed = held.changed(changes.mark, changes.items, changes.removed)
        else:
            committed = held
            held.mark = changes.mark
        # Rarely any: mind entries carry their expiry in the payload, not as a store TTL.
        now = time.time()
        expired = [key for key, at in committed.expiring.items() if at <= now]
        if expired:
            committed = committed.changed(changes.mark, [], expired)
        layer._committed[self.namespace] = committed
        self._committed = committed
        self.goals = committed.goals
        self.beliefs = committed.beliefs
        self.reflections = committed.reflections
        self._stored_vectors = committed.vectors

    # Header -----------------------------------------------------------------------------------

    def count_tokens(self, text: str) -> int:
        if self._tokens is None:
            self._tokens = _default_counter()
        count: int = self._tokens.count(text)
        return count

    def header(self, budget: int | None = None) -> str:
        """The ``--- AGENT MIND ---`` block built from the entries committed when the run
        started; empty when there is nothing to show. ``budget`` is the stack's token share for
        the whole block."""
        if self._header is None or self._header_budget != budget:
            self._header = self._shared_header(budget)
            self._header_budget = budget
        return self._header

    def _shared_header(self, budget: int | None) -> str:
        """The header, reused from an earlier run over the same committed entries while no
        entry it shows (or could show) has expired or left the recency window since."""
        now = self.started_at
        if self._tokens is None:
            self._tokens = _default_counter()
        key = (budget, id(self._tokens))
        cached = self._committed.headers.get(key)
        if cached is not None and cached[1] <= now < cached[2] and cached[3] is self._tokens:
            return cached[0]
        header = self._build_header(budget)
        self._committed.headers[key] = (header, now, self._header_valid_until(now), self._tokens)
        return header

    def _header_valid_until(self, now: int) -> float:
        """When the header built at ``now`` may first differ: the next expiry among the entries
        it draws from, or a recent reflection leaving the window."""
        window = self.layer.recency_window_days * DAY_MS
        until = math.inf
        for b in self.beliefs.values():
            if b.confidence == "high" and not b.error and (b.expires_at or 0) > now:
                until = min(until, b.expires_at or 0)
        for r in self.reflections.values():
            if r.expires_at is not None and r.expires_at > now:
                until = min(until, r.expires_at)
            if not r.pinned and r.created_at >= now - window:
                until = min(until, r.created_at + window)
        return until

    def _build_header(self, budget: int | None) -> str:
        now = self.started_at
        goals = sorted(
            (g for g in self.goals.values() if g.status == "active"),
            key=lambda g: (g.created_at, g.sequence, g.id),
        )
        rules = sorted(
            (r for r in self.reflections.values() if r.pinned and not r.expired(now)),
            key=lambda r: (r.created_at, r.id),
        )
        limit = self.layer.budget.max if budget is None else min(budget, self.layer.budget.max)
        goal_lines, rule_lines = self._standing_lines(goals, rules, limit)
        beliefs = [
            b
            for b in self.beliefs.values()
            if b.confidence == "high"
            and not b.error
            and (b.expires_at is None or b.expires_at > now)
        ]
        beliefs.sort(key=_BY_UPDATED, reverse=True)
        window_start = now - self.layer.recency_window_days * DAY_MS
        recent = [
            r
            for r in self.reflections.values()
            if not r.pinned
            and not r.error
            and r.created_at >= window_start
            and (r.expires_at is None or r.expires_at > now)
        ]
        recent.sort(key=_BY_CREATED, reverse=True)
        if not (goal_lines or rule_lines or beliefs or recent):
            return ""
        fixed = self.count_tokens(_frame(goal_lines, rule_lines))
        allowance = max(0, min(self.layer.token_budget, limit - fixed))
        belief_lines, allowance = self._fit(beliefs, "belief", allowance)
        reflection_lines, _ = self._fit(recent, "reflection", allowance)
        lines = ["--- AGENT MIND ---"]
        for title, section in (
            ("## Goals", goal_lines),
            ("## Standing Rules (Pinned)", rule_lines),
            ("## Beliefs", belief_lines),
            ("## Recent Reflections", reflection_lines),
        ):
            if section:
                lines += [title, *section]
        if len(lines) == 1:
            return ""
        lines.append("---")
        return "\n".join(lines)

    def _standing_lines(
        self, goals: list[MindGoal], rules: list[MindReflection], limit: int
    ) -> tuple[list[str], list[str]]:
        """The goal and standing-rule lines, always shown but each cut to ``HEADER_LINE_CHARS``
        (shorter, then fewer, until the header's frame fits ``limit`` tokens)."""
        chars = HEADER_LINE_CHARS
        while True:
            goal_lines = [_cut_line(_goal_line(g), chars) for g in goals]
            rule_lines = [_cut_line(f"- {one_line(r.content)}", chars) for r in rules]
            if self.count_tokens(_frame(goal_lines, rule_lines)) <= limit:
                return goal_lines, rule_lines
            if chars > MIN_HEADER_LINE_CHARS:
                chars = max(MIN_HEADER_LINE_CHARS, chars // 2)
                continue
            # Even short lines do not fit: the newest go first, rules before goals.
            if rules:
                rules = rules[:-1]
            elif goals:
                goals = goals[:-1]
            else:
                return [], []

    def _line_cache(self, kind: str) -> dict[str, tuple[MindEntry, str, int]]:
        """Rendered header lines and their token counts by entry id, kept by the layer across
        runs for one token counter. Each is stamped with the entry object it was made from:
        the layer's committed entries are never changed in place, so a new object (however its
        ``updatedAt`` reads) means a new line."""
        layer = self.layer
        if self._tokens is None:
            self._tokens = _default_counter()
        if layer._line_counter is not self._tokens:
            layer._line_tokens, layer._line_counter = {}, self._tokens
        per_kind = layer._line_tokens.setdefault(self.namespace, {})
        cache = per_kind.get(kind)
        if cache is None or len(cache) > LINE_TOKEN_CACHE:
            cache = per_kind[kind] = {}
        return cache

    def _fit(
        self, entries: list[MindBelief] | list[MindReflection], kind: str, allowance: int
    ) -> tuple[list[str], int]:
        """The entries' lines that fit, in order; a line too big is skipped and smaller ones are
        still tried."""
        cache = self._line_cache(kind)
        kept = []
        for entry in entries:
            if allowance <= 0:
                break
            hit = cache.get(entry.id)
            if hit is None or hit[0] is not entry:
                line = (
                    f"- {one_line(entry.content)} ({entry.confidence} confidence)"
                    if isinstance(entry, MindBelief)
                    else f"- [{_iso_day(entry.created_at)}] {one_line(entry.content)}"
                )
                hit = cache[entry.id] = (entry, line, self.count_tokens(line))
            if hit[2] <= allowance:
                kept.append(hit[1])
                allowance -= hit[2]
        return kept, allowance

    # Vectors ----------------------------------------------------------------------------------

    def embed_one(self, text: str) -> npt.NDArray[np.float32]:
        vector: npt.NDArray[np.float32] = np.asarray(
            self.layer.embedder.embed([text]), dtype=np.float32
        )[0]
        # One dot product (in float64, which cannot overflow here) says it all: zero for a
        # zero vector, inf or NaN for a non-finite one, and past MAX_EMBEDDING_NORM2 for one
        # whose float32 norm would overflow in the index. np.any and np.isfinite took two
        # more numpy calls on every recall and belief.
        wide = vector.astype(np.float64)
        if not 0.0 < float(wide @ wide) < MAX_EMBEDDING_NORM2:
            raise ToolError(
                "this text has no words the embedder can place; write it in words",
                code="invalid_arguments",
            )
        return vector

    def index(self) -> _Index:
        """The committed entries' vector index, brought up to date on first use."""
        if self._index is None:
            cache = self._sync_index()
            self._index = _Index(
                cache, _KindIndex(self, cache, "belief"), _KindIndex(self, cache, "reflection")
            )
        return self._index

    def _sync_index(self) -> _IndexCache:
        layer = self.layer
        embedder = layer.embedder
        model, dim = embedder.model, embedder.dim
        cache = layer._indexes.get(self.namespace)
        fresh = cache is not None and cache.source is self._committed
        if fresh and cache is not None and (cache.model, cache.dim) == (model, dim):
            return cache
        committed = self._committed
        vectors = committed.rows.get(dim)
        if vectors is None:
            vectors = committed.rows[dim] = VectorRows(dim)
        cache = _IndexCache(model, dim, vectors)
        stored = self._stored_vectors
        stale: list[str] = []
        for entries in (self.beliefs, self.reflections):
            for i in entries:
                stored_model, stored_dim, row = stored.get(i, (None, 0, -1))
                if stored_model == model and stored_dim == dim and vectors.usable(row):
                    cache.rows[i] = row
                else:
                    stale.append(i)
        if stale:
            cache.rows.update(self._reembed(stale, {**self.beliefs, **self.reflections}, vectors))
        cache.source = committed
        layer._indexes[self.namespace] = cache
        return cache

    def _reembed(
        self,
        ids: list[str],
        entries: dict[str, MindBelief | MindReflection],
        vectors: VectorRows,
    ) -> dict[str, int]:
        """Embeds entries stored without a vector of the current model into ``vectors``, shows
        progress, and writes the new vectors back in one transaction. Returns their rows."""
        total = len(ids)
        model = self.layer.embedder.model
        logger.info("re-embedding %d mind entries with %s", total, model)
        out: dict[str, npt.NDArray[np.float32]] = {}
        for start in range(0, total, REEMBED_BATCH):
            batch = ids[start : start + REEMBED_BATCH]
            matrix = np.asarray(
                self.layer.embedder.embed([entries[i].content for i in batch]), dtype=np.float32
            )
            for i, vector in zip(batch, matrix):
                if np.any(vector) and np.isfinite(vector).all():
                    out[i] = vector
            done = min(start + REEMBED_BATCH, total)
            logger.info("re-embedded %d/%d mind entries", done, total)
            if self.layer.on_progress is not None:
                self.layer.on_progress(done, total)

        def rewrite(entry: MindBelief | MindReflection, vector: npt.NDArray[np.float32]) -> Any:
            def fn(current: Any) -> Any:
                # Written meanwhile by another run: its own vector is the one to keep.
                if not isinstance(current, dict) or current.get("content") != entry.content:
                    return current if current is not None else _stored(entry, vector, model)
                return {**current, "embedding": encode_vector(vector), "embeddingModel": model}

            return fn

        if not out:
            return {}
        self.store.update_many(
            self.namespace, {_key(entries[i]): rewrite(entries[i], v) for i, v in out.items()}
        )
        rows = dict(zip(out, vectors.append(np.stack(list(out.values())))))
        vectors.seal()
        self._stored_vectors = {
            **self._stored_vectors,
            **{i: (model, vectors.dim, row) for i, row in rows.items()},
        }
        return {i: row for i, row in rows.items() if vectors.usable(row)}

    # Reading: mind_recall ---------------------------------------------------------------------

    def recall(
        self,
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
        """Searches the committed store (this run's writes are not visible until the next run).

        Goals, beliefs and reflections are ranked together by one score (similarity, recency,
        and confidence or a goal's priority); a hit is at least ``similarity_floor`` similar to
        the query and scores at least ``threshold``. ``pinned=True`` without a query lists every
        pinned reflection (the standing rules), oldest first.

        Raises:
            ToolError: An argument is out of range.
        """
        if type not in ("belief", "reflection", "goal", "all"):
            raise ToolError(f"unknown type {type!r}", code="invalid_arguments")
        if status not in GOAL_STATUSES:
            raise ToolError(f"unknown status {status!r}", code="invalid_arguments")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ToolError("limit must be a positive integer", code="invalid_arguments")
        limit = min(limit, MAX_RECALL_LIMIT)
        wanted = set(_check_tags(tags or []))
        if query is None or (isinstance(query, str) and not query.strip()):
            if pinned is True and type in ("reflection", "all"):
                return self._pinned(wanted, include_expired)
            raise ToolError(
                "query must be a non-empty string (only pinned=true lists without one)",
                code="invalid_arguments",
            )
        if not isinstance(query, str):
            raise ToolError("query must be a string", code="invalid_arguments")
        if threshold is None:
            threshold = self.layer.retrieval_threshold
        vector = self.embed_one(query)
        scored: list[MindRecallResult] = []
        if type in ("goal", "all") and not pinned:
            scored += self._recall_goals(vector, status, wanted, threshold, limit)
        if type != "goal":
            scored += self.search(
                vector,
                kinds=("belief", "reflection") if type == "all" else (type,),
                tags=wanted,
                pinned=pinned,
                include_expired=include_expired,
                threshold=threshold,
                limit=limit,
            )
        scored.sort(key=lambda r: (-(r.score or 0.0), r.created_at, r.id))
        return scored[:limit]

    def _pinned(self, tags: set[str], include_expired: bool) -> list[MindRecallResult]:
        now = self.started_at
        rules = [
            r
            for r in self.reflections.values()
            if r.pinned and tags.issubset(r.tags) and (include_expired or not r.expired(now))
        ]
        rules.sort(key=lambda r: (r.created_at, r.id))
        return [MindRecallResult.of(r) for r in rules]

    def _recall_goals(
        self,
        vector: npt.NDArray[np.float32],
        status: str,
        tags: set[str],
        threshold: float,
        limit: int,
    ) -> list[MindRecallResult]:
        """Goals scored like beliefs: similarity of their text to the query (embedded by the
        layer's embedder), recency, and priority in place of confidence."""
        goals = [g for g in self.goals.values() if g.status == status and tags.issubset(g.tags)]
        if not goals:
            return []
        query = np.asarray(vector, dtype=np.float64)
        query = query / np.linalg.norm(query)
        units = self._goal_units(goals)
        w, now, floor = self.layer.score_weights, self.started_at, self.layer.similarity_floor
        scored = []
        for goal, unit in zip(goals, units):
            similarity = float(unit @ query)
            score = (
                w.similarity * similarity
                + w.recency * _recency(goal.updated_at, now)
                + w.confidence * PRIORITY_SCORES[goal.priority]
            )
            if similarity >= floor and score >= threshold:
                scored.append((score, goal))
        scored.sort(key=lambda t: -t[0])
        return [
            MindRecallResult.of(goal, score=max(0.0, min(1.0, score)))
            for score, goal in scored[:limit]
        ]

    def _goal_units(self, goals: list[MindGoal]) -> list[npt.NDArray[np.float64]]:
        """The goals' unit vectors, kept by the layer by their text and embedder model."""
        kept = self.layer._goal_vectors
        model = self.layer.embedder.model
        texts = [" ".join([g.description, *g.progress, *g.tags]) for g in goals]
        missing = sorted({t for t in texts if (model, t) not in kept})
        if missing:
            if len(kept) + len(missing) > GOAL_VECTORS_KEPT:
                kept.clear()
            matrix = np.asarray(self.layer.embedder.embed(missing), dtype=np.float64)
            for text, row in zip(missing, matrix):
                norm = float(np.linalg.norm(row))
                kept[(model, text)] = row / norm if norm and math.isfinite(norm) else row * 0
        return [kept[(model, t)] for t in texts]

    def _ranker(self, kinds: tuple[str, ...], expired: bool) -> CompositeRanker:
        """This run's ranker over the live (or the archived) entries of the given kinds."""
        key = (kinds, expired)
        ranker = self._rankers.get(key)
        if ranker is not None:
            return ranker
        now = self.started_at
        shared = self._committed.rankers.get(key)
        if shared is not None and shared[1] <= now < shared[2]:
            self._rankers[key] = shared[0]
            return shared[0]
        ranker = self._rankers[key] = self._build_ranker(kinds, expired)
        # Valid until the first entry of these kinds expires (it would change sides).
        expiries = [
            e.expires_at
            for kind in kinds
            for e in (self.beliefs if kind == "belief" else self.reflections).values()
            if e.expires_at is not None and e.expires_at > now
        ]
        until = min([now + RANKING_REUSE_MS, *expiries])
        self._committed.rankers[key] = (ranker, now, until)
        return ranker

    def _build_ranker(self, kinds: tuple[str, ...], expired: bool) -> CompositeRanker:
        """A ranker over the live (or the archived) entries of the given kinds, at the run's
        start time."""
        cache = self.index()
        now = self.started_at
        chosen: list[MindBelief | MindReflection] = [
            e
            for kind in kinds
            for e in (self.beliefs if kind == "belief" else self.reflections).values()
            if e.id in cache.rows and e.expired(now) == expired
        ]
        w = self.layer.score_weights
        updated = np.array([e.updated_at for e in chosen], dtype=np.float64)
        recency = np.exp(-np.maximum(0.0, (now - updated) / DAY_MS) / RECENCY_DECAY_DAYS)
        confidence = np.array(
            [
                CONFIDENCE_SCORES[
                    "low" if e.error else (e.confidence if isinstance(e, MindBelief) else "medium")
                ]
                for e in chosen
            ],
            dtype=np.float64,
        )
        ranker = CompositeRanker.from_rows(
            [e.id for e in chosen],
            cache.vectors,
            [cache.rows[e.id] for e in chosen],
            w.recency * recency + w.confidence * confidence,
            w.similarity,
        )
        return ranker

    def _bias(self, entry: MindBelief | MindReflection) -> float:
        """The recency and confidence part of ``entry``'s score (see :meth:`_build_ranker`)."""
        w = self.layer.score_weights
        level = "low" if entry.error else getattr(entry, "confidence", "medium")
        return (
            w.recency * _recency(entry.updated_at, self.started_at)
            + w.confidence * (CONFIDENCE_SCORES[level])
        )

    def search(
        self,
        vector: npt.NDArray[np.float32],
        *,
        kinds: tuple[str, ...] = ("belief", "reflection"),
        tags: set[str] | frozenset[str] = frozenset(),
        pinned: bool | None = None,
        include_expired: bool = False,
        threshold: float = 0.35,
        limit: int = 5,
    ) -> list[MindRecallResult]:
        """Beliefs and reflections by composite score, from an already embedded query.

        Each kind's entries are ranked exactly by composite score in one pass
        (:class:`~memstrata.layers.mind_ranking.CompositeRanker`); filters that the ranking does
        not encode (tags, pinned) are applied to the best hits, fetching deeper only while too
        few pass.
        """
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
            raise ToolError("threshold must be a number", code="invalid_arguments")
        if not 0 <= threshold <= 1:
            raise ToolError("threshold must be between 0 and 1", code="invalid_arguments")
        query = np.asarray(vector, dtype=np.float32)
        # The ranker normalises the query itself; this only refuses one it cannot.
        norm2 = float(query @ query)
        if not norm2 or not math.isfinite(norm2):
            raise ToolError("the query has no direction to search by", code="invalid_arguments")
        w = self.layer.score_weights
        floor = self.layer.similarity_floor if w.similarity > 0 else 0.0
        filtered = bool(tags) or pinned is not None or floor > 0
        if pinned:
            kinds = tuple(kind for kind in kinds if kind != "belief")
        hits: list[tuple[float, str, MindBelief | MindReflection]] = []
        # Little Python runs after the scan, and it runs cold: the scan has just streamed
        # megabytes through the caches. Each hit's entry is looked up once.
        beliefs, reflections = self.beliefs, self.reflections
        for expired in [False, True] if include_expired and kinds else [False]:
            if not kinds:
                break
            ranker = self._ranker(kinds, expired)
            # A hit at the floor scores at least w * floor + its bias: the scan skips the rest.
            cut = max(threshold, w.similarity * floor + ranker.min_bias) if floor else threshold
            k = 4 * limit if filtered else limit
            while ranker.size:
                found = ranker.top(query, k, threshold=cut)
                passing = []
                for id_, score in found:
                    entry = beliefs.get(id_) or reflections[id_]
                    if filtered:
                        if floor and score - self._bias(entry) < w.similarity * floor - 1e-6:
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
                if len(passing) >= limit or len(found) < k or k >= ranker.size:
                    hits += passing[:limit]
                    break
                k *= 4
        hits.sort(key=_best_first)
        return [
            MindRecallResult.of(entry, score=max(0.0, min(1.0, score)))
            for score, _, entry in hits[:limit]
        ]

    # Writing: the draft -----------------------------------------------------------------------

    def believe(
        self,
        content: str,
        *,
        confidence: ConfidenceLevel = "medium",
        tags: list[str] | None = None,
        expires_in: str | None = None,
        allow_downgrade: bool = False,
    ) -> dict[str, Any]:
        """Records a belief, or updates a similar one (draft first, then the committed store).

        Returns:
            ``{"status": "ok", "action": "created" | "updated_store" | "updated_draft", "id"}``.
            A ``created`` belief that turns out, at flush, to duplicate one another run
            committed meanwhile is folded into that one, and ``id`` is never stored:
            :attr:`folded` maps it to the id the belief is stored under.
        """
        content = _check_content(content, "content")
        if confidence not in CONFIDENCE_LEVELS:
            raise ToolError(
                f"confidence must be one of {', '.join(CONFIDENCE_LEVELS)}",
                code="invalid_arguments",
            )
        tag_list = _check_tags(tags or [])
        ttl = self._ttl(expires_in, self.layer.belief_ttl_ms, "expiresIn")
        vector = self.embed_one(content)
        return self.believe_vector(content, vector, confidence, tag_list, ttl, allow_downgrade)

    def find_duplicate_belief(
        self, vector: npt.NDArray[np.float32], *, now: int | None = None
    ) -> tuple[str, float, str] | None:
        """The live belief at least ``deduplication_threshold`` similar to ``vector``, in this
        run's draft or the committed store, as ``(id, similarity, action)``; the better of the
        two wins. ``action`` is what an update of it reports (``updated_draft`` or
        ``updated_store``)."""
        now = now_ms() if now is None else now
        threshold = self.layer.deduplication_threshold
        draft = self.draft
        match: tuple[str, float, str] | None = None
        if draft.belief_vectors is not None and len(draft.belief_vectors):
            found = draft.belief_vectors.find_duplicate(vector, threshold)
            if found is not None:
                match = (found[0], found[1], "updated_draft")
        if not self.beliefs:
            return match
        index = self.index().beliefs
        best = index.find_duplicate(vector, threshold)
        if best is None:
            return match
        stored = self.beliefs.get(best[0])
        if stored is None or stored.expired(now):
            # The best is archived: look for the best live one among the similar ones.
            candidates = index.top_k(vector, max(16, len(index)), threshold=threshold)
            best = next(
                (
                    (i, sim)
                    for i, sim in candidates
                    if i in self.beliefs and not self.beliefs[i].expired(now)
                ),
                None,
            )
        if best is not None and (match is None or best[1] > match[1]):
            action = "updated_draft" if best[0] in draft.beliefs else "updated_store"
            match = (best[0], best[1], action)
        return match

    def believe_vector(
        self,
        content: str,
        vector: npt.NDArray[np.float32],
        confidence: ConfidenceLevel,
        tags: list[str],
        ttl_ms: int | None,
        allow_downgrade: bool,
    ) -> dict[str, Any]:
        """:meth:`believe` after embedding."""
        now = now_ms()
        match = self.find_duplicate_belief(vector, now=now)
        expires_at = now + ttl_ms if ttl_ms is not None else None
        if match is None:
            self._require_room("belief")
            belief = MindBelief(_new_id("b"), content, confidence, list(tags), expires_at, now, now)
            # allowDowngrade is kept for a new belief too: the flush may fold it into another.
            self._draft_belief(belief, vector, stored_before=False, allow_downgrade=allow_downgrade)
            return {"status": "ok", "action": "created", "id": belief.id}
        id_, _similarity, action = match
        if id_ in self.draft.beliefs:
            base, _old, stored_before = self.draft.beliefs[id_]
        else:
            base, stored_before = _copy_belief(self.beliefs[id_]), True
        base.previous = _previous_after(base, content)
        base.content = content
        base.confidence = _merge_confidence(base.confidence, confidence, allow_downgrade)
        base.tags = _union(base.tags, tags)
        base.expires_at = expires_at
        base.updated_at = now
        self._draft_belief(
            base, vector, stored_before=stored_before, allow_downgrade=allow_downgrade
        )
        return {"status": "ok", "action": action, "id": id_}

    def _draft_belief(
        self,
        belief: MindBelief,
        vector: npt.NDArray[np.float32],
        *,
        stored_before: bool,
        allow_downgrade: bool = False,
    ) -> None:
        draft = self.draft
        draft.beliefs[belief.id] = (belief, vector, stored_before)
        if draft.belief_vectors is None:
            draft.belief_vectors = VectorSet(int(vector.shape[0]))
        draft.belief_vectors.add([belief.id], vector.reshape(1, -1))
        if allow_downgrade:
            draft.downgrades.add(belief.id)

    def reflect(
        self,
        content: str,
        *,
        pin: bool = False,
        tags: list[str] | None = None,
        related_to: str | None = None,
    ) -> dict[str, Any]:
        """Appends a reflection (never deduplicated); ``pin`` makes it a standing rule.

        Returns:
            ``{"status": "ok", "id", "warning"?}``; the warning when pins are within 2 of the cap.
        """
        content = _check_content(content, "content")
        if not isinstance(pin, bool):
            raise ToolError("pin must be a boolean", code="invalid_arguments")
        tag_list = _check_tags(tags or [])
        if related_to is not None:
            related_to = _check_content(related_to, "relatedTo")
        self._require_room("reflection")
        cap = self.layer.max_pinned_reflections
        pinned_now = self.pinned_count()
        if pin and pinned_now >= cap:
            raise ToolError(
                f"there are already {pinned_now} pinned reflections, the cap is {cap}; unpin an "
                "outdated one with mind_unpin_reflection first",
                code="cap_reached",
            )
        vector = self.embed_one(content)
        now = now_ms()
        ttl = self.layer.reflection_ttl_ms
        reflection = MindReflection(
            _new_id("r"),
            content,
            pin,
            tag_list,
            related_to,
            now,
            now,
            expires_at=now + ttl if ttl is not None else None,
        )
        self.draft.reflections[reflection.id] = (reflection, vector)
        self.draft.pins += pin
        result: dict[str, Any] = {"status": "ok", "id": reflection.id}
        if pin and pinned_now + 1 >= cap - PINNED_WARNING_MARGIN:
            result["warning"] = (
                f"{pinned_now + 1} of {cap} pinned reflections are in use; review the standing "
                "rules and unpin outdated ones with mind_unpin_reflection"
            )
        return result

    def pinned_count(self) -> int:
        """Pinned reflections once this run's draft is applied: counted once per run, then
        kept up to date by the draft's pins and unpins."""
        if self._committed_pins is None:
            now = self.started_at
            self._committed_pins = sum(
                1 for r in self.reflections.values() if r.pinned and not r.expired(now)
            )
        return self._committed_pins + self.draft.pins

    def unpin_reflection(self, id: str) -> dict[str, Any]:
        """Unpins a standing rule (kept as a regular reflection); dropped by an error flush."""
        if not isinstance(id, str):
            raise ToolError("id must be a string", code="invalid_arguments")
        if id in self.draft.reflections:
            reflection = self.draft.reflections[id][0]
            if not reflection.pinned:
                raise ToolError(f"reflection {id!r} is not pinned", code="not_pinned")
            reflection.pinned = False
            self.draft.pins -= 1
            return {"status": "ok"}
        stored = self.reflections.get(id)
        if stored is None:
            raise ToolError(
                f"no reflection with id {id!r}; find ids with mind_recall(type='reflection', "
                "pinned=true)",
                code="not_found",
            )
        if not stored.pinned or id in self.draft.unpins:
            raise ToolError(f"reflection {id!r} is not pinned", code="not_pinned")
        self.draft.unpins.add(id)
        if not stored.expired(self.started_at):
            self.draft.pins -= 1
        return {"status": "ok"}

    def active_goal_count(self) -> int:
        committed = sum(1 for g in self.goals.values() if g.status == "active")
        return committed + len(self.draft.goals)

    def entry_count(self) -> int:
        """Goals, beliefs and reflections in the namespace once this run's draft is applied."""
        committed = len(self.goals) + len(self.beliefs) + len(self.reflections) - len(self._purged)
        drafted = sum(
            1 for _b, _v, stored_before in self.draft.beliefs.values() if not stored_before
        )
        return committed + drafted + len(self.draft.reflections) + len(self.draft.goals)

    def purge_expired(self) -> int:
        """Deletes the beliefs and reflections that expired longer than the layer's
        ``purge_expired_after`` ago (each logged); returns how many. Archived entries otherwise
        stay, and count toward ``max_entries``: a full mind purges before it refuses a write."""
        keep = self.layer.purge_expired_after_ms
        if keep is None:
            return 0
        cutoff = now_ms() - keep
        purged = 0
        entries: list[MindBelief | MindReflection] = [*self.beliefs.values()]
        entries += self.reflections.values()
        archived = [e for e in entries if e.expires_at is not None and e.expires_at <= cutoff]
        for entry in archived:
            if entry.id in self._purged or entry.id in self.draft.beliefs:
                continue
            if self.store.delete(self.namespace, _key(entry)):
                purged += 1
                logger.info("purged %s, expired at %d", _key(entry), entry.expires_at)
            self._purged.add(entry.id)
        return purged

    def _require_room(self, kind: str) -> None:
        limit = self.layer.max_entries
        count = self.entry_count()
        if count >= limit and self.purge_expired():
            count = self.entry_count()
        if count >= limit:
            raise LimitExceededError(
                f"this mind already holds {count:,} entries, its limit (max_entries), so a new "
                f"{kind} cannot be added; restate an existing belief to update it instead",
                setting="max_entries",
                size=count + 1,
                limit=limit,
            )

    def set_goal(
        self,
        description: str,
        *,
        priority: GoalPriority = "normal",
        tags: list[str] | None = None,
        due_by: str | None = None,
    ) -> dict[str, Any]:
        """Creates an active goal (buffered); fails when the active goals reach the cap."""
        description = _check_content(description, "description")
        if priority not in GOAL_PRIORITIES:
            raise ToolError(
                f"priority must be one of {', '.join(GOAL_PRIORITIES)}", code="invalid_arguments"
            )
        tag_list = _check_tags(tags or [])
        now = now_ms()
        try:
            due = None if due_by is None else parse_due_by(due_by, now=now)
        except InvalidInputError as exc:
            raise ToolError(str(exc), code="invalid_arguments") from None
        self._require_room("goal")
        cap = self.layer.max_goals
        if self.active_goal_count() >= cap:
            raise ToolError(
                f"there are already {self.active_goal_count()} active goals, the cap is {cap}; "
                "complete one with mind_complete_goal first",
                code="cap_reached",
            )
        goal = MindGoal(
            _new_id("g"),
            description,
            priority,
            "active",
            tag_list,
            due,
            [],
            None,
            now,
            now,
            next_sequence(),
        )
        self.draft.goals[goal.id] = goal
        return {"status": "ok", "id": goal.id}

    def update_goal(
        self,
        id: str,
        *,
        description: str | None = None,
        priority: GoalPriority | None = None,
        progress: str | None = None,
    ) -> dict[str, Any]:
        """Edits an active goal (buffered); ``progress`` appends a note."""
        if description is not None:
            description = _check_content(description, "description")
        if priority is not None and priority not in GOAL_PRIORITIES:
            raise ToolError(
                f"priority must be one of {', '.join(GOAL_PRIORITIES)}", code="invalid_arguments"
            )
        if progress is not None:
            progress = _check_content(progress, "progress")
        patch = _GoalPatch(description, priority, [progress] if progress is not None else [])
        if isinstance(id, str) and id in self.draft.goals:
            patch.apply(self.draft.goals[id], now_ms())
            return {"status": "ok"}
        goal = self._active_goal(id)
        pending = self.draft.goal_patches.setdefault(goal.id, _GoalPatch())
        if description is not None:
            pending.description = description
        if priority is not None:
            pending.priority = priority
        pending.progress += patch.progress
        return {"status": "ok"}

    def complete_goal(self, id: str, *, outcome: str | None = None) -> dict[str, Any]:
        """Completes an active goal and commits it at once (bypassing the draft)."""
        if outcome is not None:
            outcome = _check_content(outcome, "outcome")
        now = now_ms()
        if isinstance(id, str) and id in self.draft.goals:
            goal = self.draft.goals.pop(id)
            goal.status, goal.outcome, goal.updated_at = "completed", outcome, now
            self.store.put(self.namespace, _key(goal), goal.to_payload())
            self.goals = {**self.goals, goal.id: goal}
            return {"status": "ok"}
        goal = self._active_goal(id)
        pending = self.draft.goal_patches.pop(goal.id, None)

        def complete(current: Any) -> Any:
            try:
                stored = MindGoal.from_payload(current) if current is not None else _copy_goal(goal)
            except InvalidInputError:
                stored = _copy_goal(goal)
            if stored.status == "completed":
                raise ToolError(f"goal {goal.id!r} is already completed", code="not_active")
            if pending is not None:
                pending.apply(stored, now)
            stored.status, stored.outcome, stored.updated_at = "completed", outcome, now
            return stored.to_payload()

        try:
            item = self.store.update(self.namespace, _key(goal), complete)
        except ToolError:
            if pending is not None:
                self.draft.goal_patches[goal.id] = pending
            raise
        self.goals = {**self.goals, goal.id: MindGoal.from_payload(item.value)}
        return {"status": "ok"}

    def _active_goal(self, id: Any) -> MindGoal:
        if not isinstance(id, str):
            raise ToolError("id must be a string", code="invalid_arguments")
        goal = self.goals.get(id)
        if goal is None:
            raise ToolError(
                f"no goal with id {id!r}; find ids with mind_recall(type='goal')", code="not_found"
            )
        if goal.status != "active":
            raise ToolError(f"goal {id!r} is already completed", code="not_active")
        return goal

    def _ttl(self, expires_in: str | None, default: int | None, what: str) -> int | None:
        if expires_in is None:
            return default
        try:
            return parse_duration(expires_in, what=what)
        except InvalidInputError as exc:
            raise ToolError(str(exc), code="invalid_arguments") from None

    # Flush ------------------------------------------------------------------------------------

    def flush(self, *, error: bool = False) -> int:
        """Commits the draft in one store transaction and empties it; returns entries written.

        Clean flush: beliefs, reflections, goal creations and updates, unpins. Error flush
        (``error=True``): beliefs and reflections only, flagged ``error: true``; goal changes
        and unpins are dropped, and a pinned reflection that would take the standing rules
        past the cap without those unpins is written unpinned. Flushing twice writes nothing
        the second time. A belief this run created is folded into an equal one committed by
        another run since this one loaded (see :attr:`folded`), so overlapping runs in other
        processes never store it twice.
        """
        if self._mark is None:
            raise InvalidInputError("the handle was never loaded: open it with AgentMind.open")
        draft, self.draft = self.draft, _Draft()
        if draft.empty():
            return 0
        model = self.layer.embedder.model
        downgrades = draft.downgrades
        updates: dict[str, Updater] = {}
        created: list[tuple[MindBelief, npt.NDArray[np.float32], bool]] = []
        for belief, vector, stored_before in draft.beliefs.values():
            belief.error = error  # a clean restatement clears a crashed run's flag
            if not stored_before:
                created.append((belief, vector, belief.id in downgrades))
            updates[_key(belief)] = _belief_writer(
                belief, vector, model, stored_before, belief.id in downgrades
            )
        for reflection, vector in draft.reflections.values():
            reflection.error = error
            updates[_key(reflection)] = _constant(_stored(reflection, vector, model))
        if not error:
            for goal in draft.goals.values():
                updates[_key(goal)] = _constant(goal.to_payload())
            now = now_ms()
            for goal_id, patch in draft.goal_patches.items():
                updates[_key(self.goals[goal_id])] = _goal_writer(self.goals[goal_id], patch, now)
            for reflection_id in draft.unpins:
                updates[_key(self.reflections[reflection_id])] = _unpin_writer(
                    self.reflections[reflection_id], now
                )
        if not updates:
            return 0
        folds: dict[str, str] = {}

        def plan(changed: list[Item]) -> dict[str, Updater]:
            folds.clear()
            planned = dict(updates)
            self._hold_caps(draft, changed, planned, error=error)
            targets = self._duplicates_committed_since_load(created, changed) if created else {}
            for belief, vector, allow_downgrade in created:
                target = targets.get(belief.id)
                if target is None:
                    continue
                del planned[_key(belief)]
                key = _key(target)
                planned[key] = _fold_writer(
                    belief, vector, model, allow_downgrade, target, planned.get(key)
                )
                folds[belief.id] = target.id
            return planned

        written = self.store.update_many_since(self.namespace, self._mark, plan)
        for created_id, target_id in folds.items():
            logger.info(
                "belief %s duplicated %s, committed meanwhile: folded", created_id, target_id
            )
        self.folded.update(folds)
        return len(written)

    def _hold_caps(
        self, draft: _Draft, changed: list[Item], planned: dict[str, Updater], *, error: bool
    ) -> None:
        """Keeps the caps on active goals and pinned reflections against what is committed now
        (runs that overlap each checked them against what they loaded): a goal past the cap is
        dropped, a reflection past it is written unpinned, both logged. Runs inside the flush
        transaction; an error flush drops this run's unpins, so its pins can pass the cap too."""
        now = now_ms()
        active = {i for i, g in self.goals.items() if g.status == "active"}
        pinned = {i for i, r in self.reflections.items() if r.pinned and not r.expired(now)}
        for item in changed:
            id_ = item.key.partition("/")[2]
            try:
                entry = entry_from_payload(item.value)
            except InvalidInputError:
                continue
            if isinstance(entry, MindGoal):
                (active.add if entry.status == "active" else active.discard)(id_)
            elif isinstance(entry, MindReflection):
                live = entry.pinned and not entry.expired(now)
                (pinned.add if live else pinned.discard)(id_)
        if not error:
            pinned -= draft.unpins
            room = self.layer.max_goals - len(active - set(draft.goals))
            for goal in list(draft.goals.values())[max(0, room) :]:
                del planned[_key(goal)]
                logger.warning(
                    "goal %s dropped at flush: runs that overlapped took the %d active goals",
                    goal.id,
                    self.layer.max_goals,
                )
        model = self.layer.embedder.model
        room = self.layer.max_pinned_reflections - len(pinned - set(draft.reflections))
        pins = [(r, v) for r, v in draft.reflections.values() if r.pinned]
        for reflection, vector in pins[max(0, room) :]:
            unpinned = dataclasses.replace(reflection, pinned=False)
            planned[_key(reflection)] = _constant(_stored(unpinned, vector, model))
            logger.warning(
                "reflection %s written unpinned at flush: the %d standing rules are taken",
                reflection.id,
                self.layer.max_pinned_reflections,
            )

    def _duplicates_committed_since_load(
        self,
        created: list[tuple[MindBelief, npt.NDArray[np.float32], bool]],
        changed: list[Item],
    ) -> dict[str, MindBelief]:
        """For each belief this run created, the live belief it duplicates (at least
        ``deduplication_threshold`` similar, the most similar) among those other runs committed
        since this one loaded. Runs inside the flush transaction."""
        now = now_ms()
        model, dim = self.layer.embedder.model, self.layer.embedder.dim
        candidates: list[MindBelief] = []
        vectors: list[npt.NDArray[np.float32] | None] = []
        for item in changed:
            try:
                entry = entry_from_payload(item.value)
            except InvalidInputError:
                continue
            if not isinstance(entry, MindBelief) or item.key != _key(entry) or entry.expired(now):
                continue
            stored = item.value
            vector = decode_vector(stored.get("embedding"))
            if stored.get("embeddingModel") != model or vector is None or vector.shape[0] != dim:
                vector = None
            candidates.append(entry)
            vectors.append(vector)
        missing = [i for i, v in enumerate(vectors) if v is None]
        if missing:
            # Written by a run with another embedder: embedded here, under the flush lock.
            texts = [candidates[i].content for i in missing]
            fresh = np.asarray(self.layer.embedder.embed(texts), dtype=np.float32)
            for i, vector in zip(missing, fresh):
                vectors[i] = vector
        index = VectorSet(dim)
        placeable = [
            (entry.id, v)
            for entry, v in zip(candidates, vectors)
            if v is not None and np.any(v) and np.isfinite(v).all()
        ]
        if not placeable:
            return {}
        index.add([i for i, _ in placeable], np.stack([v for _, v in placeable]))
        by_id = {entry.id: entry for entry in candidates}
        threshold = self.layer.deduplication_threshold
        out = {}
        for belief, vector, _ in created:
            found = index.find_duplicate(vector, threshold)
            if found is not None:
                out[belief.id] = by_id[found[0]]
        return out


# Store writers (run inside the flush transaction) ----------------------------------------------


def _stored(
    entry: MindBelief | MindReflection, vector: npt.NDArray[np.float32], model: str
) -> dict[str, Any]:
    return {**entry.to_payload(), "embedding": encode_vector(vector), "embeddingModel": model}


def _constant(value: Any) -> Callable[[Any], Any]:
    return lambda _current: value


def _belief_writer(
    belief: MindBelief,
    vector: npt.NDArray[np.float32],
    model: str,
    stored_before: bool,
    allow_downgrade: bool,
) -> Callable[[Any], Any]:
    def write(current: Any) -> Any:
        if stored_before and isinstance(current, dict):
            try:
                now_stored = MindBelief.from_payload(current)
            except InvalidInputError:
                now_stored = None
            if now_stored is not None:
                belief.confidence = _merge_confidence(
                    now_stored.confidence, belief.confidence, allow_downgrade
                )
                belief.tags = _union(now_stored.tags, belief.tags)
                belief.created_at = now_stored.created_at
                # Another run may have restated it since this one loaded: keep what it said.
                belief.previous = _previous_after(now_stored, belief.content, belief.previous)
        return _stored(belief, vector, model)

    return write


def _fold_writer(
    belief: MindBelief,
    vector: npt.NDArray[np.float32],
    model: str,
    allow_downgrade: bool,
    target: MindBelief,
    before: Updater | None,
) -> Updater:
    """Folds ``belief``, created by this run, into ``target``, which another run committed
    meanwhile, by mind_believe's merge rules; ``before`` is this flush's own update of the
    target, if it makes one, applied first."""

    def write(current: Any) -> Any:
        value = before(current) if before is not None else current
        base = target
        if isinstance(value, dict):
            with suppress(InvalidInputError):  # unreadable now: merge into what the plan saw
                base = MindBelief.from_payload(value)
        merged = MindBelief(
            target.id,
            belief.content,
            _merge_confidence(base.confidence, belief.confidence, allow_downgrade),
            _union(base.tags, belief.tags),
            belief.expires_at,
            base.created_at,
            # Later than what it replaces: caches of header lines and vectors key on it.
            max(belief.updated_at, base.updated_at + 1),
            belief.error,
            _previous_after(base, belief.content, belief.previous),
        )
        return _stored(merged, vector, model)

    return write


def _goal_writer(goal: MindGoal, patch: _GoalPatch, now: int) -> Callable[[Any], Any]:
    def write(current: Any) -> Any:
        try:
            base = MindGoal.from_payload(current) if current is not None else _copy_goal(goal)
        except InvalidInputError:
            base = _copy_goal(goal)
        return patch.apply(base, now).to_payload()

    return write


def _unpin_writer(reflection: MindReflection, now: int) -> Callable[[Any], Any]:
    def write(current: Any) -> Any:
        if isinstance(current, dict):
            return {**current, "pinned": False, "updatedAt": now}
        return {**reflection.to_payload(), "pinned": False, "updatedAt": now}

    return write


# Helpers --------------------------------------------------------------------------------------


_BY_UPDATED = operator.attrgetter("updated_at")
_BY_CREATED = operator.attrgetter("created_at")
_DEFAULT_COUNTER: list[Any] = []


def _default_counter() -> Any:
    """One estimator shared by standalone sessions, so header line counts stay cached."""
    if not _DEFAULT_COUNTER:
        from memstrata.tokens import EstimatingCounter

        _DEFAULT_COUNTER.append(EstimatingCounter())
    return _DEFAULT_COUNTER[0]


def _is_embedder(obj: Any) -> bool:
    # Looked up on the type: isinstance() on the protocol would read ``dim``, which for a remote
    # embedder of unknown dimension means a network call.
    kind = type(obj)
    return all(hasattr(kind, name) for name in ("embed", "aembed", "dim", "model"))


def _best_first(hit: tuple[float, str, object]) -> tuple[float, str]:
    """Recall order: higher score first, then the lower id (stable across runs and kinds)."""
    return (-hit[0], hit[1])


def _key(entry: MindEntry) -> str:
    return f"{entry.type}/{entry.id}"


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


def _copy_belief(b: MindBelief) -> MindBelief:
    return MindBelief(
        b.id,
        b.content,
        b.confidence,
        list(b.tags),
        b.expires_at,
        b.created_at,
        b.updated_at,
        b.error,
        [dict(p) for p in b.previous],
    )


def _copy_goal(g: MindGoal) -> MindGoal:
    return MindGoal(
        g.id,
        g.description,
        g.priority,
        g.status,
        list(g.tags),
        g.due_by,
        list(g.progress),
        g.outcome,
        g.created_at,
        g.updated_at,
        g.sequence,
    )


def _merge_confidence(
    old: ConfidenceLevel, new: ConfidenceLevel, allow_downgrade: bool
) -> ConfidenceLevel:
    if allow_downgrade or _CONFIDENCE_RANK[new] >= _CONFIDENCE_RANK[old]:
        return new
    return old


def _previous_after(
    base: MindBelief, content: str, also: Sequence[dict[str, Any]] = ()
) -> list[dict[str, Any]]:
    """``base``'s previous contents, then ``base``'s own content, then ``also`` (another
    version's previous contents), once each and without ``content`` (what the belief says
    now), by time: the history of a belief restated as ``content``."""
    versions = [*base.previous, {"content": base.content, "updatedAt": base.updated_at}, *also]
    seen = {content}
    kept = []
    for version in sorted(versions, key=lambda v: v["updatedAt"]):
        if version["content"] not in seen:
            seen.add(version["content"])
            kept.append(dict(version))
    if len(kept) > MAX_PREVIOUS:
        logger.info("belief %s keeps its last %d previous contents", base.id, MAX_PREVIOUS)
    return kept[-MAX_PREVIOUS:]


def _union(a: list[str], b: list[str]) -> list[str]:
    return list(dict.fromkeys([*a, *b]))


def _recency(updated_at: int, now: int) -> float:
    age_days = max(0.0, (now - updated_at) / DAY_MS)
    return math.exp(-age_days / RECENCY_DECAY_DAYS)


def _iso_day(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).date().isoformat()


def _frame(goal_lines: list[str], rule_lines: list[str]) -> str:
    """The header without its beliefs and recent reflections: what is shown whatever the
    budget, and so what it must first make room for."""
    return "\n".join(
        [
            "--- AGENT MIND ---",
            "## Goals",
            *goal_lines,
            "## Standing Rules (Pinned)",
            *rule_lines,
            "## Beliefs",
            "## Recent Reflections",
            "---",
        ]
    )


def _cut_line(line: str, chars: int) -> str:
    return line if len(line) <= chars else line[: chars - 1].rstrip() + "…"


def _goal_line(goal: MindGoal) -> str:
    line = f"[{goal.priority}] {goal.description}"
    if goal.progress:
        line += f" — last progress: {goal.progress[-1]}"
    if goal.due_by:
        line += f" (due: {goal.due_by})"
    return one_line(line)


def _check_content(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ToolError(f"{what} must be a string", code="invalid_arguments")
    _require_unicode(value, what)
    text = value.strip()
    if not text:
        raise ToolError(f"{what} is empty", code="invalid_arguments")
    if len(text) > MAX_CONTENT_CHARS:
        raise ToolError(
            f"{what} is {len(text):,} characters; the limit is {MAX_CONTENT_CHARS:,}",
            code="invalid_arguments",
        )
    return text


def _check_tags(tags: Any) -> list[str]:
    if not isinstance(tags, (list, tuple, set, frozenset)):
        raise ToolError("tags must be a list of strings", code="invalid_arguments")
    out = list(tags)
    if len(out) > MAX_TAGS:
        raise ToolError(f"{len(out)} tags; the limit is {MAX_TAGS}", code="invalid_arguments")
    for tag in out:
        if not isinstance(tag, str) or not tag.strip() or len(tag) > MAX_TAG_CHARS:
            raise ToolError(
                f"each tag must be a non-empty string of at most {MAX_TAG_CHARS} characters, "
                f"got {tag!r}",
                code="invalid_arguments",
            )
        _require_unicode(tag, "a tag")
    return list(dict.fromkeys(out))


def _require_unicode(text: str, what: str) -> None:
    """Refuses a lone surrogate now: a draft holding one could not be stored, and the flush
    at the end of the run would then fail as a whole."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError(
            f"{what} is not valid Unicode (it holds a lone surrogate)", code="invalid_arguments"
        ) from None


def _check_int(value: Any, what: str, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInputError(f"{what} must be an int >= {minimum}, got {value!r}")


def _check_number(value: Any, what: str, *, low: float, high: float | None = None) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < low
        or (high is not None and value > high)
    ):
        bounds = f"between {low} and {high}" if high is not None else f">= {low}"
        raise InvalidInputError(f"{what} must be a number {bounds}, got {value!r}")


def _parse_namespace(namespace: Namespace | str) -> Namespace:
    from memstrata.stores.base import validate_namespace

    if isinstance(namespace, str):
        namespace = tuple(namespace.split("/"))
    try:
        return validate_namespace(namespace)
    except InvalidInputError as exc:
        raise InvalidInputError(f"namespace: {exc}") from None


__all__ = [
    "CONFIDENCE_SCORES",
    "AgentMind",
    "AgentMindHandle",
    "MindTtlDefaults",
    "ScoreWeights",
]
