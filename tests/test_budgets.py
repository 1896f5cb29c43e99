"""Budgets that hold: text chosen to fool a token estimate (runs of newlines, spaces, one
repeated character, emoji, CJK, base64, letters glued by punctuation, random kana, and the
texts of tests/adversarial_text.py the estimator counts furthest under) never takes a block,
a header section, a tool-result digest or page, a repo map or a prompt past its budget,
counted exactly; nor do budgets too small for a layer's fixed text, stacks of two encodings
sharing a layer, two writers racing, or a model's parallel tool calls."""

from __future__ import annotations

import base64
import functools
import math
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import adversarial_text
import orjson
import pytest

from memstrata import (
    AgentMind,
    ContextGate,
    MemoryStack,
    RecoverableContextError,
    SharedMemory,
    SQLiteStore,
    TeamState,
    ToolResults,
    WorkingMemory,
    repo_map,
)
from memstrata.exceptions import BudgetExceededError
from memstrata.layers.tool_results import digest
from memstrata.prompts import (
    MEMORY_TOOLS_SECTION,
    MIND_HEADER_BELIEFS,
    MIND_HEADER_REFLECTIONS,
    WORKING_MEMORY_TRUNCATED,
    one_line,
)
from memstrata.stores import InMemoryStore
from memstrata.tokens import (
    EstimatingCounter,
    count_message_tokens,
    count_tokens,
    estimate_tokens,
)

