"""ContextGate: the four states, padding, the model table, checkpoints and redaction, the stack."""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memstrata import MemoryStack, RecoverableContextError, ToolResults, estimate_messages
from memstrata.exceptions import InvalidInputError, UnsupportedTypeError
from memstrata.layers.context_gate import TOOL_RESULT_GONE, ContextGate
from memstrata.model_windows import (
    FALLBACK_MAX_INPUT_TOKENS,
    max_input_tokens_for,
    normalize_model_name,
)
from memstrata.stores import InMemoryStore
from memstrata.tokens import ExactCounter

# Made-up secrets shaped like real ones (none of these is a real credential).
FAKE_OPENAI_KEY = "sk-proj-Zq3xT9vLmN2pR7sK4wY8bC1dF6gH0jQ5eA"
FAKE_JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyLTQyIn0.c2lnbmF0dXJlLW5vdC1yZWFs"


def tool_turn(i: int, size: int) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {
                        "name": "http_get",
                        "arguments": json.dumps({"url": f"https://x/{i}"}),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": f"call_{i}", "content": f"result {i} " + "word " * size},
    ]


def conversation(turns: int, size: int) -> list[dict[str, Any]]:
    messages = [
        {"role": "system", "content": "You are a research agent."},
        {"role": "user", "content": "Find the answer."},
    ]
    for i in range(turns):
        messages.extend(tool_turn(i, size))
    return messages


def gate_for(
    messages: list[dict[str, Any]], fraction: float, tmp_path: Path, **kw: Any
) -> ContextGate:
    """A gate whose window puts ``messages`` at ``fraction`` of it (padded)."""
    probe = ContextGate(max_input_tokens=10**9)
    padded = probe.estimate(messages)
    return ContextGate(
        max_input_tokens=max(int(padded / fraction), 1), checkpoints_dir=tmp_path / "ckpt", **kw
    )


def test_a_window_the_gate_has_to_guess_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """A model the table lacks (a fine-tune, a local server's name) gets 8,192 tokens: a server
    whose model has a larger window would have its long prompts pruned and refused, so the
    gate says so, and how to give the window."""
    with caplog.at_level(logging.WARNING, logger="memstrata.context_gate"):
        assert ContextGate(model="acme-chat-large").max_input_tokens == 8192
    assert "the window of model 'acme-chat-large' is not known" in caplog.text
    assert "max_input_tokens=" in caplog.text and "register_model_window" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="memstrata.context_gate"):
        ContextGate(model="gpt-4o")
        ContextGate(model="acme-chat-large", max_input_tokens=32_000)
    assert caplog.text == ""


def test_defaults_follow_modulatio() -> None:
    gate = ContextGate()
    assert gate.enabled is True
    assert (gate.soft_warn_at_pct, gate.prune_at_pct, gate.pad_pct) == (0.70, 0.80, 0.05)
    assert gate.keep_recent == 3 and gate.checkpoint_redact_secrets is True
    assert gate.max_input_tokens == 8192  # no window given and no model to look one up by


