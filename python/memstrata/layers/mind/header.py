"""The ``--- AGENT MIND ---`` block: the run's standing context within its token budget.

Goals and standing rules (pinned reflections) are always shown, each line cut short enough for
the block's frame to fit the stack's budget; beliefs (high confidence, then medium, each newest
first and labelled with their confidence; low-confidence ones never) and recent reflections
(newest first) share ``token_budget`` in what is left, beliefs first, the two sections counted
as the block shows them (headings and line breaks included). Stored text is rendered with
:func:`~memstrata.prompts.one_line`, so it cannot forge a line of the block's own.

Rendered lines and their token counts are kept by the layer, keyed by what they are made of
(an entry's text, its confidence or creation time; a counter's encoding), never by an object;
the block itself is kept with the committed version it was built from (see :func:`header`).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from memstrata.layers.mind.entries import MindBelief, MindGoal, MindReflection
from memstrata.layers.mind.records import DAY_MS
from memstrata.prompts import (
    MIND_HEADER_BELIEFS,
    MIND_HEADER_CLOSE,
    MIND_HEADER_GOALS,
    MIND_HEADER_OPEN,
    MIND_HEADER_REFLECTIONS,
    MIND_HEADER_RULES,
    one_line,
)
from memstrata.tokens import EstimatingCounter, ExactCounter, exact_count

if TYPE_CHECKING:
    from memstrata.layers.mind.handle import AgentMindHandle

# A goal or standing-rule line in the header is cut to this many characters.
HEADER_LINE_CHARS = 300
MIN_HEADER_LINE_CHARS = 40
# Most rendered lines (and most line token counts) a layer keeps; past it, it starts afresh.
LINE_CACHE = 100_000

_BY_UPDATED = operator.attrgetter("updated_at")
_BY_CREATED = operator.attrgetter("created_at")
_DEFAULT_COUNTER: list[Any] = []


def default_counter() -> Any:
    """One estimator shared by standalone sessions."""
    if not _DEFAULT_COUNTER:
        _DEFAULT_COUNTER.append(EstimatingCounter())
    return _DEFAULT_COUNTER[0]


def counter_key(counter: Any) -> str | None:
    """What a counter's counts depend on, for the library's own counters (their encoding);
    None for any other, whose counts are then never kept."""
    kind = type(counter)
    if kind is EstimatingCounter or kind is ExactCounter:
        return f"{kind.__name__}:{counter.encoding}"
    return None


@dataclass
class _Selection:
    """What the block draws from, in the order it shows them."""

    goals: list[MindGoal]
    rules: list[MindReflection]
    beliefs: list[MindBelief]
    recent: list[MindReflection]


def header(handle: AgentMindHandle, budget: int | None) -> str:
    """The block, reused from an earlier run over the same committed version (same budget, same
    counter encoding) while everything it selected is still selected: time only ever removes an
    entry from the selection (it expires, or leaves the recency window), so the block holds
    until the first selected entry leaves."""
    # The committed version's blocks serve every run over it; a run that completed goals
    # shows them done, so its block is its own: neither taken from them nor kept among them.
    key = counter_key(handle.counter()) if not handle._completed_goals else None
    now = handle.started_at
    kept = handle._committed.headers
    if key is not None:
        found = kept.get((budget, key))
        if found is not None and found[1] <= now < found[2]:
            return found[0]
    selection = _select(handle)
    text = _render(handle, selection, budget)
    if key is not None:
        kept[(budget, key)] = (text, now, _holds_until(handle, selection))
    return text


def build_header(handle: AgentMindHandle, budget: int | None) -> str:
    """The block built from the handle's committed entries at its start time; empty when there
    is nothing to show. ``budget`` is the stack's token share for the whole block."""
    return _render(handle, _select(handle), budget)


