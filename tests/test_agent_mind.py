"""AgentMind (seed 001): header, seven tools, dedup, recall scoring, caps, draft buffer, flush."""

from __future__ import annotations

import hashlib
import json
import logging
import math
import pathlib
import random
import sqlite3
import string
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from store_checks import fresh_store

from memstrata import AgentMind, HashingEmbedder, MemoryStack, SQLiteStore, count_tokens, hash_embed
from memstrata.exceptions import InvalidInputError, MemstrataError
from memstrata.layers.mind import MindTtlDefaults, ScoreWeights
from memstrata.layers.mind.committed import refresh
from memstrata.layers.mind.entries import MindRecallResult, parse_due_by, parse_duration
from memstrata.stores import ChangesSince, InMemoryStore, Store, erase
from memstrata.stores.base import ChangeMark, Changes

AGENT = "research-tracker"
NS = ("mind", AGENT)
DAY_MS = 86_400_000
TOOLS = {
    "mind_recall",
    "mind_believe",
    "mind_reflect",
    "mind_unpin_reflection",
    "mind_set_goal",
    "mind_update_goal",
    "mind_complete_goal",
}


@pytest.fixture
def store(tmp_path: pathlib.Path) -> Iterator[SQLiteStore]:
    s = SQLiteStore(tmp_path / "mind.db")
    yield s
    s.close()


def make_stack(store: Store, **options: Any) -> MemoryStack:
    return MemoryStack([AgentMind(**options)], store=store)


def ok(result: dict[str, Any]) -> Any:
    assert result.get("ok", True) is not False, result
    return result.get("result", result)


def header_of(stack: MemoryStack) -> str:
    with stack.run(agent=AGENT) as run:
        return "\n".join(m["content"] for m in run.prepare([]))


def stored_entries(store: Store, kind: str | None = None) -> list[dict[str, Any]]:
    items = store.list(NS, limit=10_000)
    return [i.value for i in items if kind is None or i.value.get("type") == kind]


def put_raw(store: Store, payload: dict[str, Any]) -> None:
    """An entry as an earlier run (or another process) left it, without a vector."""
    store.put(NS, f"{payload['type']}/{payload['id']}", payload)


def now_ms() -> int:
    return int(time.time() * 1000)


# Config and durations ----------------------------------------------------------------------------


def test_defaults_follow_the_seed() -> None:
    mind = AgentMind()
    assert mind.token_budget == 300
    assert mind.recency_window_days == 7
    assert mind.max_goals == 10 and mind.max_pinned_reflections == 10
    assert mind.deduplication_threshold == 0.85 and mind.retrieval_threshold == 0.35
    assert mind.similarity_floor == 0.25  # memstrata's own, as docs/agent-mind.md gives it
    assert mind.ttl_defaults == MindTtlDefaults(belief="30d", reflection=None)
    assert mind.belief_ttl_ms == 30 * DAY_MS and mind.reflection_ttl_ms is None
    assert mind.score_weights == ScoreWeights(0.6, 0.2, 0.2)


def test_caps_have_a_ceiling_of_ten() -> None:
    mind = AgentMind(max_goals=50, max_pinned_reflections=99)
    assert (mind.max_goals, mind.max_pinned_reflections) == (10, 10)
    assert AgentMind(max_goals=3).max_goals == 3


@pytest.mark.parametrize(
    ("text", "ms"), [("30d", 30 * DAY_MS), ("12h", 12 * 3_600_000), ("15m", 900_000), ("9s", 9000)]
)
def test_durations_accept_days_hours_minutes_seconds(text: str, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["30", "d", "1w", "-3d", "0d", "1.5d", "30 days", "", "3d4h"])
def test_bad_durations_are_a_clear_error(text: str) -> None:
    with pytest.raises(InvalidInputError, match="not a duration"):
        parse_duration(text)


def test_bad_config_is_refused_with_the_option_named() -> None:
    with pytest.raises(InvalidInputError, match=r"ttl_defaults.belief"):
        AgentMind(ttl_defaults={"belief": "forever"})
    with pytest.raises(InvalidInputError, match="unknown keys"):
        AgentMind(ttl_defaults={"beleif": "3d"})  # type: ignore[dict-item]
    with pytest.raises(InvalidInputError, match="deduplication_threshold"):
        AgentMind(deduplication_threshold=1.5)
    with pytest.raises(InvalidInputError, match="max_goals"):
        AgentMind(max_goals=0)
    with pytest.raises(InvalidInputError, match="token_budget"):
        AgentMind(token_budget=-1)


def test_due_by_accepts_iso_dates_and_durations() -> None:
    assert parse_due_by("2026-06-01", now=0) == "2026-06-01"
    assert parse_due_by("30d", now=0) == "1970-01-31"
    with pytest.raises(InvalidInputError):
        parse_due_by("2026-13-45", now=0)
    with pytest.raises(InvalidInputError):
        parse_due_by("next week", now=0)


@pytest.mark.parametrize(
    "text", ["June 1 2026", "2026-06", "20260601", "next week", "2026-13-45", "30 days"]
)
def test_a_refused_due_by_names_both_accepted_forms(store: Store, text: str) -> None:
    """A model that meant a date must learn that dates are accepted, and in which form."""
    with pytest.raises(InvalidInputError) as refused:
        parse_due_by(text, now=0)
    for form in ("ISO 8601 date", "2026-06-01", "duration", "30d"):
        assert form in str(refused.value)
    with make_stack(store).run(agent=AGENT) as run:
        result = run.call_tool("mind_set_goal", {"description": "Ship it", "dueBy": text})
    assert result["error"]["code"] == "invalid_arguments"
    assert "2026-06-01" in result["error"]["message"] and "30d" in result["error"]["message"]
    assert stored_entries(store) == []


def test_a_run_needs_an_agent_name_or_a_namespace(store: Store) -> None:
    stack = make_stack(store)
    with pytest.raises(InvalidInputError, match="agent"), stack.run():
        pass
    shared = make_stack(store, namespace="team/minds")
    with shared.run() as run:
        ok(run.call_tool("mind_believe", {"content": "Shared memory works"}))
    assert store.list(("team", "minds"))


# Header ----------------------------------------------------------------------------------------


def test_an_empty_store_gives_no_block(store: Store) -> None:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        messages = run.prepare([{"role": "user", "content": "hi"}])
    assert messages == [{"role": "user", "content": "hi"}]


def test_the_header_has_the_seed_sections_in_order(store: Store) -> None:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        goal = ok(
            run.call_tool(
                "mind_set_goal",
                {
                    "description": "Migrate all production databases to PostgreSQL",
                    "priority": "high",
                    "dueBy": "2026-06-01",
                },
            )
        )
        ok(
            run.call_tool(
                "mind_reflect", {"content": "Always confirm destructive ops.", "pin": True}
            )
        )
        ok(
            run.call_tool(
                "mind_believe", {"content": "Staging uses its own key.", "confidence": "high"}
            )
        )
        ok(run.call_tool("mind_believe", {"content": "Payments API allows 100 req/min."}))
        ok(run.call_tool("mind_reflect", {"content": "The user prefers bullet points."}))
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_update_goal", {"id": goal["id"], "progress": "schema migrated"}))
    with stack.run(agent=AGENT) as run:
        block = run.prepare([])[0]
    assert block["role"] == "system"
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert block["content"] == (
        "--- AGENT MIND ---\n"
        "## Goals\n"
        "[high] Migrate all production databases to PostgreSQL — last progress: schema migrated"
        " (due: 2026-06-01)\n"
        "## Standing Rules (Pinned)\n"
        "- Always confirm destructive ops.\n"
        "## Beliefs\n"
        "- Staging uses its own key. (high confidence)\n"
        "- Payments API allows 100 req/min. (medium confidence)\n"
        "## Recent Reflections\n"
        f"- [{today}] The user prefers bullet points.\n"
        "---"
    )


def test_header_beliefs_show_high_then_medium_and_skip_low_error_and_expired(
    store: Store,
) -> None:
    now = now_ms()
    base = {"type": "belief", "tags": [], "createdAt": now, "updatedAt": now}
    put_raw(store, {**base, "id": "b1", "content": "Kept high belief", "confidence": "high"})
    # Newer than the high one, yet shown after it.
    newer = {"createdAt": now + 5, "updatedAt": now + 5}
    put_raw(
        store,
        {**base, **newer, "id": "b2", "content": "Medium belief", "confidence": "medium"},
    )
    put_raw(store, {**base, "id": "b3", "content": "Crashed", "confidence": "high", "error": True})
    put_raw(
        store,
        {**base, "id": "b4", "content": "Old news", "confidence": "high", "expiresAt": now - 1},
    )
    put_raw(store, {**base, "id": "b5", "content": "Hunch", "confidence": "low"})
    block = header_of(make_stack(store))
    assert (
        "## Beliefs\n- Kept high belief (high confidence)\n- Medium belief (medium confidence)\n"
        in block
    )
    for hidden in ("Crashed", "Old news", "Hunch"):
        assert hidden not in block


def test_a_belief_believed_at_the_default_confidence_shows_in_the_next_header(
    store: Store,
) -> None:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_believe", {"content": "The build cache lives in S3."}))
    assert "- The build cache lives in S3. (medium confidence)" in header_of(stack)


def test_the_belief_budget_goes_to_high_confidence_before_medium(store: Store) -> None:
    now = now_ms()
    base = {"type": "belief", "tags": [], "confidence": "medium"}
    for i in range(40):  # medium beliefs, all newer than the high ones
        at = now - i
        put_raw(
            store,
            {
                **base,
                "id": f"m{i:02d}",
                "content": f"Medium fact {i} " + "word " * 10,
                "createdAt": at,
                "updatedAt": at,
            },
        )
    for i in range(3):
        at = now - DAY_MS - i
        put_raw(
            store,
            {
                **base,
                "id": f"h{i}",
                "content": f"High fact {i}",
                "confidence": "high",
                "createdAt": at,
                "updatedAt": at,
            },
        )
    block = header_of(make_stack(store, token_budget=60))
    lines = block.split("## Beliefs\n")[1].split("\n---")[0].splitlines()
    assert lines[:3] == [f"- High fact {i} (high confidence)" for i in range(3)]
    assert 0 < len(lines) - 3 < 40  # the medium ones fill what is left, newest first
    assert lines[3].startswith("- Medium fact 0 ")


def test_recent_reflections_respect_the_window_and_pins_always_show(store: Store) -> None:
    now = now_ms()
    base = {"type": "reflection", "tags": [], "pinned": False}
    put_raw(
        store, {**base, "id": "r1", "content": "Fresh lesson", "createdAt": now, "updatedAt": now}
    )
    old = now - 8 * DAY_MS
    put_raw(
        store, {**base, "id": "r2", "content": "Stale lesson", "createdAt": old, "updatedAt": old}
    )
    put_raw(
        store,
        {
            **base,
            "id": "r3",
            "content": "Old rule",
            "pinned": True,
            "createdAt": old,
            "updatedAt": old,
        },
    )
    block = header_of(make_stack(store))
    assert "Fresh lesson" in block and "Old rule" in block and "Stale lesson" not in block
    assert "Stale lesson" in header_of(make_stack(store, recency_window_days=10))


def test_an_expired_reflection_leaves_the_header_and_recall(store: Store) -> None:
    # A reflection TTL (ttl_defaults or expiresIn) hides it like an expired belief: from the
    # header, pinned or not, and from recall unless includeExpired.
    now = now_ms()
    base = {"type": "reflection", "tags": [], "createdAt": now, "updatedAt": now}
    put_raw(store, {**base, "id": "r1", "content": "Live lesson", "pinned": False})
    put_raw(
        store,
        {**base, "id": "r2", "content": "Lapsed lesson", "pinned": False, "expiresAt": now - 1},
    )
    put_raw(
        store, {**base, "id": "r3", "content": "Lapsed rule", "pinned": True, "expiresAt": now - 1}
    )
    stack = make_stack(store)
    block = header_of(stack)
    assert "Live lesson" in block and "Lapsed" not in block
    with stack.run(agent=AGENT) as run:
        query = {"query": "lesson rule", "type": "reflection", "threshold": 0}
        found = [r["content"] for r in ok(run.call_tool("mind_recall", query))]
        assert found == ["Live lesson"]
        everything = ok(run.call_tool("mind_recall", {**query, "includeExpired": True}))
        assert sorted(r["content"] for r in everything) == [
            "Lapsed lesson",
            "Lapsed rule",
            "Live lesson",
        ]


def test_recall_returns_five_hits_unless_told(store: Store) -> None:
    now = now_ms()
    for i in range(9):
        put_raw(
            store,
            {
                "type": "belief",
                "id": f"b{i}",
                "content": f"Deploy fact number {i}",
                "confidence": "high",
                "tags": [],
                "createdAt": now,
                "updatedAt": now,
            },
        )
    with make_stack(store).run(agent=AGENT) as run:
        query = {"query": "Deploy fact", "threshold": 0}
        assert len(ok(run.call_tool("mind_recall", query))) == 5
        assert len(ok(run.call_tool("mind_recall", {**query, "limit": 8}))) == 8


def test_a_line_too_big_is_skipped_and_smaller_ones_still_fit(store: Store) -> None:
    now = now_ms()
    base = {"type": "belief", "tags": [], "confidence": "high"}
    put_raw(store, {**base, "id": "b1", "content": "short one", "createdAt": now, "updatedAt": now})
    big = "word " * 200
    put_raw(store, {**base, "id": "b2", "content": big, "createdAt": now, "updatedAt": now + 1})
    put_raw(
        store, {**base, "id": "b3", "content": "short two", "createdAt": now, "updatedAt": now - 1}
    )
    block = header_of(make_stack(store, token_budget=40))
    assert "short one" in block and "short two" in block and "word word" not in block
    # Beliefs fill the budget before reflections.
    put_raw(
        store,
        {
            "type": "reflection",
            "id": "r1",
            "content": "tiny lesson",
            "tags": [],
            "pinned": False,
            "createdAt": now,
            "updatedAt": now,
        },
    )
    assert "tiny lesson" not in header_of(make_stack(store, token_budget=12))
    assert "tiny lesson" in header_of(make_stack(store, token_budget=60))


def test_the_header_is_built_from_the_store_at_run_start(store: Store) -> None:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_believe", {"content": "Visible next run", "confidence": "high"}))
        assert run.prepare([]) == []
    assert "Visible next run" in header_of(stack)


