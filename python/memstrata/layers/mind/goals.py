"""Goals: created and updated in the draft, completed at once (``mind_complete_goal`` is the
one write that bypasses the draft, so a completion survives an error flush)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memstrata.exceptions import InvalidInputError, ToolError
from memstrata.layers.mind.checks import check_content, check_tags
from memstrata.layers.mind.entries import (
    GOAL_PRIORITIES,
    GoalPriority,
    MindGoal,
    next_sequence,
    now_ms,
    parse_due_by,
)
from memstrata.layers.mind.records import copy_goal, entry_key, new_id
from memstrata.layers.mind.writes import _GoalPatch, require_room

if TYPE_CHECKING:
    from memstrata.layers.mind.handle import AgentMindHandle


def active_goal_count(handle: AgentMindHandle) -> int:
    """See :meth:`AgentMindHandle.active_goal_count`."""
    committed = sum(1 for g in handle._goals.values() if g.status == "active")
    return committed + len(handle.draft.goals)


def set_goal(
    handle: AgentMindHandle,
    description: str,
    *,
    priority: GoalPriority,
    tags: list[str] | None,
    due_by: str | None,
) -> dict[str, Any]:
    """See :meth:`AgentMindHandle.set_goal`."""
    description = check_content(description, "description")
    if priority not in GOAL_PRIORITIES:
        raise ToolError(
            f"priority must be one of {', '.join(GOAL_PRIORITIES)}", code="invalid_arguments"
        )
    tag_list = check_tags(tags or [])
    now = now_ms()
    try:
        due = None if due_by is None else parse_due_by(due_by, now=now)
    except InvalidInputError as exc:
        raise ToolError(str(exc), code="invalid_arguments") from None
    require_room(handle, "goal")
    cap = handle.layer.max_goals
    if active_goal_count(handle) >= cap:
        raise ToolError(
            f"there are already {active_goal_count(handle)} active goals, the cap is {cap}; "
            "complete one with mind_complete_goal first",
            code="cap_reached",
        )
    goal = MindGoal(
        id=new_id("g"),
        description=description,
        priority=priority,
        status="active",
        tags=tag_list,
        due_by=due,
        created_at=now,
        updated_at=now,
        sequence=next_sequence(),
    )
    handle.draft.goals[goal.id] = goal
    return {"status": "ok", "id": goal.id}


def update_goal(
    handle: AgentMindHandle,
    id: str,
    *,
    description: str | None,
    priority: GoalPriority | None,
    progress: str | None,
) -> dict[str, Any]:
    """See :meth:`AgentMindHandle.update_goal`."""
    if description is not None:
        description = check_content(description, "description")
    if priority is not None and priority not in GOAL_PRIORITIES:
        raise ToolError(
            f"priority must be one of {', '.join(GOAL_PRIORITIES)}", code="invalid_arguments"
        )
    if progress is not None:
        progress = check_content(progress, "progress")
    patch = _GoalPatch(description, priority, [progress] if progress is not None else [])
    if isinstance(id, str) and id in handle.draft.goals:
        patch.apply(handle.draft.goals[id], now_ms())
        return {"status": "ok"}
    goal = _active_goal(handle, id)
    pending = handle.draft.goal_patches.setdefault(goal.id, _GoalPatch())
    if description is not None:
        pending.description = description
    if priority is not None:
        pending.priority = priority
    pending.progress += patch.progress
    return {"status": "ok"}


def complete_goal(handle: AgentMindHandle, id: str, *, outcome: str | None) -> dict[str, Any]:
    """See :meth:`AgentMindHandle.complete_goal`."""
    if outcome is not None:
        outcome = check_content(outcome, "outcome")
    now = now_ms()
    draft = handle.draft
    if isinstance(id, str) and id in draft.goals:
        # Taken out of the draft once stored: a write the store refuses loses nothing.
        goal = copy_goal(draft.goals[id])
        goal.status, goal.outcome, goal.updated_at = "completed", outcome, now
        handle.store.put(handle.namespace, entry_key(goal), goal.to_payload())
        del draft.goals[id]
        handle._goals = {**handle._goals, goal.id: goal}
        handle._completed_goals += 1
        return {"status": "ok"}
    goal = _active_goal(handle, id)
    pending = draft.goal_patches.pop(goal.id, None)

    def complete(current: Any) -> Any:
        if current is None:
            # Deleted since this run loaded it (an erased memory): completing it would store
            # the run's copy again.
            raise ToolError(
                f"no goal with id {goal.id!r}: it was deleted; find ids with "
                "mind_recall(type='goal')",
                code="not_found",
            )
        try:
            stored = MindGoal.from_payload(current)
        except InvalidInputError:
            stored = copy_goal(goal)
        if stored.status == "completed":
            raise ToolError(f"goal {goal.id!r} is already completed", code="not_active")
        if pending is not None:
            pending.apply(stored, now)
        stored.status, stored.outcome, stored.updated_at = "completed", outcome, now
        return stored.to_payload()

    try:
        item = handle.store.update(handle.namespace, entry_key(goal), complete)
    except Exception:
        # Nothing written (already completed, or the store refused): the updates stay.
        if pending is not None:
            draft.goal_patches[goal.id] = pending
        raise
    handle._goals = {**handle._goals, goal.id: MindGoal.from_payload(item.value)}
    handle._completed_goals += 1
    return {"status": "ok"}


def _active_goal(handle: AgentMindHandle, id: Any) -> MindGoal:
    if not isinstance(id, str):
        raise ToolError("id must be a string", code="invalid_arguments")
    goal = handle._goals.get(id)
    if goal is None:
        raise ToolError(
            f"no goal with id {id!r}; find ids with mind_recall(type='goal')", code="not_found"
        )
    if goal.status != "active":
        raise ToolError(f"goal {id!r} is already completed", code="not_active")
    return goal