def _select(handle: AgentMindHandle) -> _Selection:
    now = handle.started_at
    goals = sorted(
        (g for g in handle._goals.values() if g.status == "active"),
        key=lambda g: (g.created_at, g.sequence, g.id),
    )
    rules = sorted(
        (r for r in handle._reflections.values() if r.pinned and not r.expired(now)),
        key=lambda r: (r.created_at, r.id),
    )
    live = [
        b
        for b in handle._beliefs.values()
        if b.confidence != "low" and not b.error and (b.expires_at is None or b.expires_at > now)
    ]
    live.sort(key=_BY_UPDATED, reverse=True)
    # High before medium, each newest first: the budget goes to what the agent is surest of.
    beliefs = [b for b in live if b.confidence == "high"]
    beliefs += [b for b in live if b.confidence != "high"]
    window_start = now - handle.layer.recency_window_days * DAY_MS
    recent = [
        r
        for r in handle._reflections.values()
        if not r.pinned
        and not r.error
        and r.created_at >= window_start
        and (r.expires_at is None or r.expires_at > now)
    ]
    recent.sort(key=_BY_CREATED, reverse=True)
    return _Selection(goals, rules, beliefs, recent)


def _holds_until(handle: AgentMindHandle, selection: _Selection) -> float:
    """When the first entry of ``selection`` leaves it: expires, or leaves the window."""
    window = handle.layer.recency_window_days * DAY_MS
    expiring: list[MindBelief | MindReflection] = [
        *selection.rules,
        *selection.beliefs,
        *selection.recent,
    ]
    until = min((e.expires_at for e in expiring if e.expires_at is not None), default=math.inf)
    if selection.recent:
        until = min(until, selection.recent[-1].created_at + window)
    return until


def _render(handle: AgentMindHandle, selection: _Selection, budget: int | None) -> str:
    layer = handle.layer
    limit = layer.budget.max if budget is None else min(budget, layer.budget.max)
    goal_lines, rule_lines = _standing_lines(handle, selection.goals, selection.rules, limit)
    if not (goal_lines or rule_lines or selection.beliefs or selection.recent):
        return ""
    fixed = exact_count(handle.counter(), _frame(goal_lines, rule_lines))
    allowance = max(0, min(layer.token_budget, limit - fixed))
    belief_lines, rest = _fit(handle, selection.beliefs, _BELIEF_LINE, allowance)
    reflection_lines, _ = _fit(handle, selection.recent, _REFLECTION_LINE, rest)
    # Lines are counted one by one, without the line breaks and headings around them; the two
    # sections are then counted exactly as the block shows them, and lose their last lines
    # until they fit token_budget.
    while (belief_lines or reflection_lines) and exact_count(
        handle.counter(), _sections(belief_lines, reflection_lines)
    ) > allowance:
        if reflection_lines:
            reflection_lines = reflection_lines[:-1]
        else:
            belief_lines = belief_lines[:-1]
    while True:
        text = _assemble(goal_lines, rule_lines, belief_lines, reflection_lines)
        # Lines are counted one by one; the block as a whole is counted exactly before it is
        # shown, and loses its last reflection or belief lines until it fits.
        if not text or exact_count(handle.counter(), text) <= limit:
            return text
        if reflection_lines:
            reflection_lines = reflection_lines[:-1]
        elif belief_lines:
            belief_lines = belief_lines[:-1]
        else:
            return text  # the frame alone was fitted exactly by _standing_lines


def _assemble(
    goal_lines: list[str],
    rule_lines: list[str],
    belief_lines: list[str],
    reflection_lines: list[str],
) -> str:
    lines = [MIND_HEADER_OPEN]
    for title, section in (
        (MIND_HEADER_GOALS, goal_lines),
        (MIND_HEADER_RULES, rule_lines),
        (MIND_HEADER_BELIEFS, belief_lines),
        (MIND_HEADER_REFLECTIONS, reflection_lines),
    ):
        if section:
            lines += [title, *section]
    if len(lines) == 1:
        return ""
    lines.append(MIND_HEADER_CLOSE)
    return "\n".join(lines)


def _sections(belief_lines: list[str], reflection_lines: list[str]) -> str:
    """The beliefs and recent reflections sections as the block shows them."""
    lines: list[str] = []
    if belief_lines:
        lines += [MIND_HEADER_BELIEFS, *belief_lines]
    if reflection_lines:
        lines += [MIND_HEADER_REFLECTIONS, *reflection_lines]
    return "\n".join(lines)


