"""Pure helpers on the mind's records: copies, the merge rules of a restated belief, store keys,
new ids, and the stored form of an entry with its vector."""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from memstrata.layers.mind.entries import (
    MAX_PREVIOUS,
    ConfidenceLevel,
    MindBelief,
    MindEntry,
    MindGoal,
    MindReflection,
    encode_vector,
)
from memstrata.stores.base import MAX_KEY_LENGTH

logger = logging.getLogger("memstrata.agent_mind")

DAY_MS = 86_400_000
# The member of a stored belief or reflection that holds its vector.
VECTOR_FIELD = "embedding"
_CONFIDENCE_RANK = {"low": 0, "medium": 1, "high": 2}


def stored_payload(
    entry: MindBelief | MindReflection, vector: npt.NDArray[np.float32], model: str
) -> dict[str, Any]:
    """What the store holds for a belief or reflection: its payload, its vector and the model
    that made the vector."""
    return {**entry.to_payload(), VECTOR_FIELD: encode_vector(vector), "embeddingModel": model}


# Where a flush keeps a malformed entry it writes over (``unreadable/<key>@<ms>``): loads skip
# these records without a warning.
UNREADABLE_PREFIX = "unreadable/"


def set_aside_key(key: str, ms: int) -> str:
    """The key of a copy of the malformed entry under ``key``: ``unreadable/<key>@<ms>``, or
    ``unreadable/sha256:<hex digest of key>@<ms>`` when that would pass the store's key limit
    (entry ids have no limit of their own); the copy holds the full key either way."""
    aside = f"{UNREADABLE_PREFIX}{key}@{ms}"
    if len(aside) <= MAX_KEY_LENGTH:
        return aside
    return f"{UNREADABLE_PREFIX}sha256:{hashlib.sha256(key.encode()).hexdigest()}@{ms}"


def entry_key(entry: MindEntry) -> str:
    return f"{entry.type}/{entry.id}"


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


def copy_belief(b: MindBelief) -> MindBelief:
    return MindBelief(
        id=b.id,
        content=b.content,
        confidence=b.confidence,
        tags=list(b.tags),
        expires_at=b.expires_at,
        created_at=b.created_at,
        updated_at=b.updated_at,
        error=b.error,
        previous=[dict(p) for p in b.previous],
    )


def copy_goal(g: MindGoal) -> MindGoal:
    return MindGoal(
        id=g.id,
        description=g.description,
        priority=g.priority,
        status=g.status,
        tags=list(g.tags),
        due_by=g.due_by,
        progress=list(g.progress),
        outcome=g.outcome,
        created_at=g.created_at,
        updated_at=g.updated_at,
        sequence=g.sequence,
    )


def copy_reflection(r: MindReflection) -> MindReflection:
    return MindReflection(
        id=r.id,
        content=r.content,
        pinned=r.pinned,
        tags=list(r.tags),
        related_to=r.related_to,
        created_at=r.created_at,
        updated_at=r.updated_at,
        error=r.error,
        expires_at=r.expires_at,
    )


def merge_confidence(
    old: ConfidenceLevel, new: ConfidenceLevel, allow_downgrade: bool
) -> ConfidenceLevel:
    if allow_downgrade or _CONFIDENCE_RANK[new] >= _CONFIDENCE_RANK[old]:
        return new
    return old


def previous_after(
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


def union(a: list[str], b: list[str]) -> list[str]:
    return list(dict.fromkeys([*a, *b]))
