"""prune_sliding_window against the pure-Python reference."""

from __future__ import annotations

import json
from typing import Any

import pytest
import reference_prune as ref
from hypothesis import given
from hypothesis import strategies as st

from memstrata import prune_sliding_window
from memstrata.exceptions import InvalidInputError, UnsupportedTypeError

PLACEHOLDER = "[summarized: call_id={call_id}]"

call_ids = st.sampled_from(["c1", "c2", "call_{x}", ""])
tool_messages = st.builds(
    lambda cid, content, extra: {"role": "tool", "tool_call_id": cid, "content": content, **extra},
    call_ids,
    st.text(max_size=8)
    | st.sampled_from(["[summarized: call_id=c1]", "<c2>"])
    | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=3)})),
    st.sampled_from([{}, {"name": "search"}]),
)
other_messages = st.builds(
    lambda role, content: {"role": role, "content": content},
    st.sampled_from(["system", "user", "assistant", "Tool"]),
    st.text(max_size=8),
)
conversations = st.lists(tool_messages | other_messages, max_size=30)
templates = st.sampled_from([PLACEHOLDER, "<{call_id}>", "{call_id}{x}{call_id}"])


@given(messages=conversations, keep=st.integers(0, 8), template=templates)
def test_agrees_with_the_reference_and_is_idempotent(
    messages: list[dict[str, Any]], keep: int, template: str
) -> None:
    before = json.dumps(messages)
    out, pruned = prune_sliding_window(messages, keep_recent=keep, placeholder=template)
    want, want_pruned = ref.prune_sliding_window(messages, keep_recent=keep, placeholder=template)
    assert (out, pruned) == (want, want_pruned)
    assert json.dumps(messages) == before  # pure
    assert out is not messages
    for old, new in zip(messages, out):
        if new is not old:
            assert old["role"] == "tool" and list(new) == list(old)
            assert {k: v for k, v in new.items() if k != "content"} == {
                k: v for k, v in old.items() if k != "content"
            }
    again, pruned_again = prune_sliding_window(out, keep_recent=keep, placeholder=template)
    assert pruned_again == 0 and again == out


def test_prunes_older_tool_messages_and_keeps_the_recent_ones() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "tool_call_id": "a", "content": "A" * 1000},
        {"role": "tool", "tool_call_id": "b", "content": "B"},
        {"role": "user", "content": "u"},
        {"role": "tool", "tool_call_id": "c", "content": "C"},
        {"role": "tool", "tool_call_id": "d", "content": "D"},
    ]
    out, pruned = prune_sliding_window(messages, keep_recent=2)
    assert pruned == 2
    assert out[2] == {"role": "tool", "tool_call_id": "a", "content": "[summarized: call_id=a]"}
    assert out[3]["content"] == "[summarized: call_id=b]"
    assert all(out[i] is messages[i] for i in (0, 1, 4, 5, 6))
    assert messages[2]["content"] == "A" * 1000
    assert prune_sliding_window(messages)[1] == 1  # default keep_recent=3
    assert prune_sliding_window(messages, keep_recent=0)[1] == 4
    assert prune_sliding_window([], keep_recent=0) == ([], 0)


def test_already_pruned_messages_are_kept_and_not_counted() -> None:
    done = {"role": "tool", "tool_call_id": "a", "content": "[summarized: call_id=a]"}
    messages = [done, {"role": "tool", "tool_call_id": "b", "content": "B"}]
    out, pruned = prune_sliding_window(messages, keep_recent=0)
    assert pruned == 1 and out[0] is done


@pytest.mark.parametrize(
    ("messages", "kwargs", "error", "match"),
    [
        ("not a list", {}, UnsupportedTypeError, "messages must be a list"),
        ([{"role": "user"}, 3], {}, UnsupportedTypeError, r"messages\[1\] must be a message dict"),
        ([], {"keep_recent": -1}, InvalidInputError, "keep_recent must be 0 or more, got -1"),
        (
            [],
            {"placeholder": "[pruned]"},
            InvalidInputError,
            r"placeholder must contain \{call_id\}",
        ),
        (
            [{"role": "tool", "content": "x"}],
            {"keep_recent": 0},
            InvalidInputError,
            r"\$\[0\]\.tool_call_id",
        ),
    ],
)
def test_bad_input_is_a_clear_error(
    messages: Any, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        prune_sliding_window(messages, **kwargs)


def test_error_paths_are_attributes() -> None:
    with pytest.raises(UnsupportedTypeError) as err:
        prune_sliding_window([{"role": "tool"}, "x"])
    assert err.value.path == "$[1]"


def test_roles_that_are_not_plain_str_compare_by_value() -> None:
    class Role(str):
        pass

    messages = [
        {"role": None, "content": "x"},
        {"role": 5, "content": "x"},
        {"content": "no role"},
        {"role": Role("tool"), "tool_call_id": "a", "content": "A"},
        {"role": "".join(["to", "ol"]), "tool_call_id": "b", "content": "B"},
    ]
    out, pruned = prune_sliding_window(messages, keep_recent=0)
    assert pruned == 2
    assert [m.get("content") for m in out] == [
        "x",
        "x",
        "no role",
        "[summarized: call_id=a]",
        "[summarized: call_id=b]",
    ]
