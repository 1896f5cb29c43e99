"""Keeping :class:`~memstrata.layers.tool_results.ToolResults`' decisions true to the store
that other servers write to as well.

A decision names an id a result was stored under. Another server storing other text under that
id (the same call_id reused on a server given the conversation's next turn), a deletion, or the
TTL running out makes the decision stale. Per scope, this follows where the scope's call records
stood in the store's history when the layer last looked and what it wrote under each id since
(content hash, when); each run's opening reads what changed since then and forgets the decisions
it made stale, so those results are decided, and stored, again at the next offload. Results
kept as files are not followed.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from memstrata.layers.tool_result_decisions import SEEN_LIMIT, Decisions, Scope
from memstrata.layers.tool_result_storage import _Backend, _StoreBackend
from memstrata.stores import Store
from memstrata.stores.base import Answer, ChangeMark, Changes, ChangesSince, Namespace, Read


class Following:
    """The followed scopes of one layer and of its runs' handles (which share this object);
    stale decisions are forgotten in ``decisions``."""

    def __init__(self, decisions: Decisions) -> None:
        self._decisions = decisions
        self._lock = threading.Lock()
        self._followed: OrderedDict[Scope, tuple[ChangeMark, dict[str, tuple[str, float]]]] = (
            OrderedDict()
        )
        self._ids = 0  # ids followed in all scopes

    def opening_read(self, scope: Scope, calls: Namespace) -> Read | None:
        """What changed among ``scope``'s call records (in ``calls``) since the layer last
        looked; None before its first store there."""
        with self._lock:
            held = self._followed.get(scope)
        return None if held is None else ChangesSince(calls, held[0])

    def let_go(self, labels: tuple[str, ...]) -> None:
        """Stops following every scope whose labels start with ``labels``: what was stored
        there was erased (the decisions go with :meth:`Decisions.forget_scopes`)."""
        with self._lock:
            for scope in [
                s for s in self._followed if s is not None and s[: len(labels)] == labels
            ]:
                self._ids -= len(self._followed.pop(scope)[1])

    def follow(self, backend: _Backend, scope: Scope, writes: Sequence[tuple[str, str]]) -> None:
        """Notes that the layer is about to write ``(id, content hash)`` pairs to the store:
        the scope's mark is taken before its first write, so whatever another server writes
        from then on shows at a later :meth:`catch_up`. Past ``SEEN_LIMIT`` ids followed in
        all, the least recently written scope is let go, with its decisions."""
        if not isinstance(backend, _StoreBackend):
            return
        mark: ChangeMark | None = None
        dropped: list[Scope] = []
        while True:
            with self._lock:
                held = self._followed.get(scope)
                if held is None and mark is not None:
                    held = self._followed[scope] = (mark, {})
                if held is not None:
                    wrote, now = held[1], time.time()
                    for id_, digest_hex in writes:
                        # The most recent write last: a catch-up finds the oldest first.
                        self._ids -= wrote.pop(id_, None) is not None
                        wrote[id_] = (digest_hex, now)
                        self._ids += 1
                    self._followed.move_to_end(scope)
                    while self._ids > SEEN_LIMIT and len(self._followed) > 1:
                        gone, (_, ids) = self._followed.popitem(last=False)
                        self._ids -= len(ids)
                        dropped.append(gone)
                    break
            mark = backend.store.change_mark(backend.calls)
        for gone in dropped:
            self._decisions.forget(gone, None)

    def catch_up(
        self,
        store: Store,
        calls: Namespace,
        scope: Scope,
        ttl: float | None,
        opened: Mapping[Read, Answer] | None = None,
    ) -> None:
        """Forgets the decisions naming an id whose stored text may no longer be the one
        decided on: since the layer last looked, another server stored other text under it
        (a reused call_id, on another server of the same conversation), it was deleted, or
        half the TTL passed since the layer stored it (storing again renews the TTL, which
        the store does not report running out). ``calls`` is ``scope``'s call records;
        ``opened`` holds the run's opening reads."""
        with self._lock:
            held = self._followed.get(scope)
        if held is None:
            return  # nothing stored from here in this scope: no decision to check
        answer = (opened or {}).get(ChangesSince(calls, held[0]))
        changes = answer if isinstance(answer, Changes) else store.changes(calls, held[0])
        renew_before = time.time() - ttl / 2 if ttl is not None else None
        with self._lock:
            if self._followed.get(scope) is not held:
                return  # caught up meanwhile, or let go with its decisions
            wrote = held[1]
            stale: set[str] = set()
            if changes.complete:
                stored = {item.key: _stored_hash(item.value) for item in changes.items}
                stale.update(
                    i for i, (digest_hex, _) in wrote.items() if stored.get(i) != digest_hex
                )
            else:
                changed = {item.key: _stored_hash(item.value) for item in changes.items}
                changed.update(dict.fromkeys(changes.removed))
                # Kept in ``wrote``: what the layer stored there is still what a write of its
                # own in flight meanwhile would make it hold again.
                stale.update(i for i, h in changed.items() if i in wrote and wrote[i][0] != h)
            if renew_before is not None:
                # Oldest first (each write moves its id last): stored again once decided again.
                expired = []
                for id_, (_, at) in wrote.items():
                    if at >= renew_before:
                        break
                    expired.append(id_)
                for id_ in expired:
                    del wrote[id_]
                self._ids -= len(expired)
                stale.update(expired)
            self._followed[scope] = (changes.mark, wrote)
        if stale:
            self._decisions.forget(scope, stale)


def _stored_hash(value: Any) -> str | None:
    """The content hash a stored call record points to (None for a record not of this layer)."""
    return value.get("sha256") if isinstance(value, dict) else None
