"""Tool results through the stack: what automatic offloading adds to ``run.prepare``, and
reading a result back from the store against reading the file.

The paging case reads the first page (the default 4,000 tokens) of results of 4 KB, 27 KB and
200 KB: the page is fit to its budget by one pass of the estimator over the text, against the
same fit by bisection (what any other counter takes: one estimate per probed prefix) and against
tiktoken cutting the text at its 4,000th token.

The prepare case is the whole-turn conversation (``turn_scenario.conversation``: 200 messages,
every large result already offloaded), so the offload pass finds nothing to do: it is the
cost every turn pays. The peer is the same stack and gate without the ToolResults layer, so
the printed ratio is prepare's cost with the layer over its cost without (target: < 1.05).
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
import reference_tokens as ref
from benchkit import compare, fmt_seconds, record, timed
from postgres_cluster import throwaway_cluster
from turn_scenario import WINDOW_TOKENS, conversation

from memstrata import ContextGate, EstimatingCounter, MemoryStack, ToolResults
from memstrata.stores import PostgresStore, SQLiteStore, Store

RESULT = "\n".join(f"row {k}: region eu-{k % 5} latency {k * 7 % 300} ms" for k in range(4000))


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    with throwaway_cluster() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Store]:
    s: Store
    if request.param == "sqlite":
        s = SQLiteStore(tmp_path / "results.db")
    else:
        s = PostgresStore(request.getfixturevalue("postgres_url"))
    yield s
    s.close()


def test_prepare_with_automatic_offload_200_messages(
    benchmark: Any, tmp_path: pathlib.Path
) -> None:
    store = SQLiteStore(tmp_path / "turn.db")
    layer = ToolResults(store=store)
    messages = conversation(layer)
    gate = ContextGate(max_input_tokens=WINDOW_TOKENS, checkpoints_dir=tmp_path / "ckpt")
    with_layer = MemoryStack([layer], store=store, gate=gate)
    without = MemoryStack([], store=store, gate=gate)
    with with_layer.run(thread_id="t") as run, without.run(thread_id="t") as plain:
        assert run.prepare(messages) == plain.prepare(messages)  # nothing to offload
        ratios = compare(
            benchmark,
            "run.prepare + ContextGate, 200 messages: with ToolResults (automatic offload)",
            lambda: run.prepare(messages),
            {"the same stack without ToolResults": lambda: plain.prepare(messages)},
            target="offload pass adds < 5% (printed ratio >= 0.95)",
        )
    added = 1 / ratios["the same stack without ToolResults"]
    print(f"  prepare with the layer / without: {added:.3f}")
    store.close()


def test_read_tool_result_store_vs_file(
    benchmark: Any, store: Store, tmp_path: pathlib.Path
) -> None:
    in_store = ToolResults(store=store).for_thread("t")
    in_files = ToolResults(tool_calls_dir=tmp_path / "calls").for_thread("t")
    in_store.offload("call_1", RESULT)
    in_files.offload("call_1", RESULT)
    assert in_store.read_tool_result("call_1") == in_files.read_tool_result("call_1")
    backend = type(store).__name__
    compare(
        benchmark,
        f"read_tool_result, first 4,000-token page of a {len(RESULT):,}-char result: {backend}",
        lambda: in_store.read_tool_result("call_1"),
        {"the same result read from its file": lambda: in_files.read_tool_result("call_1")},
        target="within 3x of the file read",
    )
    cold = timed(lambda: ToolResults(store=store).for_thread("t").read_tool_result("call_1"))
    print(f"  with a new layer object each call: {fmt_seconds(cold.median)}")
    record(
        {"title": f"read_tool_result from {backend}, new layer", "ours": {"median": cold.median}}
    )


class _Bisecting(EstimatingCounter):
    """The library's estimator under another type, so a page is fit by the generic bisection."""


@pytest.mark.parametrize("size", [4_096, 27_000, 200_000])
def test_read_tool_result_page_fit(benchmark: Any, size: int, tmp_path: pathlib.Path) -> None:
    text = "\n".join(f"row {k}: region eu-{k % 5} latency {k * 7 % 300} ms" for k in range(6000))
    text = text[:size]
    ours = ToolResults(tool_calls_dir=tmp_path / "ours", threshold_tokens=100).for_thread("t")
    generic = ToolResults(
        tool_calls_dir=tmp_path / "generic", threshold_tokens=100, tokens=_Bisecting()
    ).for_thread("t")
    ours.offload("call_1", text)
    generic.offload("call_1", text)
    page = ours.read_tool_result("call_1")
    assert page == generic.read_tool_result("call_1")
    o200k = ref.tiktoken_encoding("o200k_base")
    compare(
        benchmark,
        f"read_tool_result, first 4,000-token page ({len(page['content']):,} chars) of a "
        f"{size:,}-char result: the page fit in one pass",
        lambda: ours.read_tool_result("call_1"),
        {
            "the same page fit by bisection (an estimate per probed prefix)": lambda: (
                generic.read_tool_result("call_1")
            ),
            "tiktoken: encode the text, decode its first 4,000 tokens": lambda: o200k.decode(
                o200k.encode_ordinary(text)[:4_000]
            ),
        },
        target=">= 2x the bisection from 27 KB on (a 4 KB result fits whole: both count it once)",
    )
