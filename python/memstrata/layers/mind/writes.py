"""The draft: what a run writes, buffered until its flush, and the checks each write passes.

``mind_believe`` folds a belief into a similar live one (in the draft or the committed store)
by the merge rules: content and expiry replaced, the prior content kept in ``previous``, tags
united, confidence raised only (unless ``allowDowngrade``). Reflections are appended. Each
write is refused past the layer's caps (``max_entries``; pinned reflections); a full mind first
purges what expired long enough ago. Goals are in :mod:`memstrata.layers.mind.goals`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from memstrata._core import VectorSet
from memstrata.exceptions import InvalidInputError, LimitExceededError, ToolError
from memstrata.layers.mind.checks import check_content, check_tags
from memstrata.layers.mind.conflicts import facts_disagree
from memstrata.layers.mind.entries import (
    CONFIDENCE_LEVELS,
    MAX_TTL_MS,
    ConfidenceLevel,
    GoalPriority,
    MindBelief,
    MindGoal,
    MindReflection,
    now_ms,
    parse_duration,
)
from memstrata.layers.mind.index import checked_vector
from memstrata.layers.mind.records import (
    copy_belief,
    entry_key,
    merge_confidence,
    new_id,
    previous_after,
    union,
)

if TYPE_CHECKING:
    from memstrata.layers.mind.handle import AgentMindHandle

logger = logging.getLogger("memstrata.agent_mind")

PINNED_WARNING_MARGIN = 2


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
    new_beliefs: int = 0  # beliefs among ``beliefs`` that are not stored yet
    pins: int = 0  # what the draft changes the number of live pinned reflections by
    downgrades: set[str] = field(default_factory=set)  # beliefs written with allowDowngrade
    # What this run itself said of each belief it restated: the confidence and tags of its own
    # restatements, merged (an error flush records a stored belief's restatement by itself).
    said: dict[str, tuple[ConfidenceLevel, list[str]]] = field(default_factory=dict)

    def created_entries(self) -> int:
        """New goals, beliefs and reflections in the draft (updates of stored ones aside)."""
        return self.new_beliefs + len(self.reflections) + len(self.goals)

    def empty(self) -> bool:
        return not (self.beliefs or self.reflections or self.goals or self.goal_patches) and not (
            self.unpins
        )


def believe(
    handle: AgentMindHandle,
    content: str,
    *,
    confidence: ConfidenceLevel,
    tags: list[str] | None,
    expires_in: str | None,
    allow_downgrade: bool,
) -> dict[str, Any]:
    """See :meth:`AgentMindHandle.believe`."""
    content, tag_list = _belief_fields(content, confidence, tags or [], allow_downgrade)
    ttl = _ttl(expires_in, handle.layer.belief_ttl_ms, "expiresIn")
    vector = handle.embed_one(content)
    return _believe(handle, content, vector, confidence, tag_list, ttl, allow_downgrade)


def believe_vector(
    handle: AgentMindHandle,
    content: str,
    vector: Any,
    confidence: ConfidenceLevel,
    tags: list[str],
    ttl_ms: int | None,
    allow_downgrade: bool,
) -> dict[str, Any]:
    """See :meth:`AgentMindHandle.believe_vector`: :func:`believe`'s checks, and the caller's
    vector checked and copied."""
    content, tag_list = _belief_fields(content, confidence, tags, allow_downgrade)
    if ttl_ms is not None and (
        isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or not 0 < ttl_ms <= MAX_TTL_MS
    ):
        raise ToolError(
            f"ttl_ms must be None or a whole number of milliseconds from 1 to {MAX_TTL_MS:,}, "
            f"got {ttl_ms!r}",
            code="invalid_arguments",
        )
    own = checked_vector(vector, handle.layer.embedder.dim)
    return _believe(handle, content, own, confidence, tag_list, ttl_ms, allow_downgrade)


def _belief_fields(
    content: Any, confidence: Any, tags: Any, allow_downgrade: Any
) -> tuple[str, list[str]]:
    """A belief's content and tags as stored, after the checks every way of believing makes."""
    content = check_content(content, "content")
    if not isinstance(allow_downgrade, bool):
        # A truthy "no" would let a low-confidence restatement lower a belief.
        raise ToolError(
            f"allow_downgrade must be true or false, got {allow_downgrade!r}",
            code="invalid_arguments",
        )
    if confidence not in CONFIDENCE_LEVELS:
        raise ToolError(
            f"confidence must be one of {', '.join(CONFIDENCE_LEVELS)}",
            code="invalid_arguments",
        )
    return content, check_tags(tags)


