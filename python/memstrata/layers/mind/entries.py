"""AgentMind's data: the entry types, their enumerations, durations, and their stored form.

The Python fields are snake_case; ``to_payload`` gives toolpack Agent Mind's camelCase shape (what
the tools return and what is stored), ``from_payload`` reads it back and refuses malformed data.
Times are Unix milliseconds, as in toolpack Agent Mind.
"""

from __future__ import annotations

import base64
import itertools
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from datetime import date, datetime, timedelta, timezone
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from memstrata.exceptions import InvalidInputError

GoalStatus = Literal["active", "completed"]
GoalPriority = Literal["low", "normal", "high"]
ConfidenceLevel = Literal["low", "medium", "high"]
MindEntryType = Literal["goal", "belief", "reflection"]

GOAL_STATUSES: tuple[GoalStatus, ...] = ("active", "completed")
GOAL_PRIORITIES: tuple[GoalPriority, ...] = ("low", "normal", "high")
CONFIDENCE_LEVELS: tuple[ConfidenceLevel, ...] = ("low", "medium", "high")
ENTRY_TYPES: tuple[MindEntryType, ...] = ("goal", "belief", "reflection")

_DURATION = re.compile(r"^\s*(\d{1,9})\s*([dhms])\s*$")
_UNIT_SECONDS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")


def now_ms() -> int:
    return int(time.time() * 1000)


_sequence = itertools.count(1)


def next_sequence() -> int:
    """A number larger than any this process gave before: orders entries created in one
    millisecond (``createdAt`` alone cannot)."""
    return next(_sequence)


def parse_duration(text: str, *, what: str = "duration") -> int:
    """``"30d"``, ``"12h"``, ``"15m"``, ``"90s"`` → milliseconds.

    Raises:
        InvalidInputError: Anything else (naming ``what`` and the accepted forms).
    """
    if not isinstance(text, str):
        raise InvalidInputError(f"{what} must be a string like '30d', got {type(text).__name__}")
    match = _DURATION.match(text)
    if match is None or int(match.group(1)) == 0:
        raise InvalidInputError(
            f"{what} {text!r} is not a duration: use a positive whole number followed by "
            "d (days), h (hours), m (minutes) or s (seconds), e.g. '30d'"
        )
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2)] * 1000


def parse_due_by(text: str, *, now: int) -> str:
    """A goal deadline: an ISO 8601 date/time, or a duration from now; returns ISO 8601 text
    (a date stays a date; a duration gives the UTC date it lands on)."""
    if not isinstance(text, str):
        raise InvalidInputError(f"dueBy must be a string, got {type(text).__name__}")
    if _ISO_DATE.match(text.strip()):
        value = text.strip()
        try:
            if len(value) == 10:
                date.fromisoformat(value)
            else:
                datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInputError(f"dueBy {text!r} is not a valid ISO 8601 date") from None
        return value
    ms = parse_duration(text, what="dueBy")
    due = datetime.fromtimestamp(now / 1000, tz=timezone.utc) + timedelta(milliseconds=ms)
    return due.date().isoformat()


def encode_vector(vector: npt.NDArray[np.float32]) -> str:
    """A float32 vector as base64 text: a quarter of the size of a JSON list, and exact."""
    return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")


def decode_vector(text: Any) -> npt.NDArray[np.float32] | None:
    """The vector ``encode_vector`` wrote, or None for anything that is not one."""
    if not isinstance(text, str):
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        return None
    if not raw or len(raw) % 4:
        return None
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


_Class = TypeVar("_Class", bound=type)


def _slotted(cls: _Class) -> _Class:
    """The dataclass ``cls`` rebuilt with ``__slots__`` for its fields, as
    ``dataclass(slots=True)`` does from Python 3.10 (the package supports 3.9).

    A mind holds up to 100,000 entries: without an instance ``__dict__`` each is about half
    the size, and quicker to build.
    """
    names = tuple(f.name for f in fields(cls))
    skip = {*names, "__dict__", "__weakref__"}
    body = {k: v for k, v in cls.__dict__.items() if k not in skip}
    body["__slots__"] = names
    slotted: _Class = type(cls)(cls.__name__, cls.__bases__, body)
    return slotted


