"""AgentMind: persistent goals, beliefs and reflections, a prompt header and seven tools.

Implements toolpack Agent Mind. Each run reads the committed store once, shows the model a
``--- AGENT MIND ---`` header, offers ``mind_recall``, ``mind_believe``, ``mind_reflect``,
``mind_unpin_reflection``, ``mind_set_goal``, ``mind_update_goal`` and ``mind_complete_goal``,
buffers every write but ``mind_complete_goal`` in a draft, and flushes the draft in one store
transaction when the run closes (clean or error flush).

Usable in a :class:`~memstrata.MemoryStack` or on its own::

    mind = AgentMind(embedder=HashingEmbedder())
    with mind.session(store, agent="research-tracker") as handle:
        handle.believe("TSMC Q2 capacity is fully booked.", confidence="high")

Decisions where toolpack Agent Mind is silent (or its code differs from its text):

* Storage: namespace ``("mind", agent)`` (``namespace=`` overrides; ``"a/b"`` means
  ``("a", "b")``), one key per entry (``goal/<id>``, ``belief/<id>``, ``reflection/<id>``); the
  value is toolpack Agent Mind's camelCase payload plus ``embedding`` (float32, base64) and
  ``embeddingModel``. Expiry is a field, not a store TTL: an expired belief is archived (kept,
  hidden from the header, dedup and recall unless ``includeExpired``), never deleted.
* A configured reflection TTL is applied (toolpack Agent Mind's code ignores it); expired
  reflections are archived like beliefs.
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
  kept; on an error flush, only into a belief itself from a failed run, see below). Only what
  changed since the load is read, however big the mind. What ``mind_believe`` reported stays
  as reported; the ``id`` it returned for a folded belief is then never stored: the belief
  lives on under the other run's id, which ``handle.folded`` maps it to (also logged at INFO).
* ``pinned: true`` in ``mind_recall`` returns pinned reflections only (no goals, no beliefs);
  ``pinned: false`` excludes pinned reflections; absent means no filter.
* Recall ranks exactly by the composite score in one pass over the vectors
  (:mod:`memstrata.layers.mind.ranking`); the belief dedup check searches the same ranker by
  similarity alone, so the vectors are held once in the ranker and once as loaded. Every
  search is exact: at the sizes a mind holds (up to ``max_entries``, 100,000 by default) the
  exact scan answers the dedup check faster than an hnswlib graph does
  (``benches/test_vectors.py``), with no graph to build or store.
* Goals are matched by meaning and by keyword: a goal matches when its description, progress
  notes and tags are at least ``similarity_floor`` similar to the query, or hold every word of
  the query (toolpack Agent Mind's keyword matching on goals; every word, so that a shared stop
  word alone makes no hit). Words are compared case-folded, with a few English endings folded
  (``databases``, ``database``; ``migrate``, ``migration``). The keyword match is what lets the
  model find, and so update or complete, any goal the header shows it, by a word of that goal
  or a tag, however long the goal's text (a single word is little similar to a long text). Ids
  stay out of the header: it keeps toolpack Agent Mind's format and spends no tokens on them.
  Among the goals, those matched by keyword come first for ``limit``. Every hit has a score,
  goals' included (toolpack Agent Mind gives goals none), and ``type: 'all'`` ranks the three
  kinds together by it, ``limit`` in total. ``threshold`` filters beliefs and reflections
  only: toolpack Agent Mind ignores it for goals.
* An error flush never changes a good stored belief (one not itself from a failed run): a
  restatement of it is written as a belief of its own, flagged ``error: true``, with what the
  failed run said (content, confidence, tags), and the stored belief keeps its content and its
  place in the header, as toolpack Agent Mind keeps a pin a failed run dropped ("the safe
  default"). Past ``max_entries`` or ``max_run_entries`` the restatement is dropped, with a
  warning. A restatement of a belief itself from a failed run updates it in place, still
  flagged. Dedup prefers a good belief to a failed run's, so a clean restatement confirms the
  good one rather than clearing the flag of the copy.
* Completing a goal folds in this run's pending updates to it; completing a goal created in
  this run writes it (completed) at once. Both survive an error flush, as toolpack Agent Mind's
  exemption of ``mind_complete_goal`` implies.
* The header's beliefs and reflections share ``token_budget``, further capped by the stack's
  budget for the layer minus the goals and standing rules (which are always shown). Beliefs
  come first: high confidence, then medium, each newest first and labelled; low-confidence
  ones are left to recall. toolpack Agent Mind's text says "high-confidence beliefs", but its
  own example header lists a medium one, and ``mind_believe`` believes at medium by default:
  high only would keep out of the header everything the model believes unless it says "high".
  Reflections follow, newest first.
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
  It keeps them, and their vector index, for the 256 namespaces last run (``MINDS_KEPT``): a
  server with a mind per user holds the recent users' minds, and the next run of any other
  reads its mind whole from the store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from memstrata._checks import checked_budget, checked_scope_id, checked_store
from memstrata.embedders import Embedder, HashingEmbedder
from memstrata.exceptions import InvalidInputError
from memstrata.layers.mind.checks import check_int, check_number, parse_namespace
from memstrata.layers.mind.committed import Kept, _Committed, opening_read
from memstrata.layers.mind.entries import parse_duration
from memstrata.layers.mind.handle import AgentMindHandle
from memstrata.layers.mind.index import _IndexCache
from memstrata.layers.mind.recall import CONFIDENCE_SCORES, DEFAULT_SIMILARITY_FLOOR
from memstrata.layers.mind.tools import mind_tools
from memstrata.stack import Budget, Message, RunContext
from memstrata.stores import Namespace, Read, Store
from memstrata.stores.base import Answer
from memstrata.tools import Tool

DEFAULT_MAX_ENTRIES = 100_000
# New entries one run may add: far above what a turn needs, far below what fills a mind.
DEFAULT_MAX_RUN_ENTRIES = 1_000
MAX_GOALS_CEILING = 10
MAX_PINNED_CEILING = 10

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
    """The agent-mind layer (toolpack Agent Mind).

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
        max_run_entries: Most new goals, beliefs and reflections one run may add (restating a
            belief does not count): a model cannot grow the mind without bound in one run.
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
        max_run_entries: int = DEFAULT_MAX_RUN_ENTRIES,
        purge_expired_after: str | None = "30d",
        on_progress: ProgressCallback | None = None,
        budget: tuple[int, int] | Budget = (0, 1500),
        slot: int = 10,
        name: str = "agent-mind",
    ) -> None:
        check_int(token_budget, "token_budget", minimum=0)
        check_number(recency_window_days, "recency_window_days", low=0)
        check_int(max_goals, "max_goals", minimum=1)
        check_int(max_pinned_reflections, "max_pinned_reflections", minimum=1)
        check_int(max_entries, "max_entries", minimum=1)
        check_int(max_run_entries, "max_run_entries", minimum=1)
        check_number(deduplication_threshold, "deduplication_threshold", low=0, high=1)
        check_number(retrieval_threshold, "retrieval_threshold", low=0, high=1)
        check_number(similarity_floor, "similarity_floor", low=0, high=1)
        if isinstance(ttl_defaults, dict):
            unknown = set(ttl_defaults) - {"belief", "reflection"}
            if unknown:
                raise InvalidInputError(f"ttl_defaults has unknown keys: {sorted(unknown)}")
            ttl_defaults = MindTtlDefaults(**ttl_defaults)
        elif ttl_defaults is not None and not isinstance(ttl_defaults, MindTtlDefaults):
            raise InvalidInputError(
                "ttl_defaults must be a MindTtlDefaults, a dict with belief/reflection or None, "
                f"got {type(ttl_defaults).__name__}"
            )
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
        if score_weights is not None and not isinstance(score_weights, ScoreWeights):
            raise InvalidInputError(
                f"score_weights must be a ScoreWeights or None, got {type(score_weights).__name__}"
            )
        if embedder is not None and not (_is_embedder(embedder) or callable(embedder)):
            raise InvalidInputError(
                f"embedder must be an Embedder, a factory making one, or None, got {embedder!r}"
            )
        if on_progress is not None and not callable(on_progress):
            raise InvalidInputError(f"on_progress must be callable or None, got {on_progress!r}")
        self.score_weights = score_weights if score_weights is not None else ScoreWeights()
        for label, weight in vars(self.score_weights).items():
            check_number(weight, f"score_weights.{label}", low=0)
        self.namespace = parse_namespace(namespace) if namespace is not None else None
        self.token_budget = token_budget
        self.recency_window_days = recency_window_days
        self.max_goals = min(max_goals, MAX_GOALS_CEILING)
        self.max_pinned_reflections = min(max_pinned_reflections, MAX_PINNED_CEILING)
        self.max_entries = max_entries
        self.max_run_entries = max_run_entries
        self.purge_expired_after_ms = (
            None
            if purge_expired_after is None
            else parse_duration(purge_expired_after, what="purge_expired_after")
        )
        self.deduplication_threshold = float(deduplication_threshold)
        self.retrieval_threshold = float(retrieval_threshold)
        self.similarity_floor = float(similarity_floor)
        self.on_progress = on_progress
        self.budget = checked_budget(budget)
        self.slot = slot
        self.name = name
        self._embedder_spec = embedder
        self._embedder: Embedder | None = None
        self._indexes: Kept[_IndexCache] = Kept()
        # Each namespace's committed entries, brought up to date by each run (see load), for
        # the MINDS_KEPT namespaces last run.
        self._committed: Kept[_Committed] = Kept()
        # Goals' unit vectors by (embedder model, goal text): goals have no stored vector.
        self._goal_vectors: dict[tuple[str, str], npt.NDArray[np.float64]] = {}
        # Goals' words (folded, see recall.keywords) by goal text.
        self._goal_words: dict[str, frozenset[str]] = {}
        # Header lines and their token counts by (counter encoding, kind), then by content:
        # content -> (confidence or creation time, line, tokens). See the header module.
        self._header_lines: dict[tuple[str | None, str], dict[str, tuple[Any, str, int]]] = {}

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
        """Where the mind of ``agent`` is stored: ``namespace`` if given, else
        ``("mind", agent)``.

        Raises:
            InvalidInputError: No ``namespace`` was given and ``agent`` is empty."""
        if self.namespace is not None:
            return self.namespace
        if not agent:
            raise InvalidInputError(
                "AgentMind stores under ('mind', <agent>): use stack.run(agent=...) or give "
                "AgentMind(namespace=...)"
            )
        return ("mind", agent)

    # Layer protocol ---------------------------------------------------------------------------

    def opening_reads(self, ctx: RunContext) -> list[Read]:
        """What changed since this process last loaded the mind, read with the other layers'
        when the run opens (nothing on the first load, which streams every entry)."""
        namespace = self.namespace_for(ctx.agent)
        read = opening_read(self._committed.get(namespace), ctx.store, namespace)
        return [] if read is None else [read]

    def init(self, ctx: RunContext, opened: Mapping[Read, Answer] | None = None) -> AgentMindHandle:
        handle = AgentMindHandle(self, ctx.store, self.namespace_for(ctx.agent), ctx.tokens)
        handle.load(opened)
        return handle

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
        checked_store(store)
        checked_scope_id("agent", agent)
        if tokens is not None and not callable(getattr(tokens, "count", None)):
            raise InvalidInputError(
                f"tokens must be a token counter (with count), got {type(tokens).__name__}"
            )
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


def _is_embedder(obj: Any) -> bool:
    # Looked up on the type: isinstance() on the protocol would read ``dim``, which for a remote
    # embedder of unknown dimension means a network call.
    kind = type(obj)
    return all(hasattr(kind, name) for name in ("embed", "aembed", "dim", "model"))


__all__ = [
    "CONFIDENCE_SCORES",
    "AgentMind",
    "AgentMindHandle",
    "MindTtlDefaults",
    "ScoreWeights",
]