_RNG = random.Random(5)
ADVERSARIAL = {
    "newlines": "note" + "\n" * 3_000,
    "spaces": " " * 4_000,
    "one_char": "a" * 3_900,
    "emoji": "\U0001f600" * 900,
    "cjk": "".join(chr(_RNG.randint(0x4E00, 0x9FFF)) for _ in range(1_200)),
    "base64": base64.b64encode(_RNG.randbytes(2_400)).decode(),
    "tabs_and_words": "\t" * 400 + "hello\n" * 300,
    # Words the vocabularies do not hold, glued by punctuation rather than spaced.
    "glued_letters": "".join(
        "".join(_RNG.choices("àáâãäåæçèéêëìíîïðñòóôõöøùúûüýþÿ", k=4)) + _RNG.choice(".,-/:")
        for _ in range(700)
    ),
    # Random kana of every range the estimator counts as kana: a token or more each.
    "random_kana": "".join(chr(_RNG.randint(0x3041, 0x30FA)) for _ in range(1_200)),
    "halfwidth_kana": "".join(chr(_RNG.randint(0xFF66, 0xFF9D)) for _ in range(1_200)),
    "kana_extensions": "".join(chr(_RNG.randint(0x31F0, 0x31FF)) for _ in range(1_200)),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_the_working_memory_never_stores_past_its_budget(name: str) -> None:
    stack = MemoryStack([WorkingMemory(budget=(0, 300))], store=InMemoryStore())
    text = ADVERSARIAL[name]
    with stack.run(thread_id="t") as run:
        handle = run.layer("working-memory")
        try:
            handle.update(text)
        except BudgetExceededError:
            assert count_tokens(f"<working_memory>\n{text}\n</working_memory>") > 300
        block = handle.render()
        assert count_tokens(block) <= 300


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_the_mind_header_stays_within_its_budget(name: str) -> None:
    mind = AgentMind(budget=(0, 200), token_budget=150)
    store = InMemoryStore()
    with mind.session(store, agent="a") as handle:
        handle.set_goal("Goal " + ADVERSARIAL[name][:3_800])
        handle.reflect("Rule " + ADVERSARIAL[name][:3_800], pin=True)
        handle.believe("Fact " + ADVERSARIAL[name][:3_800], confidence="high")
        handle.believe("A short fact about releases", confidence="high")
    stack = MemoryStack([mind], store=store)
    with stack.run(agent="a") as run:
        header = "\n".join(m["content"] for m in run.prepare([]))
    assert count_tokens(header) <= 200


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_shared_memory_and_team_state_stay_within_their_budgets(name: str, tmp_path) -> None:
    memory = SharedMemory(budget=(0, 250))
    for i in range(30):
        memory.set(key=f"task:{i}", kind="task_result", value=i, title=ADVERSARIAL[name][:256])
    team = TeamState(state_dir=tmp_path, budget=(0, 120))
    team.record(f"obj {name}", claim=ADVERSARIAL[name][:3_000], verified="ok", verdict="pass")
    stack = MemoryStack([memory, team], store=InMemoryStore())
    with stack.run(thread_id="t") as run:
        run.layer("shared-memory").require([f"task:{i}" for i in range(30)])
        items = run.prepare([])
    (shared,) = [i["content"] for i in items if "Memory Tools" in i["content"]]
    (state,) = [i["content"] for i in items if "Team State" in i["content"]]
    assert count_tokens(shared) <= 250
    assert count_tokens(state) <= 120


def _block_tokens(name: str, chars: int) -> int:
    return count_tokens(f"<working_memory>\n{ADVERSARIAL[name][:chars]}\n</working_memory>")


@pytest.mark.parametrize(
    "name", sorted(n for n in ADVERSARIAL if _block_tokens(n, len(ADVERSARIAL[n])) > 300)
)
def test_the_working_memory_refuses_a_write_just_over_its_budget(name: str) -> None:
    """The longest prefix of the text whose block fits is stored; one character more, whose
    block is over the budget counted exactly, is refused and leaves the stored one as it was."""

    def block_tokens(chars: int) -> int:
        return _block_tokens(name, chars)

    low, high = 1, len(ADVERSARIAL[name])  # the longest prefix within 300 tokens
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if block_tokens(middle) <= 300 else (low, middle - 1)
    assert block_tokens(low) <= 300 < block_tokens(low + 1)
    stack = MemoryStack([WorkingMemory(budget=(0, 300))], store=InMemoryStore())
    with stack.run(thread_id="t") as run:
        handle = run.layer("working-memory")
        handle.update(ADVERSARIAL[name][:low], mode="replace")
        with pytest.raises(BudgetExceededError):
            handle.update(ADVERSARIAL[name][: low + 1], mode="replace")
        assert handle.render() == f"<working_memory>\n{ADVERSARIAL[name][:low]}\n</working_memory>"


@functools.lru_cache
def _undercounted(count: int, *, chars: int, encoding: str = "o200k_base") -> list[str]:
    """``count`` texts of at most ``chars`` characters (one line each, as the mind shows them)
    that the estimator counts furthest under their exact count, drawn from fixed seeds: texts
    a budget checked by the estimate alone would let through."""
    drawn = []
    for seed in range(600):
        text = one_line(adversarial_text.text(random.Random(seed)))[:chars].strip()
        if len(text) < chars // 2:
            continue
        ratio = count_tokens(text, encoding=encoding) / estimate_tokens(text, model=encoding)
        drawn.append((ratio, seed, text))
    drawn.sort(reverse=True)
    return [text for _, _, text in drawn[:count]]


def _section_lines(header: str, title: str) -> list[str]:
    lines = header.split("\n")
    if title not in lines:
        return []
    start = lines.index(title) + 1
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("- "))
    return lines[start:end]


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_the_mind_header_beliefs_and_reflections_stay_within_token_budget(encoding: str) -> None:
    """Beliefs and recent reflections share ``token_budget``: their two sections as shown
    (headings and line breaks included), counted exactly, never pass it, however far under
    their count the estimator reads them."""
    token_budget = 300
    mind = AgentMind(budget=(0, 5_000), token_budget=token_budget)
    store = InMemoryStore()
    counter = EstimatingCounter("gpt-4" if encoding == "cl100k_base" else None)
    # Over 256 characters: shorter texts are counted exactly by the estimator itself.
    texts = _undercounted(12, chars=320, encoding=encoding)
    with mind.session(store, agent="a", tokens=counter) as handle:
        for text in texts[:6]:
            handle.believe(text, confidence="high")
        for text in texts[6:]:
            handle.reflect(text)
    stack = MemoryStack([mind], store=store, tokens=counter)
    with stack.run(agent="a") as run:
        (item,) = run.prepare([])
    shown = []
    for title in (MIND_HEADER_BELIEFS, MIND_HEADER_REFLECTIONS):
        lines = _section_lines(item["content"], title)
        shown += [title, *lines] if lines else []
    assert shown, "the header shows some of them"
    assert count_tokens("\n".join(shown), encoding=encoding) <= token_budget