def _opt(out: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        out[key] = value


def _str_list(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidInputError(f"{what} must be a list of str")
    return list(value)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(f"{what} must be a number of Unix milliseconds")
    return int(value)


def _choice(value: Any, allowed: tuple[str, ...], what: str) -> Any:
    if value not in allowed:
        raise InvalidInputError(f"{what} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be a string")
    return value


@_slotted
@dataclass
class MindGoal:
    """A goal tracked across runs (``type: 'goal'``)."""

    id: str
    description: str
    priority: GoalPriority = "normal"
    status: GoalStatus = "active"
    tags: list[str] = field(default_factory=list)
    due_by: str | None = None
    progress: list[str] = field(default_factory=list)
    outcome: str | None = None
    created_at: int = 0
    updated_at: int = 0
    sequence: int = 0  # memstrata's: orders goals created in one millisecond
    type: Literal["goal"] = "goal"

    def to_payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "type": "goal",
            "description": self.description,
            "priority": self.priority,
            "status": self.status,
            "tags": list(self.tags),
            "progress": list(self.progress),
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        }
        _opt(out, "dueBy", self.due_by)
        _opt(out, "outcome", self.outcome)
        if self.sequence:
            out["sequence"] = self.sequence
        return out

    @classmethod
    def from_payload(cls, p: dict[str, Any]) -> MindGoal:
        due_by, outcome = p.get("dueBy"), p.get("outcome")
        return cls(
            id=_text(p.get("id"), "id"),
            description=_text(p.get("description"), "description"),
            priority=_choice(p.get("priority"), GOAL_PRIORITIES, "priority"),
            status=_choice(p.get("status"), GOAL_STATUSES, "status"),
            tags=_str_list(p.get("tags", []), "tags"),
            due_by=None if due_by is None else _text(due_by, "dueBy"),
            progress=_str_list(p.get("progress", []), "progress"),
            outcome=None if outcome is None else _text(outcome, "outcome"),
            created_at=_int(p.get("createdAt"), "createdAt"),
            updated_at=_int(p.get("updatedAt"), "updatedAt"),
            sequence=_int(p.get("sequence", 0), "sequence"),
        )


MAX_PREVIOUS = 16


@_slotted
@dataclass
class MindBelief:
    """A fact the agent holds, with a confidence and usually an expiry (``type: 'belief'``).

    ``previous`` is memstrata's addition to toolpack Agent Mind's shape: the contents a restatement
    replaced, oldest first, each ``{"content", "updatedAt"}`` (the last ``MAX_PREVIOUS``), so
    that folding a belief into a similar one never destroys what it said before.
    """

    id: str
    content: str
    confidence: ConfidenceLevel = "medium"
    tags: list[str] = field(default_factory=list)
    expires_at: int | None = None
    created_at: int = 0
    updated_at: int = 0
    error: bool = False
    previous: list[dict[str, Any]] = field(default_factory=list)
    type: Literal["belief"] = "belief"

    def expired(self, now: int) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    def to_payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "type": "belief",
            "content": self.content,
            "confidence": self.confidence,
            "tags": list(self.tags),
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        }
        _opt(out, "expiresAt", self.expires_at)
        if self.error:
            out["error"] = True
        if self.previous:
            out["previous"] = [dict(p) for p in self.previous]
        return out

    @classmethod
    def from_payload(cls, p: dict[str, Any]) -> MindBelief:
        expires_at = p.get("expiresAt")
        return cls(
            id=_text(p.get("id"), "id"),
            content=_text(p.get("content"), "content"),
            confidence=_choice(p.get("confidence"), CONFIDENCE_LEVELS, "confidence"),
            tags=_str_list(p.get("tags", []), "tags"),
            expires_at=None if expires_at is None else _int(expires_at, "expiresAt"),
            created_at=_int(p.get("createdAt"), "createdAt"),
            updated_at=_int(p.get("updatedAt"), "updatedAt"),
            error=p.get("error") is True,
            previous=_previous(p.get("previous", [])),
        )


