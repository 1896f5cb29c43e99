"""Tool calls read out of every message format memstrata accepts."""

from __future__ import annotations

from typing import Any

import pytest

from memstrata.messages import (
    ToolCall,
    call_names,
    countable,
    legacy_call_id,
    tool_calls,
    tool_results,
    with_tool_results,
)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
                    {"id": "2", "type": "function", "function": {"name": "b", "arguments": "[]"}},
                ],
            },
            [ToolCall("a", "{}"), ToolCall("b", "[]")],
        ),
        (
            {"role": "assistant", "function_call": {"name": "f", "arguments": '{"x": 1}'}},
            [ToolCall("f", '{"x": 1}')],
        ),
        (
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "hi"},
                    {"type": "tool_use", "id": "t", "name": "g", "input": {"y": 2}},
                ],
            },
            [ToolCall("g", {"y": 2})],
        ),
        (
            {"type": "function_call", "call_id": "c", "name": "h", "arguments": "{}"},
            [ToolCall("h", "{}")],
        ),
    ],
    ids=["chat", "legacy-function-call", "anthropic", "responses"],
)
def test_every_format_yields_its_calls_in_order(message: Any, expected: list[ToolCall]) -> None:
    assert list(tool_calls(message)) == expected


@pytest.mark.parametrize(
    "message",
    [
        None,
        "text",
        [],
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [None, "x", {"function": "f"}]},
        {"role": "assistant", "tool_calls": 5, "function_call": "f", "content": {"a": 1}},
        {"role": "assistant", "tool_calls": [{"function": {"name": 7, "arguments": "{}"}}]},
        {"role": "assistant", "content": [{"type": "tool_use", "input": {}}]},
        {"type": "function_call", "arguments": "{}"},
    ],
)
def test_malformed_messages_yield_nothing(message: Any) -> None:
    assert list(tool_calls(message)) == []


def test_call_names_of_every_format() -> None:
    messages: list[Any] = [
        {"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f"}}]},
        {"type": "function_call", "call_id": "b", "name": "g", "arguments": "{}"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "h"}]},
        {"role": "assistant", "tool_calls": [{"function": {"name": "no-id"}}]},
    ]
    assert call_names(messages) == {"a": "f", "b": "g", "c": "h"}


def test_tool_results_of_every_format_and_their_rewrite() -> None:
    messages: list[Any] = [
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "function", "name": "f", "content": "F"},
        {"type": "function_call_output", "call_id": "b", "output": "B"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {"type": "tool_result", "tool_use_id": "c", "content": [{"type": "text"}]},
            ],
        },
        {"role": "tool", "content": "no id"},
    ]
    found = tool_results(messages)
    assert [(r.position, r.block, r.body) for r in found] == [
        (0, None, "A"),
        (1, None, "F"),
        (2, None, "B"),
        (3, 1, [{"type": "text"}]),
    ]
    assert found[1].call_id == legacy_call_id(messages[1]) and found[1].call_id.startswith("fn-")
    out = with_tool_results(messages, {(r.position, r.block): "X" for r in found})
    assert [out[0]["content"], out[1]["content"], out[2]["output"]] == ["X", "X", "X"]
    assert (
        out[3]["content"][1]["content"] == "X" and out[3]["content"][0] is messages[3]["content"][0]
    )
    assert out[4] is messages[4]
    assert messages[2]["output"] == "B" and messages[3]["content"][1]["content"] == [
        {"type": "text"}
    ]


