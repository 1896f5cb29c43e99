"""Many processes, one memory: no update is lost and no record is ever half-written, on SQLite
and on PostgreSQL. Each worker is a separate interpreter, as separate agent servers are."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import psycopg
import pytest

from memstrata import MemoryStack, WorkingMemory, open_store

_WORKING_MEMORY_WORKER = """
import sys
from memstrata import MemoryStack, WorkingMemory, open_store
url, worker, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store = open_store(url)
stack = MemoryStack(
    [WorkingMemory(schema={"type": "object"}, scope="resource", budget=(0, 1_000_000))],
    store=store,
)
done = 0
while done < count:
    # A run per few turns, as a server handles one user's requests.
    with stack.run(thread_id=f"t{worker}", resource_id="shared-user") as run:
        for _ in range(min(5, count - done)):
            result = run.call_tool("working-memory/update", {f"p{worker}_{done}": done})
            assert result == {"ok": True, "version": result["version"]}, result
            done += 1
store.close()
"""

# Rewrites one record over and over with a value whose every element names its generation, so a
# torn write would show as mixed generations.
_KILLED_WRITER = """
import sys
from memstrata import open_store
url = sys.argv[1]
store = open_store(url)
generation = 0
while True:
    generation += 1
    store.update(("crash",), "record", lambda _v, g=generation: {"gen": g, "data": [g] * 2000})
    blind = {"gen": generation, "data": [generation] * 2000}
    store.put(("crash",), f"blind-{generation % 3}", blind)
"""


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/shared.db"
    pg: str = request.getfixturevalue("postgres_url")
    with psycopg.connect(pg, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS memstrata_items, memstrata_schema")
    return pg


def test_four_processes_merge_into_one_resource_scope(url: str) -> None:
    open_store(url).close()
    procs = [
        subprocess.Popen([sys.executable, "-c", _WORKING_MEMORY_WORKER, url, str(w), "250"])
        for w in range(4)
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0, 0]
    store = open_store(url)
    stack = MemoryStack(
        [WorkingMemory(schema={"type": "object"}, scope="resource", budget=(0, 1_000_000))],
        store=store,
    )
    with stack.run(resource_id="shared-user") as run:
        state = run.layer("working-memory").snapshot
        assert run.layer("working-memory").version == 1000
    store.close()
    assert sorted(state) == sorted(f"p{w}_{j}" for w in range(4) for j in range(250))


def test_a_writer_killed_mid_write_leaves_old_or_new_values(url: str) -> None:
    open_store(url).close()
    for round_ in range(5):
        writer = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, url])
        # The writer's start (the interpreter, numpy) can take longer than the sleep on a
        # loaded machine: wait for its first write, so the kill lands while it is writing.
        with open_store(url) as watcher:
            deadline = time.monotonic() + 60
            while not watcher.list(("crash",), limit=1) and time.monotonic() < deadline:
                time.sleep(0.02)
        time.sleep(0.4 + 0.1 * round_)
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
        with open_store(url) as store:  # opens cleanly after the crash
            items = store.list(("crash",))
            assert items, "the writer made no progress before it was killed"
            for item in items:
                generation = item.value["gen"]
                assert item.value["data"] == [generation] * 2000, item.key
