"""What :class:`~memstrata.layers.tool_results.ToolResults` decided for each tool result it
saw, so a conversation prepared again at every call of a tool loop has each result counted and
stored once.

A decision is the notice that replaced a result (None: the result stays as it is), or for a
result a context gate prunes, the id it stays readable under. It is keyed by content (scope,
call_id, body), bounded in count and in the characters the keys hold, and shared by every run
of the layer (hence the scope in the key). Beside the decisions, per scope, the last
conversation the offload pass saw and the notices it put there, valid while the decisions'
version is the one they came from: rewriting (:meth:`Decisions.repoint`) or forgetting
(:meth:`Decisions.forget`) decisions moves the version on.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any, Optional

import orjson

from memstrata.messages import Snapshot
from memstrata.safe_files import MAX_FILE_ID

UNSEEN = "\x00unseen"  # what Decisions.get answers for a result not decided yet
SEEN_LIMIT = 50_000  # results whose offload decision is remembered
# Characters the remembered results' keys may hold between them: a key holds the result's text,
# so a long-running server must not keep every large result it ever saw alive.
_SEEN_MAX_CHARS = 32 << 20
_LISTS_KEPT = 64  # scopes whose last conversation the offload pass keeps a snapshot of

Scope = Optional[tuple[str, str]]
Key = tuple[Any, ...]
# The notices the offload pass put in a conversation: position -> block -> notice.
Notices = dict[int, dict[Optional[int], str]]


def derived_id(call_id: str, digest_hex: str) -> str:
    """The id an older result of a reused call_id stays readable under."""
    return f"{call_id[: MAX_FILE_ID - 13]}:{digest_hex[:12]}"


def decision_key(scope: Scope, call_id: str, body: Any, *, kept: bool = False) -> Key | None:
    """The content key of a decision: the body itself when it is text (its hash is cached on
    the str), else its JSON text; None when the body is not JSON data."""
    if type(body) is not str:
        try:
            body = orjson.dumps(body)
        except (TypeError, orjson.JSONEncodeError):
            return None
    return (scope, call_id, body, kept)


class Decisions:
    """The decisions of one layer and of its runs' handles (which share this object)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: OrderedDict[Key, str | None] = OrderedDict()
        self._chars = 0  # the characters the keys of _seen hold
        self._lists: OrderedDict[Scope, tuple[Snapshot, Notices, int]] = OrderedDict()
        self._version = 0

    @property
    def version(self) -> int:
        """Grows whenever remembered decisions are rewritten or forgotten."""
        with self._lock:
            return self._version

    def get(self, key: Key) -> str | None:
        """The decision remembered for ``key``, or :data:`UNSEEN`."""
        with self._lock:
            return self._seen.get(key, UNSEEN)

    def remember(self, key: Key, decided: str | None) -> None:
        with self._lock:
            seen = self._seen
            if key not in seen:
                self._chars += len(key[2])
            seen[key] = decided
            seen.move_to_end(key)
            while len(seen) > 1 and (len(seen) > SEEN_LIMIT or self._chars > _SEEN_MAX_CHARS):
                self._chars -= len(seen.popitem(last=False)[0][2])

    def last_conversation(self, scope: Scope) -> tuple[tuple[Snapshot, Notices, int] | None, int]:
        """The last conversation the offload pass saw in ``scope`` (its snapshot, its notices
        and the version they came from), and the version now."""
        with self._lock:
            return self._lists.get(scope), self._version

    def keep_conversation(
        self, scope: Scope, snapshot: Snapshot, notices: Notices, version: int
    ) -> None:
        with self._lock:
            self._lists[scope] = (snapshot, notices, version)
            self._lists.move_to_end(scope)
            while len(self._lists) > _LISTS_KEPT:
                self._lists.popitem(last=False)

    def repoint(self, scope: Scope, call_id: str, digest_hex: str, older: str) -> None:
        """After a reused call_id moved its older text to ``older``: the remembered decisions
        for that text name ``older`` from now on, so a conversation holding both results
        points each message at its own."""
        with self._lock:
            self._version += 1
            for key, decided in list(self._seen.items()):
                key_scope, key_id, body, kept = key
                if key_scope != scope or key_id != call_id or decided is None:
                    continue
                data = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass")
                if hashlib.sha256(data).hexdigest() != digest_hex:
                    continue
                if kept:
                    self._seen[key] = older
                else:
                    self._seen[key] = decided.replace(
                        f"call_id={call_id},", f"call_id={older},", 1
                    ).replace(f'(call_id="{call_id}")', f'(call_id="{older}")', 1)

    def forget_scopes(self, labels: tuple[str, ...]) -> None:
        """Drops the decisions and conversation snapshots of every scope whose labels start
        with ``labels`` (a user's, or one of their threads'): what was stored for them was
        erased."""
        with self._lock:
            for key in [
                k for k in self._seen if k[0] is not None and k[0][: len(labels)] == labels
            ]:
                self._chars -= len(key[2])
                del self._seen[key]
            for scope in [s for s in self._lists if s is not None and s[: len(labels)] == labels]:
                del self._lists[scope]
            self._version += 1

    def forget(self, scope: Scope, ids: set[str] | None) -> None:
        """Drops ``scope``'s decisions naming one of ``ids`` (every one of the scope's, for
        None), and the conversation snapshots whose notices may name them."""
        # A decision names its call_id, or an id derived from it (derived_id).
        bases = {id_.rpartition(":")[0] for id_ in ids or () if ":" in id_}
        cut = MAX_FILE_ID - 13
        with self._lock:
            for key in list(self._seen):
                if key[0] != scope:
                    continue
                call_id = key[1]
                if ids is None or call_id in ids or call_id[:cut] in bases:
                    self._chars -= len(key[2])
                    del self._seen[key]
            self._version += 1  # every kept snapshot's notices are decided again
