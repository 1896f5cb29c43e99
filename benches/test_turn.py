"""The whole turn an agent server feels: every layer on, on SQLite, embedding excluded.

See :mod:`turn_scenario` for what the turn holds and does. Two results:

* per-turn percentiles (p50/p95/p99 of individually timed turns), against the target of
  p95 <= 1 ms for the in-process work;
* the same turn against LangGraph's ``InMemoryStore`` + plain Python, in the same run, as a
  ratio (benchkit's batches, median per turn).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from typing import Any

import pytest
from benchkit import compare, fmt_seconds, record
from turn_scenario import NS, SHARED_NS, PlainTurn, Scenario

TARGET = "p95 <= 1 ms"


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    built = Scenario(tmp_path_factory.mktemp("turn"))
    yield built
    built.close()


def per_turn(turn: Any, *, max_turns: int = 3000, max_seconds: float = 20.0) -> list[float]:
    """Seconds of each turn, timed one by one after a warm-up."""
    for _ in range(20):
        turn()
    samples: list[float] = []
    deadline = time.perf_counter() + max_seconds
    while len(samples) < max_turns and (len(samples) < 50 or time.perf_counter() < deadline):
        start = time.perf_counter()
        turn()
        samples.append(time.perf_counter() - start)
    return sorted(samples)


def percentile(sorted_samples: list[float], pct: float) -> float:
    return sorted_samples[min(len(sorted_samples) - 1, int(len(sorted_samples) * pct / 100))]


def test_whole_turn(benchmark: Any, scenario: Scenario) -> None:
    """One test, so that ``--benchmark-only`` (``make bench``) runs all of it."""
    # The sizes the README quotes.
    assert len(scenario.store.list(NS, limit=20_000)) == 10_000
    assert 1_000 <= len(scenario.store.list(SHARED_NS, limit=20_000)) <= 1_050
    offloaded = [m for m in scenario.messages if m["role"] == "tool"]
    assert offloaded and all(
        str(m["content"]).startswith("[tool result offloaded") for m in offloaded
    )
    # Same answers first: a benchmark of a wrong result is worthless.
    peer = PlainTurn(scenario)
    for _ in range(len(scenario.queries)):
        ours = scenario.turn()
        theirs = peer.turn()
        update, recall, write = ours["results"]
        assert update["ok"] and write["ok"], (update, write)
        assert not theirs["errors"]
        assert [hit["id"] for hit in recall["result"]] == theirs["hits"]
        assert len(ours["prepared"]) == len(scenario.messages) + 4  # mind, wm, team, shared
    compare(
        benchmark,
        "whole turn: run + prepare + 3 tool calls + observe + close, every layer on, SQLite",
        scenario.turn,
        {"LangGraph InMemoryStore + plain Python (numpy, jsonschema-rs, trim_messages)": peer.turn},
        target=TARGET,
    )
    samples = per_turn(scenario.turn)
    p50, p95, p99 = (percentile(samples, p) for p in (50, 95, 99))
    print(
        f"  per turn, {len(samples)} turns: p50 {fmt_seconds(p50)} p95 {fmt_seconds(p95)}"
        f" p99 {fmt_seconds(p99)} (target {TARGET})"
    )
    record(
        {
            "title": "whole turn per-turn percentiles (every layer on, SQLite)",
            "turns": len(samples),
            "p50": p50,
            "p95": p95,
            "p99": p99,
            "mean": statistics.fmean(samples),
            "target": TARGET,
        }
    )