def test_estimate_is_padded_and_matches_the_uncached_count(tmp_path: Path) -> None:
    messages = conversation(5, 50)
    gate = ContextGate(max_input_tokens=100_000, pad_pct=0.05)
    raw = estimate_messages(messages)
    assert gate.estimate(messages) == -(-raw * 105 // 100)
    assert ContextGate(max_input_tokens=100_000, pad_pct=0.0).estimate(messages) == raw
    # Cached and uncached agree, and a replaced content is counted again.
    assert gate.estimate(messages) == ContextGate(max_input_tokens=100_000, cache=False).estimate(
        messages
    )
    messages[-1]["content"] = "tiny"
    assert ContextGate(max_input_tokens=100_000, pad_pct=0.0).estimate(
        messages
    ) == estimate_messages(messages)
    before = gate.estimate(messages)
    assert before == -(-estimate_messages(messages) * 105 // 100)


_EDITS = st.lists(
    st.tuples(
        st.sampled_from(["append", "slide", "replace", "insert", "inject", "copy", "drop"]),
        st.integers(0, 10_000),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(_EDITS)
def test_cached_counts_follow_any_edit_of_the_conversation(edits: list[tuple[str, int]]) -> None:
    """The gate reuses the last call's counts for messages it finds again at a shifted position;
    whatever a caller does to the list or its messages between calls, the cached estimate is the
    uncached one."""
    gate = ContextGate(max_input_tokens=10**9, pad_pct=0.0)
    plain = ContextGate(max_input_tokens=10**9, pad_pct=0.0, cache=False)
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": f"message {i} " + "word " * (i % 7)} for i in range(12)
    ]
    assert gate.estimate(messages) == plain.estimate(messages)
    for step, (edit, r) in enumerate(edits):
        if edit == "append":
            messages = [*messages, {"role": "user", "content": f"new {step} " * (r % 5 + 1)}]
        elif edit == "slide" and messages:
            messages = [*messages[r % 3 + 1 :], {"role": "assistant", "content": f"reply {r}"}]
        elif edit == "replace" and messages:
            # In place: the same dict, a new content (the case identity alone would miss).
            messages[r % len(messages)]["content"] = f"replaced {r} " * (r % 9 + 1)
        elif edit == "insert":
            at = r % (len(messages) + 1)
            messages = [*messages[:at], {"role": "tool", "content": "x" * (r % 50)}, *messages[at:]]
        elif edit == "inject":
            # What the stack does each turn: fresh items in front of the conversation.
            fresh = [{"role": "system", "content": f"block {r}"} for _ in range(r % 4)]
            messages = [*fresh, *messages[r % 4 :]]
        elif edit == "copy":
            messages = [dict(m) for m in messages]
        elif edit == "drop" and messages:
            del messages[r % len(messages)]
        assert gate.estimate(messages) == plain.estimate(messages), (step, edit)


def test_pass_below_soft_warn(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    messages = conversation(4, 100)
    gate = gate_for(messages, 0.5, tmp_path)
    with caplog.at_level(logging.WARNING, logger="memstrata"):
        out = gate.check_and_compress(messages, "c1")
    assert out is messages
    assert gate.evaluate(messages, "c1").state == "pass"
    assert caplog.records == []


def test_soft_warn_logs_once_per_run(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    messages = conversation(4, 100)
    gate = gate_for(messages, 0.75, tmp_path)
    with caplog.at_level(logging.WARNING, logger="memstrata"):
        for i in range(20):
            assert gate.check_and_compress(messages, f"iter-{i}", run_id="run-a") is messages
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert "iter-0" in warnings[0].getMessage()
        # Modulatio's warning is a structured log: its figures are fields of the record.
        record = warnings[0].__dict__
        assert record["memstrata_event"] == "context_soft_warning"
        assert (record["run_id"], record["call_id"]) == ("run-a", "iter-0")
        assert record["max_input_tokens"] == gate.max_input_tokens
        assert 0.75 * gate.max_input_tokens <= record["input_tokens"] < gate.max_input_tokens
        assert (record["soft_warn_at_pct"], record["prune_at_pct"]) == (0.70, 0.80)
        gate.check_and_compress(messages, "iter-0", run_id="run-b")
        assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2
        # Without run ids the gate is the run until new_run().
        gate.check_and_compress(messages, "x")
        gate.check_and_compress(messages, "y")
        assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 3
        gate.new_run()
        gate.check_and_compress(messages, "z")
        assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 4


def test_each_state_starts_exactly_at_its_line(tmp_path: Path) -> None:
    """Modulatio's bands are half-open: [soft_warn, prune) warns, [prune, 100%) prunes, and
    "at or above 100%" after pruning refuses. Counted exactly and unpadded, so the prompt
    sits on each line to the token."""
    messages = conversation(4, 100)
    exact = ExactCounter("o200k_base")
    tokens = ContextGate(max_input_tokens=10**9, pad_pct=0.0, tokens=exact).estimate(messages)

    def gate(window: int, keep_recent: int = 3) -> ContextGate:
        return ContextGate(
            max_input_tokens=window,
            soft_warn_at_pct=0.25,
            prune_at_pct=0.5,
            pad_pct=0.0,
            keep_recent=keep_recent,
            tokens=exact,
            checkpoints_dir=tmp_path / "ckpt",
        )

    assert gate(4 * tokens + 4).evaluate(messages, "c").state == "pass"
    assert gate(4 * tokens).evaluate(messages, "c").state == "warn"
    assert gate(2 * tokens + 2).evaluate(messages, "c").state == "warn"
    assert gate(2 * tokens, keep_recent=1).evaluate(messages, "c").state == "pruned"
    # Nothing left to prune (keep_recent covers every result): one token under the window
    # passes with a warning, at the window it is refused.
    assert gate(tokens + 1, keep_recent=4).evaluate(messages, "c").state == "warn"
    with pytest.raises(RecoverableContextError) as refused:
        gate(tokens, keep_recent=4).evaluate(messages, "c")
    assert refused.value.estimated_tokens == refused.value.max_input_tokens == tokens


def test_prune_then_pass(tmp_path: Path) -> None:
    messages = conversation(10, 200)
    gate = gate_for(messages, 0.9, tmp_path, keep_recent=3)
    decision = gate.evaluate(messages, "iter-3")
    assert decision.state == "pruned"
    assert decision.pruned == 7
    assert decision.estimated_tokens < gate.max_input_tokens
    tools = [m for m in decision.messages if m["role"] == "tool"]
    # The gate alone stores nothing: the placeholders say the text is gone, naming no call_id.
    assert [t["content"] for t in tools[:7]] == [TOOL_RESULT_GONE] * 7
    assert tools[7:] == [m for m in messages if m["role"] == "tool"][7:]
    assert messages[3]["content"].startswith("result 0")  # input untouched
    assert not (tmp_path / "ckpt").exists()


def test_refuse_writes_a_redacted_private_checkpoint(tmp_path: Path) -> None:
    messages = conversation(3, 300)
    messages.insert(
        2, {"role": "user", "content": f"use key {FAKE_OPENAI_KEY} and Bearer {FAKE_JWT}"}
    )
    gate = gate_for(messages, 1.5, tmp_path, model="openrouter/anthropic/claude-haiku-4-5")
    with pytest.raises(RecoverableContextError) as err:
        gate.check_and_compress(messages, "iter-3")
    exc = err.value
    path = Path(exc.checkpoint_path)
    assert path == tmp_path / "ckpt" / "iter-3.json"
    assert exc.call_id == "iter-3" and exc.max_input_tokens == gate.max_input_tokens
    assert exc.estimated_tokens >= gate.max_input_tokens
    assert str(path) in str(exc)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    record = json.loads(path.read_text())
    assert list(record) == [
        "timestamp",
        "call_id",
        "model",
        "estimated_tokens",
        "max_input_tokens",
        "redaction_policy",
        "redacted",
        "messages",
    ]
    assert record["call_id"] == "iter-3"
    # Modulatio's timestamp: ISO 8601 to the second, in UTC, with its offset written out.
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", record["timestamp"])
    assert record["model"] == "openrouter/anthropic/claude-haiku-4-5"
    assert record["estimated_tokens"] == exc.estimated_tokens
    assert record["redacted"] is True
    assert record["redaction_policy"] == [
        "user.content.secrets",
        "assistant.tool_calls.function.arguments",
        "tool.content",
    ]
    text = path.read_text()
    assert FAKE_OPENAI_KEY not in text and FAKE_JWT not in text
    assert "word word" not in text
    tool = [m for m in record["messages"] if m["role"] == "tool"]
    assert tool[-1]["content"] == f"[redacted: {len(messages[-1]['content'])} chars]"
    call = record["messages"][3]["tool_calls"][0]
    assert call["id"] == "call_0" and call["function"]["name"] == "http_get"
    assert (
        call["function"]["arguments"]
        == f"[redacted: {len(json.dumps({'url': 'https://x/0'}))} chars]"
    )


def test_an_existing_checkpoint_is_kept_and_the_new_one_is_0600(tmp_path: Path) -> None:
    """Modulatio rewrites ``<call_id>.json`` in place (and repairs its mode); in a directory
    shared by every run that would lose another run's checkpoint, so the new one goes beside
    it, private, and the old one stays as it was."""
    messages = conversation(3, 300)
    gate = gate_for(messages, 2.0, tmp_path)
    (tmp_path / "ckpt").mkdir()
    existing = tmp_path / "ckpt" / "c1.json"
    existing.write_text("old")
    os.chmod(existing, 0o644)
    with pytest.raises(RecoverableContextError) as err:
        gate.check_and_compress(messages, "c1")
    written = Path(err.value.checkpoint_path)
    assert written == tmp_path / "ckpt" / "c1~2.json"
    assert stat.S_IMODE(os.stat(written).st_mode) == 0o600
    assert json.loads(written.read_text())["call_id"] == "c1"
    assert existing.read_text() == "old"


def test_no_redaction_when_turned_off(tmp_path: Path) -> None:
    messages = conversation(2, 300)
    gate = gate_for(messages, 2.0, tmp_path, checkpoint_redact_secrets=False)
    with pytest.raises(RecoverableContextError) as err:
        gate.check_and_compress(messages, "c1")
    record = json.loads(Path(err.value.checkpoint_path).read_text())
    assert record["redacted"] is False and record["redaction_policy"] == []
    assert record["messages"][-1]["content"] == messages[-1]["content"]


def test_a_swept_checkpoint_with_nothing_to_redact_still_says_it_was_redacted(
    tmp_path: Path,
) -> None:
    """``redacted`` says whether the checkpoint went through redaction: a conversation with no
    tool bodies and no secrets comes out unchanged (``redaction_policy`` empty), and must not
    read like one written with redaction turned off."""
    messages = [{"role": "user", "content": "Summarise the plan. " * 200}]
    for redact in (True, False):
        gate = gate_for(messages, 2.0, tmp_path, checkpoint_redact_secrets=redact)
        with pytest.raises(RecoverableContextError) as err:
            gate.check_and_compress(messages, f"plain-{redact}")
        record = json.loads(Path(err.value.checkpoint_path).read_text())
        assert (record["redacted"], record["redaction_policy"]) == (redact, [])
        assert record["messages"] == messages


def test_model_table_and_fallback() -> None:
    assert max_input_tokens_for("gpt-4o-mini-2024-07-18") == 128_000
    assert max_input_tokens_for("gpt-4") == 8_192
    assert max_input_tokens_for("gpt-4.1-mini") == 1_047_576
    assert max_input_tokens_for("openrouter/anthropic/claude-haiku-4-5") == 200_000
    assert max_input_tokens_for("us.anthropic.claude-3-5-sonnet-20241022-v2:0") == 200_000
    assert max_input_tokens_for("gemini-1.5-pro-002") == 2_097_152
    assert max_input_tokens_for("meta-llama/Llama-3.1-8B-Instruct") == 131_072
    assert max_input_tokens_for("llama-3-8b") == 8_192
    assert max_input_tokens_for("mistral-large-latest") == 131_072
    assert max_input_tokens_for("Qwen/Qwen2.5-7B-Instruct") == 32_768
    assert max_input_tokens_for("my-finetune") == FALLBACK_MAX_INPUT_TOKENS == 8192
    assert max_input_tokens_for(None) == 8192
    assert normalize_model_name("openrouter/anthropic/Claude-Haiku-4-5") == "claude-haiku-4-5"
    assert ContextGate(model="gpt-4o").max_input_tokens == 128_000
    assert ContextGate(model="unknown").max_input_tokens == 8192
    assert ContextGate(model="gpt-4o", max_input_tokens=5000).max_input_tokens == 5000


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_input_tokens": 0}, "max_input_tokens"),
        ({"soft_warn_at_pct": 1.5}, "soft_warn_at_pct"),
        ({"soft_warn_at_pct": 0.9, "prune_at_pct": 0.8}, "must not exceed"),
        ({"pad_pct": -0.1}, "pad_pct"),
        ({"keep_recent": -1}, "keep_recent"),
    ],
)
def test_bad_options_are_named(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        ContextGate(**kwargs)


def test_bad_messages_are_named(tmp_path: Path) -> None:
    gate = ContextGate(max_input_tokens=1000)
    with pytest.raises(InvalidInputError, match="list of dicts"):
        gate.check_and_compress("hello", "c1")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"messages\[1\] must be a dict"):
        gate.check_and_compress([{"role": "user", "content": "x"}, "oops"], "c1")  # type: ignore[list-item]


def test_disabled_gate_passes_everything(tmp_path: Path) -> None:
    messages = conversation(3, 300)
    gate = gate_for(messages, 5.0, tmp_path, enabled=False)
    assert gate.check_and_compress(messages, "c1") is messages


def test_gate_in_the_stack_checks_every_prepare(tmp_path: Path, caplog) -> None:
    base = conversation(10, 200)
    probe = ContextGate(max_input_tokens=10**9).estimate(base)
    gate = ContextGate(max_input_tokens=int(probe / 0.9), checkpoints_dir=tmp_path / "ckpt")
    stack = MemoryStack([], store=InMemoryStore(), gate=gate)
    with stack.run(thread_id="t") as run:
        out = run.prepare(base)
        assert sum(m["content"] == TOOL_RESULT_GONE for m in out if m["role"] == "tool") == 7
        grown = base + tool_turn(99, 20_000)
        with pytest.raises(RecoverableContextError) as err:
            run.prepare(grown)
        path = Path(err.value.checkpoint_path)
        assert path.name == f"{run.run_id}-call-2.json"
        with pytest.raises(RecoverableContextError) as err:
            run.prepare(grown, call_id="iter-7")
        assert Path(err.value.checkpoint_path).name == "iter-7.json"
        # The run is still usable with a smaller prompt.
        assert run.prepare(base[:2]) == base[:2]
    with pytest.raises(InvalidInputError, match="check_and_compress"):
        MemoryStack([], store=InMemoryStore(), gate=object())  # type: ignore[arg-type]


def test_a_new_large_layer_item_every_turn_is_not_kept_alive() -> None:
    # The stack wraps each layer's item in a new dict every turn; a working memory's item is a
    # new 100 KB text after each update. Neither may pile up in the gate's caches (they did:
    # every turn's item stayed cached by its wrapper's identity, 200 KB a turn on a server).
    import gc
    import tracemalloc

    gate = ContextGate(max_input_tokens=1_000_000)
    conversation = [{"role": "user", "content": f"question {i}"} for i in range(20)]

    def turn(i: int) -> None:
        item = {"role": "system", "content": f"<working_memory>{i:06d}" + "x" * 100_000}
        assert gate.estimate([item, *conversation]) > 0

    tracemalloc.start()
    for i in range(80):  # the text cache (64 entries) fills up first
        turn(i)
    gc.collect()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(80, 280):
        turn(i)
    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert grown < 2_000_000, f"{grown:,} bytes kept after 200 turns of 100 KB items"


def test_the_message_count_cache_is_bounded_by_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    import memstrata.layers.context_gate as gate_module

    monkeypatch.setattr(gate_module, "_CACHE_MAX_CHARS", 1_000_000)
    gate = ContextGate(max_input_tokens=10_000_000)
    messages = [
        {"role": "tool", "tool_call_id": f"c{i}", "content": f"{i} " + "y" * 100_000}
        for i in range(30)
    ]
    total = gate.estimate(messages)
    assert gate._counts_chars <= 1_000_000 and len(gate._counts) <= 10
    # What stays cached is still right: the same answer as a gate that counts afresh.
    assert (
        gate.estimate(messages)
        == total
        == ContextGate(max_input_tokens=10_000_000).estimate(messages)
    )


# Context layers that compose ------------------------------------------------------------------


def _stack_with_results(tmp_path: Path, window: int, **gate_kw: Any) -> MemoryStack:
    gate = ContextGate(max_input_tokens=window, checkpoints_dir=tmp_path / "ckpt", **gate_kw)
    return MemoryStack([ToolResults()], store=InMemoryStore(), gate=gate)


def test_every_placeholder_naming_a_call_id_is_readable(tmp_path: Path) -> None:
    # The server appends tool results without calling offload(); the gate prunes them.
    messages = conversation(10, 200)
    window = int(ContextGate(max_input_tokens=10**9).estimate(messages) / 0.9)
    stack = _stack_with_results(tmp_path, window)
    with stack.run(thread_id="t") as run:
        out = run.prepare(messages)
        pruned = [m for m in out if m.get("role") == "tool" and m["content"].startswith("[summ")]
        assert len(pruned) == 7
        for message, original in zip(pruned, [m for m in messages if m.get("role") == "tool"]):
            call_id = message["content"].removeprefix("[summarized: call_id=").rstrip("]")
            page = run.call_tool("read_tool_result", {"call_id": call_id})
            assert page.get("content") == original["content"], page


def test_without_tool_results_a_pruned_placeholder_names_no_call_id(tmp_path: Path) -> None:
    messages = conversation(10, 200)
    gate = gate_for(messages, 0.9, tmp_path)
    out = gate.check_and_compress(messages, "c")
    replaced = [m["content"] for m in out if m.get("role") == "tool"][:7]
    assert replaced == [TOOL_RESULT_GONE] * 7
    assert all("call_id" not in text for text in replaced)


def test_an_offload_notice_stays_a_readable_pointer_without_the_layer(tmp_path: Path) -> None:
    layer = ToolResults(tool_calls_dir=tmp_path / "calls")
    messages = conversation(6, 200)
    messages[3] = {**messages[3], "content": layer.offload("call_0", "line\n" * 5000)}
    out = gate_for(messages, 0.9, tmp_path).check_and_compress(messages, "c")
    assert out[3]["content"] == "[summarized: call_id=call_0]"
    assert layer.read_tool_result("call_0")["total_chars"] == 25_000


def anthropic_conversation(turns: int, size: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Find the answer."}]
    for i in range(turns):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"toolu_{i}", "name": "get", "input": {"i": i}}
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": f"toolu_{i}",
                        "content": f"result {i} " + "word " * size,
                    }
                ],
            }
        )
    return messages