def test_a_long_lived_layer_sees_every_change_made_elsewhere(
    two_connections: tuple[Store, Store],
) -> None:
    """The layer keeps the entries between runs and reads only what changed: writes through
    another connection (another process), edits, deletions, purges, store TTLs running out and
    malformed rewrites all show in the next run, exactly as a fresh layer would see them."""
    store, other = two_connections
    stack = make_stack(store, embedder=HashingEmbedder())
    now = now_ms()
    base = {"type": "belief", "tags": [], "createdAt": now, "updatedAt": now}
    put_raw(store, {**base, "id": "b1", "content": "First belief", "confidence": "high"})
    assert "First belief" in header_of(stack)
    put_raw(other, {**base, "id": "b2", "content": "Written elsewhere", "confidence": "high"})
    put_raw(other, {**base, "id": "b1", "content": "First, edited", "confidence": "high"})
    put_raw(other, {**base, "id": "b3", "content": "Soon gone", "confidence": "high"})
    for key, content in (("b4", "Purged later"), ("b5", "Lapses unpurged")):
        payload = {**base, "id": key, "content": content, "confidence": "high"}
        other.put(NS, f"belief/{key}", payload, ttl=0.3)
    block = header_of(stack)
    assert "Written elsewhere" in block and "First, edited" in block and "Purged later" in block
    assert "First belief" not in block
    other.delete(NS, "belief/b3")
    other.put(NS, "belief/b2", {"type": "belief", "id": "b2"})  # malformed now: skipped
    time.sleep(0.35)
    other.delete(NS, "belief/b4")  # one expired entry removed by hand, the other left to lapse
    for view in (stack, make_stack(store, embedder=HashingEmbedder())):
        block = header_of(view)
        assert "Soon gone" not in block and "Written elsewhere" not in block
        assert "Purged later" not in block and "Lapses unpurged" not in block
        assert "First, edited" in block
        with view.run(agent=AGENT) as run:
            hits = ok(run.call_tool("mind_recall", {"query": "edited", "threshold": 0}))
            assert [h["id"] for h in hits] == ["b1"]
    other.purge_expired()
    assert "First, edited" in header_of(stack)


def test_one_layer_over_two_stores_keeps_them_apart(tmp_path: pathlib.Path) -> None:
    """A layer opened on different stores never takes one store's entries (or its mark) for
    the other's."""
    mind = AgentMind(embedder=HashingEmbedder())
    with SQLiteStore(tmp_path / "a.db") as a, SQLiteStore(tmp_path / "b.db") as b:
        for store, content in ((a, "Only in A"), (b, "Only in B")):
            for _ in range(3):
                store.put(("unrelated",), "k", 1)  # the two files' numbers differ
            with mind.session(store, agent=AGENT) as handle:
                handle.believe(content, confidence="high")
        for _ in range(2):
            for store, mine, theirs in (
                (a, "Only in A", "Only in B"),
                (b, "Only in B", "Only in A"),
            ):
                with mind.session(store, agent=AGENT) as handle:
                    contents = [belief.content for belief in handle.beliefs.values()]
                    assert contents == [mine], (contents, theirs)
    with InMemoryStore() as memory, mind.session(memory, agent=AGENT) as handle:
        assert handle.beliefs == {}  # another backend: its marks are never mixed up


def test_runs_sharing_the_layer_never_see_each_others_changes(store: Store) -> None:
    """Two open runs of one layer share its copy of the entries; what one run does to its view
    (completing a goal) never shows in the other run's view."""
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_set_goal", {"description": "Ship the report"}))
    first, second = stack.run(agent=AGENT).open(), stack.run(agent=AGENT).open()
    goal_id = next(iter(first.layer("agent-mind").goals))
    ok(first.call_tool("mind_complete_goal", {"id": goal_id, "outcome": "shipped"}))
    assert first.layer("agent-mind").goals[goal_id].status == "completed"
    assert second.layer("agent-mind").goals[goal_id].status == "active"
    first.close()
    second.close()
    with stack.run(agent=AGENT) as run:
        assert run.layer("agent-mind").goals[goal_id].status == "completed"


def test_a_runs_entries_are_the_callers_own_copies(store: Store) -> None:
    """What ``goals``, ``beliefs`` and ``reflections`` hand a caller is theirs: changing it (an
    entry's fields, its lists, the mapping) changes neither this run's header nor what another
    run of the layer sees."""
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_set_goal", {"description": "Ship the report", "tags": ["q3"]}))
        ok(run.call_tool("mind_believe", {"content": "The report is due Friday"}))
        ok(run.call_tool("mind_reflect", {"content": "Check dates twice", "pin": True}))
    first, second = stack.run(agent=AGENT).open(), stack.run(agent=AGENT).open()
    handle = first.layer("agent-mind")
    header = handle.header()
    goal = next(iter(handle.goals.values()))
    goal.status = "completed"
    goal.tags.append("forged")
    next(iter(handle.beliefs.values())).content = "The report is cancelled"
    next(iter(handle.reflections.values())).pinned = False
    handle.goals.clear()
    handle.beliefs.clear()
    assert [g.status for g in handle.goals.values()] == ["active"]
    assert [b.content for b in handle.beliefs.values()] == ["The report is due Friday"]
    assert handle.header() == header
    for run in (first, second):
        view = run.layer("agent-mind")
        assert [(g.status, g.tags) for g in view.goals.values()] == [("active", ["q3"])]
        assert [b.content for b in view.beliefs.values()] == ["The report is due Friday"]
        assert [r.pinned for r in view.reflections.values()] == [True]
        # Every field is copied: the copies equal what the mind holds.
        assert (view.goals, view.beliefs, view.reflections) == (
            view._goals,
            view._beliefs,
            view._reflections,
        )
    first.close()
    second.close()
    with stack.run(agent=AGENT) as run:
        assert "Check dates twice" in run.layer("agent-mind").header()
        assert "cancelled" not in run.layer("agent-mind").header()


def test_a_vector_given_to_believe_vector_is_copied_not_kept(store: Store) -> None:
    """A caller that embeds in batches reuses its buffer once ``believe_vector`` returns: the
    draft must hold its own copy, or the flush stores (and the draft dedups against) whatever
    the buffer holds by then."""
    stack = make_stack(store)
    sky, tea = "The sky over Lisbon is clear today", "Green tea steeps for two minutes"
    with stack.run(agent=AGENT) as run:
        handle = run.layer("agent-mind")
        buffer = handle.embed_one(sky)
        ok(handle.believe_vector(sky, buffer, "medium", [], None, False))
        buffer[:] = handle.embed_one(tea)  # the next batch overwrites the caller's buffer
        # The draft still knows the sky belief by its own vector, not the buffer's.
        assert handle.find_duplicate_belief(handle.embed_one(tea)) is None
    with stack.run(agent=AGENT) as run:
        hits = run.layer("agent-mind").recall(sky, type="belief")
        assert [h.content for h in hits] == [sky]
        assert run.layer("agent-mind").recall(tea, type="belief") == []


@pytest.mark.parametrize(
    "change",
    [
        {"content": ""},
        {"content": "x" * 4_001},
        {"content": 42},
        {"confidence": "certain"},
        {"tags": ["ok", 7]},
        {"tags": "release"},
        {"ttl_ms": -5},
        {"ttl_ms": "1d"},
        {"vector": "short"},
        {"vector": "nan"},
        {"vector": "zero"},
        {"vector": "matrix"},
    ],
)
def test_believe_vector_checks_what_believe_checks(store: Store, change: dict[str, Any]) -> None:
    """``believe_vector`` is ``believe`` with the embedding done by the caller: the same
    content, confidence and tag checks, a ttl that is a duration, and a vector the mind can
    store (its embedder's dimension, finite, not zero). Nothing reaches the draft otherwise."""
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        handle = run.layer("agent-mind")
        good = handle.embed_one("The deploy window opens at noon")
        vectors = {
            "short": good[:-1],
            "nan": np.full_like(good, np.nan),
            "zero": np.zeros_like(good),
            "matrix": np.stack([good, good]),
        }
        args = {
            "content": "The deploy window opens at noon",
            "vector": good,
            "confidence": "medium",
            "tags": ["ops"],
            "ttl_ms": None,
            "allow_downgrade": False,
            **change,
        }
        if isinstance(args["vector"], str):
            args["vector"] = vectors[args["vector"]]
        with pytest.raises(MemstrataError) as caught:
            handle.believe_vector(**args)
        named = next(iter(change))
        assert {"tags": "tag"}.get(named, named) in str(caught.value)
        assert not handle.draft.beliefs
    with stack.run(agent=AGENT) as run:
        assert run.layer("agent-mind").beliefs == {}


def test_a_reused_header_drops_a_belief_once_it_expires(store: Store) -> None:
    stack = make_stack(store)
    now = now_ms()
    base = {"type": "belief", "tags": [], "createdAt": now, "updatedAt": now}
    put_raw(store, {**base, "id": "b1", "content": "Lasting", "confidence": "high"})
    put_raw(
        store,
        {**base, "id": "b2", "content": "Fleeting", "confidence": "high", "expiresAt": now + 300},
    )
    assert "Fleeting" in header_of(stack)
    time.sleep(0.4)
    block = header_of(stack)
    assert "Lasting" in block and "Fleeting" not in block
    with stack.run(agent=AGENT) as run:
        hits = ok(run.call_tool("mind_recall", {"query": "Fleeting", "threshold": 0}))
        assert "b2" not in [h["id"] for h in hits]


# Tools -----------------------------------------------------------------------------------------


def test_the_seven_tools_are_offered_with_the_seed_parameters(store: Store) -> None:
    with make_stack(store).run(agent=AGENT) as run:
        specs = {s["name"]: s for s in run.tool_specs("mcp")}
    assert set(specs) == TOOLS
    props = {name: set(s["inputSchema"]["properties"]) for name, s in specs.items()}
    assert props["mind_recall"] == {
        "query",
        "type",
        "status",
        "tags",
        "pinned",
        "includeExpired",
        "threshold",
        "limit",
    }
    assert props["mind_believe"] == {"content", "confidence", "tags", "expiresIn", "allowDowngrade"}
    assert props["mind_reflect"] == {"content", "pin", "tags", "relatedTo"}
    assert props["mind_unpin_reflection"] == {"id"}
    assert props["mind_set_goal"] == {"description", "priority", "tags", "dueBy"}
    assert props["mind_update_goal"] == {"id", "description", "priority", "progress"}
    assert props["mind_complete_goal"] == {"id", "outcome"}
    # The query is optional: pinned=true without one lists the standing rules.
    assert specs["mind_recall"]["inputSchema"]["required"] == []


def test_the_tool_schemas_every_run_shares_cannot_be_changed_through_a_spec(store: Store) -> None:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        spec = next(s for s in run.tool_specs("mcp") if s["name"] == "mind_recall")
        spec["inputSchema"]["properties"]["limit"]["maximum"] = 10_000
        spec["inputSchema"]["properties"]["type"]["enum"].append("anything")
    with stack.run(agent=AGENT) as run:
        spec = next(s for s in run.tool_specs("mcp") if s["name"] == "mind_recall")
        assert spec["inputSchema"]["properties"]["limit"]["maximum"] == 50
        assert "anything" not in spec["inputSchema"]["properties"]["type"]["enum"]
        refused = run.call_tool("mind_recall", {"query": "x", "limit": 51})
        assert refused["error"]["code"] == "invalid_arguments"
        assert "above the maximum 50" in refused["error"]["message"]


def test_a_recall_hit_as_json_has_every_set_field_in_order_and_is_the_callers_own() -> None:
    previous = [{"content": "older", "confidence": "low"}]
    tags = ["a"]
    full = MindRecallResult(
        "b1", "belief", "text", tags, 1, 2, score=0.123456, priority="high", status="active",
        progress=["p"], outcome="o", due_by="2026-06-01", confidence="high", expires_at=3,
        pinned=True, related_to="r", error=False, previous=previous,
    )  # fmt: skip
    payload = full.to_payload()
    assert list(payload.items()) == [
        ("id", "b1"),
        ("type", "belief"),
        ("content", "text"),
        ("tags", ["a"]),
        ("createdAt", 1),
        ("updatedAt", 2),
        ("score", 0.1235),
        ("priority", "high"),
        ("status", "active"),
        ("progress", ["p"]),
        ("outcome", "o"),
        ("dueBy", "2026-06-01"),
        ("confidence", "high"),
        ("expiresAt", 3),
        ("pinned", True),
        ("relatedTo", "r"),
        ("error", False),
        ("previous", previous),
    ]
    payload["tags"].append("b")
    payload["previous"][0]["content"] = "changed"
    assert tags == ["a"] and previous[0]["content"] == "older"
    bare = MindRecallResult("r1", "reflection", "text", [], 1, 2).to_payload()
    assert bare == {
        "id": "r1",
        "type": "reflection",
        "content": "text",
        "tags": [],
        "createdAt": 1,
        "updatedAt": 2,
    }
    assert MindRecallResult("r1", "reflection", "t", [], 1, 2, score=0.0).to_payload()["score"] == 0


def test_no_mind_layer_means_no_mind_tools_and_nothing_stored(store: Store) -> None:
    stack = MemoryStack([], store=store)
    with stack.run(agent=AGENT) as run:
        assert run.tool_specs() == []
        assert run.call_tool("mind_recall", {"query": "x"})["error"]["code"] == "unknown_tool"
    assert store.list(()) == []


@pytest.mark.parametrize(
    ("tool", "args", "fragment"),
    [
        ("mind_believe", {}, "content"),
        ("mind_believe", {"content": ""}, "content"),
        ("mind_believe", {"content": "x" * 5000}, "limit"),
        ("mind_believe", {"content": "fine", "confidence": "very"}, "confidence"),
        ("mind_believe", {"content": "fine", "expiresIn": "soon"}, "not a duration"),
        ("mind_believe", {"content": "fine", "tags": "one"}, "tags"),
        ("mind_believe", {"content": "!!! ???"}, "no words"),
        ("mind_believe", '{"content": ', "not valid JSON"),
        ("mind_reflect", {"content": "fine", "pin": "yes"}, "pin"),
        ("mind_set_goal", {"description": "fine", "dueBy": "someday"}, "dueBy"),
        ("mind_update_goal", {"id": "g_nope"}, "no goal"),
        ("mind_complete_goal", {"id": "g_nope"}, "no goal"),
        ("mind_unpin_reflection", {"id": "r_nope"}, "no reflection"),
        ("mind_recall", {"query": "x", "limit": 0}, "limit"),
        ("mind_recall", {"query": "x", "threshold": 2}, "threshold"),
        ("mind_recall", {"query": "x", "type": "memo"}, "type"),
    ],
)
def test_bad_tool_calls_give_error_payloads_and_store_nothing(
    store: Store, tool: str, args: Any, fragment: str
) -> None:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        result = run.call_tool(tool, args)
        assert result["ok"] is False, result
        text = result["error"]["message"] + " ".join(result["error"].get("details", []))
        assert fragment in text
    assert store.list(NS) == []


