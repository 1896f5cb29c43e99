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
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Annotated, Any, Literal, Optional, Union

import msgspec
import numpy as np
import numpy.typing as npt

from memstrata._checks import checked_text
from memstrata.exceptions import InvalidInputError

GoalStatus = Literal["active", "completed"]
GoalPriority = Literal["low", "normal", "high"]
ConfidenceLevel = Literal["low", "medium", "high"]
MindEntryType = Literal["goal", "belief", "reflection"]

GOAL_STATUSES: tuple[GoalStatus, ...] = ("active", "completed")
GOAL_PRIORITIES: tuple[GoalPriority, ...] = ("low", "normal", "high")
CONFIDENCE_LEVELS: tuple[ConfidenceLevel, ...] = ("low", "medium", "high")
ENTRY_TYPES: tuple[MindEntryType, ...] = ("goal", "belief", "reflection")

# Unix milliseconds as stored: a 64-bit integer, the widest the store's JSON encoder writes (an
# entry holding a wider one would load, then fail the flush of any run that rewrites it).
MIN_MS, MAX_MS = -(2**63), 2**63 - 1
Millis = Annotated[int, msgspec.Meta(ge=MIN_MS, le=MAX_MS)]
# The entries' optional fields, named here rather than written ``X | None``: msgspec reads the
# fields' annotations when this module loads, and Python 3.9 has no ``|`` between types.
_OptionalText = Optional[str]
_OptionalMillis = Optional[Millis]

_DURATION = re.compile(r"^\s*(\d{1,9})\s*([dhms])\s*$")
_UNIT_SECONDS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")
_DUE_BY_FORMS = (
    "an ISO 8601 date such as 2026-06-01 (or a date and time such as 2026-06-01T17:00:00Z), or "
    "a duration from now such as 30d (a positive whole number of d, h, m or s)"
)
# The longest time to live a duration can name: 999,999,999 days.
MAX_TTL_MS = 999_999_999 * _UNIT_SECONDS["d"] * 1000


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
        raise InvalidInputError(
            f"dueBy must be a string ({_DUE_BY_FORMS}), got {type(text).__name__}"
        )
    if _ISO_DATE.match(text.strip()):
        value = text.strip()
        try:
            if len(value) == 10:
                date.fromisoformat(value)
            else:
                datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInputError(
                f"dueBy {text!r} is not a valid ISO 8601 date: use {_DUE_BY_FORMS}"
            ) from None
        return value
    try:
        ms = parse_duration(text, what="dueBy")
    except InvalidInputError:
        # Either form is accepted: a refusal naming only durations would steer a model that
        # meant a date ("June 1 2026", "2026-06") away from the form it wanted.
        raise InvalidInputError(
            f"dueBy {text!r} is neither a date nor a duration: use {_DUE_BY_FORMS}"
        ) from None
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
    if not MIN_MS <= value <= MAX_MS:
        raise InvalidInputError(f"{what} {value!r} is out of range (a 64-bit integer)")
    return int(value)


def _choice(value: Any, allowed: tuple[str, ...], what: str) -> Any:
    if value not in allowed:
        raise InvalidInputError(f"{what} must be one of {', '.join(allowed)}, got {value!r}")
    return value


class _Entry(msgspec.Struct, tag_field="type", rename="camel", gc=False):
    """What the entry types share: each is a ``msgspec.Struct``, so that a stored entry in the
    shape memstrata writes (camelCase members, exact types, ``type`` naming the kind) is read
    from its JSON text straight into its object, checked in C (see :func:`entries_from_texts`).

    Entries never refer to one another or to themselves, so the cycle collector need not track
    them (``gc=False``): a mind holds up to 100,000 of them.
    """


class MindGoal(_Entry, kw_only=True, tag="goal"):
    """A goal tracked across runs (``type: 'goal'``)."""

    id: str
    description: str
    priority: GoalPriority
    status: GoalStatus
    tags: list[str] = []
    due_by: _OptionalText = None
    progress: list[str] = []
    outcome: _OptionalText = None
    created_at: Millis
    updated_at: Millis
    sequence: Millis = 0  # memstrata's: orders goals created in one millisecond

    @property
    def type(self) -> Literal["goal"]:
        return "goal"

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
            id=checked_text(p.get("id"), "id"),
            description=checked_text(p.get("description"), "description"),
            priority=_choice(p.get("priority"), GOAL_PRIORITIES, "priority"),
            status=_choice(p.get("status"), GOAL_STATUSES, "status"),
            tags=_str_list(p.get("tags", []), "tags"),
            due_by=None if due_by is None else checked_text(due_by, "dueBy"),
            progress=_str_list(p.get("progress", []), "progress"),
            outcome=None if outcome is None else checked_text(outcome, "outcome"),
            created_at=_int(p.get("createdAt"), "createdAt"),
            updated_at=_int(p.get("updatedAt"), "updatedAt"),
            sequence=_int(p.get("sequence", 0), "sequence"),
        )


MAX_PREVIOUS = 16


class MindBelief(_Entry, kw_only=True, tag="belief"):
    """A fact the agent holds, with a confidence and usually an expiry (``type: 'belief'``).

    ``previous`` is memstrata's addition to toolpack Agent Mind's shape: the contents a restatement
    replaced, oldest first, each ``{"content", "updatedAt"}`` (the last ``MAX_PREVIOUS``), so
    that folding a belief into a similar one never destroys what it said before.
    """

    id: str
    content: str
    confidence: ConfidenceLevel
    tags: list[str] = []
    expires_at: _OptionalMillis = None
    created_at: Millis
    updated_at: Millis
    error: bool = False
    previous: list[dict[str, Any]] = []

    @property
    def type(self) -> Literal["belief"]:
        return "belief"

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
            id=checked_text(p.get("id"), "id"),
            content=checked_text(p.get("content"), "content"),
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
            "content": checked_text(item.get("content"), "previous content"),
            "updatedAt": _int(item.get("updatedAt"), "previous updatedAt"),
        }
        for item in value
        if isinstance(item, dict) or _fail("previous items must be objects")
    ]