def _standing_lines(
    handle: AgentMindHandle, goals: list[MindGoal], rules: list[MindReflection], limit: int
) -> tuple[list[str], list[str]]:
    """The goal and standing-rule lines, always shown but each cut to ``HEADER_LINE_CHARS``
    (shorter, then fewer, until the header's frame fits ``limit`` tokens)."""
    chars = HEADER_LINE_CHARS
    while True:
        goal_lines = [_cut_line(_goal_line(g), chars) for g in goals]
        rule_lines = [_cut_line(f"- {one_line(r.content)}", chars) for r in rules]
        if exact_count(handle.counter(), _frame(goal_lines, rule_lines)) <= limit:
            return goal_lines, rule_lines
        if chars > MIN_HEADER_LINE_CHARS:
            chars = max(MIN_HEADER_LINE_CHARS, chars // 2)
            continue
        # Even short lines do not fit: the newest go first, rules before goals.
        if rules:
            rules = rules[:-1]
        elif goals:
            goals = goals[:-1]
        else:
            return [], []


def _belief_line(belief: MindBelief) -> str:
    return f"- {one_line(belief.content)} ({belief.confidence} confidence)"


def _reflection_line(reflection: MindReflection) -> str:
    return f"- [{_iso_day(reflection.created_at)}] {one_line(reflection.content)}"


# Each kind's line: its name, what besides the content it is made of, and how it is made.
_BELIEF_LINE = ("belief", operator.attrgetter("confidence"), _belief_line)
_REFLECTION_LINE = ("reflection", operator.attrgetter("created_at"), _reflection_line)


def _fit(
    handle: AgentMindHandle,
    entries: Sequence[MindBelief | MindReflection],
    kind: tuple[str, Callable[[Any], Any], Callable[[Any], str]],
    allowance: int,
) -> tuple[list[str], int]:
    """The entries' lines that fit, in order; a line too big is skipped and smaller ones are
    still tried. Lines are counted exactly (``token_budget`` is a budget, which an estimate
    could pass); they and their counts are kept by the layer, by content (and counter)."""
    name, made_of, render = kind
    counter = handle.counter()
    key = counter_key(counter)
    caches = handle.layer._header_lines
    cache = caches.get((key, name))
    if cache is None or len(cache) > LINE_CACHE:
        cache = caches[(key, name)] = {}
    kept = []
    for entry in entries:
        if allowance <= 0:
            break
        hit = cache.get(entry.content)
        if hit is None or hit[0] != made_of(entry):
            line = render(entry)
            # A count by a counter of unknown make is never kept (-1): it is counted each time.
            count = -1 if key is None else exact_count(counter, line)
            hit = cache[entry.content] = (made_of(entry), line, count)
        tokens = hit[2] if hit[2] >= 0 else exact_count(counter, hit[1])
        if tokens <= allowance:
            kept.append(hit[1])
            allowance -= tokens
    return kept, allowance


def _iso_day(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).date().isoformat()


def _frame(goal_lines: list[str], rule_lines: list[str]) -> str:
    """The header without its beliefs and recent reflections: what is shown whatever the
    budget, and so what it must first make room for."""
    return "\n".join(
        [
            MIND_HEADER_OPEN,
            MIND_HEADER_GOALS,
            *goal_lines,
            MIND_HEADER_RULES,
            *rule_lines,
            MIND_HEADER_BELIEFS,
            MIND_HEADER_REFLECTIONS,
            MIND_HEADER_CLOSE,
        ]
    )


def _cut_line(line: str, chars: int) -> str:
    return line if len(line) <= chars else line[: chars - 1].rstrip() + "…"


def _goal_line(goal: MindGoal) -> str:
    line = f"[{goal.priority}] {goal.description}"
    if goal.progress:
        line += f" — last progress: {goal.progress[-1]}"
    if goal.due_by:
        line += f" (due: {goal.due_by})"
    return one_line(line)
