"""Store throughput with 1, 4 and 16 concurrent writer processes, SQLite against PostgreSQL.

Each writer is its own interpreter doing read-modify-write ``update`` calls on its own record
(one user per agent server process), for a fixed time; the figure is total updates per second.
It shows where SQLite's single writer lock stops scaling and PostgreSQL's row-level concurrency
takes over. The PostgreSQL server is a throwaway cluster on this machine (fsync off, as in the
tests), so both backends are measured without disk flushes.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
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
start = time.perf_counter(); done = 0
while time.perf_counter() - start < seconds:
    store.update(("bench", worker), "state", lambda v: deep_merge(v, {"n": v["n"] + 1, "at": done}))
    done += 1
print(done)
"""


def throughput(url: str, writers: int) -> float:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, url, str(w), str(SECONDS)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for w in range(writers)
    ]
    total = 0
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        total += int(out.strip())
    return total / SECONDS


@pytest.fixture(scope="module")
def postgres() -> Any:
    with throwaway_cluster() as url:
        yield url


def test_updates_per_second_by_writers(
    benchmark: Any, tmp_path: pathlib.Path, postgres: str
) -> None:
    results: dict[str, dict[int, float]] = {"sqlite": {}, "postgres": {}}

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
    print("  writers   SQLite    PostgreSQL")
    for writers in (1, 4, 16):
        sqlite_rate, postgres_rate = results["sqlite"][writers], results["postgres"][writers]
        print(f"  {writers:>7}  {sqlite_rate:>7,.0f}  {postgres_rate:>10,.0f}")
    record({"title": "store updates/s by concurrent writers", **{
        f"{backend}_{writers}_writers_per_second": rate
        for backend, by_writers in results.items()
        for writers, rate in by_writers.items()
    }})  # fmt: skip