def _previous(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise InvalidInputError("previous must be a list")
    return [
        {
            "content": _text(item.get("content"), "previous content"),
            "updatedAt": _int(item.get("updatedAt"), "previous updatedAt"),
        }
        for item in value
        if isinstance(item, dict) or _fail("previous items must be objects")
    ]


def _fail(message: str) -> bool:
    raise InvalidInputError(message)


@_slotted
@dataclass
class MindReflection:
    """An observation about the agent's own work; pinned ones are standing rules.

    ``expires_at`` is memstrata's addition to toolpack Agent Mind's shape: set when a reflection
    TTL is configured (``ttl_defaults.reflection``), absent otherwise.
    """

    id: str
    content: str
    pinned: bool = False
    tags: list[str] = field(default_factory=list)
    related_to: str | None = None
    created_at: int = 0
    updated_at: int = 0
    error: bool = False
    expires_at: int | None = None
    type: Literal["reflection"] = "reflection"

    def expired(self, now: int) -> bool:
        return self.expires_at is not None and self.expires_at <= now

    def to_payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "type": "reflection",
            "content": self.content,
            "pinned": self.pinned,
            "tags": list(self.tags),
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        }
        _opt(out, "relatedTo", self.related_to)
        _opt(out, "expiresAt", self.expires_at)
        if self.error:
            out["error"] = True
        return out

    @classmethod
    def from_payload(cls, p: dict[str, Any]) -> MindReflection:
        related, expires_at = p.get("relatedTo"), p.get("expiresAt")
        pinned = p.get("pinned", False)
        if not isinstance(pinned, bool):
            raise InvalidInputError("pinned must be a boolean")
        return cls(
            id=_text(p.get("id"), "id"),
            content=_text(p.get("content"), "content"),
            pinned=pinned,
            tags=_str_list(p.get("tags", []), "tags"),
            related_to=None if related is None else _text(related, "relatedTo"),
            created_at=_int(p.get("createdAt"), "createdAt"),
            updated_at=_int(p.get("updatedAt"), "updatedAt"),
            error=p.get("error") is True,
            expires_at=None if expires_at is None else _int(expires_at, "expiresAt"),
        )


MindEntry = MindGoal | MindBelief | MindReflection


@dataclass
class MindRecallResult:
    """One ``mind_recall`` hit, toolpack Agent Mind's unified shape (``to_payload`` gives it as
    JSON)."""

    id: str
    type: MindEntryType
    content: str
    tags: list[str]
    created_at: int
    updated_at: int
    score: float | None = None
    priority: GoalPriority | None = None
    status: GoalStatus | None = None
    progress: list[str] | None = None
    outcome: str | None = None
    due_by: str | None = None
    confidence: ConfidenceLevel | None = None
    expires_at: int | None = None
    pinned: bool | None = None
    related_to: str | None = None
    error: bool | None = None
    previous: list[dict[str, Any]] | None = None

    @classmethod
    def of(cls, entry: MindEntry, score: float | None = None) -> MindRecallResult:
        if isinstance(entry, MindGoal):
            return cls(
                entry.id,
                "goal",
                entry.description,
                list(entry.tags),
                entry.created_at,
                entry.updated_at,
                score=score,
                priority=entry.priority,
                status=entry.status,
                progress=list(entry.progress),
                outcome=entry.outcome,
                due_by=entry.due_by,
            )
        common = (entry.id, entry.type, entry.content, list(entry.tags))
        if isinstance(entry, MindBelief):
            return cls(
                *common,
                entry.created_at,
                entry.updated_at,
                score=score,
                confidence=entry.confidence,
                expires_at=entry.expires_at,
                error=entry.error,
                previous=[dict(p) for p in entry.previous] or None,
            )
        return cls(
            *common,
            entry.created_at,
            entry.updated_at,
            score=score,
            pinned=entry.pinned,
            related_to=entry.related_to,
            expires_at=entry.expires_at,
            error=entry.error,
        )

    def to_payload(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "type": self.type,
            "content": self.content,
            "tags": list(self.tags),
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        }
        # Each optional field only when set, in this order. Spelled out: every recall hit
        # passes here, and a loop over (key, value) pairs cost twice as much.
        if self.score is not None:
            out["score"] = round(self.score, 4)
        if self.priority is not None:
            out["priority"] = self.priority
        if self.status is not None:
            out["status"] = self.status
        if self.progress is not None:
            out["progress"] = self.progress
        if self.outcome is not None:
            out["outcome"] = self.outcome
        if self.due_by is not None:
            out["dueBy"] = self.due_by
        if self.confidence is not None:
            out["confidence"] = self.confidence
        if self.expires_at is not None:
            out["expiresAt"] = self.expires_at
        if self.pinned is not None:
            out["pinned"] = self.pinned
        if self.related_to is not None:
            out["relatedTo"] = self.related_to
        if self.error is not None:
            out["error"] = self.error
        if self.previous is not None:
            out["previous"] = [dict(p) for p in self.previous]
        return out