def responses_conversation(turns: int, size: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "Find the answer."}]
    for i in range(turns):
        items.append(
            {"type": "function_call", "call_id": f"fc_{i}", "name": "get", "arguments": "{}"}
        )
        items.append(
            {"type": "function_call_output", "call_id": f"fc_{i}", "output": "word " * size}
        )
    return items


def legacy_conversation(turns: int, size: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Find the answer."}]
    for i in range(turns):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "function_call": {"name": "get", "arguments": "{}"},
            }
        )
        messages.append({"role": "function", "name": "get", "content": f"{i} " + "word " * size})
    return messages


@pytest.mark.parametrize(
    "build", [anthropic_conversation, responses_conversation, legacy_conversation]
)
def test_every_format_is_pruned_and_read_back(tmp_path: Path, build: Any) -> None:
    messages = build(10, 200)
    plain = ContextGate(max_input_tokens=10**9).estimate(messages)
    assert plain > 10 * 200  # the tool bodies are counted
    decision = gate_for(messages, 0.9, tmp_path).evaluate(messages, "c")
    assert decision.state == "pruned" and decision.pruned == 7
    stack = _stack_with_results(tmp_path, int(plain / 0.9))
    with stack.run(thread_id="t") as run:
        out = run.prepare(messages)
        texts = json.dumps(out)
        ids = re.findall(r"\[summarized: call_id=([^\]]+)\]", texts)
        assert len(ids) == 7
        for call_id in ids:
            page = run.call_tool("read_tool_result", {"call_id": call_id})
            assert "word word" in page["content"], page


