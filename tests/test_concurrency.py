"""Many processes, one memory: no update is lost and no record is ever half-written, on SQLite
and on PostgreSQL. Each worker is a separate interpreter, as separate agent servers are."""

from __future__ import annotations

import collections
import json
import os
import pathlib
import random
import signal
import string
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest
from store_checks import drop_postgres_tables

from memstrata import MemoryStack, WorkingMemory, hash_embed, open_store
from memstrata.layers.wm_stored import read_state

_WORKING_MEMORY_WORKER = """
import sys
from memstrata import MemoryStack, WorkingMemory, open_store
url, worker, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store = open_store(url)
stack = MemoryStack(
    [WorkingMemory(schema={"type": "object"}, scope="resource", budget=(0, 1_000_000))],
    store=store,
    total_budget=1_000_000,
)
done = 0
while done < count:
    # A run per few turns, as a server handles one user's requests.
    with stack.run(thread_id=f"t{worker}", resource_id="shared-user") as run:
        for _ in range(min(5, count - done)):
            result = run.call_tool("working-memory/update", {f"p{worker}_{done}": done})
            assert result.get("ok") is True and set(result) == {"ok", "version"}, result
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
    if generation == 1:
        print("writing", flush=True)  # the kill is timed from here, not from a slow start
"""


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/shared.db"
    pg: str = request.getfixturevalue("postgres_url")
    drop_postgres_tables(pg)
    return pg


@pytest.mark.parametrize("pad", [0, 60_000], ids=["small", "large"])
def test_four_processes_merge_into_one_resource_scope(url: str, pad: int) -> None:
    open_store(url).close()
    written = 0
    if pad:
        # A large state: each write takes longer, so more of them race.
        with open_store(url) as store:
            stack = MemoryStack(
                [WorkingMemory(schema={"type": "object"}, scope="resource", budget=(0, 10**6))],
                store=store,
                total_budget=10**6,
            )
            with stack.run(resource_id="shared-user") as run:
                run.layer("working-memory").update({"pad": "x" * pad})
        written = 1
    procs = [
        subprocess.Popen([sys.executable, "-c", _WORKING_MEMORY_WORKER, url, str(w), "250"])
        for w in range(4)
    ]
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0, 0]
    store = open_store(url)
    stack = MemoryStack(
        [WorkingMemory(schema={"type": "object"}, scope="resource", budget=(0, 1_000_000))],
        store=store,
        total_budget=1_000_000,
    )
    with stack.run(resource_id="shared-user") as run:
        state = run.layer("working-memory").snapshot
        assert run.layer("working-memory").version == 1000 + written
    assert read_state(store, ("working-memory", "resource", "shared-user")) == (
        state,
        1000 + written,
    )
    store.close()
    state.pop("pad", None)
    assert sorted(state) == sorted(f"p{w}_{j}" for w in range(4) for j in range(250))


def test_a_writer_killed_mid_write_leaves_old_or_new_values(url: str) -> None:
    open_store(url).close()
    for round_ in range(5):
        writer = subprocess.Popen(
            [sys.executable, "-c", _KILLED_WRITER, url], stdout=subprocess.PIPE, text=True
        )
        assert writer.stdout is not None and writer.stdout.readline() == "writing\n"
        time.sleep(0.05 + 0.07 * round_)
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
        with open_store(url) as store:  # opens cleanly after the crash
            items = store.list(("crash",))
            assert items, "the writer made no progress before it was killed"
            for item in items:
                generation = item.value["gen"]
                assert item.value["data"] == [generation] * 2000, item.key


# Each process runs several mind runs that hold their drafts open at the same time as the other
# processes' runs, so the same belief is drafted by four runs none of which can see the others'.
_MIND_WORKER = """
import json, os, sys, time
from memstrata import AgentMind, MemoryStack, open_store
url, worker, barrier = sys.argv[1], int(sys.argv[2]), sys.argv[3]
plan = json.loads(sys.argv[4])
open(os.path.join(barrier, str(worker)), "w").close()
while len(os.listdir(barrier)) < 4:  # start together
    time.sleep(0.005)
store = open_store(url)
stack = MemoryStack([AgentMind()], store=store)
confidence = ["low", "medium", "high", "medium"][worker]
for contents in plan:
    with stack.run(agent="shared-agent") as run:
        for content in contents:
            result = run.call_tool("mind_believe", {
                "content": content, "confidence": confidence, "tags": [f"w{worker}"],
            })
            assert result.get("status") == "ok", result
        time.sleep(0.15)  # the run stays open while the other processes' runs draft too
store.close()
"""