def find_duplicate_belief(
    handle: AgentMindHandle,
    vector: npt.NDArray[np.float32],
    *,
    now: int | None = None,
    content: str | None = None,
) -> tuple[str, float, str] | None:
    """See :meth:`AgentMindHandle.find_duplicate_belief`."""
    now = now_ms() if now is None else now
    threshold = handle.layer.deduplication_threshold

    def agrees(text: str) -> bool:
        return content is None or not facts_disagree(content, text)

    draft = handle.draft
    match: tuple[str, float, str] | None = None
    if draft.belief_vectors is not None and len(draft.belief_vectors):
        similar = draft.belief_vectors.top_k(vector, len(draft.belief_vectors), threshold=threshold)
        found = next((h for h in similar if agrees(draft.beliefs[h[0]][0].content)), None)
        if found is not None:
            match = (found[0], found[1], "updated_draft")
    beliefs = handle._beliefs
    if not beliefs:
        return match
    index = handle.index().beliefs
    best = index.find_duplicate(vector, threshold)
    if best is None:
        return match
    stored = beliefs.get(best[0])
    if stored is None or stored.expired(now) or not agrees(stored.content) or stored.error:
        # The best is archived, says another fact, or was written by a failed run: look among
        # the other similar ones. A good one comes before a failed run's: a failed run's
        # restatement is kept beside the belief it restated (see flush), and a clean
        # restatement confirms that belief rather than clearing the flag of the copy.
        candidates = index.top_k(vector, max(16, len(index)), threshold=threshold)
        usable = [
            (i, sim)
            for i, sim in candidates
            if i in beliefs and not beliefs[i].expired(now) and agrees(beliefs[i].content)
        ]
        best = next((c for c in usable if not beliefs[c[0]].error), None)
        if best is None and usable:
            best = usable[0]
    if best is not None and (match is None or best[1] > match[1]):
        action = "updated_draft" if best[0] in draft.beliefs else "updated_store"
        match = (best[0], best[1], action)
    return match


def _believe(
    handle: AgentMindHandle,
    content: str,
    vector: npt.NDArray[np.float32],
    confidence: ConfidenceLevel,
    tags: list[str],
    ttl_ms: int | None,
    allow_downgrade: bool,
) -> dict[str, Any]:
    """A belief whose fields and vector are checked: drafted new, or folded into a similar one."""
    now = now_ms()
    match = find_duplicate_belief(handle, vector, now=now, content=content)
    expires_at = now + ttl_ms if ttl_ms is not None else None
    if match is None:
        require_room(handle, "belief")
        belief = MindBelief(
            id=new_id("b"),
            content=content,
            confidence=confidence,
            tags=list(tags),
            expires_at=expires_at,
            created_at=now,
            updated_at=now,
        )
        # allowDowngrade is kept for a new belief too: the flush may fold it into another.
        _draft_belief(handle, belief, vector, stored_before=False, allow_downgrade=allow_downgrade)
        return {"status": "ok", "action": "created", "id": belief.id}
    id_, _similarity, action = match
    said = handle.draft.said.get(id_)
    handle.draft.said[id_] = (
        (confidence, list(tags))
        if said is None
        else (merge_confidence(said[0], confidence, allow_downgrade), union(said[1], tags))
    )
    if id_ in handle.draft.beliefs:
        base, _old, stored_before = handle.draft.beliefs[id_]
    else:
        base, stored_before = copy_belief(handle._beliefs[id_]), True
    base.previous = previous_after(base, content)
    base.content = content
    base.confidence = merge_confidence(base.confidence, confidence, allow_downgrade)
    base.tags = union(base.tags, tags)
    base.expires_at = expires_at
    base.updated_at = now
    _draft_belief(
        handle, base, vector, stored_before=stored_before, allow_downgrade=allow_downgrade
    )
    return {"status": "ok", "action": action, "id": id_}


def _draft_belief(
    handle: AgentMindHandle,
    belief: MindBelief,
    vector: npt.NDArray[np.float32],
    *,
    stored_before: bool,
    allow_downgrade: bool = False,
) -> None:
    draft = handle.draft
    if not stored_before and belief.id not in draft.beliefs:
        draft.new_beliefs += 1
    draft.beliefs[belief.id] = (belief, vector, stored_before)
    if draft.belief_vectors is None:
        draft.belief_vectors = VectorSet(int(vector.shape[0]))
    draft.belief_vectors.add([belief.id], vector.reshape(1, -1))
    if allow_downgrade:
        draft.downgrades.add(belief.id)