@pytest.mark.parametrize(
    "build", [anthropic_conversation, responses_conversation, legacy_conversation]
)
def test_every_format_is_offloaded_by_prepare(tmp_path: Path, build: Any) -> None:
    messages = build(2, 5000)
    stack = MemoryStack([ToolResults()], store=InMemoryStore())
    with stack.run(thread_id="t") as run:
        out = run.prepare(messages)
        ids = re.findall(r"\[tool result offloaded: call_id=([^,]+),", json.dumps(out))
        assert len(ids) == 2
        for call_id in ids:
            page = run.call_tool("read_tool_result", {"call_id": call_id, "max_tokens": 32_000})
            assert page["total_chars"] >= 25_000
    assert json.dumps(messages).count("word ") == 2 * 5000  # the input is untouched


def test_the_checkpoint_redacts_every_format(tmp_path: Path) -> None:
    messages = [
        *responses_conversation(1, 10),
        *legacy_conversation(1, 10)[1:],
        {"role": "user", "content": "x " * 4000},
    ]
    gate = gate_for(messages, 1.5, tmp_path)
    with pytest.raises(RecoverableContextError) as err:
        gate.check_and_compress(messages, "c")
    text = Path(err.value.checkpoint_path).read_text()
    assert "word word" not in text
    record = json.loads(text)
    assert record["messages"][2]["output"].startswith("[redacted:")
    assert record["messages"][4]["content"].startswith("[redacted:")


