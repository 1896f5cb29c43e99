"""WorkingMemory hot paths at the sizes users run: a model's update tool call on SQLite, and
run.prepare().

Two states: one at the layer's default budget (about 1,500 tokens of block) and one at
``budget=(200, 8000)`` (about 8,000). Each update changes one project's status and owner, so
every state is new and all of the same size (under its budget): the exact token count of the
budget check runs on every call, as it does for a model's real updates.

Peer: the same update done the plain way a Python developer would write it (load the JSON from
SQLite, merge in Python, validate with ``jsonschema``, save) in the same run, on the same state;
and the same with the jsonschema-rs validator memstrata uses, for reference.
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
import pytest
from benchkit import compare, fmt_seconds, record
from state_data import SCHEMA, make_state, python_merge

from memstrata import MemoryStack, SQLiteStore, WorkingMemory, count_tokens
from memstrata.layers.wm_stored import read_state

TARGET = ">= 3x plain Python at both sizes"
# (label, projects in the state, the layer's budget)
SIZES = [("1,500-token state", 19, 1500), ("8,000-token state", 108, 8000)]


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


def patch(projects: int, call: int) -> str:
    """An update of one project, its owner renamed with a number of fixed width: every state is
    new (no count or render can be reused from an earlier call), and of the same size."""
    key = f"p{call * 7 % projects:03d}"
    owner = {"name": f"dev{call % 100_000:05d}"}
    status = "done" if call % 2 else "doing"
    return json.dumps({"projects": {key: {"status": status, "owner": owner}}})


@pytest.mark.parametrize(("label", "projects", "budget"), SIZES, ids=["1500", "8000"])
def test_update_tool_call_on_sqlite(
    benchmark: Any, tmp_path: pathlib.Path, label: str, projects: int, budget: int
) -> None:
    state = make_state(projects)
    store = SQLiteStore(tmp_path / "ours.db")
    layer = WorkingMemory(schema=SCHEMA, budget=(200, budget))
    stack = MemoryStack([layer], store=store, total_budget=budget)
    run = stack.run(thread_id="bench").open()
    run.layer("working-memory").update(state, mode="replace")
    tokens = count_tokens(run.layer("working-memory").render())
    assert 0.85 * budget <= tokens <= budget, tokens
    ours_i = iter(range(10**9))

    def ours() -> None:
        result = run.call_tool("working-memory/update", patch(projects, next(ours_i)))
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
            changes = json.loads(patch(projects, next(calls)))
            conn.execute("BEGIN IMMEDIATE")
            (text,) = conn.execute(f"SELECT value FROM {table} WHERE id = 'bench'").fetchone()
            merged = python_merge(json.loads(text), changes)
            validate(merged)
            conn.execute(f"UPDATE {table} SET value = ? WHERE id = 'bench'", (json.dumps(merged),))
            conn.execute("COMMIT")

        return update

    plain = plain_update("wm", jsonschema.Draft202012Validator(SCHEMA).validate)
    plain_fast_validator = plain_update("wm_fast", jsonschema_rs.validator_for(SCHEMA).validate)

    ratios = compare(
        benchmark,
        f"working-memory/update via call_tool, {label} ({tokens:,} tokens), SQLite",
        ours,
        {
            "plain Python (json + merge + jsonschema + sqlite3)": plain,
            "plain Python with the jsonschema-rs validator memstrata uses": plain_fast_validator,
        },
        target=TARGET,
    )
    ours_p50, ours_p99 = per_call(ours)
    plain_p50, plain_p99 = per_call(plain)
    print(
        f"  per call: memstrata p50 {fmt_seconds(ours_p50)} p99 {fmt_seconds(ours_p99)}; "
        f"plain p50 {fmt_seconds(plain_p50)} p99 {fmt_seconds(plain_p99)}; "
        f"p50 ratio {plain_p50 / ours_p50:.1f}x"
    )
    record(
        {
            "title": f"working-memory/update per-call percentiles, {label}",
            "ours_p50": ours_p50,
            "ours_p99": ours_p99,
            "plain_p50": plain_p50,
            "plain_p99": plain_p99,
        }
    )
    # The same answer as the plain way's, for the same updates.
    final = read_state(store, ("working-memory", "thread", "bench"))
    expected = state
    for call in range(next(ours_i)):
        expected = python_merge(expected, json.loads(patch(projects, call)))
    assert final is not None and final[0] == expected
    run.close()
    store.close()
    assert ratios


def test_prepare_with_working_memory(benchmark: Any, tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "prepare.db")
    stack = MemoryStack([WorkingMemory(schema=SCHEMA)], store=store)
    with stack.run(thread_id="bench") as run:
        run.layer("working-memory").update(make_state(19))
        messages = [{"role": "system", "content": "You are helpful."}] + [
            {"role": "user" if i % 2 else "assistant", "content": f"message {i}"} for i in range(40)
        ]
        benchmark(run.prepare, messages)
        p50, p99 = per_call(lambda: run.prepare(messages), n=5000)
        print(
            f"\n[run.prepare, WorkingMemory only, 1,500-token state] p50 {fmt_seconds(p50)}"
            f" p99 {fmt_seconds(p99)}"
        )
        record({"title": "run.prepare with WorkingMemory", "p50": p50, "p99": p99})
    store.close()
