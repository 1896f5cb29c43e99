"""A model-based test of shared memory and the agent's mind: long random sequences of runs
(users A/B, threads t1/t2, agents X/Y) calling ``memory_list``/``read``/``write`` and the
seven mind tools, executors writing step results, runs closing (the mind's draft flushed),
store reopens, ``stack.forget`` of a user or conversation and the erasure of an agent's mind,
checked after every step against a plain-Python model.

The model follows docs/shared-memory.md (versions, ``conflict`` for a key read at an older
version or not at ``expected_version``, ``replaced`` naming what a write replaced, first-write
order) and docs/agent-mind.md (the draft flushed at close, ``mind_complete_goal`` at once,
caps held again at the flush, a belief restated folded into the live one, also when another
run committed it meanwhile). Belief texts come in topics whose two phrasings are similar
enough to fold (cosine > 0.9 under the default embedder) and whose numbers keep topics apart.

After each step: every shared entry and every mind entry stored is the model's, and nothing
else is stored; no user's run sees another user's conversation memory (``scope="thread"``) and
no agent's run sees another agent's mind.

``STATEFUL_EXAMPLES=2000 pytest tests/test_stateful_shared_mind.py`` runs long.
"""

from __future__ import annotations

import json
import pathlib
import tempfile
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from reference_merge import json_equal, strip_unsafe_keys
from stateful_common import (
    MAX_OPEN,
    PICK,
    SERVER,
    SERVERS,
    SETTINGS,
    THREADS,
    USERS,
    has_runs,
    json_values,
    marker,
    note_outcome,
)
from store_checks import empty_postgres_tables

from memstrata import AgentMind, MemoryStack, SharedMemory, SQLiteStore
from memstrata.exceptions import LimitExceededError
from memstrata.stores import PostgresStore, Store, erase

AGENTS = ("X", "Y")
MAX_GOALS = 3
MAX_PINS = 3
MAX_ENTRIES = 16  # goals, beliefs and reflections per mind, so the limit is met too
MAX_VALUE_BYTES = 2_000
MAX_SHARED_ENTRIES = 4  # of the five keys the machine writes, so the limit is met too
TOPICS = ("the staging database", "the billing service", "the nightly backup job",
          "the search cluster")  # fmt: skip
CONFIDENCE = ("low", "medium", "high")


def belief_text(agent: str, topic: int, phrasing: int) -> str:
    n = 11 * (topic + 1)
    text = f"{TOPICS[topic].capitalize()} needs {n} workers{' now' if phrasing else ''}."
    return f"{marker(agent)} {text}"


def stronger(old: str, new: str) -> str:
    return max(old, new, key=CONFIDENCE.index)


@dataclass
class Goal:
    description: str
    priority: str = "normal"
    status: str = "active"
    progress: list[str] = field(default_factory=list)


@dataclass
class Belief:
    id: str
    content: str
    confidence: str
    error: bool = False  # written by a failed run


@dataclass
class Mind:
    goals: dict[str, Goal] = field(default_factory=dict)
    beliefs: dict[int, Belief] = field(default_factory=dict)  # by topic: one per topic
    reflections: dict[str, tuple[str, bool]] = field(default_factory=dict)  # id -> content, pin
    failed: set[str] = field(default_factory=set)  # reflections written by a failed run


@dataclass
class Draft:
    goals: dict[str, Goal] = field(default_factory=dict)
    patches: dict[str, Goal] = field(default_factory=dict)  # description/priority None: unset
    beliefs: dict[int, Belief] = field(default_factory=dict)
    stored_before: set[int] = field(default_factory=set)  # topics restating a loaded belief
    said: dict[int, str] = field(default_factory=dict)  # the confidence this run gave each
    reflections: dict[str, tuple[str, bool]] = field(default_factory=dict)
    unpins: set[str] = field(default_factory=set)


@dataclass
class OpenRun:
    user: str | None
    thread: str
    agent: str
    run: Any
    # The mind as the run loaded it (changed by its own completions), and its draft.
    view: Mind = field(default_factory=Mind)
    draft: Draft = field(default_factory=Draft)
    seen: dict[str, int] = field(default_factory=dict)  # shared key -> version read/written

    def __repr__(self) -> str:
        return f"run({self.user}/{self.thread}/{self.agent})"