def test_a_content_list_grown_in_place_is_counted_again(tmp_path: Path) -> None:
    gate = ContextGate(max_input_tokens=1000, checkpoints_dir=tmp_path)
    message = {"role": "user", "content": [{"type": "text", "text": "hello there"}]}
    messages = [message]
    assert gate.evaluate(messages, "c").state == "pass"
    message["content"].append({"type": "text", "text": "word " * 5000})
    estimate = gate.estimate(messages)
    assert estimate == ContextGate(max_input_tokens=1000, cache=False).estimate(messages)
    assert estimate > 5000
    with pytest.raises(RecoverableContextError):
        gate.check_and_compress(messages, "c2", run_id="r")


def test_a_dict_changed_in_place_is_counted_again() -> None:
    gate = ContextGate(max_input_tokens=10**6)
    messages = [{"role": "tool", "tool_call_id": "a", "content": "short"}]
    first = gate.estimate(messages)
    messages[0]["name"] = "x" * 4000
    assert gate.estimate(messages) > first + 500


@pytest.mark.parametrize("first, then", [(1, 1.0), (True, 1.0), (1.0, True)])
def test_numbers_equal_in_python_but_not_in_json_are_counted_each_as_itself(
    first: Any, then: Any
) -> None:
    """``1 == 1.0 == True`` in Python, but a prompt holds their JSON text (``1``, ``1.0``,
    ``true``), which counts differently: a count cached for one is not the other's."""
    gate = ContextGate(max_input_tokens=10**6)
    item = {"type": "function_call_output", "call_id": "c", "output": first}
    gate.estimate([item])
    other = {**item, "output": then}
    assert gate.estimate([other]) == ContextGate(max_input_tokens=10**6).estimate([other])


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"x": 1}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize("depth", [300, 1000, 5000])
def test_deep_content_is_refused_naming_the_message(tmp_path: Path, depth: int) -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "f", "input": _nested(depth)}],
        },
    ]
    gate = ContextGate(max_input_tokens=100, checkpoints_dir=tmp_path)
    with pytest.raises(InvalidInputError, match=r"messages\[1\]"):
        gate.check_and_compress(messages, "c")
    with pytest.raises(InvalidInputError, match=r"messages\[1\]"):
        ContextGate(max_input_tokens=100, cache=False).estimate(messages)
    stack = MemoryStack([ToolResults()], store=InMemoryStore(), gate=gate)
    with stack.run(thread_id="t") as run, pytest.raises(InvalidInputError, match=r"messages\[1\]"):
        run.prepare(messages)