def entry_from_payload(value: Any) -> MindEntry:
    """The entry a stored value holds; raises InvalidInputError for anything malformed."""
    if not isinstance(value, dict):
        raise InvalidInputError(f"a mind entry must be an object, got {type(value).__name__}")
    kind = value.get("type")
    if kind == "goal":
        return MindGoal.from_payload(value)
    if kind == "belief":
        return MindBelief.from_payload(value)
    if kind == "reflection":
        return MindReflection.from_payload(value)
    raise InvalidInputError(f"unknown mind entry type {kind!r}")


def entries_from_payloads(values: Iterable[Any]) -> list[MindEntry | InvalidInputError]:
    """The entries the stored ``values`` hold, in order; a malformed value gives, in its place,
    the :class:`InvalidInputError` :func:`entry_from_payload` raises for it.

    The same result as :func:`entry_from_payload` on each value, built faster for loading a
    whole namespace: a belief or reflection in exactly the shape memstrata writes (exact
    types, integer times, no stray values) is taken by one pass of checks; anything else,
    goals included, goes through :func:`entry_from_payload`, which accepts what it accepts
    (a float time, say) and names what is wrong with the rest.
    """
    out: list[MindEntry | InvalidInputError] = []
    append = out.append
    for value in values:
        entry: MindEntry | None = None
        if type(value) is dict:
            kind = value.get("type")
            if kind == "belief":
                entry = _belief_as_written(value)
            elif kind == "reflection":
                entry = _reflection_as_written(value)
        if entry is None:
            try:
                entry = entry_from_payload(value)
            except InvalidInputError as exc:
                append(exc)
                continue
        append(entry)
    return out


# The levels as the constants above: a loaded entry refers to these rather than holding its
# own copy of the text.
_CONFIDENCE: dict[str, ConfidenceLevel] = {level: level for level in CONFIDENCE_LEVELS}


def _tags_as_written(tags: Any) -> list[str] | None:
    if type(tags) is not list:
        return None
    for tag in tags:
        if type(tag) is not str:
            return None
    return list(tags)


def _previous_as_written(value: Any) -> list[dict[str, Any]] | None:
    if type(value) is not list:
        return None
    out = []
    for item in value:
        if type(item) is not dict:
            return None
        content, updated = item.get("content"), item.get("updatedAt")
        if type(content) is not str or type(updated) is not int:
            return None
        out.append({"content": content, "updatedAt": updated})
    return out


def _belief_as_written(p: dict[str, Any]) -> MindBelief | None:
    """``MindBelief.from_payload(p)`` for a payload in the written shape, else None."""
    id_, content = p.get("id"), p.get("content")
    created, updated = p.get("createdAt"), p.get("updatedAt")
    if type(id_) is not str or type(content) is not str:
        return None
    if type(created) is not int or type(updated) is not int:
        return None
    level, expires = p.get("confidence"), p.get("expiresAt")
    confidence = _CONFIDENCE.get(level) if type(level) is str else None
    tags = _tags_as_written(p.get("tags", ()))
    if confidence is None or tags is None or not (expires is None or type(expires) is int):
        return None
    previous = p.get("previous")
    if previous is None:
        if "previous" in p:
            return None
        previous = []
    else:
        previous = _previous_as_written(previous)
        if previous is None:
            return None
    return MindBelief(
        id_,
        content,
        confidence,
        tags,
        expires,
        created,
        updated,
        p.get("error") is True,
        previous,
    )


def _reflection_as_written(p: dict[str, Any]) -> MindReflection | None:
    """``MindReflection.from_payload(p)`` for a payload in the written shape, else None."""
    id_, content = p.get("id"), p.get("content")
    created, updated = p.get("createdAt"), p.get("updatedAt")
    if type(id_) is not str or type(content) is not str:
        return None
    if type(created) is not int or type(updated) is not int:
        return None
    pinned, related, expires = p.get("pinned", False), p.get("relatedTo"), p.get("expiresAt")
    tags = _tags_as_written(p.get("tags", ()))
    if tags is None or type(pinned) is not bool:
        return None
    if not (related is None or type(related) is str):
        return None
    if not (expires is None or type(expires) is int):
        return None
    return MindReflection(
        id_, content, pinned, tags, related, created, updated, p.get("error") is True, expires
    )
