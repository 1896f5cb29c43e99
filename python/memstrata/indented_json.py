"""Indented JSON text of a merged state, rebuilt from the previous text where the merge changed it.

A working memory shows the model its state as ``orjson.dumps(state, option=OPT_INDENT_2)``. After
a merge that changed a few members of a large state, rendering it again costs as much as the
whole state; :func:`respliced` instead replaces, in the previous text, only the members the
patch named (recursing into objects on both sides), and returns exactly the text a full render
would give. It relies on how orjson indents: each member of an object at depth ``d`` starts on
its own line with ``2·(d+1)`` spaces and its quoted key, and a raw newline never occurs inside a
JSON string, so the members of one object are found by searching for those line starts within
the object's own text. Whatever it does not handle (an object becoming empty or starting empty,
a patch that is not an object) returns None, and the caller renders in full.
"""

from __future__ import annotations

import operator
import threading
from typing import Any

import orjson

_INDENT = orjson.OPT_INDENT_2


def render(value: Any) -> str:
    """The full render: ``orjson.dumps(value, option=OPT_INDENT_2)`` as text."""
    return orjson.dumps(value, option=_INDENT).decode()


def _render_at(value: Any, pad: str) -> str:
    """``value`` rendered as a member value whose own line is indented by ``pad``."""
    text = orjson.dumps(value, option=_INDENT).decode()
    return text.replace("\n", "\n" + pad) if "\n" in text else text


Changes = list[tuple[str, str]]


def respliced(
    old_text: str,
    old: Any,
    new: Any,
    patch: Any,
    changes: Changes | None = None,
    *,
    within: tuple[int, int] | None = None,
) -> str | None:
    """The render of ``new`` (the merge of ``patch`` into ``old``), built from ``old_text`` (the
    render of ``old``), or None when the caller should render ``new`` in full.

    ``changes``, when given, receives each replaced piece of text as ``(old, new)``, innermost
    only (an object recursed into is not itself a piece): what a caller needs to update a
    count of the text without reading all of it. ``within=(lo, hi)`` says the render of
    ``old`` is ``old_text[lo:hi]`` (a block around it); the text around it is kept as it is,
    which spares the caller copying a large text out and back in.
    """
    if not (type(old) is dict and type(new) is dict and type(patch) is dict):
        return None
    lo, hi = within if within is not None else (0, len(old_text))
    pieces: Changes = []
    edits: list[tuple[int, int, str]] = []
    if not _splice(old_text, lo, hi, 0, old, new, patch, edits, pieces):
        return None
    if not edits:
        return old_text
    # One pass over the text: every edit is a span of the old text, none overlapping (distinct
    # members, or spans inside a member that was not itself replaced).
    edits.sort(key=lambda e: e[0])
    out = []
    at = 0
    for start, end, replacement in edits:
        if start < at:
            # Removing the first member and the next one: their spans share a separator.
            # Rare enough to render in full.
            return None
        out.append(old_text[at:start])
        out.append(replacement)
        at = end
    out.append(old_text[at:])
    if changes is not None:
        changes.extend(pieces)
    return "".join(out)


# Below this many characters (or members) an object is searched from its start: working out
# where a member probably is costs more than reading that far.
HINT_MIN_CHARS = 16_384
HINT_MIN_MEMBERS = 32
# The search for a member starts this share of the object's text before where its members
# before it would end if all were the same length (a guess past it searches the part before
# too). For 1,000 members whose lengths vary as much as their mean (exponential lengths, 2,000
# draws), the middle member's start is within 0.03 of the guess 94% of the time (median 0.011);
# for alike members, much closer. On the whole-turn benchmark's state (236 KB, 1,000
# projects), 0.1 -> 0.03 took a splice from ~30 to ~24 us.
HINT_MARGIN = 0.03

# Where each key stands in a large object's key order, carried from one state to the next: a
# merge that adds no member to an object, or only appends them, and removes none, leaves the
# order of the members it had, so the merged object's positions are the old one's (plus the
# new keys). Each entry is (object, positions), found by the object's id and checked by
# identity: it holds the object, so the id is not reused while it is kept. The positions are
# a hint only, so a stale one costs a longer search, never a wrong splice. They are built on
# the second splice in a row, so a chain of states one merge apart pays for them once and
# states spliced once each never do (operator.indexOf is cheaper than building them).
_key_orders: dict[int, tuple[dict[str, Any], dict[str, int] | None]] = {}
_key_orders_lock = threading.Lock()
KEY_ORDERS_KEPT = 16


def _key_index(obj: dict[str, Any], key: str) -> int:
    """Where ``key`` stands among ``obj``'s keys."""
    entry = _key_orders.get(id(obj))
    if entry is not None and entry[0] is obj and entry[1] is not None:
        index = entry[1].get(key)
        if index is not None:
            return index
    return operator.indexOf(obj, key)