def test_the_checkpoint_holds_the_conversation_before_pruning(tmp_path: Path) -> None:
    messages = conversation(6, 300)
    messages.append({"role": "user", "content": "y " * 20_000})
    gate = gate_for(messages, 1.5, tmp_path)
    with pytest.raises(RecoverableContextError) as err:
        gate.check_and_compress(messages, "c")
    record = json.loads(Path(err.value.checkpoint_path).read_text())
    tools = [m for m in record["messages"] if m["role"] == "tool"]
    originals = [m for m in messages if m["role"] == "tool"]
    assert [t["content"] for t in tools] == [
        f"[redacted: {len(m['content'])} chars]" for m in originals
    ]


def test_a_failed_checkpoint_write_leaves_the_old_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages = conversation(3, 300)
    gate = gate_for(messages, 1.5, tmp_path)
    with pytest.raises(RecoverableContextError) as err:
        gate.check_and_compress(messages, "c")
    path = Path(err.value.checkpoint_path)
    before = path.read_bytes()

    def crash(fd: int) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk gone"):
        gate.check_and_compress([*messages, {"role": "user", "content": "more"}], "c")
    assert path.read_bytes() == before
    assert json.loads(before)["call_id"] == "c"


def test_pruned_is_reported_only_when_something_was_pruned(tmp_path: Path) -> None:
    messages = conversation(2, 300)  # two tool results, both within keep_recent
    decision = gate_for(messages, 0.9, tmp_path).evaluate(messages, "c")
    assert decision.state == "warn" and decision.pruned == 0
    assert decision.messages is messages


