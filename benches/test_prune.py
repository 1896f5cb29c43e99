"""prune_sliding_window against the hand-written Python prune."""

from __future__ import annotations

from typing import Any

from benchkit import compare

from memstrata import prune_sliding_window


def python_prune(
    messages: list[dict[str, Any]],
    keep_recent: int = 3,
    placeholder: str = "[summarized: call_id={call_id}]",
) -> tuple[list[dict[str, Any]], int]:
    """The prune a good Python developer would write, with the same semantics as ours."""
    tool_positions = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
    out = list(messages)
    pruned = 0
    for i in tool_positions[: max(len(tool_positions) - keep_recent, 0)]:
        message = messages[i]
        text = placeholder.replace("{call_id}", message["tool_call_id"])
        if message.get("content") == text:
            continue
        out[i] = {**message, "content": text}
        pruned += 1
    return out, pruned


def conversation(n: int) -> list[dict[str, Any]]:
    """System prompt, then user / assistant-with-tool-call / tool result turns."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    i = 0
    while len(messages) < n:
        messages.append({"role": "user", "content": f"question {i}"})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "search", "arguments": '{"q": "x"}'},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": "r" * 2000})
        i += 1
    return messages[:n]


MESSAGES = conversation(2000)


def test_prune_2000_messages(benchmark: Any) -> None:
    assert prune_sliding_window(MESSAGES) == python_prune(MESSAGES)
    compare(
        benchmark,
        "prune_sliding_window: 2,000 messages (666 tool results, keep_recent=3)",
        lambda: prune_sliding_window(MESSAGES),
        {"python prune": lambda: python_prune(MESSAGES)},
        target=">= 2x python prune",
    )


def test_prune_2000_messages_already_pruned(benchmark: Any) -> None:
    pruned, _ = prune_sliding_window(MESSAGES)
    assert prune_sliding_window(pruned) == python_prune(pruned)
    compare(
        benchmark,
        "prune_sliding_window: the same 2,000 messages again (all already pruned)",
        lambda: prune_sliding_window(pruned),
        {"python prune": lambda: python_prune(pruned)},
        target=">= 2x python prune",
    )