def _fail(message: str) -> bool:
    raise InvalidInputError(message)


class MindReflection(_Entry, kw_only=True, tag="reflection"):
    """An observation about the agent's own work; pinned ones are standing rules.

    ``expires_at`` is memstrata's addition to toolpack Agent Mind's shape: set when a reflection
    TTL is configured (``ttl_defaults.reflection``), absent otherwise.
    """

    id: str
    content: str
    pinned: bool = False
    tags: list[str] = []
    related_to: _OptionalText = None
    created_at: Millis
    updated_at: Millis
    error: bool = False
    expires_at: _OptionalMillis = None

    @property
    def type(self) -> Literal["reflection"]:
        return "reflection"

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
            id=checked_text(p.get("id"), "id"),
            content=checked_text(p.get("content"), "content"),
            pinned=pinned,
            tags=_str_list(p.get("tags", []), "tags"),
            related_to=None if related is None else checked_text(related, "relatedTo"),
            created_at=_int(p.get("createdAt"), "createdAt"),
            updated_at=_int(p.get("updatedAt"), "updatedAt"),
            error=p.get("error") is True,
            expires_at=None if expires_at is None else _int(expires_at, "expiresAt"),
        )


# A Union rather than ``|``: evaluated when the module loads (and by msgspec), on Python 3.9 too.
MindEntry = Union[MindGoal, MindBelief, MindReflection]


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


# Any entry, told apart by its ``type`` member.
_entry_decoder = msgspec.json.Decoder(MindEntry)


def entries_from_payloads(values: Iterable[Any]) -> list[MindEntry | InvalidInputError]:
    """The entries the stored ``values`` hold, in order; a malformed value gives, in its place,
    the :class:`InvalidInputError` :func:`entry_from_payload` raises for it.

    The same result as :func:`entry_from_payload` on each value, built faster for loading a
    whole namespace: a value in exactly the shape memstrata writes (exact types, integer times)
    is converted in C; anything else goes through :func:`entry_from_payload`, which accepts
    what it accepts (a float time, say) and names what is wrong with the rest.
    """
    out: list[MindEntry | InvalidInputError] = []
    append = out.append
    convert, invalid = msgspec.convert, msgspec.ValidationError
    for value in values:
        entry: MindEntry | None
        try:
            entry = _as_written(convert(value, MindEntry))
        except invalid:
            entry = None
        if entry is None:
            try:
                entry = entry_from_payload(value)
            except InvalidInputError as exc:
                append(exc)
                continue
        append(entry)
    return out


def entries_from_texts(texts: list[Any]) -> list[MindEntry | None]:
    """The entries stored as the JSON ``texts`` (bytes or str), in order: each text in exactly
    the shape memstrata writes is read straight into its entry; None in place of any other
    (malformed JSON, a float time, a value that is no entry), for the caller to parse whole and
    give to :func:`entries_from_payloads`, which reads what it can and names what is wrong."""
    # (ValidationError is a DecodeError; a str with a lone surrogate has no UTF-8 to read.)
    decode, failed = _entry_decoder.decode, (msgspec.DecodeError, UnicodeError, RecursionError)
    try:  # the usual batch: every text in the written shape
        entries: list[MindEntry | None] = [
            decode(text) if len(text) <= _SURELY_SHALLOW or _shallow(text) else None
            for text in texts
        ]
    except failed:
        entries = []
        for text in texts:
            try:
                entries.append(
                    decode(text) if len(text) <= _SURELY_SHALLOW or _shallow(text) else None
                )
            except failed:
                entries.append(None)
    for n, entry in enumerate(entries):
        if type(entry) is MindBelief and entry.previous:
            entries[n] = _as_written(entry)
    return entries


# The depth to which the parser of the whole value (orjson) reads nesting. msgspec reads as
# deep as Python's recursion limit allows (1,000 frames) before 3.12 and as the C stack allows
# since; a text it could read deeper than this is left to the whole parse, which refuses it,
# so that an entry loads alike on every Python.
_WHOLE_PARSE_DEPTH = 1024
# Nesting that deep takes an opening and a closing character per level: a shorter text (a
# stored entry with its vector cut out is a few hundred) is never that deep.
_SURELY_SHALLOW = 2 * _WHOLE_PARSE_DEPTH


def _shallow(text: bytes | str) -> bool:
    """Whether ``text`` cannot nest deeper than the whole parse reads: it opens no more arrays
    and objects than that."""
    if isinstance(text, bytes):
        return text.count(b"[") + text.count(b"{") <= _WHOLE_PARSE_DEPTH
    return text.count("[") + text.count("{") <= _WHOLE_PARSE_DEPTH


def _as_written(entry: MindEntry) -> MindEntry | None:
    """``entry``, read from a stored value, if the value was in the written shape: a belief's
    ``previous`` items each exactly a content and an integer time (any other member dropped, as
    :meth:`MindBelief.from_payload` does); None for the slower, lenient reading."""
    if type(entry) is not MindBelief or not entry.previous:
        return entry
    previous = []
    for item in entry.previous:
        if type(item) is not dict:
            return None
        content, updated = item.get("content"), item.get("updatedAt")
        if type(content) is not str or type(updated) is not int or not MIN_MS <= updated <= MAX_MS:
            return None
        previous.append({"content": content, "updatedAt": updated})
    entry.previous = previous
    return entry