def _nested_conversation() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a research agent."},
        {"role": "user", "content": [{"type": "text", "text": "look up item 1"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "result one"},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "block"}],
        },
        {"type": "function_call_output", "call_id": "r1", "output": "item"},
        {"role": "user", "content": "plain text", "name": "u"},
    ]


_NESTED_EDITS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "grow_list",  # a part appended to a content list, in place
                "edit_part",  # a part's text changed in place
                "edit_arguments",  # a tool call's arguments changed in place
                "add_call",  # a tool call appended to tool_calls, in place
                "set_text",  # a top-level text changed in place
                "to_list",  # a text content becomes a list, in place
                "to_number",  # a value becomes a number, then a bool, in place
                "replace",  # a new message object at the same position
                "same_copy",  # an equal copy at the same position (nothing to recount)
                "append",
                "drop",
                "insert",
            ]
        ),
        st.integers(0, 10_000),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(_NESTED_EDITS, st.booleans())
def test_counts_follow_edits_inside_messages(edits: list[tuple[str, int]], evaluate: bool) -> None:
    """Whatever is edited in place between two calls (a content list, a part, a tool call's
    arguments, a value's type), at whatever depth, the gate's estimate is the uncached one."""
    gate = ContextGate(max_input_tokens=10**9, pad_pct=0.0)
    plain = ContextGate(max_input_tokens=10**9, pad_pct=0.0, cache=False)
    messages = _nested_conversation()

    def check(step: int, edit: str) -> None:
        if evaluate:
            got = gate.evaluate(messages, "c", run_id="r").estimated_tokens
        else:
            got = gate.estimate(messages)
        assert got == plain.estimate(messages), (step, edit)

    check(-1, "start")
    for step, (edit, r) in enumerate(edits):
        if not messages:
            messages.append({"role": "user", "content": "again"})
        i = r % len(messages)
        message = messages[i]
        words = "word " * (r % 40 + 1)
        content = message.get("content")
        lists = [content] if isinstance(content, list) else []
        if edit == "grow_list" and lists:
            lists[0].append({"type": "text", "text": words})
        elif edit == "edit_part" and lists and lists[0] and isinstance(lists[0][0], dict):
            part = lists[0][0]
            part["content" if part.get("type") == "tool_result" else "text"] = words
        elif edit == "edit_arguments" and isinstance(message.get("tool_calls"), list):
            message["tool_calls"][0]["function"]["arguments"] = json.dumps({"q": words})
        elif edit == "add_call" and isinstance(message.get("tool_calls"), list):
            message["tool_calls"].append(
                {"id": f"c{r}", "type": "function", "function": {"name": "g", "arguments": words}}
            )
        elif edit == "set_text":
            message["content" if "content" in message else "output"] = words
        elif edit == "to_list":
            message["content"] = [{"type": "text", "text": words}, {"type": "image_url"}]
        elif edit == "to_number":
            # A key the counter ignores: a cache that compared 1 == True would still agree.
            message["meta"] = 1 if message.get("meta") != 1 else True
        elif edit == "replace":
            messages[i] = {"role": "user", "content": words}
        elif edit == "same_copy":
            messages[i] = json.loads(json.dumps(message))
        elif edit == "append":
            messages.append({"role": "assistant", "content": [{"type": "text", "text": words}]})
        elif edit == "drop":
            del messages[i]
        elif edit == "insert":
            messages.insert(i, {"role": "tool", "tool_call_id": f"x{r}", "content": words})
        check(step, edit)


def test_an_equal_message_at_the_same_position_keeps_its_count_and_a_new_one_does_not() -> None:
    gate = ContextGate(max_input_tokens=10**9, pad_pct=0.0)
    messages = _nested_conversation()
    first = gate.estimate(messages)
    messages[3] = {"role": "tool", "tool_call_id": "c1", "content": "result one"}
    assert gate.estimate(messages) == first
    messages[3] = {"role": "tool", "tool_call_id": "c1", "content": "result one " + "x " * 900}
    assert gate.estimate(messages) > first + 800


def test_a_part_of_a_content_list_edited_in_place_is_counted_again() -> None:
    gate = ContextGate(max_input_tokens=10**9, pad_pct=0.0)
    messages = _nested_conversation()
    first = gate.estimate(messages)
    messages[4]["content"][0]["content"] = "word " * 5000
    assert gate.estimate(messages) > first + 4000
    messages[2]["tool_calls"][0]["function"]["arguments"] = json.dumps({"q": "word " * 5000})
    assert gate.estimate(messages) > first + 9000


def test_interleaved_conversations_on_one_gate_are_each_counted_right() -> None:
    """One gate, several threads' conversations in turn (a stack's gate serves every run)."""
    gate = ContextGate(max_input_tokens=10**9, pad_pct=0.0)
    plain = ContextGate(max_input_tokens=10**9, pad_pct=0.0, cache=False)
    conversations = [
        [
            {"role": "system", "content": "s"},
            *({"role": "user", "content": f"{k} {i}"} for i in range(k)),
        ]
        for k in range(1, 9)
    ]
    for turn in range(4):
        for k, messages in enumerate(conversations):
            messages.append({"role": "assistant", "content": [{"type": "text", "text": f"{turn}"}]})
            messages[-2 if len(messages) > 2 else -1]["content"] = f"edited {turn} " * k
            assert gate.estimate(messages) == plain.estimate(messages)