def test_countable_maps_responses_items_to_chat() -> None:
    call = countable({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"})
    assert call["role"] == "assistant" and call["tool_calls"][0]["function"]["name"] == "f"
    output = countable({"type": "function_call_output", "call_id": "c", "output": "out"})
    assert output == {"role": "tool", "tool_call_id": "c", "content": "out"}
    parts = countable({"role": "user", "content": [{"type": "input_text", "text": "hi"}]})
    assert parts["content"] == [{"type": "text", "text": "hi"}]
    assert countable({"type": "reasoning", "summary": []})["role"] == "assistant"
    chat = {"role": "user", "content": "hi"}
    assert countable(chat) is chat


def test_a_slid_window_is_realigned_and_only_what_is_new_counts_as_changed() -> None:
    from memstrata.messages import EMPTY_SNAPSHOT, changes, realigned

    system = {"role": "system", "content": "be brief"}
    turns = [{"role": "user", "content": f"turn {i}"} for i in range(30)]
    calls = [
        {"role": "assistant", "content": None, "tool_calls": [{"id": f"c{i}", "arguments": [i]}]}
        for i in range(30)
    ]
    history = [m for pair in zip(turns, calls) for m in pair]
    first = [system, {"role": "user", "content": "block v1"}, *history[:40]]
    snapshot, _ = changes(EMPTY_SNAPSHOT, first)
    # The next call: the injected block changed, the window slid by two, two messages added.
    second = [system, {"role": "user", "content": "block v2"}, *history[2:42]]
    aligned, origin = realigned(snapshot, second)
    assert origin is not None and origin[:2] == [0, -1]  # the block changed: no origin
    assert origin[2:40] == list(range(4, 42))  # the conversation: two positions further on
    assert origin[40:] == [-1, -1]
    snapshot, changed = changes(aligned, second)
    assert changed == [1, 40, 41]
    # Content edited in place under a slid window is still seen.
    calls[5]["tool_calls"][0]["arguments"].append("edited")
    third = [system, {"role": "user", "content": "block v2"}, *history[4:44]]
    aligned, origin = realigned(snapshot, third)
    _, changed = changes(aligned, third)
    assert third.index(calls[5]) in changed
    assert {40, 41} <= set(changed)


def test_lists_that_line_up_are_left_as_they_are() -> None:
    from memstrata.messages import EMPTY_SNAPSHOT, changes, realigned

    first = [{"role": "user", "content": str(i)} for i in range(10)]
    snapshot, _ = changes(EMPTY_SNAPSHOT, first)
    assert realigned(snapshot, [*first, {"role": "user", "content": "new"}]) == (snapshot, None)
    assert realigned(snapshot, [{"role": "user", "content": "other"}]) == (snapshot, None)


def _reference_realigned(previous: Any, messages: list[Any]) -> tuple[list[Any], list[int]]:
    """What realigned lays out, position by position: each position's old message, slid
    first, else in place, else none (None here); the slide is found as realigned finds it."""
    from memstrata.messages import MAX_SLIDE

    tops, n = previous.tops, len(messages)
    last = len(tops) - 1
    found = next(
        j
        for d in range(1, MAX_SLIDE + 1)
        for j in (last - d, last + d)
        if 0 <= j < n and messages[j] == tops[last]
    )
    offset = last - found
    origin = []
    for p in range(n):
        if 0 <= p + offset <= last and p < found + 1 and tops[p + offset] == messages[p]:
            origin.append(p + offset)
        elif p <= last and tops[p] == messages[p]:
            origin.append(p)
        else:
            origin.append(-1)
    return [tops[q] if q >= 0 else None for q in origin], origin


def _reference_changes(
    previous: Any, messages: list[Any], shallow: Any
) -> tuple[list[Any], list[int], list[bytes]]:
    """What changes answers, position by position: the shallow copies, the positions whose
    content differs from the snapshot's (top level, or JSON text for a deep one), and the deep
    positions with their JSON text."""
    import orjson

    tops, deep = previous.tops, dict(zip(previous.deep, previous.texts))
    changed = [
        p
        for p, message in enumerate(messages)
        if p >= len(tops) or tops[p] != message or (p in deep and deep[p] != orjson.dumps(message))
    ]
    flat = (str, type(None))
    now = [
        p
        for p, m in enumerate(messages)
        if not all(isinstance(v, flat) for v in m.values()) and (shallow is None or not shallow(m))
    ]
    return [dict(m) for m in messages], changed, [orjson.dumps(messages[p]) for p in now]


def test_realignment_and_comparison_match_a_position_by_position_reference() -> None:
    """Random windows that slid, with blocks injected before them, messages added after them
    and messages edited inside them (at the top level and deep): realigned lays out what the
    reference does, and compare answers what realigned then changes answer."""
    import random

    import orjson

    from memstrata.messages import EMPTY_SNAPSHOT, changes, compare, realigned

    rng = random.Random(26)
    pool: list[dict[str, Any]] = [{"role": "user", "content": f"m{i}"} for i in range(12)]
    pool += [{"role": "assistant", "tool_calls": [{"id": str(i)}]} for i in range(6)]

    def some(k: int) -> list[dict[str, Any]]:
        return [dict(rng.choice(pool)) for _ in range(k)]

    slid = 0
    for _ in range(3000):
        before = some(rng.randint(1, 40))
        after = before[rng.randint(0, min(len(before), 8)) :]
        after = [*some(rng.randint(0, 4)), *after, *some(rng.randint(0, 4))]
        for _edit in range(rng.randint(0, 2)):
            if after:
                k = rng.randrange(len(after))
                after[k] = rng.choice([rng.choice(pool), {**after[k], "content": [k]}])
        edited = rng.random() < 0.3 and [m for m in after if m.get("tool_calls")]
        shallow = rng.choice([None, lambda top: top.get("role") == "assistant"])
        snapshot, _ = changes(EMPTY_SNAPSHOT, before, shallow=shallow)
        if edited:  # a message the snapshot holds, edited in place below its top level
            edited[0]["tool_calls"][0]["arguments"] = "edited"
        aligned, origin = realigned(snapshot, after)
        if origin is not None:
            slid += 1
            tops, expected = _reference_realigned(snapshot, after)
            assert origin == expected
            assert [t if q >= 0 else None for t, q in zip(aligned.tops, origin)] == tops
            texts = dict(zip(snapshot.deep, snapshot.texts))
            assert aligned.deep == [p for p, q in enumerate(origin) if q in texts]
            assert aligned.texts == [texts[origin[p]] for p in aligned.deep]
        new, changed, _ = compare(snapshot, after, shallow=shallow)
        assert (new, changed) == changes(aligned, after, shallow=shallow)
        assert (new.tops, changed, new.texts) == _reference_changes(aligned, after, shallow)
        assert [new.texts[i] for i in range(len(new.deep))] == [
            orjson.dumps(after[p]) for p in new.deep
        ]
    assert slid > 1000  # most cases slid: the realignment itself was checked


def test_an_empty_dict_where_a_slid_window_has_no_old_message_counts_as_changed() -> None:
    """A position the realignment finds no old message for compares unequal to every message,
    an empty dict too: otherwise ``{}`` injected before a slid window passes for unchanged."""
    from memstrata.messages import EMPTY_SNAPSHOT, changes, compare, realigned

    before = [{"role": "user", "content": f"m{i}"} for i in range(6)]
    snapshot, _ = changes(EMPTY_SNAPSHOT, before)
    after = [{}, *before[2:]]
    new, changed, origin = compare(snapshot, after)
    assert origin == [-1, 2, 3, 4, 5]
    assert changed == [0]
    assert new.tops[0] == {} and type(new.tops[0]) is dict
    aligned, _ = realigned(snapshot, after)
    assert changes(aligned, after)[1] == [0]
