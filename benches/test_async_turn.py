"""The whole turn through the async forms, as an asyncio agent server runs it.

The turn of :mod:`turn_scenario` (every layer on) written with ``async with stack.arun()``,
``await run.aprepare``, ``await run.acall_tool`` and ``await run.aobserve``. Results:

* on SQLite, the async turn against the sync turn in the same run and on the same data
  (interleaved, median per turn): the ratio, against the target of <= 1.2x; and, as a peer,
  the same turn with each step run in a worker thread (``asyncio.to_thread``), the way an
  async wrapper around a sync library usually runs;
* on PostgreSQL (a throwaway cluster on loopback), the same;
* event-loop lag while 50 conversations run concurrently on one loop, on each store: how late
  a task ticking every millisecond woke up (p50, p99, max), and the turns per second served.
  Each conversation awaits a model call of ``MODEL_SECONDS`` between its turns (an
  ``asyncio.sleep``); with the async forms a turn's own work runs on the loop,
  so the lag is the work of the turns that are ready at once.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from benchkit import fmt_seconds, record
from postgres_cluster import throwaway_cluster
from test_turn import percentile
from turn_scenario import AGENT, THREAD, USER, Scenario, model_response

from memstrata.stores import PostgresStore

TARGET = "async turn <= 1.2x the sync turn (SQLite)"
CONCURRENT = 50
MODEL_SECONDS = 0.5


@pytest.fixture(scope="module")
def sqlite_scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    built = Scenario(tmp_path_factory.mktemp("async-turn"))
    yield built
    built.close()


@pytest.fixture(scope="module")
def postgres_scenario(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    with throwaway_cluster() as url:
        built = Scenario(tmp_path_factory.mktemp("async-turn-pg"), store=PostgresStore(url))
        yield built
        built.close()


async def threaded_turn(scenario: Scenario) -> dict[str, Any]:
    """The peer: the same turn, each step in a worker thread."""
    i, calls = scenario.next_turn()
    run = scenario.stack.run(thread_id=THREAD, resource_id=USER, agent=AGENT)
    await asyncio.to_thread(run.open)
    try:
        prepared = await asyncio.to_thread(run.prepare, scenario.messages)
        results = [await asyncio.to_thread(run.call_tool, name, args) for name, args in calls]
        await asyncio.to_thread(run.observe, model_response(i, calls))
    finally:
        await asyncio.to_thread(run.close)
    return {"prepared": prepared, "results": results}


async def interleaved(scenario: Scenario, rounds: int = 9, per_round: int = 40) -> dict[str, Any]:
    """Sync, async and threaded turns alternated on the running loop, timed one by one: per
    form, percentiles; per round, the median of each, and the median over rounds of the
    async/sync and threaded/sync ratios."""
    forms: dict[str, Callable[[], Awaitable[Any]]] = {
        "sync": lambda: asyncio.sleep(0, scenario.turn()),
        "async": scenario.aturn,
        "threaded": lambda: threaded_turn(scenario),
    }
    for _ in range(10):
        for form in forms.values():
            await form()
    samples: dict[str, list[float]] = {name: [] for name in forms}
    ratios: dict[str, list[float]] = {"async": [], "threaded": []}
    for _ in range(rounds):
        medians = {}
        for name, form in forms.items():
            times = []
            for _ in range(per_round):
                start = time.perf_counter()
                await form()
                times.append(time.perf_counter() - start)
            medians[name] = statistics.median(times)
            samples[name] += times
        for name in ratios:
            ratios[name].append(medians[name] / medians["sync"])
    out: dict[str, Any] = {f"{name}/sync": statistics.median(r) for name, r in ratios.items()}
    for name, times in samples.items():
        times.sort()
        out[name] = {p: percentile(times, p) for p in (50, 95, 99)}
    return out


async def lag_under_load(
    turn: Callable[[], Awaitable[Any]], seconds: float = 6.0
) -> dict[str, Any]:
    """``CONCURRENT`` conversations running turns for ``seconds``, each awaiting a model call
    between turns, and a task that sleeps 1 ms at a time noting how late it wakes."""
    stop = time.perf_counter() + seconds
    turns = 0

    async def server() -> None:
        nonlocal turns
        while time.perf_counter() < stop:
            await asyncio.sleep(MODEL_SECONDS)  # the model call
            await turn()
            turns += 1

    lags: list[float] = []

    async def ticker() -> None:
        while time.perf_counter() < stop:
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - start - 0.001)

    started = time.perf_counter()
    await asyncio.gather(ticker(), *(server() for _ in range(CONCURRENT)))
    elapsed = time.perf_counter() - started
    lags.sort()
    return {
        "turns_per_s": turns / elapsed,
        "lag_max": lags[-1],
        "lag_p99": percentile(lags, 99),
        "lag_p50": percentile(lags, 50),
    }


def report(store: str, scenario: Scenario, benchmark: Any, *, target: str) -> None:
    loop = asyncio.new_event_loop()
    try:
        # pytest-benchmark's table: an async turn, run to completion on the loop.
        benchmark(lambda: loop.run_until_complete(scenario.aturn()))
        timings = loop.run_until_complete(interleaved(scenario))
        lag = loop.run_until_complete(lag_under_load(scenario.aturn))
        threaded_lag = loop.run_until_complete(lag_under_load(lambda: threaded_turn(scenario)))
    finally:
        loop.close()
    lines = [
        f"\n[whole turn, async forms, {store}] async/sync {timings['async/sync']:.2f}x"
        f" (target: {target}); each step in a thread: {timings['threaded/sync']:.2f}x"
    ]
    for name in ("sync", "async", "threaded"):
        t = timings[name]
        lines.append(
            f"  {name:8} p50 {fmt_seconds(t[50])} p95 {fmt_seconds(t[95])} p99 {fmt_seconds(t[99])}"
        )
    for name, measured in (("async", lag), ("threaded", threaded_lag)):
        lines.append(
            f"  {CONCURRENT} conversations ({name}, a {MODEL_SECONDS * 1000:.0f} ms model call"
            " between turns) on one loop: "
            f"{measured['turns_per_s']:.0f} turns/s, loop lag p50 "
            f"{fmt_seconds(measured['lag_p50'])} p99 {fmt_seconds(measured['lag_p99'])}"
            f" max {fmt_seconds(measured['lag_max'])}"
        )
    print("\n".join(lines))
    record(
        {
            "title": f"whole turn, async forms vs sync ({store})",
            **timings,
            "concurrent": CONCURRENT,
            "lag": lag,
            "threaded_lag": threaded_lag,
            "target": target,
        }
    )


def test_async_turn_sqlite(benchmark: Any, sqlite_scenario: Scenario) -> None:
    answers = asyncio.run(sqlite_scenario.aturn())
    assert all(result["ok"] for result in answers["results"]), answers["results"]
    report("SQLite", sqlite_scenario, benchmark, target=TARGET)


def test_async_turn_postgres(benchmark: Any, postgres_scenario: Scenario) -> None:
    answers = asyncio.run(postgres_scenario.aturn())
    assert all(result["ok"] for result in answers["results"]), answers["results"]
    report("PostgreSQL loopback", postgres_scenario, benchmark, target="measured")
