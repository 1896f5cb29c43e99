"""A small pure-Python reference for ``prune_sliding_window``, for the property tests."""

from __future__ import annotations

from typing import Any


def prune_sliding_window(
    messages: list[dict[str, Any]],
    *,
    keep_recent: int = 3,
    placeholder: str = "[summarized: call_id={call_id}]",
) -> tuple[list[dict[str, Any]], int]:
    tools = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
    older = tools[: max(len(tools) - keep_recent, 0)]
    out = list(messages)
    pruned = 0
    for i in older:
        message = messages[i]
        rendered = placeholder.replace("{call_id}", message["tool_call_id"])
        if message.get("content") == rendered:
            continue
        out[i] = {**message, "content": rendered}
        pruned += 1
    return out, pruned