def _words(rng: random.Random, n: int) -> str:
    return " ".join(
        "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(5, 9)))
        for _ in range(n)
    )


def test_four_processes_flushing_one_mind_store_each_belief_once(
    url: str, tmp_path: pathlib.Path
) -> None:
    rng = random.Random(7)
    runs, shared_per_run, unique_per_run = 4, 3, 3
    shared = [f"Shared fact {i}: {_words(rng, 6)}." for i in range(runs * shared_per_run)]
    unique = {
        w: [f"Worker {w} note {i}: {_words(rng, 6)}." for i in range(runs * unique_per_run)]
        for w in range(4)
    }
    everything = shared + [c for notes in unique.values() for c in notes]
    vectors = hash_embed(everything, 384)
    similarity = vectors @ vectors.T
    np.fill_diagonal(similarity, 0)
    assert similarity.max() < 0.7  # distinct contents, far under the 0.85 fold threshold
    open_store(url).close()
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = []
    for w in range(4):
        plan = [
            shared[r * shared_per_run : (r + 1) * shared_per_run]
            + unique[w][r * unique_per_run : (r + 1) * unique_per_run]
            # Re-believing an earlier shared fact goes through the believe-time dedup.
            + (shared[(r - 1) * shared_per_run : r * shared_per_run][:1] if r else [])
            for r in range(runs)
        ]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _MIND_WORKER, url, str(w), str(barrier), json.dumps(plan)]
            )
        )
    assert [p.wait(timeout=300) for p in procs] == [0, 0, 0, 0]
    with open_store(url) as store:
        beliefs = [i.value for i in store.list(("mind", "shared-agent"), limit=10_000)]
    by_content = collections.Counter(b["content"] for b in beliefs)
    assert {c: n for c, n in by_content.items() if n > 1} == {}, "duplicated beliefs"
    assert sorted(by_content) == sorted(everything), "a belief was lost"
    for belief in beliefs:
        if belief["content"] in shared:
            # Every process believed it: the confidence rose to the highest, tags were united.
            assert belief["confidence"] == "high", belief
            assert sorted(belief["tags"]) == ["w0", "w1", "w2", "w3"], belief


_PROFILE = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "diet": {"type": "string"}},
}
# (layer options, the first write, the other server's write, the stale rewrite, its arguments,
# what the other server's write leaves in the state)
_REWRITES = {
    "voltagent replace": (
        {"tools": "voltagent"},
        ("update_working_memory", {"content": "- name: Priya"}),
        ("update_working_memory", {"content": "- allergic to peanuts"}),
        ("update_working_memory", {"content": "- name: Priya Raman", "mode": "replace"}),
        "- name: Priya\n\n- allergic to peanuts",
    ),
    "voltagent clear": (
        {"tools": "voltagent"},
        ("update_working_memory", {"content": "- name: Priya"}),
        ("update_working_memory", {"content": "- allergic to peanuts"}),
        ("clear_working_memory", {}),
        "- name: Priya\n\n- allergic to peanuts",
    ),
    "noetic replace": (
        {"schema": _PROFILE},
        ("working-memory/update", {"name": "Priya"}),
        ("working-memory/update", {"diet": "no peanuts"}),
        ("working-memory/replace", {"name": "Priya Raman"}),
        {"name": "Priya", "diet": "no peanuts"},
    ),
    "legacy replace": (
        {},
        ("working-memory/update", {"content": "- name: Priya"}),
        ("working-memory/update", {"content": "- allergic to peanuts"}),
        ("updateWorkingMemory", {"content": "- name: Priya Raman", "mode": "replace"}),
        "- name: Priya\n\n- allergic to peanuts",
    ),
}


