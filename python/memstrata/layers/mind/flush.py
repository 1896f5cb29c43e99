"""The flush: a run's draft committed in one store transaction when the run closes.

The flush writes through ``Store.update_many_since`` from the mark taken before the load, so
it sees what other runs committed meanwhile: it holds the caps on active goals and pinned
reflections against that, and folds each belief this run created into an equal one committed
since (``handle.folded`` maps the ids). Each entry is written by a small writer that merges
with what the store holds now.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import numpy.typing as npt

from memstrata._core import VectorSet
from memstrata.embedders import embed_texts
from memstrata.exceptions import InvalidInputError, StorageRaceError
from memstrata.layers.mind.conflicts import facts_disagree
from memstrata.layers.mind.entries import (
    MindBelief,
    MindGoal,
    MindReflection,
    decode_vector,
    entry_from_payload,
    now_ms,
)
from memstrata.layers.mind.records import (
    copy_goal,
    entry_key,
    merge_confidence,
    new_id,
    previous_after,
    set_aside_key,
    stored_payload,
    union,
)
from memstrata.layers.mind.writes import _Draft, _GoalPatch, entry_count
from memstrata.stores import Item
from memstrata.stores.base import Updater

if TYPE_CHECKING:
    from memstrata.layers.mind.handle import AgentMindHandle

logger = logging.getLogger("memstrata.agent_mind")


def flush(handle: AgentMindHandle, *, error: bool) -> int:
    """See :meth:`AgentMindHandle.flush`."""
    if handle._mark is None:
        raise InvalidInputError("the handle was never loaded: open it with AgentMind.open")
    if not isinstance(error, bool):
        # A truthy "no" would make this an error flush: goal changes dropped, entries flagged.
        raise InvalidInputError(f"error must be True or False, got {error!r}")
    draft, handle.draft = handle.draft, _Draft()
    if draft.empty():
        return 0
    model = handle.layer.embedder.model
    downgrades = draft.downgrades
    updates: dict[str, Updater] = {}
    created: list[tuple[MindBelief, npt.NDArray[np.float32], bool]] = []
    # Stored beliefs this failed run restated, each with the id its restatement is recorded
    # under if the stored one is good (decided in the flush transaction, see _restated).
    restated: list[tuple[MindBelief, npt.NDArray[np.float32], str]] = []
    restatements: dict[str, tuple[MindBelief, npt.NDArray[np.float32], bool]] = {}
    for belief, vector, stored_before in draft.beliefs.values():
        belief.error = error  # a clean restatement clears a crashed run's flag
        if stored_before and error:
            restated.append((belief, vector, new_id("b")))
            continue
        if not stored_before:
            created.append((belief, vector, belief.id in downgrades))
        else:
            # Written instead if the stored belief was deleted since the run loaded it: what
            # this run said, as a belief of its own, with nothing of the deleted one.
            confidence, tags = draft.said.get(belief.id, (belief.confidence, belief.tags))
            fresh = msgspec.structs.replace(
                belief,
                confidence=confidence,
                tags=list(tags),
                previous=[],
                created_at=belief.updated_at,
            )
            restatements[entry_key(belief)] = (fresh, vector, belief.id in downgrades)
        updates[entry_key(belief)] = _belief_writer(
            belief, vector, model, stored_before, belief.id in downgrades
        )
    for reflection, vector in draft.reflections.values():
        reflection.error = error
        updates[entry_key(reflection)] = _constant(stored_payload(reflection, vector, model))
    if not error:
        for goal in draft.goals.values():
            updates[entry_key(goal)] = _new_goal_writer(goal.to_payload())
        now = now_ms()
        goals, reflections = handle._goals, handle._reflections
        for goal_id, patch in draft.goal_patches.items():
            updates[entry_key(goals[goal_id])] = _goal_writer(goals[goal_id], patch, now)
        for reflection_id in draft.unpins:
            updates[entry_key(reflections[reflection_id])] = _unpin_writer(
                reflections[reflection_id], now
            )
    if not updates and not restated:
        return 0
    folds: dict[str, str] = {}
    kept_apart: list[tuple[str, str | None]] = []
    # Entries this run updates that were deleted since it loaded them: their updates are
    # dropped, so a deletion (an erased memory) is never undone by a copy the run held.
    deleted: set[str] = set()
    # The keys of every entry deleted (or expired) since the load, read from the store only
    # once the caps would drop a goal or unpin a reflection (see _DeletionsUnknown).
    gone: set[str] | None = None

    def plan(changed: list[Item]) -> dict[str, Updater]:
        folds.clear()
        kept_apart.clear()
        planned = {key: write for key, write in updates.items() if key not in deleted}
        # A restatement of a deleted belief is new: written, or folded into an equal belief
        # committed since, as the beliefs this run created are.
        new = [*created, *(restatements[key] for key in deleted if key in restatements)]
        for belief, vector, allow_downgrade in new[len(created) :]:
            planned[entry_key(belief)] = _belief_writer(
                belief, vector, model, False, allow_downgrade
            )
        if restated:
            kept_apart.extend(_restated(handle, draft, restated, changed, planned, deleted))
        _set_aside_malformed(changed, planned)
        _hold_caps(handle, draft, changed, planned, deleted, gone, error=error)
        targets = _duplicates_committed_since_load(handle, new, changed, error=error) if new else {}
        for belief, vector, allow_downgrade in new:
            target = targets.get(belief.id)
            if target is None:
                continue
            del planned[entry_key(belief)]
            key = entry_key(target)
            planned[key] = _fold_writer(
                belief, vector, model, allow_downgrade, target, planned.get(key)
            )
            folds[belief.id] = target.id
        return planned

    # Each retry follows a deletion met inside the transaction (rolled back, nothing written)
    # and plans without what it deleted: at most one per updated entry, one per fold, and one
    # to read what was deleted when the caps bite.
    for _ in range(len(updates) + len(created) + len(restated) + 2):
        try:
            written = handle.store.update_many_since(handle.namespace, handle._mark, plan)
            break
        except _EntryDeleted as exc:
            if exc.key is not None:
                deleted.add(exc.key)
                logger.info("%s was deleted since this run loaded it", exc.key)
        except _DeletionsUnknown:
            try:
                gone = _deleted_since_load(handle)
            except Exception:
                handle.draft = draft
                raise
        except Exception:
            # The transaction rolled back, nothing written: the draft stays for the next flush.
            # (An interruption may come once the write is done: the draft it wrote is not kept.)
            handle.draft = draft
            raise
    else:
        handle.draft = draft
        raise StorageRaceError(f"mind {'/'.join(handle.namespace)} kept changing during a flush")
    for created_id, target_id in folds.items():
        logger.info("belief %s duplicated %s, committed meanwhile: folded", created_id, target_id)
    for stored_id, aside_id in kept_apart:
        if aside_id is None:
            logger.warning(
                "belief %s was restated in a failed run with no room left for the restatement "
                "(max_entries or max_run_entries): dropped, the stored belief kept",
                stored_id,
            )
        else:
            logger.info(
                "belief %s was restated in a failed run: recorded as %s, flagged error; the "
                "stored belief kept as it was",
                stored_id,
                aside_id,
            )
    handle.folded.update(folds)
    return len(written)


def _restated(
    handle: AgentMindHandle,
    draft: _Draft,
    restated: list[tuple[MindBelief, npt.NDArray[np.float32], str]],
    changed: list[Item],
    planned: dict[str, Updater],
    deleted: set[str],
) -> list[tuple[str, str | None]]:
    """Plans the writes of stored beliefs a failed run restated. A good stored belief (not
    itself from a failed run) is never replaced by a failed run's word: the restatement is
    recorded beside it as a belief of its own, flagged error, with what the run said (its
    content, confidence and tags), within ``max_entries`` and ``max_run_entries`` (past them
    it is dropped: the stored belief stays, the safe default, as for a failed run's unpins).
    A stored belief that is itself from a failed run is updated in place, still flagged. Runs
    inside the flush transaction: ``changed`` holds what other runs wrote since the load.
    Returns, for each restatement recorded apart or dropped, the stored id and the new one
    (None: dropped)."""
    layer = handle.layer
    model = layer.embedder.model
    now_stored: dict[str, MindBelief] = {}
    for item in changed:
        with suppress(InvalidInputError):
            entry = entry_from_payload(item.value)
            if isinstance(entry, MindBelief) and item.key == entry_key(entry):
                now_stored[entry.id] = entry
    room = min(
        layer.max_entries - entry_count(handle),
        layer.max_run_entries - draft.created_entries(),
    )
    apart: list[tuple[str, str | None]] = []
    for belief, vector, aside_id in restated:
        stored = now_stored.get(belief.id, handle._beliefs.get(belief.id))
        if entry_key(belief) in deleted:
            stored = None  # deleted since the load: the restatement is recorded apart
        if stored is not None and stored.error:
            planned[entry_key(belief)] = _belief_writer(
                belief, vector, model, True, belief.id in draft.downgrades
            )
            continue
        if room <= 0:
            apart.append((belief.id, None))
            continue
        room -= 1
        confidence, tags = draft.said.get(belief.id, (belief.confidence, belief.tags))
        record = MindBelief(
            id=aside_id,
            content=belief.content,
            confidence=confidence,
            tags=list(tags),
            expires_at=belief.expires_at,
            created_at=belief.updated_at,
            updated_at=belief.updated_at,
            error=True,
        )
        planned[entry_key(record)] = _constant(stored_payload(record, vector, model))
        apart.append((belief.id, aside_id))
    return apart


def _set_aside_malformed(changed: list[Item], planned: dict[str, Updater]) -> None:
    """Copies each entry this flush writes over that another program left malformed since the
    load to ``unreadable/<key>@<ms>`` (its value, key and when; see ``set_aside_key``), in the
    flush transaction, so the write replaces nothing without a trace. Loads skip those records
    silently. A key malformed before the load holds no entry the run could write: only
    ``changed`` can."""
    now = now_ms()
    for item in changed:
        if item.key not in planned:
            continue
        try:
            entry_from_payload(item.value)
        except InvalidInputError as exc:
            aside = set_aside_key(item.key, now)
            record = {"key": item.key, "value": item.value, "setAsideAt": now}
            planned[aside] = _constant(record)
            logger.warning(
                "mind entry %r was malformed (%s); copied to %r before the flush wrote it",
                item.key,
                exc,
                aside,
            )


def _deleted_since_load(handle: AgentMindHandle) -> set[str]:
    """The keys of the entries this run loaded that were deleted or expired since, read
    outside the flush transaction (a deletion after it is counted, as before, until the next
    run: the safe side of a cap). A key written again since is in the transaction's changes,
    which count it as it is now."""
    since = handle.store.changes(handle.namespace, handle._mark)
    if not since.complete:
        return set(since.removed)
    # The mark is older than the deletions the store keeps: what is no longer there is gone.
    present = {item.key for item in since.items}
    loaded = {entry_key(goal) for goal in handle._goals.values()}
    loaded.update(entry_key(reflection) for reflection in handle._reflections.values())
    return loaded - present


def _hold_caps(
    handle: AgentMindHandle,
    draft: _Draft,
    changed: list[Item],
    planned: dict[str, Updater],
    deleted: set[str],
    gone: set[str] | None,
    *,
    error: bool,
) -> None:
    """Keeps the caps on active goals and pinned reflections against what is committed now
    (runs that overlap each checked them against what they loaded): a goal past the cap is
    dropped, a reflection past it is written unpinned, both logged. What was deleted since
    the load (an erased entry) counts for nothing: ``deleted``, met by this flush's writes,
    and ``gone``, every deletion, once read; a cap that would bite before it is read raises
    _DeletionsUnknown. Runs inside the flush transaction; an error flush drops this run's
    unpins, so its pins can pass the cap too."""
    layer = handle.layer
    now = now_ms()
    erased = deleted if gone is None else deleted | gone
    active = {
        i for i, g in handle._goals.items() if g.status == "active" and entry_key(g) not in erased
    }
    pinned = {
        i
        for i, r in handle._reflections.items()
        if r.pinned and not r.expired(now) and entry_key(r) not in erased
    }
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
        room = layer.max_goals - len(active - set(draft.goals))
        if gone is None and len(draft.goals) > max(0, room):
            raise _DeletionsUnknown
        for goal in list(draft.goals.values())[max(0, room) :]:
            del planned[entry_key(goal)]
            logger.warning(
                "goal %s dropped at flush: runs that overlapped took the %d active goals",
                goal.id,
                layer.max_goals,
            )
    model = layer.embedder.model
    room = layer.max_pinned_reflections - len(pinned - set(draft.reflections))
    pins = [(r, v) for r, v in draft.reflections.values() if r.pinned]
    if gone is None and len(pins) > max(0, room):
        raise _DeletionsUnknown
    for reflection, vector in pins[max(0, room) :]:
        unpinned = msgspec.structs.replace(reflection, pinned=False)
        planned[entry_key(reflection)] = _constant(stored_payload(unpinned, vector, model))
        logger.warning(
            "reflection %s written unpinned at flush: the %d standing rules are taken",
            reflection.id,
            layer.max_pinned_reflections,
        )


def _duplicates_committed_since_load(
    handle: AgentMindHandle,
    created: list[tuple[MindBelief, npt.NDArray[np.float32], bool]],
    changed: list[Item],
    *,
    error: bool,
) -> dict[str, MindBelief]:
    """For each belief this run created, the live belief it duplicates (at least
    ``deduplication_threshold`` similar, the most similar) among those other runs committed
    since this one loaded: a good one before one from a failed run, as ``mind_believe``
    chooses. On an error flush, only one from a failed run: folding into a good one would
    replace what it says and take it out of the header with the error flag. Runs inside the
    flush transaction."""
    layer = handle.layer
    now = now_ms()
    model, dim = layer.embedder.model, layer.embedder.dim
    candidates: list[MindBelief] = []
    vectors: list[npt.NDArray[np.float32] | None] = []
    for item in changed:
        try:
            entry = entry_from_payload(item.value)
        except InvalidInputError:
            continue
        if not isinstance(entry, MindBelief) or item.key != entry_key(entry) or entry.expired(now):
            continue
        if error and not entry.error:
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
        fresh = np.asarray(embed_texts(layer.embedder, texts), dtype=np.float32)
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
    threshold = layer.deduplication_threshold
    out = {}
    for belief, vector, _ in created:
        # The most similar one that does not say another fact (a number, a date, a negation).
        similar = index.top_k(vector, len(placeable), threshold=threshold)
        agreeing = [i for i, _ in similar if not facts_disagree(belief.content, by_id[i].content)]
        found = next((i for i in agreeing if not by_id[i].error), None)
        if found is None and agreeing:
            found = agreeing[0]
        if found is not None:
            out[belief.id] = by_id[found]
    return out


# Store writers (run inside the flush transaction) ----------------------------------------------


class _EntryDeleted(Exception):
    """An entry a writer updates is no longer stored: deleted since the run loaded it (its
    ``key``), or the target of a fold deleted since the plan (None). Raised inside the flush
    transaction, which rolls back; the flush plans again without it."""

    def __init__(self, key: str | None) -> None:
        super().__init__(key)
        self.key = key


class _DeletionsUnknown(Exception):
    """A cap would drop a goal or unpin a reflection, counting entries the run loaded that may
    have been deleted since: raised inside the flush transaction, which rolls back; the flush
    reads what was deleted since the load and plans again."""


def _constant(value: Any) -> Callable[[Any], Any]:
    return lambda _current: value


def _new_goal_writer(payload: dict[str, Any]) -> Callable[[Any], Any]:
    """A goal set in this run. Its key is new, so a completed goal stored under it is this
    run's own completion, which ``complete_goal`` writes at once: one whose answer was lost
    (the connection ended after the write) left the goal in the draft. Kept, never written
    over with the draft's active goal."""

    def write(current: Any) -> Any:
        if isinstance(current, dict) and current.get("status") == "completed":
            return current
        return payload

    return write


def _belief_writer(
    belief: MindBelief,
    vector: npt.NDArray[np.float32],
    model: str,
    stored_before: bool,
    allow_downgrade: bool,
) -> Callable[[Any], Any]:
    def write(current: Any) -> Any:
        if stored_before and current is None:
            raise _EntryDeleted(entry_key(belief))  # planned again as a new belief
        if stored_before and isinstance(current, dict):
            try:
                now_stored = MindBelief.from_payload(current)
            except InvalidInputError:
                now_stored = None
            if now_stored is not None:
                belief.confidence = merge_confidence(
                    now_stored.confidence, belief.confidence, allow_downgrade
                )
                belief.tags = union(now_stored.tags, belief.tags)
                belief.created_at = now_stored.created_at
                # Another run may have restated it since this one loaded: keep what it said.
                belief.previous = previous_after(now_stored, belief.content, belief.previous)
        return stored_payload(belief, vector, model)

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
        if current is None:
            raise _EntryDeleted(None)  # planned again: the belief is written as it is
        value = before(current) if before is not None else current
        base = target
        if isinstance(value, dict):
            with suppress(InvalidInputError):  # unreadable now: merge into what the plan saw
                base = MindBelief.from_payload(value)
        merged = MindBelief(
            id=target.id,
            content=belief.content,
            confidence=merge_confidence(base.confidence, belief.confidence, allow_downgrade),
            tags=union(base.tags, belief.tags),
            expires_at=belief.expires_at,
            created_at=base.created_at,
            # Later than what it replaces, so whoever compares versions sees a new one.
            updated_at=max(belief.updated_at, base.updated_at + 1),
            error=belief.error,
            previous=previous_after(base, belief.content, belief.previous),
        )
        return stored_payload(merged, vector, model)

    return write


def _goal_writer(goal: MindGoal, patch: _GoalPatch, now: int) -> Callable[[Any], Any]:
    def write(current: Any) -> Any:
        if current is None:
            raise _EntryDeleted(entry_key(goal))
        try:
            base = MindGoal.from_payload(current)
        except InvalidInputError:
            base = copy_goal(goal)
        return patch.apply(base, now).to_payload()

    return write


def _unpin_writer(reflection: MindReflection, now: int) -> Callable[[Any], Any]:
    def write(current: Any) -> Any:
        if current is None:
            raise _EntryDeleted(entry_key(reflection))
        if isinstance(current, dict):
            return {**current, "pinned": False, "updatedAt": now}
        return {**reflection.to_payload(), "pinned": False, "updatedAt": now}

    return write
