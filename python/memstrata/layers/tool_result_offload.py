"""The offload pass over a conversation: which of its tool results
:class:`~memstrata.layers.tool_results.ToolResults` replaces by notices, each result decided
once.

The pass compares the conversation with the last one it saw in the scope (a tool loop prepares
the same conversation again at every call, one or two messages longer), keeps the notices it put
at the positions that did not change, and looks only at the results in messages that did:
those already decided reuse the remembered decision; the others are decided by the layer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from memstrata.layers.tool_result_decisions import (
    UNSEEN,
    Decisions,
    Key,
    Scope,
    decision_key,
)
from memstrata.messages import (
    EMPTY_SNAPSHOT,
    ToolResult,
    call_names,
    compare,
    tool_results,
    with_tool_results,
)
from memstrata.stack import Message

# The notice replacing a result, or None to leave it: (position, call_id, body).
Decide = Callable[[int, str, Any], Optional[str]]

_READ_TOOL_NAMES = frozenset({"read_tool_result"})


def offload_pass(
    given: list[Message], decisions: Decisions, scope: Scope, decide: Decide
) -> list[Message]:
    """``given`` with the notices of its results to offload in place of their bodies (the
    input itself when there are none); see :meth:`ToolResults.offload_messages
    <memstrata.layers.tool_results.ToolResults.offload_messages>`."""
    kept, version = decisions.last_conversation(scope)
    if kept is not None and kept[2] == version:
        previous, notices = kept[0], kept[1]
    else:
        previous, notices = EMPTY_SNAPSHOT, {}
    try:
        snapshot, changed, origin = compare(previous, given, shallow=_holds_no_result)
    except (TypeError, ValueError):  # an item that is not a dict: the plain pass skips it
        return _offload_all(given, decisions, scope, decide)
    if origin is not None and notices:  # a window that slid keeps its notices
        notices = {p: notices[q] for p, q in enumerate(origin) if q in notices}
    n = len(given)
    if any(p >= n for p in notices):  # a shorter list: its positions past the end are gone
        notices = {p: b for p, b in notices.items() if p < n}
    if changed:
        notices = dict(notices)
        for p in changed:
            notices.pop(p, None)
        found = tool_results([given[p] for p in changed])
        decided = _decided(given, found, decisions, scope, decide, positions=changed)
        for (p, block), text in decided.items():
            notices.setdefault(p, {})[block] = text
        if decisions.version != version:
            # The notices kept for unchanged positions may name an id whose text this pass
            # moved (see Decisions.repoint); the next pass starts afresh (the version changed).
            return _offload_all(given, decisions, scope, decide)
    decisions.keep_conversation(scope, snapshot, notices, version)
    if not notices:
        return given
    bodies = {(p, b): text for p, blocks in notices.items() for b, text in blocks.items()}
    return with_tool_results(given, bodies)


def _offload_all(
    given: list[Message], decisions: Decisions, scope: Scope, decide: Decide
) -> list[Message]:
    bodies = _decided(given, tool_results(given), decisions, scope, decide)
    return with_tool_results(given, bodies) if bodies else given


def _decided(
    given: list[Message],
    found: list[ToolResult],
    decisions: Decisions,
    scope: Scope,
    decide: Decide,
    positions: list[int] | None = None,
) -> dict[tuple[int, int | None], str]:
    """The notice for each result in ``found`` that is to be offloaded, by (position,
    block); ``positions`` maps the results' positions to ``given``'s."""
    bodies: dict[tuple[int, int | None], str] = {}
    names: dict[str, str] | None = None
    version = decisions.version
    keys: list[tuple[tuple[int, int | None], Key]] = []
    for result in found:
        position = positions[result.position] if positions is not None else result.position
        key = decision_key(scope, result.call_id, result.body)
        if key is None:
            continue
        keys.append(((position, result.block), key))
        decided = decisions.get(key)
        if decided is UNSEEN:
            if names is None:
                names = call_names(given)
            if names.get(result.call_id) in _READ_TOOL_NAMES:
                # A page the model asked for: offloading it would send the model back to
                # read it again, for ever.
                decided = None
            else:
                decided = decide(position, result.call_id, result.body)
            decisions.remember(key, decided)
        if decided is not None:
            bodies[(position, result.block)] = decided
    if decisions.version != version:
        # A result stored in this pass moved the older text of its call_id under a new id
        # (see Decisions.repoint): a notice decided before it in the pass named the old one.
        for place, key in keys:
            if place not in bodies:
                continue
            repointed = decisions.get(key)
            if repointed is UNSEEN:
                # Let go meanwhile (past the count or size kept, or forgotten by a catch-up):
                # the notice may name the id whose text moved, and only the remembered
                # decision followed the move. The result stays as it is in this pass.
                del bodies[place]
            elif repointed is not None:
                bodies[place] = repointed
    return bodies


def _holds_no_result(top: Message) -> bool:
    """Whether a message holds no tool result whatever its nested values (an assistant or
    system message): the offload pass compares it by its top level only."""
    role = top.get("role")
    return type(role) is str and role in ("assistant", "system")