@pytest.mark.parametrize("case", list(_REWRITES))
def test_a_rewrite_over_another_servers_write_is_a_conflict_not_a_loss(url: str, case: str) -> None:
    """A replace or a clear that the model made from the state it read, after another server
    wrote: merging it would drop that write unseen, so it is refused and the run takes the
    stored state; the model's rewrite then goes through."""
    options, first, other, rewrite, merged = _REWRITES[case]
    namespace = ("working-memory", "resource", "user-7")
    stores = [open_store(url), open_store(url)]
    try:
        one, two = (
            MemoryStack([WorkingMemory(scope="resource", **options)], store=s) for s in stores
        )
        with one.run(resource_id="user-7") as run:
            assert run.call_tool(*first)["ok"] is True
        with one.run(resource_id="user-7") as mine, two.run(resource_id="user-7") as theirs:
            assert theirs.call_tool(*other) == {"ok": True, "version": 2}
            refused = mine.call_tool(*rewrite)
            assert refused["ok"] is False and refused["error"]["code"] == "conflict", refused
            assert "another writer" in refused["error"]["message"]
            assert read_state(stores[0], namespace) == (merged, 2)  # nothing written
            handle = mine.layer("working-memory")
            assert (handle.snapshot, handle.version) == (merged, 2)  # what the model reads next
            assert mine.call_tool(*rewrite)["ok"] is True  # made from what is stored: written
            assert read_state(stores[1], namespace)[1] == 3
    finally:
        for store in stores:
            store.close()


def test_a_run_holding_a_working_memory_deleted_since_merges_into_the_new_one(url: str) -> None:
    """A server deletes a user's working memory (the user asked to be forgotten) while a run
    of another server holds it; a third writes anew. The holding run's write must merge into
    the new state: written over it as if it were the state it read, it would bring the
    deleted fields back and drop the new one."""
    namespace = ("working-memory", "resource", "user-9")
    stores = [open_store(url), open_store(url)]
    try:
        one, two = (
            MemoryStack([WorkingMemory(schema={"type": "object"}, scope="resource")], store=s)
            for s in stores
        )
        with one.run(resource_id="user-9") as run:
            assert run.call_tool("working-memory/update", {"passport": "X123"})["ok"] is True
        with one.run(resource_id="user-9") as holding:
            assert stores[1].delete(namespace, "state")
            with two.run(resource_id="user-9") as fresh:
                assert fresh.call_tool("working-memory/update", {"name": "Priya"})["ok"] is True
            assert holding.call_tool("working-memory/update", {"city": "Pune"})["ok"] is True
        state, _version = read_state(stores[0], namespace)  # type: ignore[misc]
        assert state == {"name": "Priya", "city": "Pune"}
    finally:
        for store in stores:
            store.close()


@pytest.mark.parametrize(
    ("schema", "limits", "held", "patch", "code"),
    [
        # The held state plus the patch pass max_state_bytes; the stored one plus it does not.
        ({"type": "object"}, {"max_state_bytes": 6_000}, "x" * 4_000, "y" * 4_000, "limit"),
        # ... or the token budget.
        ({"type": "object"}, {"budget": (0, 1_200)}, "word " * 900, "word " * 900, "budget"),
        # ... or the schema: the held state has a field the patch may not join, which the
        # stored one no longer has.
        ({"type": "object", "not": {"required": ["a", "b"]}}, {}, "word", "", "schema"),
    ],
)
def test_an_append_refused_against_a_state_another_writer_replaced_merges_into_theirs(
    url: str, schema: dict[str, Any], limits: dict[str, Any], held: str, patch: str, code: str
) -> None:
    """A run's append is checked against the state it holds; when another server replaced
    that state since, the append merges into theirs (docs/working-memory.md: no update is
    lost), so it is refused only if the stored state plus the patch breaks a limit or the
    schema. Found by the model-based test (tests/test_stateful_working_memory.py): the call
    was refused naming a size the state would never have."""
    namespace = ("working-memory", "resource", "user-5")
    stores = [open_store(url), open_store(url)]
    try:
        one, two = (
            MemoryStack(
                [WorkingMemory(schema=schema, scope="resource", **limits)],
                store=s,
                total_budget=100_000,
            )
            for s in stores
        )
        first = {"a": held}
        with one.run(resource_id="user-5") as run:
            assert run.call_tool("working-memory/update", first)["ok"] is True, first
        with one.run(resource_id="user-5") as holding:
            with two.run(resource_id="user-5") as other:
                replaced = other.call_tool("working-memory/replace", {"c": 1})
                assert replaced["ok"] is True, replaced
            change = {"b": 2} if code == "schema" else {"d": patch}
            written = holding.call_tool("working-memory/update", change)
            assert written == {"ok": True, "version": 3}, written  # before: refused
            assert holding.layer("working-memory").snapshot == {"c": 1, **change}
        assert read_state(stores[1], namespace) == ({"c": 1, **change}, 3)
    finally:
        for store in stores:
            store.close()
