"""Tool calls read out of every message format memstrata accepts."""

from __future__ import annotations

from typing import Any

import pytest

from memstrata.messages import ToolCall, tool_calls


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