class FixedEmbedder(HashingEmbedder):
    """Embeds every text as one given vector (a broken embedder's output)."""

    def __init__(self, vector: list[float]) -> None:
        super().__init__(dim=len(vector))
        self.vector = vector

    def embed(self, texts: Any) -> Any:
        return np.array([self.vector] * len(texts), dtype=np.float32)


@pytest.mark.parametrize(
    "vector",
    [[0.0] * 8, [1.0] * 7 + [math.nan], [1.0] * 7 + [math.inf], [3e38] * 8],
    ids=["zero", "nan", "inf", "overflowing"],
)
def test_a_vector_without_a_direction_is_an_error_payload(
    store: Store, vector: list[float]
) -> None:
    stack = MemoryStack([AgentMind(embedder=FixedEmbedder(vector))], store=store)
    with stack.run(agent=AGENT) as run:
        for tool, args in (
            ("mind_believe", {"content": "The sky is green."}),
            ("mind_recall", {"query": "sky"}),
        ):
            result = run.call_tool(tool, args)
            assert result["ok"] is False, result
            assert "no words the embedder can place" in result["error"]["message"]
    assert store.list(NS) == []


# Dedup -----------------------------------------------------------------------------------------


def test_similar_beliefs_update_in_place_in_the_draft_then_in_the_store(store: Store) -> None:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        first = ok(
            run.call_tool(
                "mind_believe", {"content": "TSMC Q2 capacity is fully booked.", "tags": ["tsmc"]}
            )
        )
        again = ok(
            run.call_tool(
                "mind_believe",
                {
                    "content": "TSMC Q2 capacity is fully booked!",
                    "confidence": "high",
                    "tags": ["chips"],
                },
            )
        )
        assert first["action"] == "created" and again == {
            "status": "ok",
            "action": "updated_draft",
            "id": first["id"],
        }
    with stack.run(agent=AGENT) as run:
        third = ok(
            run.call_tool(
                "mind_believe", {"content": "tsmc Q2 capacity is fully booked", "confidence": "low"}
            )
        )
        assert third == {"status": "ok", "action": "updated_store", "id": first["id"]}
    beliefs = stored_entries(store, "belief")
    assert len(beliefs) == 1
    assert beliefs[0]["confidence"] == "high"  # only rises
    assert beliefs[0]["tags"] == ["tsmc", "chips"]
    assert beliefs[0]["content"] == "tsmc Q2 capacity is fully booked"
    with stack.run(agent=AGENT) as run:
        ok(
            run.call_tool(
                "mind_believe",
                {
                    "content": "TSMC Q2 capacity is fully booked",
                    "confidence": "low",
                    "allowDowngrade": True,
                },
            )
        )
    assert stored_entries(store, "belief")[0]["confidence"] == "low"


def test_different_beliefs_are_separate_and_reflections_are_never_deduped(store: Store) -> None:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        a = ok(run.call_tool("mind_believe", {"content": "The staging database runs Postgres 16."}))
        b = ok(run.call_tool("mind_believe", {"content": "Invoices are emailed every Monday."}))
        assert a["id"] != b["id"] and b["action"] == "created"
        r1 = ok(run.call_tool("mind_reflect", {"content": "Check the logs first."}))
        r2 = ok(run.call_tool("mind_reflect", {"content": "Check the logs first."}))
        assert r1["id"] != r2["id"]
    assert len(stored_entries(store, "belief")) == 2
    assert len(stored_entries(store, "reflection")) == 2


def test_dedup_threshold_is_configurable(store: Store) -> None:
    # A rewording (morning vs evening would be another fact, never folded whatever the cosine).
    a, b = "The deploy window is Tuesday morning.", "Deploys go out in the Tuesday morning window."
    sim = float(hash_embed([a, b], 384)[0] @ hash_embed([a, b], 384)[1])
    strict = make_stack(store, deduplication_threshold=min(1.0, sim + 0.01))
    with strict.run(agent=AGENT) as run:
        ok(run.call_tool("mind_believe", {"content": a}))
        assert ok(run.call_tool("mind_believe", {"content": b}))["action"] == "created"
    loose = make_stack(store, deduplication_threshold=max(0.0, sim - 0.01))
    with loose.run(agent="other") as run:
        ok(run.call_tool("mind_believe", {"content": a}))
        assert ok(run.call_tool("mind_believe", {"content": b}))["action"] == "updated_draft"


# Recall ----------------------------------------------------------------------------------------


def test_writes_are_invisible_to_recall_in_the_run_and_visible_in_the_next(store: Store) -> None:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        ok(
            run.call_tool(
                "mind_believe",
                {"content": "Rate limits are 100 requests per minute.", "confidence": "high"},
            )
        )
        assert ok(run.call_tool("mind_recall", {"query": "rate limits requests per minute"})) == []
    with stack.run(agent=AGENT) as run:
        found = ok(run.call_tool("mind_recall", {"query": "rate limits requests per minute"}))
    assert [f["content"] for f in found] == ["Rate limits are 100 requests per minute."]
    hit = found[0]
    assert hit["type"] == "belief" and hit["confidence"] == "high" and hit["error"] is False
    assert set(hit) >= {
        "id",
        "type",
        "content",
        "score",
        "tags",
        "createdAt",
        "updatedAt",
        "expiresAt",
    }


def test_recall_score_is_the_weighted_composite(store: Store) -> None:
    now = now_ms()
    content, query = "Quarterly revenue grew eight percent", "quarterly revenue growth"
    age_days = 12
    updated = now - age_days * DAY_MS
    put_raw(
        store,
        {
            "type": "belief",
            "id": "b1",
            "content": content,
            "confidence": "medium",
            "tags": [],
            "createdAt": updated,
            "updatedAt": updated,
        },
    )
    put_raw(
        store,
        {
            "type": "belief",
            "id": "b2",
            "content": content,
            "confidence": "high",
            "tags": [],
            "createdAt": updated,
            "updatedAt": updated,
            "error": True,
        },
    )
    with make_stack(store).run(agent=AGENT) as run:
        found = {
            f["id"]: f for f in ok(run.call_tool("mind_recall", {"query": query, "threshold": 0}))
        }
    vectors = hash_embed([content, query], 384)
    similarity = float(vectors[0] @ vectors[1])
    recency = math.exp(-age_days / 30)
    assert found["b1"]["score"] == pytest.approx(
        0.6 * similarity + 0.2 * recency + 0.2 * 0.6, abs=2e-3
    )
    # Error-flagged beliefs count as low confidence.
    assert found["b2"]["score"] == pytest.approx(
        0.6 * similarity + 0.2 * recency + 0.2 * 0.3, abs=2e-3
    )
    weighted = make_stack(store, score_weights=ScoreWeights(1.0, 0.0, 0.0))
    with weighted.run(agent=AGENT) as run:
        found = ok(run.call_tool("mind_recall", {"query": query, "threshold": 0, "type": "belief"}))
    assert found[0]["score"] == pytest.approx(similarity, abs=2e-3)


def seed_entries(stack: MemoryStack) -> dict[str, str]:
    ids = {}
    with stack.run(agent=AGENT) as run:
        ids["b_db"] = ok(
            run.call_tool(
                "mind_believe",
                {
                    "content": "The database cluster runs Postgres",
                    "tags": ["db", "infra"],
                    "confidence": "high",
                },
            )
        )["id"]
        ids["b_short"] = ok(
            run.call_tool(
                "mind_believe",
                {"content": "The database backup expires soon", "tags": ["db"], "expiresIn": "1s"},
            )
        )["id"]
        ids["r_pin"] = ok(
            run.call_tool(
                "mind_reflect",
                {"content": "Database migrations need a dry run", "pin": True, "tags": ["db"]},
            )
        )["id"]
        ids["r_plain"] = ok(
            run.call_tool(
                "mind_reflect", {"content": "Database questions deserve care", "relatedTo": "PR-42"}
            )
        )["id"]
        ids["g_db"] = ok(
            run.call_tool(
                "mind_set_goal", {"description": "Upgrade the database cluster", "tags": ["db"]}
            )
        )["id"]
        ids["g_other"] = ok(
            run.call_tool("mind_set_goal", {"description": "Write the onboarding guide"})
        )["id"]
    return ids


def test_recall_filters(store: Store) -> None:
    stack = make_stack(store, similarity_floor=0.0)  # the filters, not the floor, under test
    ids = seed_entries(stack)
    time.sleep(1.1)  # let the 1s belief expire
    with stack.run(agent=AGENT) as run:

        def recall(**args: Any) -> list[str]:
            found = ok(
                run.call_tool("mind_recall", {"query": "database cluster", "threshold": 0, **args})
            )
            return [f["id"] for f in found]

        assert set(recall(type="belief")) == {ids["b_db"]}
        assert set(recall(type="belief", includeExpired=True)) == {ids["b_db"], ids["b_short"]}
        assert set(recall(type="reflection")) == {ids["r_pin"], ids["r_plain"]}
        assert recall(type="reflection", pinned=True) == [ids["r_pin"]]
        assert recall(pinned=True) == [ids["r_pin"]]
        assert recall(type="reflection", pinned=False) == [ids["r_plain"]]
        assert recall(type="goal") == [ids["g_db"]]
        assert recall(type="goal", status="completed") == []
        assert set(recall(tags=["db", "infra"])) == {ids["b_db"]}
        assert len(recall(limit=2)) == 2
        everything = recall(limit=10)
        assert set(everything) == {
            ids["g_db"],
            ids["b_db"],
            ids["r_pin"],
            ids["r_plain"],
        }
        assert recall(type="belief", threshold=0.99) == []
        scores = [
            f["score"]
            for f in ok(
                run.call_tool(
                    "mind_recall",
                    {"query": "database cluster", "threshold": 0, "type": "all", "limit": 10},
                )
            )
        ]
        # Goals are scored and ranked with the rest, not listed first.
        assert len(scores) == 4 and scores == sorted(scores, reverse=True)
        ok(run.call_tool("mind_complete_goal", {"id": ids["g_db"], "outcome": "on v16"}))
        done = ok(
            run.call_tool(
                "mind_recall", {"query": "database", "type": "goal", "status": "completed"}
            )
        )
        assert [(g["id"], g["outcome"], g["status"]) for g in done] == [
            (ids["g_db"], "on v16", "completed")
        ]


def test_expired_beliefs_are_archived_not_deleted(store: Store) -> None:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        ok(
            run.call_tool(
                "mind_believe",
                {"content": "Flash sale ends tonight", "expiresIn": "1s", "confidence": "high"},
            )
        )
    time.sleep(1.1)
    assert "Flash sale" not in header_of(stack)
    store.purge_expired()
    assert [b["content"] for b in stored_entries(store, "belief")] == ["Flash sale ends tonight"]
    with stack.run(agent=AGENT) as run:
        # An archived belief does not absorb a new one.
        assert (
            ok(run.call_tool("mind_believe", {"content": "Flash sale ends tonight"}))["action"]
            == "created"
        )


def test_ttl_defaults_apply_to_beliefs_and_reflections(store: Store) -> None:
    stack = make_stack(store, ttl_defaults={"belief": "2d", "reflection": "3h"})
    before = now_ms()
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_believe", {"content": "Belief with default ttl"}))
        ok(run.call_tool("mind_believe", {"content": "Belief with its own ttl", "expiresIn": "5m"}))
        ok(run.call_tool("mind_reflect", {"content": "Reflection with default ttl"}))
    after = now_ms()
    by_content = {e["content"]: e for e in stored_entries(store)}
    assert (
        before + 2 * DAY_MS
        <= by_content["Belief with default ttl"]["expiresAt"]
        <= after + 2 * DAY_MS
    )
    assert before + 300_000 <= by_content["Belief with its own ttl"]["expiresAt"] <= after + 300_000
    assert (
        before + 3 * 3_600_000
        <= by_content["Reflection with default ttl"]["expiresAt"]
        <= after + 3 * 3_600_000
    )
    no_ttl = make_stack(store, ttl_defaults={"belief": None})
    with no_ttl.run(agent="b") as run:
        ok(run.call_tool("mind_believe", {"content": "Forever"}))
    assert "expiresAt" not in store.list(("mind", "b"))[0].value


# Caps ------------------------------------------------------------------------------------------


def test_write_tools_return_the_seed_shapes_and_goals_list_in_creation_order(
    store: Store,
) -> None:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        made = []
        for name, priority in (("alpha", "low"), ("beta", "high"), ("gamma", "normal")):
            made.append(
                run.call_tool(
                    "mind_set_goal", {"description": f"Goal {name}", "priority": priority}
                )
            )
            time.sleep(0.002)  # creation times are milliseconds: keep them apart
        assert all(set(m) == {"status", "id"} and m["status"] == "ok" for m in made), made
        rule = run.call_tool("mind_reflect", {"content": "A standing rule", "pin": True})
        assert set(rule) == {"status", "id"}
    with stack.run(agent=AGENT) as run:
        assert run.call_tool("mind_unpin_reflection", {"id": rule["id"]}) == {"status": "ok"}
        assert run.call_tool("mind_update_goal", {"id": made[0]["id"], "progress": "Half way"}) == {
            "status": "ok"
        }
        assert run.call_tool("mind_complete_goal", {"id": made[1]["id"]}) == {"status": "ok"}
    with stack.run(agent=AGENT) as run:
        goals = ok(run.call_tool("mind_recall", {"query": "Goal", "type": "goal"}))
        # Active goals ranked by score; the completed one only when asked.
        assert {g["content"] for g in goals} == {"Goal alpha", "Goal gamma"}
        assert [g["score"] for g in goals] == sorted((g["score"] for g in goals), reverse=True)
        done = ok(
            run.call_tool("mind_recall", {"query": "Goal", "type": "goal", "status": "completed"})
        )
        assert [g["content"] for g in done] == ["Goal beta"]


