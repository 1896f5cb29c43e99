"""Context layers: the gate on a 2,000-message conversation, offloading 1 MB, repo_map.

Peer for the gate: LangChain's ``trim_messages`` (langchain-core) to the same token budget, with
its own approximate counter (``count_tokens_approximately``), on messages converted to LangChain
objects beforehand (conversion is not timed). Our gate keeps its per-message counts cached across
calls, as it does across the iterations of a tool loop.
"""

from __future__ import annotations

import itertools
import json
import pathlib
import shutil
import tempfile
from typing import Any

from benchkit import compare, fmt_seconds, record, timed
from langchain_core.messages import convert_to_messages, trim_messages
from langchain_core.messages.utils import count_tokens_approximately

from memstrata import ContextGate, InMemoryStore, MemoryStack, TeamState, ToolResults, repo_map

ROOT = pathlib.Path(__file__).resolve().parent.parent


def conversation(n: int) -> list[dict[str, Any]]:
    """System prompt, then user / assistant tool call / tool result turns, like a tool loop."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a research agent."}]
    i = 0
    while len(messages) < n:
        messages.append({"role": "user", "content": f"Look up item {i} and summarise it."})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {
                            "name": "search",
                            "arguments": json.dumps({"q": f"item {i}", "limit": 5}),
                        },
                    }
                ],
            }
        )
        messages.append(
            {
                "role": "tool",
                "tool_call_id": f"call_{i}",
                "content": " ".join(
                    f"result {i}.{k}: lorem ipsum dolor sit amet" for k in range(20)
                ),
            }
        )
        i += 1
    return messages[:n]


MESSAGES = conversation(2000)
LC_MESSAGES = convert_to_messages(MESSAGES)


def lc_trim(budget: int) -> list[Any]:
    return trim_messages(
        LC_MESSAGES,
        max_tokens=budget,
        token_counter=count_tokens_approximately,
        strategy="last",
        include_system=True,
    )


def test_gate_pass_2000_messages(benchmark: Any) -> None:
    """The common case: the conversation is under the soft-warn line; nothing to trim."""
    window = int(ContextGate(max_input_tokens=10**9).estimate(MESSAGES) / 0.5)
    gate = ContextGate(max_input_tokens=window)
    assert gate.evaluate(MESSAGES, "c").state == "pass"
    assert len(lc_trim(window)) == len(LC_MESSAGES)
    compare(
        benchmark,
        f"ContextGate.check_and_compress: 2,000 messages, pass (window {window:,} tokens)",
        lambda: gate.check_and_compress(MESSAGES, "c"),
        {"langchain trim_messages": lambda: lc_trim(window)},
        target=">= 8x langchain trim_messages",
    )
    cold = timed(lambda: ContextGate(max_input_tokens=window).check_and_compress(MESSAGES, "c"))
    peer = timed(lambda: lc_trim(window))
    print(
        f"  cold gate (no cached counts): {fmt_seconds(cold.median)}"
        f" -> {peer.median / cold.median:.2f}x langchain"
    )
    record(
        {
            "title": "ContextGate.check_and_compress: 2,000 messages, pass, cold cache",
            "ours": {"median": cold.median},
            "ratios": {"langchain trim_messages": peer.median / cold.median},
        }
    )


def test_gate_prune_2000_messages(benchmark: Any) -> None:
    """Over the window (120% of it): old tool results are pruned to placeholders, then
    re-estimated, and the result fits. The peer trims the oldest messages to the same window."""
    window = int(ContextGate(max_input_tokens=10**9).estimate(MESSAGES) / 1.2)
    gate = ContextGate(max_input_tokens=window)
    decision = gate.evaluate(MESSAGES, "c")
    assert decision.state == "pruned" and decision.pruned > 600
    trimmed = lc_trim(window)
    assert len(trimmed) < len(LC_MESSAGES)
    compare(
        benchmark,
        f"ContextGate.check_and_compress: 2,000 messages, prune (window {window:,} tokens)",
        lambda: gate.check_and_compress(MESSAGES, "c"),
        {"langchain trim_messages": lambda: lc_trim(window)},
        target=">= 8x langchain trim_messages",
    )


def test_prepare_with_gate_2000_messages(benchmark: Any, tmp_path: pathlib.Path) -> None:
    """run.prepare() with a TeamState block injected and the gate at the end: the injected item
    is a new object every call, the conversation after it is not."""
    team = TeamState(state_dir=tmp_path)
    team.record("inventory", shipped="hosts table", claim="12 hosts", verdict="pass")
    window = int(ContextGate(max_input_tokens=10**9).estimate(MESSAGES) / 0.5)
    stack = MemoryStack([team], store=InMemoryStore(), gate=ContextGate(max_input_tokens=window))
    with stack.run(thread_id="bench") as run:
        assert len(run.prepare(MESSAGES)) == len(MESSAGES) + 1
        compare(
            benchmark,
            "run.prepare + ContextGate: 2,000 messages, TeamState injected, pass",
            lambda: run.prepare(MESSAGES),
            {"langchain trim_messages": lambda: lc_trim(window)},
            target=">= 8x langchain trim_messages",
        )


def test_offload_1mb_tool_result(benchmark: Any) -> None:
    """A 1 MB result, new each call: count, hash, write (0600, fsync, rename), link, digest.
    Peer: writing the same text to a file with pathlib (no hash, no fsync, no digest)."""
    line = "2026-11-22T02:00:00Z INFO GET /api/items/{i} 200 12ms user=u{i} trace=abcdef0123\n"
    base = "".join(line.format(i=i) for i in range(1_000_000 // len(line) + 1))[:1_000_000]
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="memstrata-bench-offload-"))
    ids = itertools.count()
    try:
        layer = ToolResults(tool_calls_dir=workdir / "ours")
        plain = workdir / "plain"
        plain.mkdir()

        def ours() -> str:
            n = next(ids)
            return layer.offload(f"call_{n}", f"{n}\n{base}")

        def pathlib_write() -> None:
            n = next(ids)
            (plain / f"call_{n}.txt").write_text(f"{n}\n{base}")

        assert ours().startswith("[tool result offloaded")
        compare(
            benchmark,
            "ToolResults.offload: a 1 MB tool result (stored, digested)",
            ours,
            {"pathlib write_text only": pathlib_write},
            target="report",
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def test_repo_map_of_this_repository(benchmark: Any) -> None:
    out = repo_map(ROOT, max_tokens=8000)
    assert "## python/memstrata/stack.py" in out
    benchmark(lambda: repo_map(ROOT, max_tokens=8000))
    t = timed(lambda: repo_map(ROOT, max_tokens=8000), min_time=1.0, max_batches=30)
    files = out.count("\n## ") + 1
    title = "repo_map of this repository, 8,000 tokens"
    print(f"\n[{title}] {fmt_seconds(t.median)} ({files} files shown)")
    record({"title": "repo_map of this repository (8,000 tokens)", "ours": {"median": t.median}})