def copy_mind(mind: Mind) -> Mind:
    return Mind(
        {
            i: Goal(g.description, g.priority, g.status, list(g.progress))
            for i, g in mind.goals.items()
        },
        {t: Belief(b.id, b.content, b.confidence, b.error) for t, b in mind.beliefs.items()},
        dict(mind.reflections),
        set(mind.failed),
    )


@dataclass
class Server:
    """One server's view of the store: its own connection, stack and shared memory."""

    store: Store
    stack: MemoryStack
    shared: SharedMemory


@dataclass
class Entry:
    value: Any
    version: int
    source: str
    kind: str


def build_machine(
    shared_scope: str, postgres_url: str | None = None
) -> type[RuleBasedStateMachine]:
    """The machine for this shared-memory scope, on SQLite (a file per example) or on
    PostgreSQL."""

    class SharedMindMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.tmp = tempfile.TemporaryDirectory(prefix="stateful-sm-")
            self.path = pathlib.Path(self.tmp.name) / "sm.db"
            self._open_store()
            if postgres_url is not None:
                empty_postgres_tables(postgres_url)  # each example starts from an empty store
            # Shared entries per namespace, in first-write order; the last version each key
            # had (a key erased and written again numbers on).
            self.entries: dict[tuple[str, ...], dict[str, Entry]] = {}
            self.last_version: dict[tuple[tuple[str, ...], str], int] = {}
            self.minds: dict[str, Mind] = {a: Mind() for a in AGENTS}
            self.open_runs: list[OpenRun] = []
            self.serial = 0  # makes every goal's description its own

        def _open_store(self) -> None:
            """Two servers on the one store, each with its own connection and layers."""
            self.servers = [self._server() for _ in range(SERVERS)]
            self.store = self.servers[0].store
            self.stack, self.shared = self.servers[0].stack, self.servers[0].shared

        def _server(self) -> Server:
            store: Store = (
                SQLiteStore(self.path) if postgres_url is None else PostgresStore(postgres_url)
            )
            namespace = ("workflows",) if shared_scope == "thread" else ("workflow", "w1")
            shared = SharedMemory(
                store=store,
                namespace=namespace,
                scope=shared_scope,
                max_value_bytes=MAX_VALUE_BYTES,
                max_entries=MAX_SHARED_ENTRIES,
            )
            mind = AgentMind(
                max_goals=MAX_GOALS, max_pinned_reflections=MAX_PINS, max_entries=MAX_ENTRIES
            )
            return Server(store, MemoryStack([shared, mind], store=store), shared)

        def run_at(self, pick: int) -> OpenRun:
            return self.open_runs[pick % len(self.open_runs)]

        def teardown(self) -> None:
            for entry in self.open_runs:
                entry.run.close()
            for server in self.servers:
                server.store.close()
            self.tmp.cleanup()

        def shared_ns(self, user: str | None, thread: str) -> tuple[str, ...]:
            if shared_scope == "workflow":
                return ("workflow", "w1")
            if user is None:  # a conversation whose runs name no user
                return ("workflows", "thread", thread)
            return ("workflows", "user-thread", user, thread)

        # Runs ---------------------------------------------------------------------------------

        @precondition(lambda self: len(self.open_runs) < MAX_OPEN)
        @rule(
            user=st.sampled_from([*USERS, None]),
            thread=st.sampled_from(THREADS),
            agent=st.sampled_from(AGENTS),
            server=SERVER,
        )
        def open_run(self, user: str | None, thread: str, agent: str, server: int = 0) -> None:
            run = (
                self.servers[server]
                .stack.run(thread_id=thread, resource_id=user, agent=agent)
                .open()
            )
            entry = OpenRun(user, thread, agent, run, view=copy_mind(self.minds[agent]))
            self.open_runs.append(entry)

        @precondition(has_runs)
        @rule(pick=PICK)
        def close_run(self, pick: int) -> None:
            entry = self.run_at(pick)
            entry.run.close()
            self.open_runs.remove(entry)
            self.flush(entry)

        def flush(self, entry: OpenRun, *, error: bool = False) -> None:
            """The draft committed, as docs/agent-mind.md says a clean close does; or a failed
            run's: goal changes and unpins dropped, beliefs and reflections kept, flagged."""
            mind, draft = self.minds[entry.agent], entry.draft
            entry.draft = Draft()
            if not error:
                for goal_id, patch in draft.patches.items():
                    goal = mind.goals.get(goal_id)
                    if goal is None:
                        continue  # erased since the run loaded it: the update is dropped
                    if patch.description is not None:
                        goal.description = patch.description
                    if patch.priority is not None:
                        goal.priority = patch.priority
                    goal.progress = [*goal.progress, *patch.progress]
                # The caps count what is committed now: what was erased since the run
                # loaded it counts for nothing.
                active = {i for i, g in mind.goals.items() if g.status == "active"}
                room = MAX_GOALS - len(active)
                for goal_id, goal in list(draft.goals.items())[: max(0, room)]:
                    mind.goals[goal_id] = goal
                for rid in draft.unpins:
                    if rid in mind.reflections:  # else erased: the unpin is dropped
                        mind.reflections[rid] = (mind.reflections[rid][0], False)
            pinned = {i for i, (_c, p) in mind.reflections.items() if p}
            if not error:
                pinned -= draft.unpins
            room = MAX_PINS - len(pinned)
            for rid, (content, pin) in draft.reflections.items():
                if pin:
                    pin = room > 0
                    room -= 1
                mind.reflections[rid] = (content, pin)
                if error:
                    mind.failed.add(rid)
            ids = {b.id: t for t, b in mind.beliefs.items()}
            for topic, belief in draft.beliefs.items():
                now = mind.beliefs.get(topic)
                confidence = belief.confidence
                if topic in draft.stored_before and belief.id not in ids:
                    # Erased since the run loaded it: what this run said, as a new belief.
                    confidence = draft.said[topic]
                if now is None:
                    mind.beliefs[topic] = Belief(belief.id, belief.content, confidence, error)
                else:  # restated, or folded into one another run committed meanwhile
                    assert not error  # fail_run makes a failed run's beliefs new ones only
                    mind.beliefs[topic] = Belief(
                        now.id, belief.content, stronger(now.confidence, confidence)
                    )

        @precondition(has_runs)
        @rule(pick=PICK)
        def fail_run(self, pick: int) -> None:
            """The run ends with an exception (the model call failed). A failed run that
            restated a stored belief records its restatement beside it under an id of its own;
            the model leaves that case to a clean close, closing such a run cleanly instead."""
            entry = self.run_at(pick)
            mind = self.minds[entry.agent]
            if entry.draft.stored_before or any(t in mind.beliefs for t in entry.draft.beliefs):
                return self.close_run(pick)
            entry.run.close(RuntimeError("the model call failed"))
            self.open_runs.remove(entry)
            self.flush(entry, error=True)

        @rule()
        def reopen_store(self) -> None:
            for entry in list(self.open_runs):
                entry.run.close()
                self.open_runs.remove(entry)
                self.flush(entry)
            for server in self.servers:
                server.store.close()
            self._open_store()

        @rule(
            user=st.sampled_from([*USERS, None]),
            thread=st.one_of(st.none(), st.sampled_from(THREADS)),
            server=SERVER,
        )
        def forget(self, user: str | None, thread: str | None, server: int) -> None:
            if user is None and thread is None:
                return
            erased = self.servers[server].stack.forget(resource_id=user, thread_id=thread)
            gone = 0
            if shared_scope == "thread":
                for ns in list(self.entries):
                    # With a user, their conversations (or that one); without, only the
                    # conversation whose runs named no user (docs/privacy.md).
                    if (
                        user is not None
                        and ns[1:3] == ("user-thread", user)
                        and (thread in (None, ns[3]))
                    ) or (user is None and ns[1:] == ("thread", thread)):
                        gone += len(self.entries.pop(ns))
            # The mind is the agent's, not the user's: forget leaves it (docs/privacy.md).
            assert erased == {"shared-memory": gone}, erased

        @rule(agent=st.sampled_from(AGENTS), server=SERVER)
        def erase_mind(self, agent: str, server: int) -> None:
            """The agent's whole mind erased, as docs/privacy.md says, maybe while runs that
            loaded it are open: they never write an erased entry back."""
            erase(self.servers[server].store, ("mind", agent))
            self.minds[agent] = Mind()

        @precondition(has_runs)
        @rule(
            pick=PICK,
            which=st.integers(0, 20),
            then=st.sampled_from(["unpin", "progress", "complete", "restate"]),
        )
        def erase_under_a_run(self, pick: int, which: int, then: str) -> None:
            """The mind of an open run's agent erased, then the run touches what it loaded
            (the erasure alone rarely meets such a run at random)."""
            entry = self.run_at(pick)
            erase(self.store, ("mind", entry.agent))
            self.minds[entry.agent] = Mind()
            if then == "unpin":
                self.unpin(pick, which)
            elif then == "progress":
                self.update_goal(pick, which, "step done", None, False)
            elif then == "complete":
                self.complete_goal(pick, which)
            else:
                topics = sorted(entry.view.beliefs) or [0]
                self.believe(pick, topics[which % len(topics)], which % 2, "low")

        # Shared memory ------------------------------------------------------------------------

        def call(self, entry: OpenRun, name: str, arguments: Any) -> dict[str, Any]:
            before = self._records()
            result = entry.run.call_tool(name, arguments)
            assert isinstance(result, dict)
            note_outcome(name, result)
            if "error" in result or result.get("ok") is False:
                assert result["error"]["code"] not in ("internal_error",), result
                if name != "mind_complete_goal":
                    assert self._records() == before, (name, result)
            self._isolated(entry, json.dumps(result, ensure_ascii=False))
            return result

        @precondition(has_runs)
        @rule(
            pick=PICK,
            key=st.sampled_from(["k1", "k2", "shared:k1", "k3"]),
            value=json_values,
            how=st.sampled_from(["plain", "overwrite", "expected", "expected-guess"]),
            guess=st.integers(min_value=0, max_value=4),
            tagged=st.booleans(),
            huge=st.booleans(),
        )
        def memory_write(
            self, pick: int, key: str, value: Any, how: str, guess: int, tagged: bool, huge: bool
        ) -> None:
            entry = self.run_at(pick)
            if tagged:
                value = {"owner": marker(entry.user), "v": value}
            if huge:
                value = "x" * (MAX_VALUE_BYTES + 10)
            full = "shared:" + key.removeprefix("shared:")
            ns = self.shared_ns(entry.user, entry.thread)
            entries = self.entries.setdefault(ns, {})
            old = entries.get(full)
            arguments: dict[str, Any] = {"key": key, "value": value}
            expected: int | None = entry.seen.get(full)
            if how == "overwrite":
                arguments["overwrite"] = True
                expected = None
            elif how == "expected":
                expected = old.version if old else 0
                arguments["expected_version"] = expected
            elif how == "expected-guess":
                expected = guess
                arguments["expected_version"] = guess
            result = self.call(entry, "memory_write", arguments)
            stored = strip_unsafe_keys(value)
            if len(json.dumps(stored, separators=(",", ":"), ensure_ascii=False)) > MAX_VALUE_BYTES:
                assert result["error"]["code"] == "limit_exceeded", result
                return
            if old is None and len(entries) >= MAX_SHARED_ENTRIES:
                assert result["error"]["code"] == "limit_exceeded", result
                return
            if expected is not None and (old.version if old else 0) != expected:
                assert result["error"]["code"] == "conflict", (result, expected, old)
                return
            version = self.last_version.get((ns, full), 0) + 1
            self.last_version[(ns, full)] = version
            want = {"ok": True, "key": full, "kind": "shared", "version": version}
            if old is not None:
                want["replaced"] = {"source": old.source, "version": old.version}
            assert {k: v for k, v in result.items() if k != "createdAt"} == want, (result, want)
            if old is not None:
                old.value, old.version, old.source, old.kind = (
                    stored,
                    version,
                    "memory_write",
                    "shared",
                )
            else:
                entries[full] = Entry(stored, version, "memory_write", "shared")
            entry.seen[full] = version

        @precondition(has_runs)
        @rule(
            pick=PICK,
            keys=st.lists(
                st.sampled_from(["shared:k1", "shared:k2", "shared:k3", "step:s1", "nope"]),
                max_size=3,
            ),
        )
        def memory_read(self, pick: int, keys: list[str]) -> None:
            entry = self.run_at(pick)
            result = self.call(entry, "memory_read", {"keys": keys})
            entries = self.entries.get(self.shared_ns(entry.user, entry.thread), {})
            unique = list(dict.fromkeys(keys))
            assert result["missing"] == [k for k in unique if k not in entries], result
            assert set(result["entries"]) == {k for k in unique if k in entries}, result
            for key, got in result["entries"].items():
                want = entries[key]
                assert json_equal(got["value"], want.value), (got, want)
                assert (got["version"], got["source"], got["kind"]) == (
                    want.version,
                    want.source,
                    want.kind,
                ), (got, want)
            for key in unique:
                entry.seen[key] = entries[key].version if key in entries else 0

        @precondition(has_runs)
        @rule(
            pick=PICK,
            kind=st.sampled_from([None, "shared", "step_result", ["shared", "input"]]),
            prefix=st.sampled_from([None, "shared:k", "step:", "shared:k1"]),
            sources=st.sampled_from([None, ["executor"], ["memory_write", "x"]]),
        )
        def memory_list(
            self, pick: int, kind: Any, prefix: str | None, sources: list[str] | None
        ) -> None:
            entry = self.run_at(pick)
            arguments = {
                k: v
                for k, v in {"kind": kind, "key_prefix": prefix, "sources": sources}.items()
                if v is not None
            }
            result = self.call(entry, "memory_list", arguments)
            kinds = [kind] if isinstance(kind, str) else kind
            entries = [
                key
                for key, e in self.entries.get(self.shared_ns(entry.user, entry.thread), {}).items()
                if (kinds is None or e.kind in kinds)
                and (prefix is None or key.startswith(prefix))
                and (sources is None or e.source in sources)
            ]
            assert [e["key"] for e in result["entries"]] == entries, (result, entries)
            assert result["total"] == len(entries)

        @rule(
            user=st.sampled_from([*USERS, None]),
            thread=st.sampled_from(THREADS),
            step=st.sampled_from(["s1", "s2"]),
            value=json_values,
            server=SERVER,
        )
        def executor_writes(
            self, user: str | None, thread: str, step: str, value: Any, server: int
        ) -> None:
            """A workflow's executor writes a step's result, as docs/shared-memory.md shows."""
            shared = self.servers[server].shared
            memory = (
                shared.for_thread(thread, resource_id=user) if shared_scope == "thread" else shared
            )
            value = {"owner": marker(user), "v": value}
            ns = self.shared_ns(user, thread)
            key = f"step:{step}"
            entries = self.entries.setdefault(ns, {})
            if key not in entries and len(entries) >= MAX_SHARED_ENTRIES:
                with pytest.raises(LimitExceededError, match="max_entries"):
                    memory.set(key=key, kind="step_result", value=value, source="executor")
                return
            memory.set(key=key, kind="step_result", value=value, source="executor")
            version = self.last_version.get((ns, key), 0) + 1
            self.last_version[(ns, key)] = version
            stored = strip_unsafe_keys(value)
            if key in entries:
                old = entries[key]
                old.value, old.version, old.source, old.kind = (
                    stored,
                    version,
                    "executor",
                    "step_result",
                )
            else:
                entries[key] = Entry(stored, version, "executor", "step_result")

        # The mind -------------------------------------------------------------------------------

        @precondition(has_runs)
        @rule(pick=PICK, n=st.integers(0, 5), priority=st.sampled_from(["low", "normal", "high"]))
        def set_goal(self, pick: int, n: int, priority: str) -> None:
            entry = self.run_at(pick)
            self.serial += 1
            description = f"{marker(entry.agent)} goal {n} ref{self.serial}"
            result = self.call(
                entry, "mind_set_goal", {"description": description, "priority": priority}
            )
            active = sum(1 for g in entry.view.goals.values() if g.status == "active")
            if self.full(entry):
                assert result["error"]["code"] == "limit_exceeded", result
                return
            if active + len(entry.draft.goals) >= MAX_GOALS:
                assert result["error"]["code"] == "cap_reached", result
                return
            assert result["status"] == "ok", result
            entry.draft.goals[result["id"]] = Goal(description, priority)

        def full(self, entry: OpenRun) -> bool:
            """Whether the mind, as the run counts it, holds max_entries: what it loaded and
            what its draft adds."""
            view, draft = entry.view, entry.draft
            loaded = len(view.goals) + len(view.beliefs) + len(view.reflections)
            created = sum(1 for t in draft.beliefs if t not in draft.stored_before)
            return loaded + created + len(draft.goals) + len(draft.reflections) >= MAX_ENTRIES

        def goal_ids(self, entry: OpenRun) -> list[str]:
            return sorted(
                {*entry.draft.goals, *entry.view.goals, *self.minds[entry.agent].goals, "g_missing"}
            )

        @precondition(has_runs)
        @rule(
            pick=PICK,
            which=st.integers(0, 20),
            note=st.sampled_from([None, "step done"]),
            priority=st.sampled_from([None, "high"]),
            rename=st.booleans(),
        )
        def update_goal(
            self, pick: int, which: int, note: str | None, priority: str | None, rename: bool
        ) -> None:
            entry = self.run_at(pick)
            ids = self.goal_ids(entry)
            goal_id = ids[which % len(ids)]
            arguments: dict[str, Any] = {"id": goal_id}
            description = None
            if rename:
                self.serial += 1
                description = f"{marker(entry.agent)} goal renamed ref{self.serial}"
                arguments["description"] = description
            if note is not None:
                arguments["progress"] = note
            if priority is not None:
                arguments["priority"] = priority
            result = self.call(entry, "mind_update_goal", arguments)
            if goal_id in entry.draft.goals:
                goal = entry.draft.goals[goal_id]
            elif goal_id not in entry.view.goals:
                assert result["error"]["code"] == "not_found", result
                return
            elif entry.view.goals[goal_id].status != "active":
                assert result["error"]["code"] == "not_active", result
                return
            else:
                goal = entry.draft.patches.setdefault(goal_id, Goal(None, None, "active"))  # type: ignore[arg-type]
            assert result == {"status": "ok"}, result
            if description is not None:
                goal.description = description
            if priority is not None:
                goal.priority = priority
            if note is not None:
                goal.progress.append(note)

        @precondition(has_runs)
        @rule(pick=PICK, which=st.integers(0, 20))
        def complete_goal(self, pick: int, which: int) -> None:
            entry = self.run_at(pick)
            ids = self.goal_ids(entry)
            goal_id = ids[which % len(ids)]
            mind = self.minds[entry.agent]
            before = self._records()
            result = entry.run.call_tool("mind_complete_goal", {"id": goal_id})
            if goal_id in entry.draft.goals:
                goal = entry.draft.goals.pop(goal_id)
            elif goal_id not in entry.view.goals:
                assert result["error"]["code"] == "not_found", result
                assert self._records() == before
                return
            elif entry.view.goals[goal_id].status == "active" and goal_id not in mind.goals:
                # Erased since the run loaded it: not stored again (docs/privacy.md).
                assert result["error"]["code"] == "not_found", result
                assert self._records() == before
                return
            elif entry.view.goals[goal_id].status != "active" or (
                mind.goals[goal_id].status != "active"
            ):
                # Completed by this run, or by another since this one loaded (the completion
                # reads the stored goal in its transaction).
                assert result["error"]["code"] == "not_active", result
                assert self._records() == before
                return
            else:
                goal = mind.goals.get(goal_id) or entry.view.goals[goal_id]
                patch = entry.draft.patches.pop(goal_id, None)
                if patch is not None:
                    if patch.description is not None:
                        goal.description = patch.description
                    if patch.priority is not None:
                        goal.priority = patch.priority
                    goal.progress = [*goal.progress, *patch.progress]
            assert result == {"status": "ok"}, result
            goal.status = "completed"
            mind.goals[goal_id] = goal
            entry.view.goals[goal_id] = Goal(
                goal.description, goal.priority, "completed", list(goal.progress)
            )

        @precondition(has_runs)
        @rule(
            pick=PICK,
            topic=st.integers(0, len(TOPICS) - 1),
            phrasing=st.integers(0, 1),
            confidence=st.sampled_from(CONFIDENCE),
        )
        def believe(self, pick: int, topic: int, phrasing: int, confidence: str) -> None:
            entry = self.run_at(pick)
            content = belief_text(entry.agent, topic, phrasing)
            result = self.call(
                entry, "mind_believe", {"content": content, "confidence": confidence}
            )
            draft = entry.draft
            if topic in draft.beliefs:
                old = draft.beliefs[topic]
                assert (result["action"], result["id"]) == ("updated_draft", old.id), result
                draft.said[topic] = stronger(draft.said.get(topic, confidence), confidence)
                draft.beliefs[topic] = Belief(old.id, content, stronger(old.confidence, confidence))
            elif topic in entry.view.beliefs:
                old = entry.view.beliefs[topic]
                assert (result["action"], result["id"]) == ("updated_store", old.id), result
                draft.said[topic] = stronger(draft.said.get(topic, confidence), confidence)
                draft.beliefs[topic] = Belief(old.id, content, stronger(old.confidence, confidence))
                draft.stored_before.add(topic)
            elif self.full(entry):
                assert result["error"]["code"] == "limit_exceeded", result
                return
            else:
                assert result["action"] == "created", result
                draft.beliefs[topic] = Belief(result["id"], content, confidence)

        @precondition(has_runs)
        @rule(pick=PICK, n=st.integers(0, 3), pin=st.booleans())
        def reflect(self, pick: int, n: int, pin: bool) -> None:
            entry = self.run_at(pick)
            content = f"{marker(entry.agent)} lesson {n}"
            result = self.call(entry, "mind_reflect", {"content": content, "pin": pin})
            pinned = sum(
                1
                for r, (_c, p) in entry.view.reflections.items()
                if p and r not in entry.draft.unpins
            )
            pinned += sum(1 for _c, p in entry.draft.reflections.values() if p)
            if self.full(entry):
                assert result["error"]["code"] == "limit_exceeded", result
                return
            if pin and pinned >= MAX_PINS:
                assert result["error"]["code"] == "cap_reached", result
                return
            assert result["status"] == "ok", result
            entry.draft.reflections[result["id"]] = (content, pin)

        @precondition(has_runs)
        @rule(pick=PICK, which=st.integers(0, 20))
        def unpin(self, pick: int, which: int) -> None:
            entry = self.run_at(pick)
            ids = sorted({*entry.draft.reflections, *entry.view.reflections, "r_missing"})
            rid = ids[which % len(ids)]
            result = self.call(entry, "mind_unpin_reflection", {"id": rid})
            if rid in entry.draft.reflections:
                content, pinned = entry.draft.reflections[rid]
                if not pinned:
                    assert result["error"]["code"] == "not_pinned", result
                    return
                entry.draft.reflections[rid] = (content, False)
            elif rid not in entry.view.reflections:
                assert result["error"]["code"] == "not_found", result
                return
            elif not entry.view.reflections[rid][1] or rid in entry.draft.unpins:
                assert result["error"]["code"] == "not_pinned", result
                return
            else:
                entry.draft.unpins.add(rid)
            assert result == {"status": "ok"}, result

        @precondition(has_runs)
        @rule(pick=PICK, query=st.sampled_from(["workers", "goal", "lesson", "database"]))
        def recall(self, pick: int, query: str) -> None:
            entry = self.run_at(pick)
            result = self.call(entry, "mind_recall", {"query": query, "limit": 50})
            committed = {
                *entry.view.goals,
                *entry.view.reflections,
                *(b.id for b in entry.view.beliefs.values()),
            }
            for hit in result["result"]:
                assert hit["id"] in committed, (hit, committed)

        @precondition(has_runs)
        @rule(pick=PICK, which=st.integers(0, 20))
        def recall_goal(self, pick: int, which: int) -> None:
            """A goal's own words find it (docs/agent-mind.md: the model can always complete a
            goal it sees)."""
            entry = self.run_at(pick)
            active = sorted(i for i, g in entry.view.goals.items() if g.status == "active")
            if not active:
                return
            goal_id = active[which % len(active)]
            query = entry.view.goals[goal_id].description
            result = self.call(entry, "mind_recall", {"query": query, "type": "goal"})
            assert goal_id in [hit["id"] for hit in result["result"]], (goal_id, result)

        # Invariants -----------------------------------------------------------------------------

        def _records(self) -> list[tuple[Any, ...]]:
            return [
                (i.namespace, i.key, i.version, json.dumps(i.value, sort_keys=True))
                for i in self.store.list(limit=10_000)
            ]

        def _isolated(self, entry: OpenRun, text: str) -> None:
            if shared_scope == "thread":
                for user in [*USERS, None]:
                    if user != entry.user:
                        assert marker(user) not in text, (entry, text[:400])
            for agent in AGENTS:
                if agent != entry.agent:
                    assert marker(agent) not in text, (entry, text[:400])

        @invariant()
        def shared_is_the_model(self) -> None:
            prefix = ("workflows",) if shared_scope == "thread" else ("workflow",)
            stored: dict[tuple[str, ...], dict[str, Any]] = {}
            for item in self.store.list(prefix, limit=10_000):
                stored.setdefault(item.namespace, {})[item.key] = item
            model = {ns: e for ns, e in self.entries.items() if e}
            assert stored.keys() == model.keys(), (stored.keys(), model.keys())
            for ns, entries in model.items():
                assert list(stored[ns]) == sorted(entries), (ns, list(stored[ns]))
                for key, want in entries.items():
                    got = stored[ns][key]
                    assert json_equal(got.value["value"], want.value), (got.value, want)
                    assert (got.version, got.value["source"], got.value["kind"]) == (
                        want.version,
                        want.source,
                        want.kind,
                    ), (got, want)

        @invariant()
        def minds_are_the_model(self) -> None:
            for agent in AGENTS:
                mind = self.minds[agent]
                goals, beliefs, reflections = {}, [], {}
                for item in self.store.list(("mind", agent), limit=10_000):
                    kind, _, id_ = item.key.partition("/")
                    value = item.value
                    if kind == "goal":
                        goals[id_] = Goal(
                            value["description"],
                            value["priority"],
                            value["status"],
                            value["progress"],
                        )
                    elif kind == "belief":
                        beliefs.append(
                            Belief(
                                id_,
                                value["content"],
                                value["confidence"],
                                value.get("error", False),
                            )
                        )
                    elif kind == "reflection":
                        reflections[id_] = (value["content"], value["pinned"])
                        assert value.get("error", False) == (id_ in mind.failed), (agent, value)
                    else:
                        raise AssertionError(f"unexpected mind record {item.key}")
                assert goals == mind.goals, (agent, goals, mind.goals)
                assert reflections == mind.reflections, (agent, reflections, mind.reflections)
                want = sorted(mind.beliefs.values(), key=lambda b: b.id)
                assert sorted(beliefs, key=lambda b: b.id) == want, (agent, beliefs, want)

        @invariant()
        def prompts_are_isolated(self) -> None:
            for entry in self.open_runs:
                prompt = json.dumps(entry.run.prepare([]), ensure_ascii=False)
                self._isolated(entry, prompt)
                # Goals and standing rules are always shown (docs/agent-mind.md): nothing the
                # run loaded is missing from its header.
                view, mind = entry.view, self.minds[entry.agent]
                shown = [
                    g.description
                    for i, g in view.goals.items()
                    if g.status == "active" and i in mind.goals
                ]
                shown += [
                    c for i, (c, p) in view.reflections.items() if p and i in mind.reflections
                ]
                for text in shown:
                    assert json.dumps(text, ensure_ascii=False)[1:-1] in prompt, (text, prompt)

    SharedMindMachine.TestCase.settings = SETTINGS
    return SharedMindMachine


TestWorkflowSharedMemoryAndMind = build_machine("workflow").TestCase
TestThreadSharedMemoryAndMind = build_machine("thread").TestCase


@pytest.mark.parametrize("scope", ["workflow", "thread"])
def test_the_machine_reaches_commits(scope: str) -> None:
    """Guards the machine: a fixed sequence through it stores shared entries and a mind."""
    machine = build_machine(scope)()
    try:
        machine.open_run("A", "t1", "X")
        machine.memory_write(0, "k1", [1], "plain", 0, True, False)
        machine.believe(0, 0, 0, "medium")
        machine.set_goal(0, 1, "high")
        machine.reflect(0, 0, True)
        machine.close_run(0)
        machine.shared_is_the_model()
        machine.minds_are_the_model()
        assert len(machine.store.list(("mind", "X"))) == 3
    finally:
        machine.teardown()


def test_the_machine_on_postgres(postgres_url: str) -> None:
    """The thread-scoped machine on PostgreSQL (fewer examples: each step is several round
    trips)."""
    run_state_machine_as_test(
        build_machine("thread", postgres_url),
        settings=settings(SETTINGS, max_examples=max(5, SETTINGS.max_examples // 6)),
    )
