"""Where the whole turn's time goes on PostgreSQL, statement by statement.

Usage: python tools/pg_turn_breakdown.py [--turns N] [--url URL]

Starts a throwaway cluster with the benchmark's settings (``tests/postgres_cluster.py``) and
``pg_stat_statements`` loaded, builds the whole-turn scenario (``benches/turn_scenario.py``) on
it, warms up, then runs N turns and prints, per statement the turn sends:

* the client's wall time per statement (sent, waited for, answer received and loaded), and its
  CPU time (the thread's: adapting, sending, loading the rows);
* the server's planning and execution time (``pg_stat_statements``) and the buffers it touched;

then, per turn: the whole turn's wall time, the client thread's CPU, each backend's CPU (from
``/proc``), the time the client and the backends waited for a core (``/proc/*/schedstat``), and
the bare round trip (``SELECT 1``, prepared, on a connection of the store's pool). ``--url``
measures a server you already have (with ``pg_stat_statements`` loaded) instead.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import pathlib
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "benches"), str(ROOT / "tests")]

import psycopg  # noqa: E402
from postgres_cluster import throwaway_cluster  # noqa: E402
from turn_scenario import Scenario  # noqa: E402

from memstrata.stores import PostgresStore, postgres  # noqa: E402

STATS = "-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track_planning=on"


def proc_cpu(pid: int) -> float:
    """Seconds of CPU (user + system) process ``pid`` has used."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # clock ticks of 10 ms


def sched(pid: int, tid: int | None = None) -> tuple[float, float]:
    """(seconds on a core, seconds waiting for one) of a process or one of its threads."""
    path = f"/proc/{pid}/task/{tid}/schedstat" if tid else f"/proc/{pid}/schedstat"
    run, wait, _ = pathlib.Path(path).read_text().split()
    return int(run) / 1e9, int(wait) / 1e9