def test_set_goal_fails_at_the_cap_counting_stored_and_drafted(store: Store) -> None:
    stack = make_stack(store, max_goals=3)
    with stack.run(agent=AGENT) as run:
        for i in range(2):
            ok(run.call_tool("mind_set_goal", {"description": f"Goal {i}"}))
    with stack.run(agent=AGENT) as run:
        third = ok(run.call_tool("mind_set_goal", {"description": "Goal 2"}))
        refused = run.call_tool("mind_set_goal", {"description": "Goal 3"})
        assert refused["ok"] is False and refused["error"]["code"] == "cap_reached"
        assert "3" in refused["error"]["message"]
        ok(run.call_tool("mind_complete_goal", {"id": third["id"]}))
        ok(run.call_tool("mind_set_goal", {"description": "Goal 3"}))
    assert len(stored_entries(store, "goal")) == 4


def test_goals_are_never_deduplicated_nor_archived_when_due(store: Store) -> None:
    """toolpack Agent Mind: mind_set_goal does no deduplication (the model is to recall
    first), and dueBy is metadata: a goal past its deadline stays active and in the header."""
    stack = make_stack(store)
    args = {"description": "Renew the TLS certificates", "dueBy": "2000-01-01"}
    with stack.run(agent=AGENT) as run:
        first = ok(run.call_tool("mind_set_goal", args))["id"]
    with stack.run(agent=AGENT) as run:
        second = ok(run.call_tool("mind_set_goal", args))["id"]
    assert first != second
    goals = stored_entries(store, "goal")
    assert sorted(g["id"] for g in goals) == sorted([first, second])
    assert {(g["status"], g["dueBy"]) for g in goals} == {("active", "2000-01-01")}
    lines = header_of(stack).splitlines()
    assert lines.count("[normal] Renew the TLS certificates (due: 2000-01-01)") == 2


def test_pinning_warns_within_two_of_the_cap_and_fails_at_it(store: Store) -> None:
    stack = make_stack(store, max_pinned_reflections=4)
    with stack.run(agent=AGENT) as run:
        first = ok(run.call_tool("mind_reflect", {"content": "Rule one", "pin": True}))
        assert "warning" not in first
        second = ok(run.call_tool("mind_reflect", {"content": "Rule two", "pin": True}))
        assert "2 of 4" in second["warning"]
        ok(run.call_tool("mind_reflect", {"content": "Rule three", "pin": True}))
    with stack.run(agent=AGENT) as run:
        fourth = ok(run.call_tool("mind_reflect", {"content": "Rule four", "pin": True}))
        assert "4 of 4" in fourth["warning"]
        refused = run.call_tool("mind_reflect", {"content": "Rule five", "pin": True})
        assert refused["ok"] is False and refused["error"]["code"] == "cap_reached"
        assert "warning" not in ok(run.call_tool("mind_reflect", {"content": "Not pinned"}))
        rule = ok(
            run.call_tool("mind_recall", {"query": "Rule one", "pinned": True, "threshold": 0})
        )[0]
        ok(run.call_tool("mind_unpin_reflection", {"id": rule["id"]}))
        ok(run.call_tool("mind_reflect", {"content": "Rule five", "pin": True}))
        again = run.call_tool("mind_unpin_reflection", {"id": rule["id"]})
        assert again["error"]["code"] == "not_pinned"
    pinned = [r["content"] for r in stored_entries(store, "reflection") if r["pinned"]]
    assert sorted(pinned) == ["Rule five", "Rule four", "Rule three", "Rule two"]


def test_an_error_run_never_leaves_more_standing_rules_than_the_cap(store: Store) -> None:
    stack = make_stack(store, max_pinned_reflections=2)
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_reflect", {"content": "Rule one", "pin": True}))
        ok(run.call_tool("mind_reflect", {"content": "Rule two", "pin": True}))
    with pytest.raises(RuntimeError), stack.run(agent=AGENT) as run:
        rule = ok(
            run.call_tool("mind_recall", {"query": "Rule one", "pinned": True, "threshold": 0})
        )[0]
        ok(run.call_tool("mind_unpin_reflection", {"id": rule["id"]}))
        ok(run.call_tool("mind_reflect", {"content": "Rule three", "pin": True}))
        raise RuntimeError("the run fails: its unpin is dropped")
    stored = {r["content"]: r for r in stored_entries(store, "reflection")}
    # The unpin was dropped, so Rule three is kept (flagged) but not as a third standing rule.
    assert sorted(c for c, r in stored.items() if r["pinned"]) == ["Rule one", "Rule two"]
    assert stored["Rule three"]["error"] is True and stored["Rule three"]["pinned"] is False
    with stack.run(agent=AGENT) as run:
        header = run.prepare([{"role": "user", "content": "hi"}])[0]["content"]
        rules = header.split("## Standing Rules (Pinned)\n")[1].split("\n## ")[0]
        assert sorted(line for line in rules.splitlines() if line.startswith("- ")) == [
            "- Rule one",
            "- Rule two",
        ]


# Draft buffer and flush --------------------------------------------------------------------------


class CountingStore(SQLiteStore):
    """Real SQLite, counting the transactions a flush uses."""

    def __init__(self, path: pathlib.Path) -> None:
        super().__init__(path)
        self.batches: list[list[str]] = []

    def update_many(self, namespace: Any, updates: Any, *, ttl: Any = None) -> Any:
        self.batches.append(list(updates))
        return super().update_many(namespace, updates, ttl=ttl)

    def update_many_since(self, namespace: Any, since: Any, plan: Any, *, ttl: Any = None) -> Any:
        def counted(changed: Any) -> Any:
            updates = plan(changed)
            self.batches.append(list(updates))
            return updates

        return super().update_many_since(namespace, since, counted, ttl=ttl)


def test_a_clean_flush_writes_everything_in_one_transaction(tmp_path: pathlib.Path) -> None:
    store = CountingStore(tmp_path / "count.db")
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_believe", {"content": "One belief"}))
        ok(run.call_tool("mind_reflect", {"content": "One reflection", "pin": True}))
        goal = ok(run.call_tool("mind_set_goal", {"description": "One goal"}))
        assert store.list(NS) == []
    assert len(store.batches) == 1 and len(store.batches[0]) == 3
    store.batches.clear()
    with stack.run(agent=AGENT) as run:
        ok(
            run.call_tool(
                "mind_update_goal", {"id": goal["id"], "priority": "high", "progress": "half"}
            )
        )
        ok(run.call_tool("mind_update_goal", {"id": goal["id"], "progress": "most"}))
        rule = ok(
            run.call_tool(
                "mind_recall", {"query": "One reflection", "threshold": 0, "pinned": True}
            )
        )[0]
        ok(run.call_tool("mind_unpin_reflection", {"id": rule["id"]}))
    assert len(store.batches) == 1
    (g,) = stored_entries(store, "goal")
    assert (g["priority"], g["progress"]) == ("high", ["half", "most"])
    assert [r["pinned"] for r in stored_entries(store, "reflection")] == [False]
    with stack.run(agent=AGENT):
        pass
    assert len(store.batches) == 1  # an empty draft writes nothing
    store.close()


def test_an_error_flush_keeps_beliefs_and_reflections_flagged_and_drops_the_rest(
    store: Store,
) -> None:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        goal = ok(run.call_tool("mind_set_goal", {"description": "Ship the release"}))
        rule = ok(run.call_tool("mind_reflect", {"content": "Pinned safety rule", "pin": True}))
    with pytest.raises(RuntimeError, match="model crashed"), stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_believe", {"content": "Learned before the crash"}))
        ok(run.call_tool("mind_reflect", {"content": "Reflected before the crash"}))
        ok(run.call_tool("mind_set_goal", {"description": "Goal from a crashed run"}))
        ok(run.call_tool("mind_update_goal", {"id": goal["id"], "progress": "lost"}))
        ok(run.call_tool("mind_unpin_reflection", {"id": rule["id"]}))
        raise RuntimeError("model crashed")
    beliefs = stored_entries(store, "belief")
    assert [(b["content"], b["error"]) for b in beliefs] == [("Learned before the crash", True)]
    crashed = [
        r
        for r in stored_entries(store, "reflection")
        if r["content"] == "Reflected before the crash"
    ]
    assert crashed[0]["error"] is True
    assert [g["description"] for g in stored_entries(store, "goal")] == ["Ship the release"]
    assert stored_entries(store, "goal")[0]["progress"] == []
    pinned = {r["id"]: r["pinned"] for r in stored_entries(store, "reflection")}
    assert pinned[rule["id"]] is True
    with stack.run(agent=AGENT) as run:
        found = ok(
            run.call_tool(
                "mind_recall",
                {"query": "learned before the crash", "threshold": 0, "type": "belief"},
            )
        )
        assert found[0]["error"] is True
    # Error-flagged beliefs stay out of the header, whatever their confidence.
    assert "Learned before the crash" not in header_of(stack)


def test_a_failed_run_restating_a_belief_leaves_the_stored_one_as_it_was(store: Store) -> None:
    """A failed run's restatement is recorded (flagged error) beside a good stored belief,
    never over it: the stored belief keeps its content, confidence and place in the header."""
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        good = ok(
            run.call_tool(
                "mind_believe",
                {"content": "The staging API key differs from production.", "confidence": "high"},
            )
        )
    (before,) = stored_entries(store, "belief")
    with pytest.raises(RuntimeError, match="model crashed"), stack.run(agent=AGENT) as run:
        restated = ok(
            run.call_tool(
                "mind_believe",
                {
                    "content": "The staging API key differs from production!",
                    "confidence": "low",
                    "tags": ["keys"],
                },
            )
        )
        assert restated == {"status": "ok", "action": "updated_store", "id": good["id"]}
        raise RuntimeError("model crashed")
    beliefs = {b["id"]: b for b in stored_entries(store, "belief")}
    assert beliefs.pop(good["id"]) == before
    (recorded,) = beliefs.values()
    assert recorded["content"] == "The staging API key differs from production!"
    assert (recorded["error"], recorded["confidence"], recorded["tags"]) == (True, "low", ["keys"])
    assert "- The staging API key differs from production. (high confidence)" in header_of(stack)
    # A clean run restating it again updates the good belief (the closer of the two).
    with stack.run(agent=AGENT) as run:
        again = ok(
            run.call_tool(
                "mind_believe", {"content": "The staging API key differs from production."}
            )
        )
    assert again["id"] == good["id"]


def test_a_failed_run_restating_a_failed_runs_belief_updates_it_in_place(store: Store) -> None:
    stack = make_stack(store)
    for text in ("The nightly backup job is flaky.", "The nightly backup job is flaky!"):
        with pytest.raises(RuntimeError), stack.run(agent=AGENT) as run:
            ok(run.call_tool("mind_believe", {"content": text}))
            raise RuntimeError("model crashed")
    (belief,) = stored_entries(store, "belief")
    assert (belief["content"], belief["error"]) == ("The nightly backup job is flaky!", True)
    assert [p["content"] for p in belief["previous"]] == ["The nightly backup job is flaky."]


def test_a_failed_run_never_folds_its_belief_into_a_good_one_committed_meanwhile(
    store: Store,
) -> None:
    stack = make_stack(store)
    failing, clean = stack.run(agent=AGENT).open(), stack.run(agent=AGENT).open()
    ok(failing.call_tool("mind_believe", {"content": "Deploys freeze on Fridays!"}))
    ok(
        clean.call_tool(
            "mind_believe", {"content": "Deploys freeze on Fridays.", "confidence": "high"}
        )
    )
    clean.close()
    (good,) = stored_entries(store, "belief")
    with pytest.raises(RuntimeError), failing:
        raise RuntimeError("model crashed")
    beliefs = {b["id"]: b for b in stored_entries(store, "belief")}
    assert beliefs.pop(good["id"]) == good
    assert [(b["content"], b["error"]) for b in beliefs.values()] == [
        ("Deploys freeze on Fridays!", True)
    ]


