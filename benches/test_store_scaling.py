"""Store throughput with 1, 4 and 16 concurrent writer processes, SQLite against PostgreSQL.

Each writer is its own interpreter doing read-modify-write ``update`` calls on its own record
(one user per agent server process). Every writer starts up and opens its store first, then all
of them wait for one wall-clock start time and count the updates they finish in the same window,
so the total over the window is a rate at which all writers really ran at once (timing each
writer from its own start-up would count staggered windows as if they overlapped).
It shows where SQLite's single writer lock stops scaling and PostgreSQL's row-level concurrency
takes over. The PostgreSQL server is a throwaway cluster on this machine (fsync off, as in the
tests), so both backends are measured without disk flushes.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import time
from typing import Any

import psycopg
import pytest
from benchkit import record
from postgres_cluster import throwaway_cluster

from memstrata import open_store

SECONDS = 3.0

_WRITER = """
import sys, time
from memstrata import deep_merge, open_store
url, worker, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
store = open_store(url)
store.put(("bench", worker), "state", {"n": 0})
print("ready", flush=True)
start_at = float(sys.stdin.readline())
latencies = []
time.sleep(max(0.0, start_at - time.time()))
end_at = start_at + seconds
while True:
    t0 = time.time()
    if t0 >= end_at:
        break
    store.update(("bench", worker), "state", lambda v: deep_merge(v, {"n": v["n"] + 1}))
    latencies.append(time.time() - t0)
latencies.sort()
print(len(latencies), latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)])
"""

# The window opens this long after the last writer said it is ready (its store open).
START_DELAY_SECONDS = 0.5


def throughput(url: str, writers: int) -> tuple[float, float, float]:
    """Total updates/s over the common window, and the worst writer's p50 and p99 latency."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, url, str(w), str(SECONDS)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for w in range(writers)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    start_at = time.time() + START_DELAY_SECONDS
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(f"{start_at!r}\n")
        p.stdin.close()
    total, p50, p99 = 0, 0.0, 0.0
    for p in procs:
        assert p.stdout is not None
        out = p.stdout.read()
        p.wait(timeout=120)
        assert p.returncode == 0
        done, median, tail = out.split()
        total += int(done)
        p50, p99 = max(p50, float(median)), max(p99, float(tail))
    assert time.time() >= start_at + SECONDS, "a writer did not wait for the window"
    return total / SECONDS, p50, p99


@pytest.fixture(scope="module")
def postgres() -> Any:
    with throwaway_cluster() as url:
        yield url


def test_updates_per_second_by_writers(
    benchmark: Any, tmp_path: pathlib.Path, postgres: str
) -> None:
    results: dict[str, dict[int, tuple[float, float, float]]] = {"sqlite": {}, "postgres": {}}

    def measure() -> None:
        for writers in (1, 4, 16):
            sqlite_url = f"sqlite:///{tmp_path}/scaling-{writers}.db"
            open_store(sqlite_url).close()
            results["sqlite"][writers] = throughput(sqlite_url, writers)
            with psycopg.connect(postgres, autocommit=True) as conn:
                conn.execute(
                    "DROP TABLE IF EXISTS memstrata_items, memstrata_tombstones,"
                    " memstrata_tombstone_floor, memstrata_schema"
                )
            open_store(postgres).close()
            results["postgres"][writers] = throughput(postgres, writers)

    benchmark.pedantic(measure, rounds=1, iterations=1)
    print("\n[store updates/s, read-modify-write, one record per writer process, 2 cores]")
    print("  writers   SQLite/s  p50 ms  p99 ms   PostgreSQL/s  p50 ms  p99 ms")
    for writers in (1, 4, 16):
        (s_rate, s_p50, s_p99), (p_rate, p_p50, p_p99) = (
            results["sqlite"][writers],
            results["postgres"][writers],
        )
        print(
            f"  {writers:>7}  {s_rate:>8,.0f}  {s_p50 * 1e3:>6.3f}  {s_p99 * 1e3:>6.3f}"
            f"   {p_rate:>12,.0f}  {p_p50 * 1e3:>6.3f}  {p_p99 * 1e3:>6.3f}"
        )
    record({"title": "store updates/s by concurrent writers", **{
        f"{backend}_{writers}_writers_{name}": value
        for backend, by_writers in results.items()
        for writers, figures in by_writers.items()
        for name, value in zip(("per_second", "p50_seconds", "p99_seconds"), figures)
    }})  # fmt: skip