class StatementTimer:
    """Times every statement the store sends outside a pipeline, in this thread: wall and CPU,
    from the call until its rows are loaded."""

    def __init__(self) -> None:
        self.wall: dict[str, list[float]] = collections.defaultdict(list)
        self.cpu: dict[str, list[float]] = collections.defaultdict(list)
        self.on = False

    def timed(self, sql: Any, call: Any) -> Any:
        if not self.on:
            return call()
        wall, cpu = time.perf_counter(), time.thread_time()
        answer = call()
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
        key = " ".join(str(sql).split()[0:3])[:40]
        self.wall[key].append(wall)
        self.cpu[key].append(cpu)
        return answer

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Wraps psycopg's ``Connection.execute`` and the store's prepared-statement path
        (``pg_prepared.execute``, as ``postgres`` imported it)."""
        execute = psycopg.Connection.execute
        prepared = postgres.execute

        def timed_execute(conn: Any, query: Any, params: Any = None, **kw: Any) -> Any:
            if conn._pipeline is not None:
                return execute(conn, query, params, **kw)
            return self.timed(query, lambda: execute(conn, query, params, **kw))

        def timed_prepared(conn: Any, query: str, params: Any, **kw: Any) -> Any:
            return self.timed(query, lambda: prepared(conn, query, params, **kw))

        psycopg.Connection.execute = timed_execute  # type: ignore[method-assign]
        postgres.execute = timed_prepared
        try:
            yield
        finally:
            psycopg.Connection.execute = execute  # type: ignore[method-assign]
            postgres.execute = prepared


def socket_url(url: str) -> str:
    """``url`` through the server's unix socket (found in /proc/net/unix by its port)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    port = conninfo_to_dict(url)["port"]
    with open("/proc/net/unix") as table:
        path = next(line.split()[-1] for line in table if line.endswith(f".s.PGSQL.{port}\n"))
    return make_conninfo(url, host=os.path.dirname(path))


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--url")
    parser.add_argument("--max-size", type=int, default=10, help="the store's pool size")
    parser.add_argument("--socket", action="store_true", help="connect through the unix socket")
    args = parser.parse_args()
    cluster = (
        contextlib.nullcontext(args.url) if args.url else throwaway_cluster(extra_options=STATS)
    )
    with cluster as url, tempfile.TemporaryDirectory() as tmp:
        admin = psycopg.connect(url, autocommit=True)
        admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        if args.socket:
            url = socket_url(url)
        print("store URL:", url)
        store = PostgresStore(url, max_size=args.max_size)
        scenario = Scenario(pathlib.Path(tmp), store=store)
        for _ in range(200):
            scenario.turn()
        backends = [
            row[0]
            for row in admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'"
                " AND pid <> pg_backend_pid()"
            ).fetchall()
        ]
        me, tid = os.getpid(), threading.get_native_id()
        timer = StatementTimer()
        with timer.installed():
            admin.execute("SELECT pg_stat_statements_reset()")
            walls, cpus = [], []
            cpu0 = {pid: proc_cpu(pid) for pid in backends}
            sched0 = {pid: sched(pid) for pid in backends}
            me0 = sched(me, tid)
            timer.on = True
            for _ in range(args.turns):
                wall, cpu = time.perf_counter(), time.thread_time()
                scenario.turn()
                cpus.append(time.thread_time() - cpu)
                walls.append(time.perf_counter() - wall)
            timer.on = False
            me1 = sched(me, tid)
            sched1 = {pid: sched(pid) for pid in backends}
            cpu1 = {pid: proc_cpu(pid) for pid in backends}
        n = args.turns
        print(f"{n} turns; per turn, ms (medians unless said):")
        print(f"  turn wall p50 {ms(statistics.median(walls))}  client thread CPU p50 "
              f"{ms(statistics.median(cpus))}")  # fmt: skip
        print(f"  client thread: on a core {ms((me1[0] - me0[0]) / n)} (mean), waited for a core "
              f"{ms((me1[1] - me0[1]) / n)} (mean)")  # fmt: skip
        for pid in backends:
            used = cpu1[pid] - cpu0[pid]
            ran, waited = sched1[pid][0] - sched0[pid][0], sched1[pid][1] - sched0[pid][1]
            if ran > 0.001:
                print(f"  backend {pid}: CPU {ms(used / n)} (ticks), on a core {ms(ran / n)},"
                      f" waited for a core {ms(waited / n)} (means)")  # fmt: skip
        print("statements outside pipelines (client, per call): calls, wall p50, CPU p50")
        for key in timer.wall:
            print(f"  {key:40s} {len(timer.wall[key]) / n:5.2f}/turn  wall "
                  f"{ms(statistics.median(timer.wall[key]))}  cpu "
                  f"{ms(statistics.median(timer.cpu[key]))}")  # fmt: skip
        print("server (pg_stat_statements, per call): calls/turn, plan ms, exec ms, rows, blks")
        for row in admin.execute(
            "SELECT calls, mean_plan_time, mean_exec_time, rows, shared_blks_hit,"
            " shared_blks_dirtied, left(regexp_replace(query, '\\s+', ' ', 'g'), 70)"
            " FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat%' ORDER BY calls DESC"
        ).fetchall():
            calls, plan, exe, rows, hit, dirtied, query = row
            print(f"  {calls / n:5.2f}/turn plan {plan:.3f} exec {exe:.3f} rows {rows / calls:.1f}"
                  f" hit {hit / calls:.1f} dirtied {dirtied / calls:.2f}  {query}")  # fmt: skip
        with store._pool.connection() as conn:
            for _ in range(50):
                conn.execute("SELECT 1").fetchone()
            trips = []
            for _ in range(2000):
                start = time.perf_counter()
                conn.execute("SELECT 1").fetchone()
                trips.append(time.perf_counter() - start)
        print(f"bare round trip SELECT 1 (pool connection): p50 {ms(statistics.median(trips))}"
              f" p95 {ms(sorted(trips)[int(len(trips) * 0.95)])}")  # fmt: skip
        scenario.close()
        admin.close()


if __name__ == "__main__":
    main()
