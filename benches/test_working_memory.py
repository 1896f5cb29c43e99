"""WorkingMemory hot paths: a model's update tool call on SQLite, and run.prepare().

Peer: the same update done the plain way a Python developer would write it (load the JSON from
SQLite, merge in Python, validate with `jsonschema`, save) in the same run, on the same state.
"""

from __future__ import annotations

import json
import pathlib
import sqlite3
import statistics
import time
from collections.abc import Callable
from typing import Any

import jsonschema
import jsonschema_rs
from benchkit import compare, fmt_seconds, record
from state_data import SCHEMA, count_nodes, make_state, python_merge

from memstrata import MemoryStack, SQLiteStore, WorkingMemory
from memstrata.layers.wm_stored import read_state


def per_call(fn: Callable[[], Any], n: int = 1500) -> tuple[float, float]:
    for _ in range(50):
        fn()
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    samples.sort()
    return statistics.median(samples), samples[int(n * 0.99)]


PATCHES = [
    json.dumps({"projects": {f"p{i:03d}": {"status": "done", "tags": ["backend", "shipped"]}}})
    for i in range(0, 100, 7)
]


def test_update_tool_call_on_sqlite(benchmark: Any, tmp_path: pathlib.Path) -> None:
    state = make_state()
    assert 950 <= count_nodes(state) <= 1100

    store = SQLiteStore(tmp_path / "ours.db")
    stack = MemoryStack(
        [WorkingMemory(schema=SCHEMA, budget=(200, 100_000))], store=store, total_budget=100_000
    )
    run = stack.run(thread_id="bench").open()
    run.layer("working-memory").update(state, mode="replace")
    ours_i = iter(range(10**9))

    def ours() -> None:
        result = run.call_tool("working-memory/update", PATCHES[next(ours_i) % len(PATCHES)])
        assert result["ok"], result

    conn = sqlite3.connect(tmp_path / "plain.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")

    def plain_update(table: str, validate: Callable[[Any], Any]) -> Callable[[], None]:
        """The update as a Python developer writes it: load, merge, validate, save."""
        conn.execute(f"CREATE TABLE {table} (id TEXT PRIMARY KEY, value TEXT)")
        conn.execute(f"INSERT INTO {table} VALUES ('bench', ?)", (json.dumps(state),))
        calls = iter(range(10**9))

        def update() -> None:
            patch = json.loads(PATCHES[next(calls) % len(PATCHES)])
            conn.execute("BEGIN IMMEDIATE")
            (text,) = conn.execute(f"SELECT value FROM {table} WHERE id = 'bench'").fetchone()
            merged = python_merge(json.loads(text), patch)
            validate(merged)
            conn.execute(f"UPDATE {table} SET value = ? WHERE id = 'bench'", (json.dumps(merged),))
            conn.execute("COMMIT")

        return update

    plain = plain_update("wm", jsonschema.Draft202012Validator(SCHEMA).validate)
    plain_fast_validator = plain_update("wm_fast", jsonschema_rs.validator_for(SCHEMA).validate)

    ratios = compare(
        benchmark,
        "working-memory/update via call_tool, 1k-node state, SQLite",
        ours,
        {
            "plain Python (json + merge + jsonschema + sqlite3)": plain,
            "plain Python with the jsonschema-rs validator memstrata uses": plain_fast_validator,
        },
        target=">= 3x plain Python",
    )
    ours_p50, ours_p99 = per_call(ours)
    plain_p50, plain_p99 = per_call(plain)
    print(
        f"  per call: memstrata p50 {fmt_seconds(ours_p50)} p99 {fmt_seconds(ours_p99)}; "
        f"plain p50 {fmt_seconds(plain_p50)} p99 {fmt_seconds(plain_p99)}"
    )
    record(
        {
            "title": "working-memory/update per-call percentiles",
            "ours_p50": ours_p50,
            "ours_p99": ours_p99,
            "plain_p50": plain_p50,
            "plain_p99": plain_p99,
        }
    )
    final = read_state(store, ("working-memory", "thread", "bench"))
    (plain_text,) = conn.execute("SELECT value FROM wm").fetchone()
    assert final is not None and final[0] == json.loads(plain_text)
    run.close()
    store.close()
    assert ratios


def test_prepare_with_working_memory(benchmark: Any, tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "prepare.db")
    stack = MemoryStack([WorkingMemory(schema=SCHEMA, budget=(200, 100_000))], store=store)
    with stack.run(thread_id="bench") as run:
        run.layer("working-memory").update(make_state(20))
        messages = [{"role": "system", "content": "You are helpful."}] + [
            {"role": "user" if i % 2 else "assistant", "content": f"message {i}"} for i in range(40)
        ]
        benchmark(run.prepare, messages)
        p50, p99 = per_call(lambda: run.prepare(messages), n=5000)
        print(
            f"\n[run.prepare, WorkingMemory only, 220-node state] p50 {fmt_seconds(p50)}"
            f" p99 {fmt_seconds(p99)}"
        )
        record({"title": "run.prepare with WorkingMemory", "p50": p50, "p99": p99})
    store.close()