def _counter(encoding: str) -> EstimatingCounter:
    return EstimatingCounter("gpt-4" if encoding == "cl100k_base" else None)


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_tool_results_over_the_threshold_counted_exactly_are_offloaded(encoding: str) -> None:
    """A result stays in the conversation only when its exact count is within
    ``threshold_tokens``: one the estimator reads as within it is still offloaded."""
    for index, text in enumerate(_undercounted(5, chars=2_000, encoding=encoding)):
        threshold = estimate_tokens(text, model=encoding)
        layer = ToolResults(threshold_tokens=threshold, tokens=_counter(encoding))
        shown = layer.offload(f"call_{index}", text)
        if count_tokens(text, encoding=encoding) > threshold:
            assert shown != text and shown.startswith("[tool result offloaded:")
        else:
            assert shown == text


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_tool_result_digests_and_summaries_stay_within_summary_tokens(
    encoding: str, tmp_path
) -> None:
    """The digest (head and tail lines) and a summarizer's output, cut to ``summary_tokens``,
    never pass it counted exactly."""
    lines = _undercounted(40, chars=150, encoding=encoding)
    text = "\n".join(lines)
    counter = _counter(encoding)
    for summary_tokens in (60, 150, 400):
        digest_text = digest(text, max_tokens=summary_tokens, tokens=counter)
        assert count_tokens(digest_text, encoding=encoding) <= summary_tokens
        layer = ToolResults(
            store=SQLiteStore(tmp_path / f"r{summary_tokens}.db"),
            threshold_tokens=1,
            summary_tokens=summary_tokens,
            summarizer=lambda result: " ".join(lines),
            tokens=counter,
        )
        summary = layer.summarize(text)
        assert count_tokens(summary, encoding=encoding) <= summary_tokens


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_tool_result_pages_stay_within_max_tokens(encoding: str, tmp_path) -> None:
    """Every page ``read_tool_result`` returns holds at most ``max_tokens`` tokens counted
    exactly, and the pages together are the whole text."""
    text = "".join(_undercounted(30, chars=400, encoding=encoding))
    layer = ToolResults(
        store=SQLiteStore(tmp_path / "results.db"), threshold_tokens=1, tokens=_counter(encoding)
    )
    layer.offload("call_1", text)
    for max_tokens in (37, 200, 1_000):
        pages, offset = [], 0
        while offset is not None:
            page = layer.read_tool_result("call_1", offset, max_tokens)
            assert count_tokens(page["content"], encoding=encoding) <= max_tokens
            pages.append(page["content"])
            offset = page["next_offset"]
        assert "".join(pages) == text


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_the_context_gate_never_passes_a_prompt_over_its_window(encoding: str, tmp_path) -> None:
    """A prompt whose padded estimate is under the window but whose padded exact count is
    not is refused (there is no tool result to prune); every prompt the gate lets through
    fits the window counted exactly, pruned or not."""
    model = "gpt-4" if encoding == "cl100k_base" else "gpt-4o"
    texts = _undercounted(8, chars=1_500, encoding=encoding)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    for index, text in enumerate(texts):
        messages.append({"role": "user", "content": text})
        call = {"id": f"call_{index}", "type": "function"}
        call["function"] = {"name": "search", "arguments": "{}"}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"call_{index}", "content": text})

    def padded(listed: list[dict[str, Any]]) -> int:
        return math.ceil(count_message_tokens(listed, encoding=encoding) * 1.05)

    estimate = ContextGate(model=model, max_input_tokens=10**9).estimate(messages)
    exact = padded(messages)
    assert estimate < exact  # the prompt is one the estimate alone would let through
    for window in (estimate + 1, (estimate + exact) // 2, exact, exact + 1):
        for prompt in (messages, [m for m in messages if m["role"] in ("system", "user")]):
            gate = ContextGate(model=model, max_input_tokens=window, checkpoints_dir=tmp_path)
            try:
                sent = gate.check_and_compress(prompt, f"w{window}")
            except RecoverableContextError:
                continue
            assert padded(sent) < window


class _CountingEstimator(EstimatingCounter):
    """The native estimator, counting its calls: a subclass that changes no count."""

    calls = 0

    def count_messages(self, messages: Any) -> int:
        type(self).calls += 1
        return super().count_messages(messages)


def test_a_gate_counting_with_a_subclass_of_the_estimator_counts_exactly_near_the_window(
    tmp_path,
) -> None:
    """Budgets count an EstimatingCounter's subclass exactly in its encoding, as they count the
    estimator itself (see exact_count); the gate does too: a prompt the estimate puts under the
    window but the exact count does not is refused, never sent."""
    texts = _undercounted(8, chars=1_500, encoding="o200k_base")
    messages = [{"role": "user", "content": text} for text in texts]
    estimate = ContextGate(model="gpt-4o", max_input_tokens=10**9).estimate(messages)
    exact = math.ceil(count_message_tokens(messages, encoding="o200k_base") * 1.05)
    assert estimate < exact
    window = (estimate + exact) // 2 + 1
    gate = ContextGate(
        model="gpt-4o",
        max_input_tokens=window,
        checkpoints_dir=tmp_path,
        tokens=_CountingEstimator("gpt-4o"),
    )
    with pytest.raises(RecoverableContextError):
        gate.check_and_compress(messages, "near")
    assert _CountingEstimator.calls > 0


def test_a_working_memory_over_a_budget_too_small_for_its_notice_shows_nothing(tmp_path) -> None:
    """A block written under a larger budget is shown cut, with a notice; when the stack's
    share is too small for even the notice and the guidelines after it, nothing is shown rather
    than an item over it."""
    store = SQLiteStore(tmp_path / "wm.db")
    wide = MemoryStack([WorkingMemory(budget=(0, 1_500))], store=store)
    with wide.run(thread_id="t") as run:
        run.layer("working-memory").update("Customer prefers email. " * 100)
        written = count_tokens(run.layer("working-memory").render())

    def notice(total: int) -> int:
        text = WORKING_MEMORY_TRUNCATED.format(
            tokens=written, budget=total, rewrite="working-memory_update"
        )
        return count_tokens(f"<working_memory>\n{text}\n</working_memory>")

    layer = WorkingMemory(budget=(0, 1_500))
    guidelines = count_tokens(f"\n{layer.tool_names['guidelines']}")
    smallest = notice(40) + guidelines  # the notice in a block, and the guidelines after it
    for total in (10, smallest - 1, smallest, smallest + 20, 300):
        narrow = MemoryStack([layer], store=store, total_budget=total)
        with narrow.run(thread_id="t") as run:
            items = run.prepare([])
        # The whole item (the cut block and the guidelines) stays within the layer's share.
        assert all(count_tokens(item["content"]) <= total for item in items), total
        assert bool(items) == (total - guidelines >= notice(total - guidelines)), total


def test_the_shared_memory_section_is_not_shown_past_its_budget() -> None:
    """The "Memory Tools" section is fixed template: a share of the stack's budget too small
    for it injects nothing (as the team state does) rather than a section over it."""
    section = count_tokens(MEMORY_TOOLS_SECTION)
    for total in (section - 1, section, section + 40):
        stack = MemoryStack([SharedMemory(budget=(0, 400))], store="memory://", total_budget=total)
        with stack.run(thread_id="t") as run:
            run.layer("shared-memory").require(["task:1", "task:2"])
            items = run.prepare([])
        assert sum(count_tokens(i["content"]) for i in items) <= total
        assert bool(items) == (total >= section)


def test_team_state_shared_by_stacks_of_two_encodings_fits_each_one(tmp_path) -> None:
    """One TeamState in two stacks counting in different encodings: each run's block fits
    its budget in its own stack's encoding, whichever run opened last."""
    team = TeamState(state_dir=tmp_path, budget=(0, 120))
    cjk = "".join(chr(random.Random(3).randint(0x4E00, 0x9FFF)) for _ in range(40))
    for i in range(6):
        team.record(f"objective {i}", claim=cjk * 3, verified="ok", verdict="pass")
    o200k = MemoryStack([team], store=InMemoryStore(), tokens=EstimatingCounter("gpt-4o"))
    cl100k = MemoryStack([team], store=InMemoryStore(), tokens=EstimatingCounter("gpt-4"))
    for order in ((o200k, cl100k), (cl100k, o200k)):
        with order[0].run(thread_id="t") as one, order[1].run(thread_id="t") as two:
            for run in (one, two, one):
                (item,) = run.prepare([])
                encoding = run.stack.tokens.encoding
                assert count_tokens(item["content"], encoding=encoding) <= 120


@pytest.mark.parametrize("kind", ["text", "markdown_user_scope", "structured"])
def test_two_writers_each_within_the_budget_never_store_past_it_together(
    two_connections: tuple[Any, Any], kind: str
) -> None:
    """Two runs (two connections, as two servers) load the same state; each writes what fits
    alone, but not with the other's. The second is refused and what is stored fits, counted
    exactly, whichever store: its merge into the first one's write is checked too."""
    options: dict[str, Any] = {"budget": (0, 300)}
    if kind == "markdown_user_scope":
        options.update(template="# Notes\n", scope="user", tools="voltagent")
    if kind == "structured":
        options.update(schema={"type": "object"})
    first, second = (
        MemoryStack([WorkingMemory(**options)], store=store) for store in two_connections
    )
    words = ADVERSARIAL["glued_letters"]
    patches: list[Any] = [words[:170], words[170:340]]
    if kind == "structured":
        patches = [{"a": words[:170]}, {"b": words[170:340]}]
    with first.run(thread_id="t1", resource_id="u") as one:
        # User scope: two conversations of one user; thread scope: one conversation.
        other = "t2" if kind == "markdown_user_scope" else "t1"
        with second.run(thread_id=other, resource_id="u") as two:
            one.layer("working-memory").update(patches[0])
            with pytest.raises(BudgetExceededError):
                two.layer("working-memory").update(patches[1])
            # The model's tool call, after the race, over the budget alone.
            tool = (
                "update_working_memory"
                if kind == "markdown_user_scope"
                else "working-memory_update"
            )
            arguments = {"a": words} if kind == "structured" else {"content": words}
            refused = two.call_tool(tool, arguments)
            assert refused["error"]["code"] == "budget_exceeded"
    with first.run(thread_id="t1", resource_id="u") as run:
        block = run.layer("working-memory").render()
    assert count_tokens(block) <= 300
    assert words[:170] in block and words[170:340] not in block


@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_repo_map_stays_within_max_tokens_counted_exactly(encoding: str, tmp_path) -> None:
    """Files whose docstrings the estimator reads far under their count: the digest, cut to
    ``max_tokens``, never passes it counted exactly."""
    docs = [
        doc.replace("\\", "").replace('"', "")
        for doc in _undercounted(24, chars=150, encoding=encoding)
    ]
    for index, doc in enumerate(docs):
        body = "".join(f'def f{k}(x):\n    """{doc[k:]}"""\n    return x\n\n' for k in range(3))
        (tmp_path / f"m{index:02}.py").write_text(f'"""{doc}"""\n\n{body}', encoding="utf-8")
    counter = _counter(encoding)
    for max_tokens in (120, 400, 900, 2_000):
        digest_text = repo_map(tmp_path, max_tokens=max_tokens, tokens=counter)
        assert count_tokens(digest_text, encoding=encoding) <= max_tokens


def _write_after(call: tuple[threading.Barrier, Any, int, str]) -> dict[str, Any]:
    barrier, run, index, value = call
    barrier.wait()
    result: dict[str, Any] = run.call_tool("memory_write", {"key": f"k{index}", "value": value})
    return result


@pytest.mark.parametrize("quota", ["max_run_writes", "max_run_bytes"])
def test_parallel_memory_writes_of_one_run_stay_within_its_quotas(quota: str, tmp_path) -> None:
    """A model's parallel tool calls (a server running them on threads): writes each within
    the run's quota, but not together, are refused past it."""
    value = "v" * 100
    size = len(orjson.dumps(value))
    limits = {"max_run_writes": 2} if quota == "max_run_writes" else {"max_run_bytes": 2 * size}
    for attempt in range(5):
        store = SQLiteStore(tmp_path / f"shared{attempt}.db")
        memory = SharedMemory(store=store, **limits)
        stack = MemoryStack([memory], store=store)
        with stack.run(thread_id="t") as run:
            barrier = threading.Barrier(8)
            with ThreadPoolExecutor(8) as pool:
                results = list(pool.map(_write_after, [(barrier, run, i, value) for i in range(8)]))
        stored = [r for r in results if r.get("ok")]
        assert len(stored) == 2
        assert all(r["error"]["code"] == "limit_exceeded" for r in results if not r.get("ok"))
        store.close()


def _mind_call(call: tuple[threading.Barrier, Any, str, dict[str, Any]]) -> dict[str, Any]:
    barrier, run, tool, arguments = call
    barrier.wait()
    result: dict[str, Any] = run.call_tool(tool, arguments)
    return result


@pytest.mark.parametrize("tool", ["mind_reflect", "mind_believe", "mind_set_goal"])
def test_parallel_mind_writes_of_one_run_stay_within_its_caps(tool: str, tmp_path) -> None:
    """A model's parallel tool calls (a server running them on threads): writes that each fit
    the run's caps (``max_run_entries``, ``max_goals``) but not together are refused past
    them, and no more than the cap is flushed."""
    for attempt in range(6):
        store = SQLiteStore(tmp_path / f"mind{attempt}.db")
        mind = AgentMind(max_run_entries=3, max_goals=2)
        stack = MemoryStack([mind], store=store)
        barrier = threading.Barrier(8)
        calls = []
        for index in range(8):
            text = f"{index} {adversarial_text.segment(random.Random(index), 'prose')[:80]}"
            arguments = {"description": text} if tool == "mind_set_goal" else {"content": text}
            calls.append((barrier, None, tool, arguments))
        with stack.run(agent="a") as run:
            calls = [(b, run, t, a) for b, _, t, a in calls]
            with ThreadPoolExecutor(8) as pool:
                results = list(pool.map(_mind_call, calls))
        cap = 2 if tool == "mind_set_goal" else 3
        assert sum(1 for r in results if "error" not in r) <= cap
        with stack.run(agent="a") as run:
            handle = run.layer("agent-mind")
            stored = len(handle.goals) + len(handle.beliefs) + len(handle.reflections)
        assert stored <= cap
        store.close()


@pytest.mark.parametrize("thread_id", [None, "t"])
def test_tool_results_shared_by_two_stacks_count_and_store_in_each_runs_own(
    thread_id: str | None, tmp_path
) -> None:
    """One ToolResults layer in two stacks (two stores, two encodings), their runs open
    together: each run decides by its own stack's count and keeps its results in its own
    stack's store, where its model reads them back."""
    layer = ToolResults(threshold_tokens=300)
    text = _undercounted(1, chars=2_000, encoding="cl100k_base")[0]
    cl100k = count_tokens(text, encoding="cl100k_base")
    o200k = count_tokens(text, encoding="o200k_base")
    layer.threshold_tokens = (cl100k + o200k) // 2
    assert o200k <= layer.threshold_tokens < cl100k  # the encodings disagree on this result
    first, second = SQLiteStore(tmp_path / "a.db"), SQLiteStore(tmp_path / "b.db")
    a = MemoryStack([layer], store=first, tokens=EstimatingCounter("gpt-4"))
    b = MemoryStack([layer], store=second, tokens=EstimatingCounter("gpt-4o"))
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": text},
    ]
    for a_first in (True, False):
        order = (a, b) if a_first else (b, a)
        with order[0].run(thread_id=thread_id) as one, order[1].run(thread_id=thread_id) as two:
            in_a, in_b = (one, two) if a_first else (two, one)
            assert in_b.prepare(messages)[-1]["content"] == text  # within o200k's count
            shown = in_a.prepare(messages)[-1]["content"]
            assert shown.startswith("[tool result offloaded: call_id=c1,")
            assert in_a.call_tool("read_tool_result", {"call_id": "c1"})["content"] == text
            assert in_b.call_tool("read_tool_result", {"call_id": "c1"})["ok"] is False
    assert second.list(("tool-results",), limit=10) == []


