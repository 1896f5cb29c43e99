"""Many servers, one memory: 8 processes run agent turns for 100 users against one store.

Each process is an agent server with its own :class:`~memstrata.MemoryStack` (a structured
WorkingMemory) on the same PostgreSQL database or the same SQLite file. A turn: ``stack.run``,
``prepare`` of a short conversation, one ``working-memory/update`` tool call that adds a key
unique to the turn, close. Two sharings:

* ``thread``: each server keeps its own conversation per user (no two servers write one record);
* ``resource``: the users' memories are shared (resource scope): the 8 servers write the same
  100 records, so conditional writes conflict and fall back to the locked merge.

Printed per store and sharing: turns/s over the whole run, p50/p99 per turn. At the end every
record must hold every turn's key and a version equal to its number of writes: 0 lost updates.
"""

from __future__ import annotations

import json
import multiprocessing
import pathlib
import queue
import time
from collections.abc import Iterator
from typing import Any

import pytest
from benchkit import fmt_seconds, record
from postgres_cluster import throwaway_cluster

from memstrata import MemoryStack, WorkingMemory
from memstrata.stores import open_store

SERVERS = 8
USERS = 100
TURNS_PER_SERVER = 300  # 3 per user per server: 2,400 turns per run
TARGET = "0 lost updates"
MESSAGES = [
    {"role": "system", "content": "You are a support agent."},
    {"role": "user", "content": "Where is my order?"},
]


def _stack(url: str, scope: str) -> MemoryStack:
    layer = WorkingMemory(schema={"type": "object"}, scope=scope)  # type: ignore[arg-type]
    return MemoryStack([layer], store=open_store(url))


def _ids(server: int, user: int) -> dict[str, str]:
    return {"thread_id": f"server-{server}/user-{user}", "resource_id": f"user-{user}"}


def serve(url: str, scope: str, server: int, ready: Any, start: Any, out: Any) -> None:
    """One agent server: its turns over every user, each timed."""
    stack = _stack(url, scope)
    # Warm: connections open, statements prepared (a turn that writes nothing).
    with stack.run(**_ids(server, 0)) as run:
        run.prepare(MESSAGES)
    ready.put(server)
    start.wait()
    began = time.perf_counter()
    samples = []
    for n in range(TURNS_PER_SERVER):
        user = (n + server * 13) % USERS
        patch = json.dumps({"turns": {f"s{server}-n{n}": n}})
        t = time.perf_counter()
        with stack.run(**_ids(server, user)) as run:
            run.prepare(MESSAGES)
            result = run.call_tool("working-memory/update", patch)
        samples.append(time.perf_counter() - t)
        assert result["ok"], result
    out.put((samples, time.perf_counter() - began))
    stack.close()


def expected_keys(scope: str) -> dict[tuple[int, int], set[str]]:
    """The keys each record must hold: per (server, user) for thread scope, per user else."""
    expected: dict[tuple[int, int], set[str]] = {}
    for server in range(SERVERS):
        for n in range(TURNS_PER_SERVER):
            user = (n + server * 13) % USERS
            owner = (server, user) if scope == "thread" else (0, user)
            expected.setdefault(owner, set()).add(f"s{server}-n{n}")
    return expected


def lost_updates(url: str, scope: str) -> int:
    stack = _stack(url, scope)
    lost = 0
    for (server, user), keys in expected_keys(scope).items():
        with stack.run(**_ids(server, user)) as run:
            handle = run.layer("working-memory")
            held = set(handle.snapshot.get("turns", {}))
            lost += len(keys - held)
            # Every turn wrote once: the record's version counts the writes.
            lost += max(0, len(keys) - handle.version)
    stack.close()
    return lost


def _gather(answers: Any, procs: list[Any]) -> list[Any]:
    """One answer per server from the queue; a server that died is an error at once."""
    got: list[Any] = []
    while len(got) < len(procs):
        try:
            got.append(answers.get(timeout=1))
        except queue.Empty:
            failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            assert not failed, f"a server failed: exit codes {failed}"
    return got


def run_servers(url: str, scope: str) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    ready, start, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=serve, args=(url, scope, server, ready, start, out))
        for server in range(SERVERS)
    ]
    for p in procs:
        p.start()
    _gather(ready, procs)  # every server warm before the clock starts
    start.set()
    began = time.perf_counter()
    results = _gather(out, procs)
    wall = time.perf_counter() - began
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    samples = sorted(s for per_server, _ in results for s in per_server)
    return {
        "turns": len(samples),
        "turns_per_s": len(samples) / wall,
        "p50": samples[len(samples) // 2],
        "p99": samples[min(len(samples) - 1, int(len(samples) * 0.99))],
        "lost": lost_updates(url, scope),
    }


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    with throwaway_cluster() as url:
        open_store(url).close()  # migrate once, before the servers start
        yield url


@pytest.mark.parametrize("scope", ["thread", "resource"])
@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_many_servers(
    benchmark: Any, backend: str, scope: str, request: Any, tmp_path: pathlib.Path
) -> None:
    if backend == "postgres":
        url = request.getfixturevalue("postgres")
        with open_store(url) as store:  # a clean slate per case
            for item in store.list((), limit=100_000):
                store.delete(item.namespace, item.key)
    else:
        url = f"sqlite:///{tmp_path / 'servers.db'}"
        open_store(url).close()
    # One timed round through pytest-benchmark, so that ``--benchmark-only`` (``make bench``)
    # runs it; the figures that matter are the per-turn ones the servers measure themselves.
    got = benchmark.pedantic(run_servers, args=(url, scope), rounds=1, iterations=1)
    print(
        f"\n[many servers: {backend}, {scope} scope] {SERVERS} processes x {TURNS_PER_SERVER}"
        f" turns over {USERS} users: {got['turns_per_s']:.0f} turns/s,"
        f" p50 {fmt_seconds(got['p50'])} p99 {fmt_seconds(got['p99'])},"
        f" lost updates {got['lost']} (target {TARGET})"
    )
    record(
        {
            "title": f"many servers ({backend}, {scope} scope)",
            "servers": SERVERS,
            "users": USERS,
            "turns_per_server": TURNS_PER_SERVER,
            **got,
            "target": TARGET,
        }
    )
    assert got["lost"] == 0