def test_a_failed_runs_restatements_stay_within_max_entries(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    stack = make_stack(store, max_entries=2)
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_believe", {"content": "Alpha service runs on port 8080."}))
        ok(run.call_tool("mind_believe", {"content": "Beta queue drains every hour."}))
    before = sorted(json.dumps(b, sort_keys=True) for b in stored_entries(store, "belief"))
    with (
        caplog.at_level(logging.WARNING, logger="memstrata.agent_mind"),
        pytest.raises(RuntimeError),
        stack.run(agent=AGENT) as run,
    ):
        ok(run.call_tool("mind_believe", {"content": "Alpha service runs on port 8080!"}))
        raise RuntimeError("model crashed")
    after = sorted(json.dumps(b, sort_keys=True) for b in stored_entries(store, "belief"))
    assert after == before
    assert "no room left for the restatement" in caplog.text


def test_a_goal_completed_in_a_run_leaves_that_runs_header_only(store: Store) -> None:
    """A completed goal is committed at once and leaves the run's view of the goals: the
    run's next prompt must not show it as active, whether or not the run showed the block
    before; and another open run, whose view still holds it, must not lose it from its block
    because of a header the first run made."""
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        report = ok(run.call_tool("mind_set_goal", {"description": "Ship the report"}))
        venue = ok(run.call_tool("mind_set_goal", {"description": "Book the venue"}))

    def block(run: Any) -> str:
        return "\n".join(m["content"] for m in run.prepare([]))

    rendered, silent, other = (stack.run(agent=AGENT).open() for _ in range(3))
    assert "Ship the report" in block(rendered)
    ok(rendered.call_tool("mind_complete_goal", {"id": report["id"]}))
    assert "Ship the report" not in block(rendered)
    ok(silent.call_tool("mind_complete_goal", {"id": venue["id"]}))  # no block shown before
    assert "Book the venue" not in block(silent)
    assert "Ship the report" in block(other) and "Book the venue" in block(other)
    for run in (rendered, silent, other):
        run.close()
    assert "Goals" not in header_of(stack)


def test_complete_goal_commits_at_once_and_survives_an_error_run(store: Store) -> None:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        goal = ok(run.call_tool("mind_set_goal", {"description": "Finish the report"}))
    with pytest.raises(RuntimeError), stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_update_goal", {"id": goal["id"], "progress": "drafted"}))
        ok(run.call_tool("mind_complete_goal", {"id": goal["id"], "outcome": "sent"}))
        (stored,) = stored_entries(store, "goal")
        assert (stored["status"], stored["outcome"]) == ("completed", "sent")
        fresh = ok(run.call_tool("mind_set_goal", {"description": "Same-run goal"}))
        ok(run.call_tool("mind_complete_goal", {"id": fresh["id"]}))
        again = run.call_tool("mind_complete_goal", {"id": goal["id"]})
        assert again["error"]["code"] == "not_active"
        raise RuntimeError("crash")
    goals = {g["description"]: g for g in stored_entries(store, "goal")}
    assert goals["Finish the report"]["status"] == "completed"
    assert goals["Finish the report"]["progress"] == ["drafted"]
    assert goals["Same-run goal"]["status"] == "completed"
    assert "Finish the report" not in header_of(stack)


def test_a_failed_flush_writes_nothing(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_believe", {"content": "Kept from before"}))
    before = stored_entries(store)
    real = store.update_many_since

    def failing(namespace: Any, since: Any, plan: Any, **kw: Any) -> Any:
        def boom(_current: Any) -> Any:
            raise OSError("disk full")

        return real(namespace, since, lambda changed: {**plan(changed), "zz/boom": boom}, **kw)

    monkeypatch.setattr(store, "update_many_since", failing)
    with pytest.raises(OSError, match="disk full"), stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_believe", {"content": "Never half written"}))
        ok(run.call_tool("mind_reflect", {"content": "Nor this"}))
    assert stored_entries(store) == before


def test_a_flush_the_store_refused_keeps_the_draft_for_the_next(tmp_path: pathlib.Path) -> None:
    """A flush whose transaction the store refused (another process held the file's lock past
    the busy timeout) wrote nothing: its draft stays, so flushing again commits it, rather than
    reporting nothing to write and losing every belief and goal of the run."""
    path = tmp_path / "mind.db"
    store = SQLiteStore(path, busy_timeout=0.05)
    handle = AgentMind().open(store, agent=AGENT)
    assert handle.believe("The nightly backup job is flaky.")["action"] == "created"
    handle.set_goal("Fix the nightly backup job")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        handle.flush()
    other.execute("ROLLBACK")
    other.close()
    assert stored_entries(store) == []
    assert handle.flush() == 2
    assert {e["type"]: e.get("content", e.get("description")) for e in stored_entries(store)} == {
        "belief": "The nightly backup job is flaky.",
        "goal": "Fix the nightly backup job",
    }
    assert handle.flush() == 0  # committed once
    store.close()


def test_a_completion_the_store_refused_loses_neither_the_goal_nor_its_updates(
    tmp_path: pathlib.Path,
) -> None:
    """mind_complete_goal writes at once; when the store refuses that write (the file locked
    past the busy timeout) the model is told it failed, and the goal it set this run, or the
    progress it noted on a committed goal, must still be there to complete or flush."""
    path = tmp_path / "mind.db"
    store = SQLiteStore(path, busy_timeout=0.05)
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        committed = ok(run.call_tool("mind_set_goal", {"description": "Ship the report"}))["id"]
    with stack.run(agent=AGENT) as run:
        fresh = ok(run.call_tool("mind_set_goal", {"description": "Fix the nightly backup"}))["id"]
        note = {"id": committed, "progress": "Drafted the summary"}
        ok(run.call_tool("mind_update_goal", note))
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        for goal in (fresh, committed):
            failed = run.call_tool("mind_complete_goal", {"id": goal})
            assert failed["ok"] is False and failed["error"]["code"] == "memory_unavailable", failed
            assert failed["error"]["retry"] is True, failed
        other.execute("ROLLBACK")
        other.close()
        ok(run.call_tool("mind_complete_goal", {"id": fresh}))
    goals = {g["description"]: g for g in stored_entries(store, "goal")}
    assert goals["Fix the nightly backup"]["status"] == "completed"
    assert goals["Ship the report"]["status"] == "active"
    assert goals["Ship the report"]["progress"] == ["Drafted the summary"]
    store.close()


def test_an_entry_another_program_made_unreadable_is_skipped_by_a_long_lived_mind(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A stored entry rewritten with text that is not JSON is skipped with a warning, never
    deleted, as the docs say: by a process catching up with what changed since its last run
    as by one reading the mind whole, instead of every later run of that process failing."""
    path = tmp_path / "mind.db"
    store = SQLiteStore(path)
    stack = make_stack(store)  # one layer across runs: later runs read only what changed
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_believe", {"content": "The backup job runs nightly."}))
        ok(run.call_tool("mind_believe", {"content": "Reports are due on Fridays."}))
    with sqlite3.connect(path) as raw:
        damaged = raw.execute(
            "UPDATE items SET value = ? WHERE key IN (SELECT key FROM items"
            " WHERE CAST(value AS TEXT) LIKE '%backup%')",
            (b'{"type": "belief", "cont',),
        ).rowcount
    assert damaged == 1
    with caplog.at_level(logging.WARNING), stack.run(agent=AGENT) as run:
        hits = ok(run.call_tool("mind_recall", {"query": "when are reports due"}))
        assert [h["content"] for h in hits] == ["Reports are due on Fridays."]
        ok(run.call_tool("mind_believe", {"content": "Staging runs PostgreSQL 16."}))
    assert "stored as malformed JSON" in caplog.text
    with sqlite3.connect(path) as raw:  # kept, as it was
        assert raw.execute(
            "SELECT count(*) FROM items WHERE value = ?", (b'{"type": "belief", "cont',)
        ).fetchone() == (1,)
    assert "Staging runs PostgreSQL 16." in [
        e.get("content") for e in stored_entries_readable(path)
    ]
    store.close()


def stored_entries_readable(path: pathlib.Path) -> list[dict[str, Any]]:
    """The entries of the mind's file that are JSON, read past the store."""
    with sqlite3.connect(path) as raw:
        texts = [value for (value,) in raw.execute("SELECT value FROM items")]
    out = []
    for text in texts:
        try:
            out.append(json.loads(text))
        except ValueError:
            continue
    return out


# Embedders and indexes ---------------------------------------------------------------------------


class CountingEmbedder(HashingEmbedder):
    def __init__(self, *, dim: int = 384, name: str = "count") -> None:
        super().__init__(dim=dim)
        self.calls: list[int] = []
        self._name = name

    @property
    def model(self) -> str:
        return f"{self._name}-{self.dim}"

    def embed(self, texts: Any) -> Any:
        self.calls.append(len(texts))
        return super().embed(texts)


def test_embedder_and_index_are_created_lazily(store: Store) -> None:
    made: list[CountingEmbedder] = []

    def factory() -> CountingEmbedder:
        made.append(CountingEmbedder())
        return made[-1]

    stack = MemoryStack([AgentMind(embedder=factory)], store=store)
    now = now_ms()
    put_raw(
        store,
        {
            "type": "belief",
            "id": "b1",
            "content": "Header only",
            "confidence": "high",
            "tags": [],
            "createdAt": now,
            "updatedAt": now,
        },
    )
    with stack.run(agent=AGENT) as run:
        assert "Header only" in run.prepare([])[0]["content"]
        run.tool_specs()
    assert made == []
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_recall", {"query": "header"}))
    assert len(made) == 1


FACTS = [
    "Invoices are emailed every Monday",
    "The staging cluster runs in Frankfurt",
    "Alice approves production deploys",
    "Search latency budget is 200 milliseconds",
    "Backups rotate weekly to cold storage",
]


def test_changing_the_embedder_re_embeds_with_progress(store: Store) -> None:
    old = make_stack(store, embedder=CountingEmbedder(dim=64, name="old"))
    with old.run(agent=AGENT) as run:
        for fact in FACTS:
            assert ok(run.call_tool("mind_believe", {"content": fact}))["action"] == "created"
        ok(run.call_tool("mind_reflect", {"content": "A reflection"}))
    assert {e["embeddingModel"] for e in stored_entries(store) if "embedding" in e} == {"old-64"}
    progress: list[tuple[int, int]] = []
    new_embedder = CountingEmbedder(dim=128, name="new")
    new = make_stack(store, embedder=new_embedder, on_progress=lambda d, t: progress.append((d, t)))
    with new.run(agent=AGENT) as run:
        found = ok(run.call_tool("mind_recall", {"query": FACTS[3], "type": "belief"}))
    assert found[0]["content"] == FACTS[3]
    assert progress == [(6, 6)]
    stored = stored_entries(store)
    assert {e["embeddingModel"] for e in stored if "embedding" in e} == {"new-128"}
    assert all(
        len(np.frombuffer(__import__("base64").b64decode(e["embedding"]), "<f4")) == 128
        for e in stored
        if "embedding" in e
    )
    new_embedder.calls.clear()
    with new.run(agent=AGENT) as run:
        ok(run.call_tool("mind_recall", {"query": "topic", "type": "belief"}))
    assert new_embedder.calls == [1]  # only the query: nothing left to re-embed


def test_the_index_follows_the_store_between_runs(store: Store) -> None:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_believe", {"content": "Alpha service owns billing"}))
    with stack.run(agent=AGENT) as run:
        assert ok(run.call_tool("mind_recall", {"query": "alpha service billing"}))
    for item in store.list(NS):
        store.delete(NS, item.key)
    with stack.run(agent=AGENT) as run:
        assert ok(run.call_tool("mind_recall", {"query": "alpha service billing"})) == []


def test_the_vectors_are_held_once_and_no_graph_is_built(store: Store) -> None:
    stack = make_stack(store)
    topics = ["billing", "search", "payments", "onboarding", "logging", "alerting"]
    with stack.run(agent=AGENT) as run:
        for topic in topics:
            ok(run.call_tool("mind_believe", {"content": f"The {topic} team owns {topic}"}))
        ok(run.call_tool("mind_reflect", {"content": "Ask the owning team first"}))
    with stack.run(agent=AGENT) as run:
        found = ok(
            run.call_tool("mind_recall", {"query": "logging team", "type": "belief", "limit": 1})
        )
        dup = ok(run.call_tool("mind_believe", {"content": "The alerting team owns alerting!"}))
        handle = run.layer("agent-mind")
        index = handle.index()
        (rows,) = handle._committed.rows.values()
        # One row per stored vector, and the index reads those rows: no copy of its own.
        assert rows.size == len(topics) + 1 and index.vectors is rows
        assert (len(index.beliefs), len(index.reflections)) == (len(topics), 1)
        assert not hasattr(index.beliefs, "backend")
    assert found[0]["content"] == "The logging team owns logging"
    assert dup["action"] == "updated_store"


def test_the_dedup_check_finds_the_best_live_belief_among_many(store: Store) -> None:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        for i in range(40):
            ok(run.call_tool("mind_believe", {"content": f"Server {i} runs in zone {i % 3}"}))
    with stack.run(agent=AGENT) as run:
        handle = run.layer("agent-mind")
        vector = handle.embed_one("Server 17 runs in zone 2")
        best = handle.index().beliefs.top_k(vector, 3, threshold=0.5)
        # Exact cosine similarity, best first: the same as a plain scan of the stored vectors.
        stored = {e["content"]: e["id"] for e in stored_entries(store, "belief")}
        texts = list(stored)
        sims = hash_embed(texts, 384) @ (vector / np.linalg.norm(vector))
        want = sorted(((-float(s), stored[t]) for t, s in zip(texts, sims) if s >= 0.5))[:3]
        assert [i for i, _ in best] == [i for _, i in want]
        assert np.allclose([s for _, s in best], [-s for s, _ in want], atol=1e-5)
        assert len(best) == 3


# Standalone use and spawn ------------------------------------------------------------------------


def test_standalone_session_flushes_on_exit(store: Store) -> None:
    mind = AgentMind()
    with mind.session(store, agent=AGENT) as handle:
        assert handle.believe("Works without a stack", confidence="high")["action"] == "created"
        assert handle.recall("works without a stack") == []
    with mind.session(store, agent=AGENT) as handle:
        assert "Works without a stack" in handle.header()
        hits = handle.recall("works without a stack")
        assert hits[0].content == "Works without a stack" and hits[0].score is not None
    with pytest.raises(ValueError), mind.session(store, agent=AGENT) as handle:
        handle.believe("Written in a failing session")
        raise ValueError("boom")
    flagged = [
        b for b in stored_entries(store, "belief") if b["content"] == "Written in a failing session"
    ]
    assert flagged[0]["error"] is True


def test_a_spawned_run_has_its_own_draft(store: Store) -> None:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as parent:
        with parent.spawn() as child:
            ok(child.call_tool("mind_believe", {"content": "Child learned this"}))
        assert [b["content"] for b in stored_entries(store, "belief")] == ["Child learned this"]
        ok(parent.call_tool("mind_believe", {"content": "Parent learned that"}))
    assert len(stored_entries(store, "belief")) == 2


def test_the_demo_starts_run_two_with_run_ones_writes(
    store: Store, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from memstrata.demos.agent_mind import run_demo

    run_demo(store, tmp_path)
    run_demo(store, tmp_path)  # repeatable on the same store
    out = capsys.readouterr().out.split("AgentMind run 1")[-1]
    assert "no header: the mind is empty" in out.split("AgentMind run 2")[0]
    run_two = out.split("AgentMind run 2")[1].split("AgentMind run 3")[0]
    assert "--- AGENT MIND ---" in run_two and "Monitor TSMC Q3 2026" in run_two
    assert "Always cite the filing date" in run_two and "updated_draft" in out
    goals = [e for e in store.list(("mind", "research-tracker")) if e.value["type"] == "goal"]
    assert [g.value["status"] for g in goals] == ["completed"]


def test_malformed_stored_entries_are_skipped_not_deleted(store: Store) -> None:
    store.put(NS, "belief/bad", {"type": "belief", "content": 3})
    store.put(NS, "note", "not an entry")
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_believe", {"content": "A good belief", "confidence": "high"}))
    assert "A good belief" in header_of(stack)
    assert store.get(NS, "belief/bad") is not None and store.get(NS, "note") is not None


@pytest.mark.parametrize("bad_id", ["../goal/x", "goal/../../x", "", "x" * 500, 7, None])
def test_ids_from_the_model_cannot_reach_other_keys(store: Store, bad_id: Any) -> None:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        for tool in ("mind_update_goal", "mind_complete_goal", "mind_unpin_reflection"):
            result = run.call_tool(
                tool, {"id": bad_id, "progress": "x"} if "update" in tool else {"id": bad_id}
            )
            assert result["ok"] is False
    assert store.list(()) == []


# Runs that overlap: dedup at flush against what other runs committed meanwhile ------------------


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def shared_store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    """One store that several runs (standing for several processes) write at once."""
    s = fresh_store(request.param, request, tmp_path)
    yield s
    s.close()


def test_a_belief_two_overlapping_runs_create_is_stored_once(shared_store: Store) -> None:
    mind = AgentMind()
    first, second = mind.open(shared_store, agent=AGENT), mind.open(shared_store, agent=AGENT)
    kept = first.believe("TSMC Q2 capacity is fully booked.", confidence="high", tags=["tsmc"])
    created_at = first.draft.beliefs[kept["id"]][0].created_at
    first.flush()
    again = second.believe("TSMC Q2 capacity is fully booked!", confidence="low", tags=["chips"])
    other = second.believe("Invoices are emailed every Monday.")
    # What the model was told stays as it was: the second run could not see the first's belief.
    assert again["action"] == other["action"] == "created"
    time.sleep(0.002)
    second.flush()
    assert second.folded == {again["id"]: kept["id"]}
    beliefs = {b["content"]: b for b in stored_entries(shared_store, "belief")}
    assert sorted(beliefs) == [
        "Invoices are emailed every Monday.",
        "TSMC Q2 capacity is fully booked!",
    ]
    folded = beliefs["TSMC Q2 capacity is fully booked!"]
    assert folded["id"] == kept["id"]
    assert folded["confidence"] == "high"  # only rises
    assert folded["tags"] == ["tsmc", "chips"]
    assert folded["createdAt"] == created_at and folded["updatedAt"] > created_at
    assert "error" not in folded
    assert beliefs["Invoices are emailed every Monday."]["id"] == other["id"]
    # The next run finds the folded belief by similarity, under the first run's id.
    with mind.session(shared_store, agent=AGENT) as handle:
        hit = handle.recall("TSMC capacity booked", type="belief", limit=1)[0]
        assert (hit.id, hit.content) == (kept["id"], "TSMC Q2 capacity is fully booked!")


def test_a_fold_follows_allow_downgrade(shared_store: Store) -> None:
    mind = AgentMind()
    first, second = mind.open(shared_store, agent=AGENT), mind.open(shared_store, agent=AGENT)
    first.believe("The staging database runs Postgres 16.", confidence="high")
    first.flush()
    second.believe("The staging database runs Postgres 16", confidence="low", allow_downgrade=True)
    second.flush()
    (belief,) = stored_entries(shared_store, "belief")
    assert (belief["confidence"], belief.get("error", False)) == ("low", False)


def test_an_error_flush_folds_only_into_a_failed_runs_belief(shared_store: Store) -> None:
    """A good belief committed meanwhile is left as it was by a failed run (its belief is kept
    apart, flagged); one a failed run committed meanwhile takes the fold, flagged."""
    mind = AgentMind()
    good, failed, also_failed = (mind.open(shared_store, agent=AGENT) for _ in range(3))
    good.believe("The staging database runs Postgres 16.", confidence="high")
    good.flush()
    failed.believe("The staging database runs Postgres 16", confidence="low", allow_downgrade=True)
    failed.flush(error=True)
    also_failed.believe("The staging database runs Postgres 16!", confidence="medium")
    also_failed.flush(error=True)
    beliefs = sorted(
        (b["content"], b["confidence"], b.get("error", False))
        for b in stored_entries(shared_store, "belief")
    )
    assert beliefs == [
        ("The staging database runs Postgres 16!", "medium", True),
        ("The staging database runs Postgres 16.", "high", False),
    ]


def test_folding_starts_at_the_dedup_threshold(shared_store: Store) -> None:
    # A rewording (morning vs evening would be another fact, never folded whatever the cosine).
    a, b = "The deploy window is Tuesday morning.", "Deploys go out in the Tuesday morning window."
    vectors = hash_embed([a, b], 384)
    similarity = float(vectors[0] @ vectors[1])
    for threshold, beliefs in ((similarity - 0.01, 1), (min(1.0, similarity + 0.01), 2)):
        mind = AgentMind(deduplication_threshold=threshold, namespace=f"mind/t{threshold}")
        first, second = mind.open(shared_store), mind.open(shared_store)
        first.believe(a)
        first.flush()
        second.believe(b)
        second.flush()
        stored = shared_store.list(mind.namespace_for(None))
        assert len(stored) == beliefs, threshold


def test_a_fold_needs_a_live_belief_and_reads_any_embedding(shared_store: Store) -> None:
    mind = AgentMind()
    handle = mind.open(shared_store, agent=AGENT)
    base = {"type": "belief", "confidence": "medium", "tags": [], "createdAt": now_ms()}
    # Committed meanwhile by runs with another embedder (no vector) - one of them expired.
    put_raw(shared_store, {**base, "id": "b_live", "content": "Lunch is served at noon.",
                           "updatedAt": now_ms()})  # fmt: skip
    put_raw(shared_store, {**base, "id": "b_expired", "content": "The office closes at six.",
                           "updatedAt": now_ms(), "expiresAt": now_ms() - 1})  # fmt: skip
    handle.believe("Lunch is served at noon!")
    handle.believe("The office closes at six!")
    handle.flush()
    beliefs = {b["id"]: b for b in stored_entries(shared_store, "belief")}
    assert len(beliefs) == 3 and beliefs["b_live"]["content"] == "Lunch is served at noon!"
    assert beliefs["b_expired"]["content"] == "The office closes at six."
    assert list(handle.folded.values()) == ["b_live"]


def test_a_second_flush_of_one_run_folds_into_its_first(shared_store: Store) -> None:
    mind = AgentMind()
    handle = mind.open(shared_store, agent=AGENT)
    handle.believe("Releases ship on Thursdays.")
    handle.flush()
    handle.believe("Releases ship on Thursdays.", confidence="high")
    handle.flush()
    (belief,) = stored_entries(shared_store, "belief")
    assert belief["confidence"] == "high"


class ChangeCountingStore(SQLiteStore):
    """Real SQLite, recording how many items each flush is shown and every list call."""

    def __init__(self, path: pathlib.Path) -> None:
        super().__init__(path)
        self.shown: list[int] = []
        self.lists = 0

    def list(self, *args: Any, **kwargs: Any) -> Any:
        self.lists += 1
        return super().list(*args, **kwargs)

    def update_many_since(self, namespace: Any, since: Any, plan: Any, *, ttl: Any = None) -> Any:
        def shown(changed: Any) -> Any:
            self.shown.append(len(changed))
            return plan(changed)

        return super().update_many_since(namespace, since, shown, ttl=ttl)


def test_a_flush_reads_only_what_changed_since_the_load(tmp_path: pathlib.Path) -> None:
    store = ChangeCountingStore(tmp_path / "big.db")
    mind = AgentMind()
    rng = random.Random(5)
    with mind.session(store, agent=AGENT) as handle:
        for _ in range(300):  # random words: no two alike
            handle.believe(
                " ".join("".join(rng.choices(string.ascii_lowercase, k=8)) for _ in "123")
            )
    first, second = mind.open(store, agent=AGENT), mind.open(store, agent=AGENT)
    assert len(first.beliefs) == 300
    first.believe("A belief from the first run")
    first.flush()
    second.believe("A belief from the second run")
    lists_before = store.lists
    second.flush()
    # 300 beliefs committed before the load, one since: the flush is shown that one only.
    assert store.shown[-2:] == [0, 1] and store.lists == lists_before
    store.close()


def test_a_handle_that_was_never_loaded_refuses_to_flush(store: Store) -> None:
    from memstrata.layers.mind import AgentMindHandle

    mind = AgentMind()
    handle = AgentMindHandle(mind, store, NS)
    handle.believe("Never loaded")
    with pytest.raises(InvalidInputError, match="never loaded"):
        handle.flush()
    assert store.list(NS) == []


FRESH_FACTS = [
    "The user's production database runs PostgreSQL 16",
    "Deploys go out on Tuesdays after the standup",
    "The staging cluster has three nodes",
    "The team prefers short pull requests",
]


def test_recall_returns_nothing_for_an_unrelated_query() -> None:
    """Fresh high-confidence beliefs score 0.40 with no similarity at all, over the 0.35
    threshold: the similarity floor keeps them out of an unrelated query's answer."""
    stack = make_stack(InMemoryStore())
    with stack.run(agent=AGENT) as run:
        for fact in FRESH_FACTS:
            ok(run.call_tool("mind_believe", {"content": fact, "confidence": "high"}))
        ok(run.call_tool("mind_reflect", {"content": "Double-check the deploy calendar"}))
    with stack.run(agent=AGENT) as run:
        found = ok(
            run.call_tool("mind_recall", {"query": "What is the weather in Paris tomorrow?"})
        )
        assert found == []
        found = ok(run.call_tool("mind_recall", {"query": "which database does production run"}))
        assert [f["content"] for f in found][:1] == [FRESH_FACTS[0]]
    seed_formula = make_stack(InMemoryStore(), similarity_floor=0.0)
    with seed_formula.run(agent=AGENT) as run:
        for fact in FRESH_FACTS:
            ok(run.call_tool("mind_believe", {"content": fact, "confidence": "high"}))
    with seed_formula.run(agent=AGENT) as run:
        found = ok(
            run.call_tool("mind_recall", {"query": "What is the weather in Paris tomorrow?"})
        )
        assert len(found) == len(FRESH_FACTS)  # what the floor prevents


def test_goals_match_by_meaning_not_by_a_shared_stop_word() -> None:
    stack = make_stack(InMemoryStore())
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_set_goal", {"description": "Migrate the production databases"}))
        for text in ("Ship the onboarding guide", "Review the budget for the quarter"):
            ok(run.call_tool("mind_set_goal", {"description": text}))
        ok(
            run.call_tool(
                "mind_believe",
                {
                    "content": "The database migration needs a maintenance window",
                    "confidence": "high",
                },
            )
        )
    with stack.run(agent=AGENT) as run:
        found = ok(run.call_tool("mind_recall", {"query": "database migration"}))
        contents = [f["content"] for f in found]
        assert "Migrate the production databases" in contents
        assert "The database migration needs a maintenance window" in contents
        assert not {"Ship the onboarding guide", "Review the budget for the quarter"} & set(
            contents
        )
        query = "What is the weather for the weekend?"
        assert ok(run.call_tool("mind_recall", {"query": query, "type": "goal"})) == []


LONG_GOAL = (
    "Migrate all production databases to PostgreSQL, coordinating with the SRE team, "
    "scheduling maintenance windows and finishing before the Q3 change freeze, updating the "
    "runbooks"
)


def test_a_goal_is_found_by_any_of_its_words_or_tags_however_long_its_text(
    store: Store,
) -> None:
    """A single word is little similar to a long goal (under the similarity floor with the
    HashingEmbedder), so recall by meaning alone lost the goal, and with it its id: the
    model could not complete a goal the header showed it."""
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        goal = ok(
            run.call_tool(
                "mind_set_goal", {"description": LONG_GOAL, "tags": ["db"], "priority": "high"}
            )
        )
        ok(run.call_tool("mind_set_goal", {"description": "Ship the onboarding guide"}))
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_update_goal", {"id": goal["id"], "progress": "schema copied"}))
    with stack.run(agent=AGENT) as run:
        for query in (
            "runbooks",
            "freeze",
            "db",
            "database migration",
            "RUNBOOK",
            "Schema",
            "postgresql sre",
        ):
            found = ok(run.call_tool("mind_recall", {"query": query, "type": "goal"}))
            assert [f["id"] for f in found] == [goal["id"]], query
        # Every word of the query, not any: words shared with another goal name no goal.
        found = ok(
            run.call_tool(
                "mind_recall", {"query": "runbooks for the onboarding guide", "type": "goal"}
            )
        )
        assert goal["id"] not in [f["id"] for f in found]
        ok(run.call_tool("mind_complete_goal", {"id": goal["id"], "outcome": "done"}))
    assert "Migrate all production" not in header_of(stack)


def test_every_goal_the_header_shows_can_be_found_by_a_word_of_it_and_completed(
    store: Store,
) -> None:
    stack = make_stack(store)
    topics = ["billing", "search", "payroll", "auth", "backups", "metrics", "docs", "queue"]
    with stack.run(agent=AGENT) as run:
        for topic in topics:
            ok(run.call_tool("mind_set_goal", {"description": f"{LONG_GOAL} for {topic}"}))
        # Goals similar to "runbooks" by their text, yet not naming it: they come after.
        for i in range(2):
            ok(run.call_tool("mind_set_goal", {"description": f"Run books {i} again"}))
    for topic in topics:
        with stack.run(agent=AGENT) as run:
            header = run.prepare([])[0]["content"]
            assert f"for {topic}" in header
            found = ok(run.call_tool("mind_recall", {"query": f"{topic} runbooks", "type": "goal"}))
            assert found[0]["content"].endswith(f"for {topic}")
            ok(run.call_tool("mind_complete_goal", {"id": found[0]["id"]}))
    assert LONG_GOAL not in header_of(stack)


def test_the_threshold_never_filters_goals(store: Store) -> None:
    """toolpack Agent Mind ignores ``threshold`` for goals: a goal the query matches (here:
    similar enough to pass the similarity floor) is a hit however old or low its priority,
    while beliefs and reflections still have to reach the threshold."""
    old = now_ms() - 200 * DAY_MS
    put_raw(
        store,
        {
            "type": "goal",
            "id": "g_old",
            "description": "Migrate the billing database to PostgreSQL",
            "priority": "low",
            "status": "active",
            "tags": [],
            "progress": [],
            "createdAt": old,
            "updatedAt": old,
        },
    )
    put_raw(
        store,
        {
            "type": "belief",
            "id": "b_old",
            "content": "The billing database migration is half done",
            "confidence": "low",
            "tags": [],
            "createdAt": old,
            "updatedAt": old,
        },
    )
    query = "billing database migration"
    with make_stack(store).run(agent=AGENT) as run:
        for args in ({"type": "goal", "threshold": 0.95}, {"threshold": 0.95}):
            found = ok(run.call_tool("mind_recall", {"query": query, **args}))
            assert [f["id"] for f in found] == ["g_old"], args
            assert found[0]["score"] < 0.95  # scored for the ranking, not filtered by it
        both = ok(run.call_tool("mind_recall", {"query": query, "threshold": 0}))
        assert {f["id"] for f in both} == {"g_old", "b_old"}
        # The floor still holds: an unrelated query finds no goal at any threshold.
        unrelated = {"query": "What is the weather in Paris tomorrow?", "type": "goal"}
        assert ok(run.call_tool("mind_recall", {**unrelated, "threshold": 0})) == []


def test_pinned_listing_without_a_query_lists_every_standing_rule() -> None:
    stack = make_stack(InMemoryStore())
    rules = [f"Rule {i}: always {word} before merging" for i, word in enumerate("abcdefgh")]
    with stack.run(agent=AGENT) as run:
        for rule in rules:
            ok(run.call_tool("mind_reflect", {"content": rule, "pin": True}))
        ok(run.call_tool("mind_reflect", {"content": "An ordinary note"}))
    with stack.run(agent=AGENT) as run:
        listed = ok(run.call_tool("mind_recall", {"type": "reflection", "pinned": True}))
        assert sorted(r["content"] for r in listed) == sorted(rules)
        assert all(r["pinned"] for r in listed)
        refused = run.call_tool("mind_recall", {"type": "belief"})
        assert refused["ok"] is False and "query" in refused["error"]["message"]


def test_a_fold_keeps_the_content_it_replaced(shared_store: Store) -> None:
    """A restatement replaces a belief's content; what it said before stays on the entry, is
    returned by mind_recall, and survives a fold at flush and a restatement by another run."""
    mind = AgentMind()
    with mind.session(shared_store, agent=AGENT) as handle:
        first = handle.believe("The payments API allows 100 requests per minute", confidence="high")
    with mind.session(shared_store, agent=AGENT) as handle:
        again = handle.believe("The payments API allows 100 requests per minute.")
        assert again == {"status": "ok", "action": "updated_store", "id": first["id"]}
    # Two runs restate it at once: the later flush keeps the earlier one's content.
    a, b = mind.open(shared_store, agent=AGENT), mind.open(shared_store, agent=AGENT)
    a.believe("The payments API allows 100 requests per minute!")
    b.believe("The payments API allows 100 requests per minute, per key")
    a.flush()
    time.sleep(0.002)
    b.flush()
    (stored,) = stored_entries(shared_store, "belief")
    assert stored["content"] == "The payments API allows 100 requests per minute, per key"
    assert [p["content"] for p in stored["previous"]] == [
        "The payments API allows 100 requests per minute",
        "The payments API allows 100 requests per minute.",
        "The payments API allows 100 requests per minute!",
    ]
    with mind.session(shared_store, agent=AGENT) as handle:
        (hit,) = handle.recall("payments API requests per minute", type="belief")
        assert hit.to_payload()["previous"] == stored["previous"]


def test_a_clean_restatement_clears_the_error_flag(store: Store) -> None:
    mind = AgentMind()
    handle = mind.open(store, agent=AGENT)
    handle.believe("The nightly export finishes by 3am", confidence="high")
    handle.flush(error=True)
    assert "AGENT MIND" not in header_of(MemoryStack([mind], store=store))
    with mind.session(store, agent=AGENT) as handle:
        handle.believe("The nightly export finishes by 3am", confidence="high")
    (stored,) = stored_entries(store, "belief")
    assert "error" not in stored
    assert "The nightly export finishes by 3am" in header_of(MemoryStack([mind], store=store))


def test_reflections_from_a_crashed_run_leave_the_header_like_beliefs(store: Store) -> None:
    mind = AgentMind()
    handle = mind.open(store, agent=AGENT)
    handle.reflect("Retries hid the real failure")
    handle.believe("The cache is warm after deploys", confidence="high")
    handle.flush(error=True)
    assert header_of(MemoryStack([mind], store=store)) == ""
    with mind.session(store, agent=AGENT) as handle:
        found = handle.recall("real failure retries", type="reflection")
        assert [(r.content, r.error) for r in found] == [("Retries hid the real failure", True)]
    # A pin is always shown (toolpack Agent Mind), one made by a crashed run too.
    handle = mind.open(store, agent=AGENT)
    handle.reflect("Check the retry budget first", pin=True)
    handle.flush(error=True)
    assert header_of(MemoryStack([mind], store=store)) == (
        "--- AGENT MIND ---\n## Standing Rules (Pinned)\n- Check the retry budget first\n---"
    )


def test_overlapping_runs_cannot_pass_the_goal_and_pin_caps(
    shared_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    mind = AgentMind(max_goals=3, max_pinned_reflections=3)
    with mind.session(shared_store, agent=AGENT) as handle:
        for i in range(2):
            handle.set_goal(f"Existing goal {i}")
            handle.reflect(f"Existing rule {i}", pin=True)
    a, b = mind.open(shared_store, agent=AGENT), mind.open(shared_store, agent=AGENT)
    a.set_goal("Goal from run a")
    a.reflect("Rule from run a", pin=True)
    b.set_goal("Goal from run b")
    b.reflect("Rule from run b", pin=True)
    a.flush()
    with caplog.at_level("WARNING", logger="memstrata.agent_mind"):
        b.flush()
    goals = [g for g in stored_entries(shared_store, "goal") if g["status"] == "active"]
    assert sorted(g["description"] for g in goals) == [
        "Existing goal 0",
        "Existing goal 1",
        "Goal from run a",
    ]
    reflections = {r["content"]: r["pinned"] for r in stored_entries(shared_store, "reflection")}
    assert sum(reflections.values()) == 3
    assert reflections["Rule from run b"] is False  # kept, as a plain reflection
    assert "dropped at flush" in caplog.text and "written unpinned" in caplog.text


def test_goals_made_in_one_millisecond_keep_their_order(store: Store) -> None:
    stack = make_stack(store)
    names = [f"Goal number {i:02d} of the plan" for i in range(10)]
    with stack.run(agent=AGENT) as run:
        for name in names:
            ok(run.call_tool("mind_set_goal", {"description": name}))
    header = header_of(stack)
    assert [line for line in header.splitlines() if "Goal number" in line] == [
        f"[normal] {name}" for name in names
    ]


class _NoScan(dict):  # type: ignore[type-arg]
    def values(self) -> Any:
        raise AssertionError("the draft was scanned")


def test_reflect_never_rescans_the_draft(store: Store) -> None:
    """mind_reflect counts pins in constant time: a run writing many reflections does not
    slow down with each one."""
    mind = AgentMind(max_pinned_reflections=5)
    handle = mind.open(store, agent=AGENT)
    handle.draft.reflections = _NoScan()
    for i in range(4):
        handle.reflect(f"Standing rule {i}", pin=True)
    for i in range(50):
        handle.reflect(f"Plain note {i}")
    assert handle.pinned_count() == 4
    handle.unpin_reflection(next(iter(dict.keys(handle.draft.reflections))))
    assert handle.pinned_count() == 3


def test_long_goals_and_rules_cannot_take_the_header_past_its_budget(store: Store) -> None:
    words = " ".join(f"word{i}" for i in range(500))[:3900]  # near the 4,000-character limit
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        for i in range(10):
            ok(run.call_tool("mind_set_goal", {"description": f"Goal {i}: {words}"}))
            ok(run.call_tool("mind_reflect", {"content": f"Rule {i}: {words}", "pin": True}))
        ok(run.call_tool("mind_believe", {"content": "Short fact", "confidence": "high"}))
    header = header_of(stack)
    assert count_tokens(header) <= 1500
    lines = header.splitlines()
    assert sum(line.startswith("[normal] Goal") for line in lines) == 10
    assert sum(line.startswith("- Rule") for line in lines) == 10
    assert all(len(line) <= 300 for line in lines)
    assert all(line.endswith("…") for line in lines if "word1" in line)
    small = MemoryStack([AgentMind(budget=(0, 400))], store=store)
    assert count_tokens(header_of(small)) <= 400


@pytest.mark.parametrize("token_budget", [20, 50, 100, 300])
def test_the_beliefs_and_reflections_sections_fit_token_budget_as_shown(
    store: Store, token_budget: int
) -> None:
    """toolpack Agent Mind's tokenBudget is the most the beliefs and recent reflections
    sections take together: counted as they appear in the block, headings and line breaks
    included, not line by line."""
    now = now_ms()
    for i in range(40):
        put_raw(
            store,
            {
                "type": "belief",
                "id": f"b{i:02d}",
                "content": f"Service {i} answers within {i + 5} ms",
                "confidence": "high",
                "tags": [],
                "createdAt": now - i,
                "updatedAt": now - i,
            },
        )
        put_raw(
            store,
            {
                "type": "reflection",
                "id": f"r{i:02d}",
                "content": f"Lesson number {i} was learned the hard way",
                "pinned": False,
                "tags": [],
                "createdAt": now - i,
                "updatedAt": now - i,
            },
        )
    header = header_of(make_stack(store, token_budget=token_budget))
    lines = header.splitlines()
    sections = "\n".join(lines[1:-1])  # no goals or rules: only the two sections
    assert sections.startswith("## Beliefs\n- Service 0 answers")
    assert count_tokens(sections) <= token_budget
    # Filled, not starved: another line of about ten tokens would not have fit.
    assert count_tokens(sections) > token_budget - 12


def test_a_full_mind_purges_long_expired_entries_before_refusing(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    keeper = make_stack(store, max_entries=3, purge_expired_after=None)
    with keeper.run(agent=AGENT) as run:
        ok(run.call_tool("mind_believe", {"content": "Kept for ever", "expiresIn": None}))
        for text in ("Short lived alpha fact", "Short lived omega note"):
            ok(run.call_tool("mind_believe", {"content": text, "expiresIn": "1s"}))
    time.sleep(2.1)
    with keeper.run(agent=AGENT) as run:  # archived entries are kept: the mind stays full
        refused = run.call_tool("mind_reflect", {"content": "No room"})
        assert refused["error"]["code"] == "limit_exceeded"
    purging = make_stack(store, max_entries=3, purge_expired_after="1s")
    with caplog.at_level("INFO", logger="memstrata.agent_mind"), purging.run(agent=AGENT) as run:
        ok(run.call_tool("mind_reflect", {"content": "Room made"}))
        ok(run.call_tool("mind_reflect", {"content": "And again"}))
        refused = run.call_tool("mind_reflect", {"content": "Now full of live entries"})
        assert refused["error"]["code"] == "limit_exceeded"
    contents = sorted(e["content"] for e in stored_entries(store))
    assert contents == ["And again", "Kept for ever", "Room made"]
    assert caplog.text.count("purged belief/") == 2


DISTINCT_FACTS = [
    ("TSMC Q2 capacity is fully booked", "TSMC Q3 capacity is fully booked"),
    ("The payments API allows 100 req/min", "The payments API allows 500 req/min"),
    ("Postgres differs from MySQL in locking", "MySQL differs from Postgres in locking"),
    ("The user is allergic to peanuts", "The user is not allergic to peanuts"),
    ("The release ships on 2026-03-01", "The release ships on 2026-04-01"),
]


@pytest.mark.parametrize(("first", "second"), DISTINCT_FACTS)
def test_facts_that_disagree_are_never_folded(store: Store, first: str, second: str) -> None:
    mind = AgentMind()
    with mind.session(store, agent=AGENT) as handle:
        kept = handle.believe(first, confidence="high")
    with mind.session(store, agent=AGENT) as handle:
        other = handle.believe(second, confidence="high")
        assert other["action"] == "created" and other["id"] != kept["id"]
        again = handle.believe(second + ".", confidence="high")  # a restatement still folds
        assert again == {"status": "ok", "action": "updated_draft", "id": other["id"]}
    assert sorted(b["content"] for b in stored_entries(store, "belief")) == sorted(
        [first, second + "."]
    )


@pytest.mark.parametrize(("first", "second"), DISTINCT_FACTS[:2])
def test_overlapping_runs_never_fold_facts_that_disagree(
    shared_store: Store, first: str, second: str
) -> None:
    mind = AgentMind()
    a, b = mind.open(shared_store, agent=AGENT), mind.open(shared_store, agent=AGENT)
    a.believe(first, confidence="high")
    b.believe(second, confidence="high")
    a.flush()
    b.flush()
    assert b.folded == {}
    assert sorted(x["content"] for x in stored_entries(shared_store, "belief")) == sorted(
        [first, second]
    )


def test_one_run_cannot_add_past_its_entry_quota(store: Store) -> None:
    stack = make_stack(store, max_run_entries=3)
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_reflect", {"content": "First note"}))
        ok(run.call_tool("mind_set_goal", {"description": "Ship the release"}))
        first = ok(run.call_tool("mind_believe", {"content": "The API answers in JSON"}))
        refused = run.call_tool("mind_reflect", {"content": "One too many"})
        assert refused["error"]["code"] == "limit_exceeded"
        assert "max_run_entries" in refused["error"]["message"]
        # Restating a belief adds nothing: still allowed.
        again = ok(run.call_tool("mind_believe", {"content": "The API answers in JSON."}))
        assert again["id"] == first["id"]
    with stack.run(agent=AGENT) as run:  # the next run has its own quota
        ok(run.call_tool("mind_reflect", {"content": "A new run's note"}))


def test_the_opening_read_is_used_only_for_the_mark_it_was_made_at(store: Store) -> None:
    mind = AgentMind()
    with mind.session(store, agent=AGENT) as handle:
        handle.believe("the sky is blue", confidence="high")
    with mind.session(store, agent=AGENT):
        pass  # loads what the first session committed
    held = mind._committed[NS]
    assert held.mark is not None
    # Another process commits a belief after this process last looked.
    with AgentMind().session(store, agent=AGENT) as other:
        other.believe("grass is green", confidence="high")
    # An answer for the mark the layer holds is taken as the read (here: "nothing changed").
    answer = Changes(held.mark, [], [], complete=False)
    committed, _ = refresh(held, store, NS, {ChangesSince(NS, held.mark): answer})
    assert sorted(b.content for b in committed.beliefs.values()) == ["the sky is blue"]
    # One made at another mark answers another read: the layer reads again and sees it.
    older = ChangeMark(held.mark.backend, NS, "0")
    committed, _ = refresh(held, store, NS, {ChangesSince(NS, older): answer})
    assert sorted(b.content for b in committed.beliefs.values()) == [
        "grass is green",
        "the sky is blue",
    ]
    # Through a run: the opening read sees the other process's belief.
    stack = MemoryStack([mind], store=store)
    with stack.run(agent=AGENT) as run:
        assert "grass is green" in "\n".join(m["content"] for m in run.prepare([]))


def test_an_entry_with_a_time_past_64_bits_is_skipped_and_the_run_still_flushes(
    store: SQLiteStore, caplog: Any
) -> None:
    """A time no 64-bit integer holds (a foreign writer's ``1e20``) cannot be written back as
    JSON: such an entry is skipped with a warning, as any malformed one is, and left as stored;
    the runs around it work and flush as usual."""
    goal = {
        "id": "g1",
        "type": "goal",
        "description": "ship",
        "priority": "high",
        "status": "active",
        "tags": [],
        "progress": [],
        "createdAt": 1e20,
        "updatedAt": 1,
    }
    belief = {
        "id": "b1",
        "type": "belief",
        "content": "the sky is green today",
        "confidence": "high",
        "tags": [],
        "createdAt": 1,
        "updatedAt": -1e19,
    }
    put_raw(store, goal)
    put_raw(store, belief)
    stack = make_stack(store)
    with caplog.at_level("WARNING", logger="memstrata.agent_mind"), stack.run(agent=AGENT) as run:
        assert (
            run.call_tool("mind_update_goal", {"id": "g1", "progress": "half"}).get("ok") is False
        )
        ok(
            run.call_tool(
                "mind_believe", {"content": "the sky is green today", "confidence": "low"}
            )
        )
        ok(run.call_tool("mind_set_goal", {"description": "another"}))
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "'goal/g1'" in warned and "createdAt 1e+20 is out of range" in warned
    assert "'belief/b1'" in warned and "updatedAt" in warned
    assert store.get(NS, "goal/g1").value == goal  # type: ignore[union-attr]
    assert store.get(NS, "belief/b1").value == belief  # type: ignore[union-attr]
    descriptions = {g["description"] for g in stored_entries(store, "goal")}
    assert descriptions == {"ship", "another"}
    assert len(stored_entries(store, "belief")) == 2


def test_a_flush_over_an_entry_made_malformed_meanwhile_copies_it_aside_first(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Another program rewrites a goal and a belief this run loaded with values that are no
    entries; the run's flush writes both keys, in one transaction with copies of what it
    replaces under ``unreadable/<key>@<ms>`` (its value, key and when), as working memory and
    shared memory set aside what they cannot read. Later loads skip those copies silently."""
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        goal = ok(run.call_tool("mind_set_goal", {"description": "Ship the report"}))
        ok(run.call_tool("mind_believe", {"content": "The backup job runs nightly."}))
    belief_key = next(i.key for i in store.list(NS) if i.key.startswith("belief/"))
    goal_key = f"goal/{goal['id']}"
    damaged = {goal_key: {"type": "goal", "notes": "by hand"}, belief_key: ["a", "list"]}
    with stack.run(agent=AGENT) as run:
        run.prepare([])  # loaded: the run holds both entries
        for key, value in damaged.items():
            store.put(NS, key, value)
        ok(run.call_tool("mind_update_goal", {"id": goal["id"], "progress": "drafted"}))
        ok(run.call_tool("mind_believe", {"content": "The backup job runs nightly."}))
    kept = {
        item.value["key"]: item for item in store.list(NS) if item.key.startswith("unreadable/")
    }
    assert set(kept) == set(damaged)
    for key, item in kept.items():
        assert item.value["value"] == damaged[key]
        assert item.key.startswith(f"unreadable/{key}@")
        assert item.value["setAsideAt"] == int(item.key.rpartition("@")[2])
    rewritten = store.get(NS, goal_key)
    assert rewritten is not None and rewritten.value["type"] == "goal"
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert "Ship the report" in header_of(make_stack(store))
    assert "malformed" not in caplog.text


def test_a_flush_over_a_malformed_entry_with_a_long_id_copies_it_aside_under_a_digest(
    store: Store,
) -> None:
    """Entry ids have no length limit of their own (another program may store one), so the
    copy-aside key cannot hold every entry key: past the store's 1,024 characters it names the
    key by its digest, the full key kept in the copy, and the flush goes through."""
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_believe", {"content": "The backup job runs nightly."}))
    (short,) = [item for item in store.list(NS) if item.key.startswith("belief/")]
    long_id = "b" * 1010
    long_key = f"belief/{long_id}"
    store.put(NS, long_key, {**short.value, "id": long_id})
    store.delete(NS, short.key)
    with stack.run(agent=AGENT) as run:
        run.prepare([])  # loaded: the run holds the entry with the long id
        store.put(NS, long_key, ["no", "entry"])
        ok(run.call_tool("mind_believe", {"content": "The backup job runs nightly."}))
    (kept,) = [item for item in store.list(NS) if item.key.startswith("unreadable/")]
    assert kept.value["key"] == long_key and kept.value["value"] == ["no", "entry"]
    digest = hashlib.sha256(long_key.encode()).hexdigest()
    assert kept.key == f"unreadable/sha256:{digest}@{kept.value['setAsideAt']}"
    rewritten = store.get(NS, long_key)
    assert rewritten is not None and rewritten.value["content"] == "The backup job runs nightly."


def test_a_server_with_a_mind_per_user_keeps_only_the_recent_minds(store: Store) -> None:
    from memstrata.layers.mind.committed import MINDS_KEPT

    mind = AgentMind()
    stack = MemoryStack([mind], store=store)
    users = [f"u{n}" for n in range(MINDS_KEPT + 20)]
    for user in users:
        with stack.run(agent=f"support/{user}") as run:
            ok(run.call_tool("mind_believe", {"content": f"{user} prefers short answers"}))
            ok(run.call_tool("mind_recall", {"query": "short answers"}))  # builds its index
    assert len(mind._committed) <= MINDS_KEPT
    assert len(mind._indexes) <= MINDS_KEPT
    # The first user's mind was let go; another server writes to it meanwhile.
    with AgentMind().session(store, agent="support/u0") as other:
        other.believe("u0 works in Lisbon", confidence="high")
    with stack.run(agent="support/u0") as run:
        found = ok(run.call_tool("mind_recall", {"query": "u0", "threshold": 0}))
    assert sorted(hit["content"] for hit in found) == [
        "u0 prefers short answers",
        "u0 works in Lisbon",
    ]


# An entry deleted while a run that loaded it is open --------------------------------------------
# docs/privacy.md: to remove a mind entry, delete its record. A run opened before the deletion
# holds a copy; its bookkeeping on the entry must not write the deleted text back. Found by the
# model-based test (tests/test_stateful_shared_mind.py).


def _mind_with_a_goal_a_rule_and_a_belief(store: Store) -> tuple[MemoryStack, dict[str, str]]:
    stack = make_stack(store)
    with stack.run(agent=AGENT) as run:
        ids = {
            "goal": ok(run.call_tool("mind_set_goal", {"description": "Priya's secret goal"})),
            "reflection": ok(
                run.call_tool("mind_reflect", {"content": "Priya's secret rule", "pin": True})
            ),
            "belief": ok(run.call_tool("mind_believe", {"content": "Priya lives at 12 Elm St"})),
        }
    return stack, {kind: result["id"] for kind, result in ids.items()}


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("mind_unpin_reflection", lambda ids: {"id": ids["reflection"]}),
        ("mind_update_goal", lambda ids: {"id": ids["goal"], "progress": "noted"}),
        ("mind_update_goal", lambda ids: {"id": ids["goal"], "priority": "high"}),
    ],
)
def test_an_update_of_an_entry_deleted_since_the_run_loaded_it_does_not_bring_it_back(
    store: Store, tool: str, arguments: Any
) -> None:
    stack, ids = _mind_with_a_goal_a_rule_and_a_belief(store)
    run = stack.run(agent=AGENT).open()
    erase(store, NS)  # the user asked: the agent's memory of her is erased
    assert run.call_tool(tool, arguments(ids)) == {"status": "ok"}  # the run cannot know yet
    run.close()
    assert store.list(NS) == []  # before: the entry was written back whole, secret included


def test_completing_a_goal_deleted_since_the_run_loaded_it_is_not_found(store: Store) -> None:
    stack, ids = _mind_with_a_goal_a_rule_and_a_belief(store)
    run = stack.run(agent=AGENT).open()
    store.delete(NS, f"goal/{ids['goal']}")
    refused = run.call_tool("mind_complete_goal", {"id": ids["goal"]})
    assert refused["error"]["code"] == "not_found", refused  # before: stored again, completed
    run.close()
    assert [i.key for i in store.list(NS)] == sorted(
        [f"belief/{ids['belief']}", f"reflection/{ids['reflection']}"]
    )


def test_restating_a_belief_deleted_since_the_run_loaded_it_keeps_only_what_the_run_said(
    store: Store,
) -> None:
    stack, ids = _mind_with_a_goal_a_rule_and_a_belief(store)
    run = stack.run(agent=AGENT).open()
    store.delete(NS, f"belief/{ids['belief']}")
    restated = ok(
        run.call_tool("mind_believe", {"content": "Priya lives at 12 Elm St.", "tags": ["home"]})
    )
    assert restated["action"] == "updated_store"
    run.close()
    (belief,) = stored_entries(store, "belief")
    # What this run said, as a belief of its own: before, "previous" held the deleted text.
    assert belief["content"] == "Priya lives at 12 Elm St."
    assert belief.get("previous", []) == []
    assert belief["tags"] == ["home"]
    assert belief["confidence"] == "medium"


def test_the_other_entries_of_a_flush_are_written_when_one_was_deleted(store: Store) -> None:
    stack, ids = _mind_with_a_goal_a_rule_and_a_belief(store)
    run = stack.run(agent=AGENT).open()
    store.delete(NS, f"reflection/{ids['reflection']}")
    ok(run.call_tool("mind_unpin_reflection", {"id": ids["reflection"]}))
    ok(run.call_tool("mind_update_goal", {"id": ids["goal"], "progress": "step one"}))
    ok(run.call_tool("mind_reflect", {"content": "A new lesson."}))
    run.close()
    goal = stored_entries(store, "goal")[0]
    assert goal["progress"] == ["step one"]
    assert [r["content"] for r in stored_entries(store, "reflection")] == ["A new lesson."]


def _an_open_run_adds_a_goal_and_a_rule_to_full_caps(
    store: Store, meanwhile: Callable[[], None]
) -> tuple[list[str], dict[str, bool]]:
    """Caps of 3: an open run loaded a goal and a standing rule; ``meanwhile`` runs, then
    another run sets two goals and pins two rules, then the open run sets a goal and pins a
    rule and closes. The stored goals' descriptions (sorted) and each rule's pinned flag."""
    stack = make_stack(store, max_goals=3, max_pinned_reflections=3)
    with stack.run(agent=AGENT) as run:
        ok(run.call_tool("mind_set_goal", {"description": "Loaded goal"}))
        ok(run.call_tool("mind_reflect", {"content": "Loaded rule", "pin": True}))
    open_run = stack.run(agent=AGENT).open()
    meanwhile()
    with stack.run(agent=AGENT) as run:
        for n in (1, 2):
            ok(run.call_tool("mind_set_goal", {"description": f"Other goal {n}"}))
            ok(run.call_tool("mind_reflect", {"content": f"Other rule {n}", "pin": True}))
    ok(open_run.call_tool("mind_set_goal", {"description": "Open run's goal"}))
    ok(open_run.call_tool("mind_reflect", {"content": "Open run's rule", "pin": True}))
    open_run.close()
    goals = sorted(g["description"] for g in stored_entries(store, "goal"))
    return goals, {r["content"]: r["pinned"] for r in stored_entries(store, "reflection")}


@pytest.mark.parametrize("pruned", [False, True])
def test_entries_erased_under_an_open_run_do_not_count_against_the_caps_at_its_flush(
    shared_store: Store, pruned: bool
) -> None:
    """The mind is erased while a run that loaded a goal and a standing rule is open: its new
    goal and rule fit the caps, and are kept, also when the erasure's tombstones were pruned
    before the flush (what the run loaded and the store no longer holds is gone). Before, the
    flush counted the erased entries too: the goal was dropped and the rule written unpinned."""

    def erased() -> None:
        erase(shared_store, NS)
        if pruned:
            shared_store.tombstone_retention = 0.0
            time.sleep(0.01)
            shared_store.purge_expired()

    goals, pinned = _an_open_run_adds_a_goal_and_a_rule_to_full_caps(shared_store, erased)
    assert goals == ["Open run's goal", "Other goal 1", "Other goal 2"]
    assert sorted(rule for rule, pin in pinned.items() if pin) == [
        "Open run's rule",
        "Other rule 1",
        "Other rule 2",
    ]


def test_the_caps_still_hold_at_the_flush_when_nothing_was_erased(shared_store: Store) -> None:
    goals, pinned = _an_open_run_adds_a_goal_and_a_rule_to_full_caps(shared_store, lambda: None)
    assert goals == ["Loaded goal", "Other goal 1", "Other goal 2"]
    assert pinned["Open run's rule"] is False and sum(pinned.values()) == 3


def test_a_restated_deleted_belief_folds_into_the_same_belief_stored_again_since(
    store: Store,
) -> None:
    stack, ids = _mind_with_a_goal_a_rule_and_a_belief(store)
    holding = stack.run(agent=AGENT).open()
    store.delete(NS, f"belief/{ids['belief']}")
    with stack.run(agent=AGENT) as other:  # learns it again, as a new belief
        again = ok(other.call_tool("mind_believe", {"content": "Priya lives at 12 Elm St"}))
    assert again["action"] == "created"
    restated = ok(holding.call_tool("mind_believe", {"content": "Priya lives at 12 Elm St."}))
    assert restated["action"] == "updated_store"  # the copy it loaded
    handle = holding.layer("agent-mind")
    holding.close()
    (belief,) = stored_entries(store, "belief")  # one belief, not two
    assert (belief["id"], belief["content"]) == (again["id"], "Priya lives at 12 Elm St.")
    assert belief.get("previous") == [
        {"content": "Priya lives at 12 Elm St", "updatedAt": belief["previous"][0]["updatedAt"]}
    ]
    assert handle.folded == {ids["belief"]: again["id"]}