@pytest.mark.parametrize("total", [300, 4_000])
def test_the_working_memory_item_with_its_guidelines_stays_within_its_share(total: int) -> None:
    """The guidelines shown after the block are part of the layer's prompt item: the stack
    gives room for them beyond ``budget.max`` when its total allows, and otherwise the block's
    limit is the share less the guidelines, for writes and the prompt alike. The longest text
    a write accepts is shown whole, and the item never passes the share."""
    layer = WorkingMemory(budget=(0, 300))
    stack = MemoryStack([layer], store=InMemoryStore(), total_budget=total)
    share = stack.budgets["working-memory"]
    assert share == min(total, 300 + layer.prompt_overhead(stack.tokens))
    text = ADVERSARIAL["one_char"]
    with stack.run(thread_id="t") as run:
        handle = run.layer("working-memory")
        low, high = 1, len(text)  # the longest prefix a write accepts
        while low < high:
            middle = (low + high + 1) // 2
            try:
                handle.update(text[:middle], mode="replace")
                low = middle
            except BudgetExceededError:
                high = middle - 1
        handle.update(text[:low], mode="replace")
        (item,) = run.prepare([])
    assert count_tokens(item["content"]) <= share
    assert f"\n{text[:low]}\n</working_memory>\n" in item["content"]  # shown whole, not cut
    assert "[... cut" not in item["content"]


