"""The whole turn of ``test_turn.py`` with every layer's data in PostgreSQL, on loopback.

A throwaway cluster (``tests/postgres_cluster.py``, fsync off) holds the turn's store, reached
over TCP on 127.0.0.1 (``postgresql://user@127.0.0.1:port/db``), as a server in a container or
on another host reaches it (docs/stores.md on the unix socket).
``tools/pg_turn_breakdown.py`` shows where the turn's time goes, statement by statement.
Results:

* per-turn percentiles (p50/p95/p99), against the target of p95 <= 2 ms;
* round trips per turn, counted on the wire by a loopback proxy (each time the client speaks
  after the server answered), for memstrata and for the peer;
* the peer: :class:`turn_scenario.PlainTurn` with LangGraph's ``PostgresStore``
  (``langgraph-checkpoint-postgres``) in place of its ``InMemoryStore``, same reads and writes,
  same cluster, same run; the ratio (benchkit's median per turn) against the target of >= 5x.
"""

from __future__ import annotations

import contextlib
import pathlib
import statistics
from collections.abc import Iterator
from typing import Any

import pytest
from benchkit import compare, fmt_seconds, record
from pg_round_trips import RoundTripCounter
from postgres_cluster import throwaway_cluster
from test_turn import per_turn, percentile
from turn_scenario import THREAD, PlainTurn, Scenario

from memstrata.stores import PostgresStore

TARGET = "p95 <= 2 ms on loopback, >= 5x LangGraph's PostgresStore + plain Python"


class LangGraphPostgresTurn(PlainTurn):
    """:class:`PlainTurn` with LangGraph's ``PostgresStore`` (a connection pool, as ours) in
    place of its ``InMemoryStore``: the state read, written back, and the shared-memory write
    go to PostgreSQL; the mind's entries and vectors stay in memory, as in the plain turn."""

    def __init__(self, scenario: Scenario, url: str) -> None:
        from langgraph.store.postgres import PostgresStore as LangGraphPostgresStore

        super().__init__(scenario)
        self._exit = contextlib.ExitStack()
        store = self._exit.enter_context(
            LangGraphPostgresStore.from_conn_string(
                url, pool_config={"min_size": 1, "max_size": 10}
            )
        )
        store.setup()
        store.put(("wm", THREAD), "state", scenario.state)
        for entry in scenario.shared.snapshot():
            store.put(("shared",), entry.key, {"kind": entry.kind, "value": entry.value})
        self.store = store  # type: ignore[assignment]

    def close(self) -> None:
        self._exit.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    with throwaway_cluster() as url:
        yield url


@pytest.fixture(scope="module")
def scenario(cluster: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scenario]:
    built = Scenario(tmp_path_factory.mktemp("turn-pg"), store=PostgresStore(cluster))
    yield built
    built.close()


def round_trips_per_turn(turn: Any, counter: RoundTripCounter, turns: int = 50) -> float:
    for _ in range(10):
        turn()  # warm: connections open, statements prepared
    start = counter.round_trips
    for _ in range(turns):
        turn()
    return (counter.round_trips - start) / turns


def test_whole_turn_postgres(
    benchmark: Any, cluster: str, scenario: Scenario, tmp_path: pathlib.Path
) -> None:
    peer = LangGraphPostgresTurn(scenario, cluster)
    for _ in range(len(scenario.queries)):
        ours = scenario.turn()
        theirs = peer.turn()
        update, recall, write = ours["results"]
        assert update["ok"] and write["ok"], (update, write)
        assert not theirs["errors"]
        assert [hit["id"] for hit in recall["result"]] == theirs["hits"]
    ratios = compare(
        benchmark,
        "whole turn on PostgreSQL (loopback): every layer on, store shared by servers",
        scenario.turn,
        {"LangGraph PostgresStore + plain Python": peer.turn},
        target=TARGET,
    )
    samples = per_turn(scenario.turn)
    peer_samples = per_turn(peer.turn, max_turns=1000, max_seconds=10.0)
    p50, p95, p99 = (percentile(samples, p) for p in (50, 95, 99))
    q50, q95, q99 = (percentile(peer_samples, p) for p in (50, 95, 99))
    # Round trips, through the counting proxy: the same store and stack, its connection pool
    # swapped for one opened through the proxy while counting.
    counter = RoundTripCounter(cluster)
    assert isinstance(scenario.store, PostgresStore)
    proxied = PostgresStore(counter.url)
    direct = scenario.store._pool
    scenario.store._pool = proxied._pool
    ours_trips = round_trips_per_turn(scenario.turn, counter)
    scenario.store._pool = direct
    proxied.close()
    counted_peer = LangGraphPostgresTurn(scenario, counter.url)
    peer_trips = round_trips_per_turn(counted_peer.turn, counter)
    counted_peer.close()
    counter.close()
    peer.close()
    ratio = next(iter(ratios.values()))
    print(
        f"  per turn, {len(samples)} turns: p50 {fmt_seconds(p50)} p95 {fmt_seconds(p95)}"
        f" p99 {fmt_seconds(p99)}; round trips per turn {ours_trips:.1f}\n"
        f"  peer per turn, {len(peer_samples)} turns: p50 {fmt_seconds(q50)}"
        f" p95 {fmt_seconds(q95)} p99 {fmt_seconds(q99)}; round trips per turn {peer_trips:.1f}\n"
        f"  ratio {ratio:.2f}x (target {TARGET})"
    )
    record(
        {
            "title": "whole turn per-turn percentiles (every layer on, PostgreSQL loopback)",
            "turns": len(samples),
            "p50": p50,
            "p95": p95,
            "p99": p99,
            "mean": statistics.fmean(samples),
            "round_trips": ours_trips,
            "peer": {"p50": q50, "p95": q95, "p99": q99, "round_trips": peer_trips},
            "ratio": ratio,
            "target": TARGET,
        }
    )