@pytest.mark.parametrize("cache", [True, False])
def test_a_bad_message_is_named_by_its_index(cache: bool) -> None:
    gate = ContextGate(max_input_tokens=1000, cache=cache)
    good = {"role": "user", "content": "hi"}
    with pytest.raises(UnsupportedTypeError, match=r"messages \$\[2\]\.role must be a str") as e:
        gate.check_and_compress([good, good, {"role": 5, "content": "x"}], "c1")
    assert e.value.path == "$[2].role"
    bad_part = {"role": "user", "content": [{"type": "text", "text": 7}]}
    with pytest.raises(UnsupportedTypeError, match=r"\$\[1\]\.content\[0\]\.text"):
        gate.check_and_compress([good, bad_part], "c2")


def test_a_sliding_window_keeps_counts_right_through_edits_in_place() -> None:
    """A conversation trimmed at its start every call (a window sliding by a few messages),
    with a block before it that changes and a message edited in place: the cached gate's
    estimate is the uncached one's at every step."""
    cached = ContextGate(max_input_tokens=10**9)
    plain = ContextGate(max_input_tokens=10**9, cache=False)
    history = []
    for i in range(120):
        history.append({"role": "user", "content": f"question {i} " * (i % 7 + 1)})
        history.append(
            {
                "role": "assistant",
                "content": [{"type": "text", "text": f"answer {i}"}],
                "tool_calls": [{"id": f"c{i}", "type": "function",
                                "function": {"name": "f", "arguments": "{}"}}],
            }
        )  # fmt: skip
    for step in range(40):
        start = step * 3
        window = history[start : start + 60]
        block = {"role": "system", "content": f"memory block v{step // 2}"}
        messages = [{"role": "system", "content": "be brief"}, block, *window]
        if step % 5 == 4:  # an edit in place, deep inside a message the window still holds
            edited = next(m for m in window[10:] if m["role"] == "assistant")
            edited["content"][0]["text"] += " and much more text " * 30
        assert cached.estimate(messages) == plain.estimate(messages), step


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"model": 5}, "model must be a str or None, got int"),
        ({"checkpoints_dir": 5}, "checkpoints_dir must be a path"),
        ({"tokens": "cl100k_base"}, "tokens must be a token counter"),
    ],
)
def test_options_of_the_wrong_type_are_refused_by_name(options: dict, named: str) -> None:
    with pytest.raises(InvalidInputError, match=named):
        ContextGate(**options)


def test_two_conversations_with_one_call_id_keep_their_own_checkpoints(tmp_path: Path) -> None:
    """The checkpoints directory is shared by every run; a caller numbering its calls per task
    (``iter-3``, as Modulatio's runs do in a directory of their own) gives two conversations
    the same call_id. Each refusal keeps its own file, and its error names it: the second
    never replaces the first, nor does the first task's path show the second's conversation."""
    gate = ContextGate(max_input_tokens=1_000, checkpoints_dir=tmp_path / "ckpt")
    stack = MemoryStack([], store=InMemoryStore(), gate=gate)
    paths = {}
    for user in ("alice", "bob"):
        too_big = [{"role": "user", "content": f"{user} says " + "word " * 2_000}]
        with (
            stack.run(thread_id=f"chat-{user}") as run,
            pytest.raises(RecoverableContextError) as err,
        ):
            run.prepare(too_big, call_id="iter-3")
        paths[user] = Path(err.value.checkpoint_path)
    assert paths == {
        "alice": tmp_path / "ckpt" / "iter-3.json",
        "bob": tmp_path / "ckpt" / "iter-3~2.json",
    }
    for user, path in paths.items():
        record = json.loads(path.read_text())
        assert record["call_id"] == "iter-3"
        assert record["messages"][0]["content"].startswith(f"{user} says ")


def test_a_call_id_with_every_checkpoint_name_taken_is_refused_naming_it(tmp_path: Path) -> None:
    """A thousand checkpoints of one call_id (a caller refused again and again, no retention):
    the error names the call_id, the directory and what to do, and nothing is replaced."""
    directory = tmp_path / "ckpt"
    directory.mkdir()
    for k in range(1, 1001):
        (directory / ("c1.json" if k == 1 else f"c1~{k}.json")).write_text("old")
    messages = conversation(2, 300)
    gate = gate_for(messages, 2.0, tmp_path)
    with pytest.raises(InvalidInputError, match=r"call 'c1'.*ckpt.*c1~1000\.json") as err:
        gate.check_and_compress(messages, "c1")
    assert "move" in str(err.value)
    assert {p.read_text() for p in directory.iterdir()} == {"old"}
    assert len(list(directory.iterdir())) == 1000  # and no temp file left