class _CharCounter:
    """A caller's own definition of a token: one per character."""

    encoding = "characters"

    def count(self, text: str) -> int:
        return len(text)

    def count_messages(self, messages: Any) -> int:
        return sum(len(str(m.get("content") or "")) for m in messages)


def test_the_working_memory_gets_its_whole_budget_under_a_callers_counter() -> None:
    """The stack gives the working memory room for its guidelines beyond ``budget.max`` in the
    stack's own counter, not only in the encodings the library ships: with a total to spare, a
    block of exactly ``budget.max`` tokens is accepted and shown whole, and the item stays
    within the share."""
    counter = _CharCounter()
    layer = WorkingMemory(budget=(0, 300))
    stack = MemoryStack([layer], store=InMemoryStore(), tokens=counter, total_budget=100_000)
    share = stack.budgets["working-memory"]
    with stack.run(thread_id="t") as run:
        handle = run.layer("working-memory")
        low, high = 1, 400
        while low < high:
            middle = (low + high + 1) // 2
            try:
                handle.update("a" * middle, mode="replace")
                low = middle
            except BudgetExceededError:
                high = middle - 1
        handle.update("a" * low, mode="replace")
        block = handle.render()
        (item,) = run.prepare([])
    assert counter.count(block) == 300
    assert block in item["content"]
    assert counter.count(item["content"]) <= share


@pytest.mark.parametrize("total", [0, 10])
def test_a_share_too_small_for_the_guidelines_says_so_rather_than_a_negative_limit(
    total: int,
) -> None:
    """A total_budget whose share cannot hold the working memory's guidelines leaves the block
    no room: the layer shows nothing, and a write is refused with an error naming the share
    and the setting to raise, never "a limit of -31"."""
    stack = MemoryStack([WorkingMemory(budget=(0, 300))], store=InMemoryStore(), total_budget=total)
    with stack.run(thread_id="t") as run:
        refused = run.call_tool("working-memory_update", {"content": "hi"})
        assert run.prepare([]) == []
    assert refused["error"]["code"] == "budget_exceeded"
    message = refused["error"]["message"]
    assert "total_budget" in message
    assert f"share of {total}" in message
    assert "-" not in message.split(";")[0].replace("working-memory", "")
