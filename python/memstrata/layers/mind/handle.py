"""AgentMindHandle: one run's view of the mind, and the methods its tools call.

The handle holds the run's state (the committed entries it loaded, the draft of its writes, its
index and rankers); the work is done by the modules named for it: :mod:`.header`,
:mod:`.recall`, :mod:`.writes`, :mod:`.goals` and :mod:`.flush`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from memstrata._bridge import TaskLock
from memstrata.exceptions import InvalidInputError
from memstrata.layers.mind import flush as _flush
from memstrata.layers.mind import goals as _goal_writes
from memstrata.layers.mind import header as _header
from memstrata.layers.mind import recall as _recall
from memstrata.layers.mind import writes as _writes
from memstrata.layers.mind.committed import _Committed, refresh
from memstrata.layers.mind.entries import (
    ConfidenceLevel,
    GoalPriority,
    GoalStatus,
    MindBelief,
    MindGoal,
    MindRecallResult,
    MindReflection,
    now_ms,
)
from memstrata.layers.mind.header import default_counter
from memstrata.layers.mind.index import _Index, embed_one, open_index
from memstrata.layers.mind.ranking import CompositeRanker
from memstrata.layers.mind.records import copy_belief, copy_goal, copy_reflection
from memstrata.layers.mind.writes import _Draft
from memstrata.stores import Namespace, Store
from memstrata.stores.base import Answer, ChangeMark, Read

if TYPE_CHECKING:
    from memstrata.layers.mind import AgentMind


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
        # The committed entries: the layer's shared copy (see load), replaced, never changed.
        self._goals: dict[str, MindGoal] = {}
        self._beliefs: dict[str, MindBelief] = {}
        self._reflections: dict[str, MindReflection] = {}
        # id -> (model, dimension, row in the committed rows); see _Committed.vectors
        self._stored_vectors: dict[str, tuple[Any, int, int]] = {}
        self._committed = _Committed(None, None)
        self._mark: ChangeMark | None = None  # where the store's history stood at load
        self.draft = _Draft()
        # The draft's writes one at a time: a model's parallel tool calls (a server running
        # them on threads or tasks) would otherwise each pass a cap (max_run_entries, the
        # goal and pin caps) the others' writes then take the draft past. A TaskLock: the
        # flush holds it across store calls, which under an event loop suspend.
        self._writing = TaskLock()
        # Goals this run completed: committed at once, they leave the run's view (and its
        # header) at once, so the header is made again after each.
        self._completed_goals = 0
        self._header: tuple[tuple[int | None, int], str] | None = None  # (budget, completed)
        self._index: _Index | None = None
        self._rankers: dict[tuple[tuple[str, ...], bool], CompositeRanker] = {}
        self._committed_pins: int | None = None
        self._purged: set[str] = set()  # ids this run deleted (purge_expired)
        # Beliefs this run created that a flush folded into an equal one another run had
        # committed meanwhile: the id mind_believe returned -> the id the belief is stored under.
        self.folded: dict[str, str] = {}

    def load(self, opened: Mapping[Read, Answer] | None = None) -> None:
        """Brings the layer's copy of the committed entries up to date, reading only what was
        written or deleted since the last run looked (or taking it from ``opened``, the reads
        the run opened with), and takes it as this run's view. A malformed entry is skipped
        and logged, never deleted."""
        committed, self._mark = refresh(
            self.layer._committed.get(self.namespace), self.store, self.namespace, opened
        )
        self.layer._committed[self.namespace] = committed
        self._committed = committed
        self._goals = committed.goals
        self._beliefs = committed.beliefs
        self._reflections = committed.reflections
        self._stored_vectors = committed.vectors

    # Reading ----------------------------------------------------------------------------------

    @property
    def goals(self) -> dict[str, MindGoal]:
        """The goals committed when the run started, with the ones this run completed: the
        caller's own copies (changing them changes nothing the mind holds)."""
        return {id: copy_goal(goal) for id, goal in self._goals.items()}

    @property
    def beliefs(self) -> dict[str, MindBelief]:
        """The beliefs committed when the run started (this run's writes are in its draft until
        the run ends): the caller's own copies."""
        return {id: copy_belief(belief) for id, belief in self._beliefs.items()}

    @property
    def reflections(self) -> dict[str, MindReflection]:
        """The reflections committed when the run started: the caller's own copies."""
        return {id: copy_reflection(r) for id, r in self._reflections.items()}

    def counter(self) -> Any:
        """The run's token counter (a shared estimator when none was given)."""
        if self._tokens is None:
            self._tokens = default_counter()
        return self._tokens

    def header(self, budget: int | None = None) -> str:
        """The ``--- AGENT MIND ---`` block built from the entries committed when the run
        started, less the goals this run completed; empty when there is nothing to show.
        ``budget`` is the stack's token share for the whole block."""
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
            raise InvalidInputError(f"budget must be an int or None, got {budget!r}")
        key = (budget, self._completed_goals)
        if self._header is None or self._header[0] != key:
            self._header = (key, _header.header(self, budget))
        return self._header[1]

    def embed_one(self, text: str) -> npt.NDArray[np.float32]:
        """``text``'s vector under the mind's embedder.

        Raises:
            ToolError: The embedder cannot place the text (it has no words)."""
        return embed_one(self.layer.embedder, text)

    def index(self) -> _Index:
        """The committed entries' vector index, brought up to date on first use."""
        if self._index is None:
            self._index = open_index(self)
        return self._index

    def _ranker(self, kinds: tuple[str, ...], expired: bool) -> CompositeRanker:
        return _recall.ranker(self, kinds, expired)

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
        the query (a goal also matches when its text and tags hold every word of the query), and
        a belief or reflection scores at least ``threshold`` (as in toolpack Agent Mind, the
        threshold does not apply to goals). ``pinned=True`` without a query
        lists every pinned reflection (the standing rules), oldest first.

        Raises:
            ToolError: An argument is out of range.
        """
        return _recall.recall(
            self,
            query,
            type=type,
            status=status,
            tags=tags,
            pinned=pinned,
            include_expired=include_expired,
            threshold=threshold,
            limit=limit,
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
        (:class:`~memstrata.layers.mind.ranking.CompositeRanker`); filters that the ranking
        does not encode (tags, pinned) are applied to the best hits, fetching deeper only while
        too few pass.
        """
        return _recall.search(
            self,
            vector,
            kinds=kinds,
            tags=tags,
            pinned=pinned,
            include_expired=include_expired,
            threshold=threshold,
            limit=limit,
        )

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
        with self._writing:
            return _writes.believe(
                self,
                content,
                confidence=confidence,
                tags=tags,
                expires_in=expires_in,
                allow_downgrade=allow_downgrade,
            )

    def find_duplicate_belief(
        self,
        vector: npt.NDArray[np.float32],
        *,
        now: int | None = None,
        content: str | None = None,
    ) -> tuple[str, float, str] | None:
        """The live belief at least ``deduplication_threshold`` similar to ``vector``, in this
        run's draft or the committed store, as ``(id, similarity, action)``; the better of the
        two wins. With ``content``, a belief whose facts disagree with it (numbers, dates,
        negation: :func:`~memstrata.layers.mind.conflicts.facts_disagree`) is never the match,
        however similar. ``action`` is what an update of it reports (``updated_draft`` or
        ``updated_store``)."""
        return _writes.find_duplicate_belief(self, vector, now=now, content=content)

    def believe_vector(
        self,
        content: str,
        vector: npt.NDArray[np.float32],
        confidence: ConfidenceLevel,
        tags: list[str],
        ttl_ms: int | None,
        allow_downgrade: bool,
    ) -> dict[str, Any]:
        """:meth:`believe` with the embedding done by the caller (``ttl_ms``: the belief's time
        to live; None: it does not expire). The same checks as
        :meth:`believe`, and ``vector`` must be the embedder's dimension, finite and not zero.
        It is copied: the draft keeps it until the flush stores it, and a caller embedding in
        batches reuses its buffer."""
        with self._writing:
            return _writes.believe_vector(
                self, content, vector, confidence, tags, ttl_ms, allow_downgrade
            )

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
        with self._writing:
            return _writes.reflect(self, content, pin=pin, tags=tags, related_to=related_to)

    def pinned_count(self) -> int:
        """Pinned reflections once this run's draft is applied: counted once per run, then
        kept up to date by the draft's pins and unpins."""
        return _writes.pinned_count(self)

    def unpin_reflection(self, id: str) -> dict[str, Any]:
        """Unpins a standing rule (kept as a regular reflection); dropped by an error flush."""
        with self._writing:
            return _writes.unpin_reflection(self, id)

    def entry_count(self) -> int:
        """Goals, beliefs and reflections in the namespace once this run's draft is applied."""
        return _writes.entry_count(self)

    def purge_expired(self) -> int:
        """Deletes the beliefs and reflections that expired longer than the layer's
        ``purge_expired_after`` ago (each logged); returns how many. Archived entries otherwise
        stay, and count toward ``max_entries``: a full mind purges before it refuses a write."""
        return _writes.purge_expired(self)

    def active_goal_count(self) -> int:
        """Active goals: those committed and this run's new ones (checked against
        ``max_goals``)."""
        return _goal_writes.active_goal_count(self)

    def set_goal(
        self,
        description: str,
        *,
        priority: GoalPriority = "normal",
        tags: list[str] | None = None,
        due_by: str | None = None,
    ) -> dict[str, Any]:
        """Creates an active goal (buffered); fails when the active goals reach the cap."""
        with self._writing:
            return _goal_writes.set_goal(
                self, description, priority=priority, tags=tags, due_by=due_by
            )

    def update_goal(
        self,
        id: str,
        *,
        description: str | None = None,
        priority: GoalPriority | None = None,
        progress: str | None = None,
    ) -> dict[str, Any]:
        """Edits an active goal (buffered); ``progress`` appends a note."""
        with self._writing:
            return _goal_writes.update_goal(
                self, id, description=description, priority=priority, progress=progress
            )

    def complete_goal(self, id: str, *, outcome: str | None = None) -> dict[str, Any]:
        """Completes an active goal and commits it at once (bypassing the draft)."""
        with self._writing:
            return _goal_writes.complete_goal(self, id, outcome=outcome)

    # Flush ------------------------------------------------------------------------------------

    def flush(self, *, error: bool = False) -> int:
        """Commits the draft in one store transaction and empties it; returns entries written.
        A flush the store fails (the transaction rolled back) keeps the draft and raises.

        Clean flush: beliefs, reflections, goal creations and updates, unpins. Error flush
        (``error=True``): beliefs and reflections only, flagged ``error: true``; goal changes
        and unpins are dropped, and a pinned reflection that would take the standing rules
        past the cap without those unpins is written unpinned. A good stored belief the failed
        run restated is left as it was: the restatement is written beside it as a belief of
        its own, flagged (or dropped, with a warning, past ``max_entries`` or
        ``max_run_entries``). Flushing twice writes nothing the second time. A belief this run
        created is folded into an equal one committed by another run since this one loaded
        (see :attr:`folded`; on an error flush, only into one itself from a failed run), so
        overlapping runs in other processes never store it twice.
        """
        with self._writing:
            return _flush.flush(self, error=error)