def reflect(
    handle: AgentMindHandle,
    content: str,
    *,
    pin: bool,
    tags: list[str] | None,
    related_to: str | None,
) -> dict[str, Any]:
    """See :meth:`AgentMindHandle.reflect`."""
    content = check_content(content, "content")
    if not isinstance(pin, bool):
        raise ToolError("pin must be a boolean", code="invalid_arguments")
    tag_list = check_tags(tags or [])
    if related_to is not None:
        related_to = check_content(related_to, "relatedTo")
    require_room(handle, "reflection")
    layer = handle.layer
    cap = layer.max_pinned_reflections
    pinned_now = pinned_count(handle)
    if pin and pinned_now >= cap:
        raise ToolError(
            f"there are already {pinned_now} pinned reflections, the cap is {cap}; unpin an "
            "outdated one with mind_unpin_reflection first",
            code="cap_reached",
        )
    vector = handle.embed_one(content)
    now = now_ms()
    ttl = layer.reflection_ttl_ms
    reflection = MindReflection(
        id=new_id("r"),
        content=content,
        pinned=pin,
        tags=tag_list,
        related_to=related_to,
        created_at=now,
        updated_at=now,
        expires_at=now + ttl if ttl is not None else None,
    )
    handle.draft.reflections[reflection.id] = (reflection, vector)
    handle.draft.pins += pin
    result: dict[str, Any] = {"status": "ok", "id": reflection.id}
    if pin and pinned_now + 1 >= cap - PINNED_WARNING_MARGIN:
        result["warning"] = (
            f"{pinned_now + 1} of {cap} pinned reflections are in use; review the standing "
            "rules and unpin outdated ones with mind_unpin_reflection"
        )
    return result


def pinned_count(handle: AgentMindHandle) -> int:
    """See :meth:`AgentMindHandle.pinned_count`."""
    if handle._committed_pins is None:
        now = handle.started_at
        handle._committed_pins = sum(
            1 for r in handle._reflections.values() if r.pinned and not r.expired(now)
        )
    return handle._committed_pins + handle.draft.pins


def unpin_reflection(handle: AgentMindHandle, id: str) -> dict[str, Any]:
    """See :meth:`AgentMindHandle.unpin_reflection`."""
    if not isinstance(id, str):
        raise ToolError("id must be a string", code="invalid_arguments")
    draft = handle.draft
    if id in draft.reflections:
        reflection = draft.reflections[id][0]
        if not reflection.pinned:
            raise ToolError(f"reflection {id!r} is not pinned", code="not_pinned")
        reflection.pinned = False
        draft.pins -= 1
        return {"status": "ok"}
    stored = handle._reflections.get(id)
    if stored is None:
        raise ToolError(
            f"no reflection with id {id!r}; find ids with mind_recall(type='reflection', "
            "pinned=true)",
            code="not_found",
        )
    if not stored.pinned or id in draft.unpins:
        raise ToolError(f"reflection {id!r} is not pinned", code="not_pinned")
    draft.unpins.add(id)
    if not stored.expired(handle.started_at):
        draft.pins -= 1
    return {"status": "ok"}


def entry_count(handle: AgentMindHandle) -> int:
    """See :meth:`AgentMindHandle.entry_count`."""
    committed = len(handle._goals) + len(handle._beliefs) + len(handle._reflections)
    return committed - len(handle._purged) + handle.draft.created_entries()


def purge_expired(handle: AgentMindHandle) -> int:
    """See :meth:`AgentMindHandle.purge_expired`."""
    keep = handle.layer.purge_expired_after_ms
    if keep is None:
        return 0
    cutoff = now_ms() - keep
    purged = 0
    entries: list[MindBelief | MindReflection] = [*handle._beliefs.values()]
    entries += handle._reflections.values()
    archived = [e for e in entries if e.expires_at is not None and e.expires_at <= cutoff]
    for entry in archived:
        if entry.id in handle._purged or entry.id in handle.draft.beliefs:
            continue
        if handle.store.delete(handle.namespace, entry_key(entry)):
            purged += 1
            logger.info("purged %s, expired at %d", entry_key(entry), entry.expires_at)
        handle._purged.add(entry.id)
    return purged


def require_room(handle: AgentMindHandle, kind: str) -> None:
    """Refuses a new entry of ``kind`` once the namespace holds ``max_entries`` (after purging
    what expired long enough ago)."""
    quota = handle.layer.max_run_entries
    drafted = handle.draft.created_entries()
    if drafted >= quota:
        raise LimitExceededError(
            f"this run already added {drafted:,} entries, the most one run may add "
            f"(max_run_entries); restate existing beliefs to update them instead",
            setting="max_run_entries",
            size=drafted + 1,
            limit=quota,
        )
    limit = handle.layer.max_entries
    count = entry_count(handle)
    if count >= limit and purge_expired(handle):
        count = entry_count(handle)
    if count >= limit:
        raise LimitExceededError(
            f"this mind already holds {count:,} entries, its limit (max_entries), so a new "
            f"{kind} cannot be added; restate an existing belief to update it instead",
            setting="max_entries",
            size=count + 1,
            limit=limit,
        )


def _ttl(expires_in: str | None, default: int | None, what: str) -> int | None:
    if expires_in is None:
        return default
    try:
        return parse_duration(expires_in, what=what)
    except InvalidInputError as exc:
        raise ToolError(str(exc), code="invalid_arguments") from None
