"""AgentMind's seven tools: their JSON Schemas (toolpack Agent Mind's parameter names) and handlers.

Each handler turns the model's camelCase arguments into a call on the run's
:class:`~memstrata.layers.mind.handle.AgentMindHandle`; the handle validates and raises
:class:`~memstrata.exceptions.ToolError`, which the stack returns as an error payload.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memstrata.layers.mind.entries import CONFIDENCE_LEVELS, GOAL_PRIORITIES, GOAL_STATUSES
from memstrata.prompts import (
    MIND_BELIEVE_DESCRIPTION,
    MIND_COMPLETE_GOAL_DESCRIPTION,
    MIND_RECALL_DESCRIPTION,
    MIND_REFLECT_DESCRIPTION,
    MIND_SET_GOAL_DESCRIPTION,
    MIND_UNPIN_DESCRIPTION,
    MIND_UPDATE_GOAL_DESCRIPTION,
)
from memstrata.tools import Tool, frozen

if TYPE_CHECKING:
    from memstrata.layers.mind.handle import AgentMindHandle

MAX_CONTENT_CHARS = 4000
MAX_TAGS = 32
MAX_TAG_CHARS = 64
MAX_RECALL_LIMIT = 50

_TAGS_SCHEMA = {
    "type": "array",
    "items": {"type": "string", "minLength": 1, "maxLength": MAX_TAG_CHARS},
    "maxItems": MAX_TAGS,
}
_TEXT = {"type": "string", "minLength": 1, "maxLength": MAX_CONTENT_CHARS}


def _schema(required: list[str], **properties: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


# The tools' schemas, built once and read-only: every run shares them and binds only the
# handlers to its handle.
_NULLABLE = {"type": ["string", "null"], "maxLength": MAX_CONTENT_CHARS}

_RECALL_SCHEMA = frozen(
    _schema(
        [],
        query={**_TEXT, "description": "Free-text query (needed unless pinned=true)."},
        type={"type": "string", "enum": ["belief", "reflection", "goal", "all"]},
        status={"type": "string", "enum": list(GOAL_STATUSES)},
        tags=_TAGS_SCHEMA,
        pinned={"type": ["boolean", "null"]},
        includeExpired={"type": ["boolean", "null"]},
        threshold={"type": ["number", "null"], "minimum": 0, "maximum": 1},
        limit={"type": ["integer", "null"], "minimum": 1, "maximum": MAX_RECALL_LIMIT},
    )
)

_BELIEVE_SCHEMA = frozen(
    _schema(
        ["content"],
        content={**_TEXT, "description": "The belief statement."},
        confidence={"type": "string", "enum": list(CONFIDENCE_LEVELS)},
        tags=_TAGS_SCHEMA,
        expiresIn={**_NULLABLE, "description": "TTL such as '7d' or '90d'."},
        allowDowngrade={"type": ["boolean", "null"]},
    )
)

_REFLECT_SCHEMA = frozen(
    _schema(
        ["content"],
        content={**_TEXT, "description": "The observation."},
        pin={"type": ["boolean", "null"]},
        tags=_TAGS_SCHEMA,
        relatedTo={**_NULLABLE, "description": "Context, e.g. a PR or task id."},
    )
)

_UNPIN_REFLECTION_SCHEMA = frozen(
    _schema(["id"], id={"type": "string", "minLength": 1, "maxLength": 64})
)

_SET_GOAL_SCHEMA = frozen(
    _schema(
        ["description"],
        description={**_TEXT, "description": "The goal statement."},
        priority={"type": "string", "enum": list(GOAL_PRIORITIES)},
        tags=_TAGS_SCHEMA,
        dueBy={**_NULLABLE, "description": "ISO date ('2026-06-01') or duration ('30d')."},
    )
)

_UPDATE_GOAL_SCHEMA = frozen(
    _schema(
        ["id"],
        id={"type": "string", "minLength": 1, "maxLength": 64},
        description=_NULLABLE,
        priority={"type": ["string", "null"], "enum": [*GOAL_PRIORITIES, None]},
        progress=_NULLABLE,
    )
)

_COMPLETE_GOAL_SCHEMA = frozen(
    _schema(
        ["id"],
        id={"type": "string", "minLength": 1, "maxLength": 64},
        outcome=_NULLABLE,
    )
)


def _args(args: dict[str, Any]) -> dict[str, Any]:
    """OpenAI strict mode pads optional fields with null: treat null as absent."""
    return {k: v for k, v in args.items() if v is not None}


def mind_tools(handle: AgentMindHandle) -> list[Tool]:
    """The seven tools, bound to one run's handle; argument names are toolpack Agent Mind's."""

    def recall(args: dict[str, Any]) -> list[dict[str, Any]]:
        a = _args(args)
        found = handle.recall(
            a.get("query"),
            type=a.get("type", "all"),
            status=a.get("status", "active"),
            tags=a.get("tags"),
            pinned=a.get("pinned"),
            include_expired=a.get("includeExpired", False),
            threshold=a.get("threshold"),
            limit=int(a.get("limit", 5)),
        )
        return [r.to_payload() for r in found]

    def believe(args: dict[str, Any]) -> dict[str, Any]:
        a = _args(args)
        return handle.believe(
            a["content"],
            confidence=a.get("confidence", "medium"),
            tags=a.get("tags"),
            expires_in=a.get("expiresIn"),
            allow_downgrade=a.get("allowDowngrade", False),
        )

    def reflect(args: dict[str, Any]) -> dict[str, Any]:
        a = _args(args)
        return handle.reflect(
            a["content"], pin=a.get("pin", False), tags=a.get("tags"), related_to=a.get("relatedTo")
        )

    def unpin(args: dict[str, Any]) -> dict[str, Any]:
        return handle.unpin_reflection(args["id"])

    def set_goal(args: dict[str, Any]) -> dict[str, Any]:
        a = _args(args)
        return handle.set_goal(
            a["description"],
            priority=a.get("priority", "normal"),
            tags=a.get("tags"),
            due_by=a.get("dueBy"),
        )

    def update_goal(args: dict[str, Any]) -> dict[str, Any]:
        a = _args(args)
        return handle.update_goal(
            a["id"],
            description=a.get("description"),
            priority=a.get("priority"),
            progress=a.get("progress"),
        )

    def complete_goal(args: dict[str, Any]) -> dict[str, Any]:
        a = _args(args)
        return handle.complete_goal(a["id"], outcome=a.get("outcome"))

    return [
        Tool("mind_recall", MIND_RECALL_DESCRIPTION, _RECALL_SCHEMA, recall),
        Tool("mind_believe", MIND_BELIEVE_DESCRIPTION, _BELIEVE_SCHEMA, believe),
        Tool("mind_reflect", MIND_REFLECT_DESCRIPTION, _REFLECT_SCHEMA, reflect),
        Tool("mind_unpin_reflection", MIND_UNPIN_DESCRIPTION, _UNPIN_REFLECTION_SCHEMA, unpin),
        Tool("mind_set_goal", MIND_SET_GOAL_DESCRIPTION, _SET_GOAL_SCHEMA, set_goal),
        Tool("mind_update_goal", MIND_UPDATE_GOAL_DESCRIPTION, _UPDATE_GOAL_SCHEMA, update_goal),
        Tool(
            "mind_complete_goal",
            MIND_COMPLETE_GOAL_DESCRIPTION,
            _COMPLETE_GOAL_SCHEMA,
            complete_goal,
        ),
    ]