def _carry_key_order(old: dict[str, Any], new: dict[str, Any], added: list[str]) -> None:
    """Keeps ``new``'s key positions, the merge of a patch that removed no member of ``old``
    and appended the ``added`` keys, from ``old``'s."""
    with _key_orders_lock:
        entry = _key_orders.pop(id(old), None)
        if entry is None or entry[0] is not old:
            positions = None  # the first splice of a chain: mark it, build on the next
        elif entry[1] is None:
            positions = {key: index for index, key in enumerate(new)}
        else:
            positions = entry[1]  # old's own keys keep their positions
            for key in added:
                positions[key] = len(positions)
        _key_orders[id(new)] = (new, positions)
        while len(_key_orders) > KEY_ORDERS_KEPT:
            del _key_orders[next(iter(_key_orders))]


def _find_member(text: str, head: str, lo: int, hi: int, obj: dict[str, Any], key: str) -> int:
    """Where ``head`` (a member's line start: newline, indent, quoted key) is in ``text[lo:hi]``,
    or -1. Only that member's line can match: a raw newline never occurs inside a JSON string,
    and the indent is exactly its object's. Members are rendered in the object's key order, so
    in a large object the search starts a little before the share of the text the members
    before the key probably take, rather than reading half the object on average."""
    if hi - lo < HINT_MIN_CHARS or len(obj) < HINT_MIN_MEMBERS:
        return text.find(head, lo, hi)
    share = _key_index(obj, key) / len(obj)
    start = max(lo, lo + int((hi - lo) * (share - HINT_MARGIN)))
    found = text.find(head, start, hi)
    if found < 0 and start > lo:
        # The members before the key were longer than most: it is before the guess.
        found = text.find(head, lo, start + len(head))
    return found


def _splice(
    text: str,
    lo: int,
    hi: int,
    level: int,
    old: dict[str, Any],
    new: dict[str, Any],
    patch: Any,
    edits: list[tuple[int, int, str]],
    changes: Changes,
) -> bool:
    """``text[lo:hi]`` renders ``old`` at depth ``level``; adds to ``edits`` (spans of ``text``
    and their replacements) what turns it into the render of ``new``. False when it cannot, and
    then ``edits`` and ``changes`` are as they were."""
    if not old or not new:
        return False  # "{}" on one side: no member lines to work from
    pad = "  " * (level + 1)
    close = "\n" + "  " * level + "}"
    closing = hi - len(close)
    if not text.startswith(close, closing):
        return False
    mine: list[tuple[int, int, str]] = []
    found: Changes = []
    added: list[str] = []
    added_keys: list[str] = []
    removed = False
    last = next(reversed(old))
    for key in patch:
        in_old, in_new = key in old, key in new
        if not in_old:
            if in_new:
                added.append(f",\n{pad}{orjson.dumps(key).decode()}: {_render_at(new[key], pad)}")
                added_keys.append(key)
            continue
        before = old[key]
        after = new.get(key, before) if in_new else None
        if in_new and after is before:
            continue
        head = f"\n{pad}{orjson.dumps(key).decode()}: "
        start = _find_member(text, head, lo, hi, old, key)
        if start < 0:
            return False
        value_start = start + len(head)
        # The last member ends at the closing brace: no search through it (it is often the
        # large one, such as a map of every project).
        next_member = -1 if key == last else text.find(f',\n{pad}"', value_start, hi)
        end = closing if next_member < 0 else next_member
        if not in_new:
            removed = True
            # Removed: the member and one separator go.
            if start > lo + 1:
                span = (start - 1, end)  # ",\n  "key": value"
            elif next_member >= 0:
                span = (start, next_member + 1)  # "\n  "key": value," (the first member)
            else:
                return False  # the only member: the object becomes "{}"
            found.append((text[span[0] : span[1]], ""))
            mine.append((*span, ""))
            continue
        sub_patch = patch[key]
        if not (
            type(before) is dict
            and type(after) is dict
            and type(sub_patch) is dict
            and _splice(text, value_start, end, level + 1, before, after, sub_patch, mine, found)
        ):
            # Replaced whole (the recursion added nothing when it failed).
            rendered = _render_at(after, pad)
            found.append((text[value_start:end], rendered))
            mine.append((value_start, end, rendered))
    if added:
        joined = "".join(added)
        found.append(("", joined))
        mine.append((closing, closing, joined))
    edits.extend(mine)
    changes.extend(found)
    if len(old) >= HINT_MIN_MEMBERS and not removed:
        _carry_key_order(old, new, added_keys)
    return True
