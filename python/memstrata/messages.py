"""What memstrata reads out of a model's messages, whatever API wrote them: OpenAI Chat
Completions (``tool_calls``, the legacy ``function_call``), OpenAI Responses items
(``{"type": "function_call"}``) and Anthropic messages (``tool_use`` content blocks)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple


class ToolCall(NamedTuple):
    """One call a model made: its tool's name and its arguments, as the API sent them (JSON
    text, or an already parsed object for Anthropic's ``input``)."""

    name: str
    arguments: Any


def tool_calls(message: Any) -> Iterator[ToolCall]:
    """Every tool call in ``message``, in order; nothing for anything else."""
    if not isinstance(message, Mapping):
        return
    if message.get("type") == "function_call":  # a Responses output item
        yield from _call(message.get("name"), message.get("arguments"))
        return
    calls = message.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            yield from _call(function.get("name"), function.get("arguments"))
    legacy = message.get("function_call")
    if isinstance(legacy, Mapping):
        yield from _call(legacy.get("name"), legacy.get("arguments"))
    content = message.get("content")
    if isinstance(content, list):
        for block in content:
            if isinstance(block, Mapping) and block.get("type") == "tool_use":
                yield from _call(block.get("name"), block.get("input"))


def _call(name: Any, arguments: Any) -> Iterator[ToolCall]:
    if isinstance(name, str):
        yield ToolCall(name, arguments)
